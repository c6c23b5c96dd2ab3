"""A dependency-free terminal progress line for long runs (silent when disabled)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, enabled: bool = True, start: int = 0, label: str = "epoch",
                 stream=None, interval: float = 0.5):
        self.total, self.enabled, self.label = total, enabled, label
        self.stream = stream or sys.stderr
        self.start_count, self.t0 = start, time.perf_counter()
        self.interval, self.last = interval, 0.0

    def update(self, count: int, work: float | None = None, **fields) -> None:
        """``work``: the fraction of this session's work done, when items differ in size
        (the time left is then extrapolated from it instead of from the item count)."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.last < self.interval and count < self.total:
            return
        self.last = now
        done = count - self.start_count
        rate = done / max(now - self.t0, 1e-9)
        eta = (self.total - count) / rate if rate > 0 else float("inf")
        if work is not None:
            eta = (now - self.t0) * (1 - work) / work if work > 0 else float("inf")
        width = 24
        filled = int(width * count / self.total)
        extra = "  ".join(f"{k} {_fmt(v)}" for k, v in fields.items())
        line = (f"\r{self.label} {count}/{self.total} [{'#' * filled}{'.' * (width - filled)}] "
                f"{extra}  {_duration(now - self.t0)} elapsed, {_duration(eta)} left")
        self.stream.write(line.ljust(100))
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _fmt(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _duration(sec: float) -> str:
    if sec == float("inf"):
        return "?"
    sec = int(sec)
    return f"{sec // 60}m{sec % 60:02d}s" if sec >= 60 else f"{sec}s"
