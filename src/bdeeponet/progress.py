"""The terminal progress bar of long runs (epochs of a run, runs of the grid), drawn by tqdm;
silent when disabled.

The one thing added to tqdm is the time left when items differ in size (the runs of the
grid): the caller then passes ``work``, the fraction of the session's work done, and the
time left is extrapolated from it instead of from the item count.
"""

from __future__ import annotations

import sys

from tqdm import tqdm

BAR_FORMAT = "{desc} {n_fmt}/{total_fmt} |{bar}| {fields}{elapsed} elapsed, {left} left"


def time_left(elapsed: float, count: int, total: int, start: int = 0,
              rate: float | None = None, work: float | None = None) -> float | None:
    """Seconds left (None: unknown yet). From ``work`` (the fraction of this session's work
    done) when given; otherwise from the items left at ``rate`` items per second, or at the
    session's mean rate (``count - start`` items in ``elapsed`` seconds)."""
    if work is not None:
        return elapsed * (1 - work) / work if work > 0 else None
    if rate is None and elapsed > 0 and count > start:
        rate = (count - start) / elapsed
    return (total - count) / rate if rate else None


class _Bar(tqdm):
    """tqdm with two more fields for ``BAR_FORMAT``: ``left`` (see :func:`time_left`) and
    ``fields`` (the caller's named values)."""

    monitor_interval = 0  # no monitor thread: the bar is redrawn from update() only
    work: float | None = None
    fields: str = ""

    @property
    def format_dict(self):
        d = super().format_dict
        left = time_left(d["elapsed"], self.n, self.total, self.initial, d["rate"], self.work)
        d["left"] = "?" if left is None else self.format_interval(left)
        d["fields"] = f"{self.fields}  " if self.fields else ""
        return d


class Progress:
    """Items ``start .. total`` (``start``: those done before this session, e.g. on resume).

    ``update(count, work=None, **fields)`` after each item, ``close()`` at the end. The line
    is redrawn at most every ``interval`` seconds, on ``stream`` (default: stderr)."""

    def __init__(self, total: int, enabled: bool = True, start: int = 0, label: str = "epoch",
                 stream=None, interval: float = 0.5):
        self.total, self.enabled, self.start, self.label = total, enabled, start, label
        self._bar = None
        if enabled:
            self._bar = _Bar(total=total, initial=start, desc=label, file=stream or sys.stderr,
                             mininterval=interval, miniters=1, bar_format=BAR_FORMAT,
                             dynamic_ncols=True, leave=True)

    def update(self, count: int, work: float | None = None, **fields) -> None:
        """``count`` items done in all; ``work``: the fraction of this session's work done,
        when items differ in size; ``fields``: named values shown on the line."""
        if self._bar is None:
            return
        self._bar.work = work
        self._bar.fields = "  ".join(f"{k} {_fmt(v)}" for k, v in fields.items())
        self._bar.update(count - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _fmt(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)
