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


def test_the_umask_in_force_at_write_time_is_used_and_left_alone(tmp_path, monkeypatch):
    import bdeeponet.io as bio

    def umask_is_not_read_by_setting(mask):
        raise AssertionError("os.umask called although /proc/self/status has the umask")

    old = os.umask(0o027)
    try:
        if os.path.exists("/proc/self/status"):
            monkeypatch.setattr(bio.os, "umask", umask_is_not_read_by_setting)
        written = write_text(tmp_path / "a.txt", "x")
        monkeypatch.undo()
        assert stat.S_IMODE(written.stat().st_mode) == 0o640
        # where /proc is not there: read by setting and restoring
        monkeypatch.setattr("builtins.open", _no_proc(open))
        assert bio.current_umask() == 0o027
        monkeypatch.undo()
        assert os.umask(0o027) == 0o027
    finally:
        os.umask(old)


def _no_proc(real_open):
    def fake(path, *args, **kwargs):
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    return fake
