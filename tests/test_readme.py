"""The README's command-line example, run as written, so the README cannot drift from the tool.

The shell block after ``<!-- readme-cli-example -->`` is run command by command with the
``bdeeponet`` beside this interpreter, on a small file of the kind the README describes
(``measurements.npz`` with ``u`` (N, m) and ``s`` (N, P), and ``new_inputs.npz`` with ``u``);
then the Python block after ``<!-- readme-cli-read -->`` reads the ``PRED.npz`` it wrote. The
only change to the commands: ``train`` gets ``--epochs 40 --quiet`` appended (argparse keeps
the last value), so the test takes seconds instead of minutes.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BDEEPONET = Path(sys.executable).with_name("bdeeponet")
PRED_KEYS = {"mean", "std", "lower", "upper", "obs_lower", "obs_upper", "sim_lower", "sim_upper"}
FAST = {"train": ["--epochs", "40", "--quiet"]}


def fenced_block(marker: str) -> tuple[str, str]:
    """The language and text of the fenced block right after ``<!-- marker -->``."""
    found = re.search(rf"<!-- {re.escape(marker)} -->\n```(\w*)\n(.*?)\n```", README.read_text(),
                      re.S)
    assert found, f"README.md has no fenced block right after <!-- {marker} -->"
    return found.group(1), found.group(2)


def write_user_files(where: Path) -> None:
    """Smooth inputs on 40 sensors and their noisy antiderivatives: 60 functions, and 3 new."""
    rng = np.random.default_rng(0)
    x = np.linspace(0, 1, 40)
    a = rng.normal(size=(63, 3))
    u = a[:, :1] + a[:, 1:2] * np.sin(2 * np.pi * x) + a[:, 2:] * np.cos(2 * np.pi * x)
    s = np.cumsum(u, axis=1) / x.size + 0.01 * rng.normal(size=u.shape)
    np.savez(where / "measurements.npz", u=u[:60], s=s[:60])
    np.savez(where / "new_inputs.npz", u=u[60:])


def test_the_blocks_are_there():
    lang, text = fenced_block("readme-cli-example")
    assert lang == ""
    subcommands = [shlex.split(line)[1] for line in text.splitlines()]
    assert subcommands == ["import", "train", "predict"]
    assert fenced_block("readme-cli-read")[0] == "python"


@pytest.mark.slow
def test_readme_cli_example(tmp_path):
    assert BDEEPONET.exists(), f"no bdeeponet beside {sys.executable}"
    write_user_files(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    for line in fenced_block("readme-cli-example")[1].splitlines():
        argv = shlex.split(line)
        assert argv[0] == "bdeeponet", line
        argv = [str(BDEEPONET), *argv[1:], *FAST.get(argv[1], [])]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, f"{line}\n{done.stderr}"

    assert (tmp_path / "data.npz").exists()
    for name in ("config.json", "history.csv", "posterior.pt", "metrics.json"):
        assert (tmp_path / "run" / name).exists(), name
    with np.load(tmp_path / "PRED.npz") as pred:
        assert PRED_KEYS <= set(pred.files)
        for key in PRED_KEYS:
            assert pred[key].shape == (3, 40), key

    # the README's way of reading PRED.npz runs as written
    code = fenced_block("readme-cli-read")[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
