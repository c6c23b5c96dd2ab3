"""The test suite's shared helpers (``closed_form``) import by name from every test folder.

The suite runs as two workers on a 2-core machine: each, and every command-line run it
starts in a child process (`train` uses torch's thread count by default), takes one thread,
so that the workers do not oversubscribe the cores."""

import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
