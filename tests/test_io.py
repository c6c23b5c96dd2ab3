"""Atomic writes: all or nothing, with ordinary file permissions."""

import os
import stat

import pytest

from bdeeponet.io import atomic_write, write_text


def test_written_file_has_the_permissions_of_an_ordinary_file(tmp_path):
    umask = os.umask(0o022)
    os.umask(umask)
    ordinary = tmp_path / "ordinary.txt"
    ordinary.write_text("x")
    written = write_text(tmp_path / "atomic.txt", "x")
    assert stat.S_IMODE(written.stat().st_mode) == stat.S_IMODE(ordinary.stat().st_mode)


def test_a_failed_write_leaves_neither_the_file_nor_a_temporary(tmp_path):
    def fail(fh):
        fh.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(tmp_path / "out.bin", fail)
    assert list(tmp_path.iterdir()) == []
