"""The test suite's shared helpers (``closed_form``) import by name from every test folder."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
