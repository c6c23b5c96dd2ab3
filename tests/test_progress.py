"""The progress line's time left."""

import io

from bdeeponet import progress
from bdeeponet.progress import Progress


def _line_after(monkeypatch, **update):
    clock = iter([0.0, 100.0])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    buf = io.StringIO()
    bar = Progress(10, stream=buf, label="runs")  # starts at t = 0
    bar.update(1, **update)  # at t = 100 s
    return buf.getvalue()


def test_time_left_from_the_item_count(monkeypatch):
    assert "1m40s elapsed, 15m00s left" in _line_after(monkeypatch)  # 9 more items at 100 s


def test_time_left_from_the_fraction_of_work(monkeypatch):
    # one run of ten finished, but it was a quarter of the work: 300 s left, not 900 s
    assert "1m40s elapsed, 5m00s left" in _line_after(monkeypatch, work=0.25)
