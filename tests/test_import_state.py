"""Importing the package changes no process-wide state: not matplotlib's backend (nor does
it import pyplot), not the umask (not even for a moment: os.umask can only be read by
setting it)."""

import json
import os
import subprocess
import sys

import pytest

MODULES = ("bdeeponet", "bdeeponet.plots", "bdeeponet.report", "bdeeponet.experiments",
           "bdeeponet.grid", "bdeeponet.io", "bdeeponet.progress", "bdeeponet.cli")

SCRIPT = """
import importlib, json, os, sys
os.umask(0o027)
umask_callers = []
real_umask = os.umask
def spy(mask):
    umask_callers.append(sys._getframe(1).f_code.co_filename)
    return real_umask(mask)
os.umask = spy
for name in sys.argv[1:]:
    importlib.import_module(name)
os.umask = real_umask
pyplot_imported = "matplotlib.pyplot" in sys.modules
import matplotlib
mask = os.umask(0o022)
print(json.dumps({"backend": matplotlib.get_backend(), "pyplot": pyplot_imported,
                  "umask": mask, "umask_callers": umask_callers}))
"""


def _state_after_importing(*modules: str) -> dict:
    # A backend that differs from the one a headless machine picks, so a switch shows.
    env = {**os.environ, "MPLBACKEND": "svg"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *modules], env=env, check=True,
                          capture_output=True, text=True, timeout=300)
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def baseline():
    return _state_after_importing("numpy", "torch", "matplotlib")


@pytest.fixture(scope="module")
def after():
    return _state_after_importing(*MODULES)


def test_importing_the_package_keeps_the_matplotlib_backend(baseline, after):
    assert baseline["backend"] == "svg"  # the control: the environment's choice holds
    assert after["backend"] == baseline["backend"]
    assert not after["pyplot"]


def test_importing_the_package_leaves_the_umask_alone(after):
    assert after["umask"] == 0o027
    ours = [f for f in after["umask_callers"] if f"{os.sep}bdeeponet{os.sep}" in f]
    assert ours == [], f"os.umask called at import by {ours}"
