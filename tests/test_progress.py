"""The progress bar: its time left, what it writes, and silence when disabled."""

import io

from bdeeponet.progress import Progress, time_left


def test_time_left_from_the_item_count():
    # one item of ten done in 100 s: nine more take 900 s
    assert time_left(elapsed=100.0, count=1, total=10) == 900.0
    # resumed at 4: the 2 items of this session took 100 s, 4 more take 200 s
    assert time_left(elapsed=100.0, count=6, total=10, start=4) == 200.0
    assert time_left(elapsed=0.0, count=0, total=10) is None  # nothing to extrapolate from


def test_time_left_from_the_fraction_of_work():
    # one run of ten finished, but it was a quarter of the work: 300 s left, not 900 s
    assert time_left(elapsed=100.0, count=1, total=10, work=0.25) == 300.0
    assert time_left(elapsed=100.0, count=1, total=10, work=0.0) is None


def test_the_line_shows_the_count_and_the_fields_and_ends_with_a_newline():
    buf = io.StringIO()
    bar = Progress(10, stream=buf, label="runs", start=2, interval=0.0)
    for count in range(3, 11):
        bar.update(count, work=count / 10, e2=1.23456, swap=0)
    bar.close()
    out = buf.getvalue()
    last = out.rstrip("\n").split("\r")[-1]
    assert last.startswith("runs 10/10 ") and "e2 1.23  swap 0" in last
    assert "elapsed" in last and "left" in last
    assert out.endswith("\n") and out.count("\n") == 1


def test_a_disabled_bar_writes_nothing():
    buf = io.StringIO()
    bar = Progress(10, enabled=False, stream=buf)
    bar.update(5, e2=1.0)
    bar.close()
    assert buf.getvalue() == ""
