"""Step progress for logs: plain lines with elapsed time and an estimate of what remains (core: the
conversions in harness/toolkit and the gates print them as well as the terminal helpers in harness/report).

A 20-step denoise is ~40 min on the board: a CI log that says nothing until the end looks hung. On a
terminal the caller keeps its live display (a rich bar in the CLI, a rewritten line under pytest);
where output goes to a file or a pipe, a step becomes a line that survives in the log: the first, the
last, and one whenever LOG_INTERVAL has passed since the last line. A board's 2-minute steps all get
theirs; a run here (84 subgraphs exported in a second, 20 steps in three) gets two, not 105.
"""
from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["StepLines", "LOG_INTERVAL"]

LOG_INTERVAL = 10.0     # seconds between two progress lines in a log: often enough that a run never looks hung


def format_duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"


class StepLines:
    """Call once per finished step; writes '<label>: step k/N, elapsed X, ETA Y' through `write` for the
    first and the last step and whenever `interval` seconds passed since the last line (0: every step)."""

    def __init__(self, total: int, label: str, write: Callable[[str], None], clock=time.monotonic,
                 interval: float = LOG_INTERVAL):
        self.total = total
        self.label = label
        self.write = write
        self.clock = clock
        self.interval = interval
        self.start = clock()
        self.done = 0
        self.written: float | None = None

    def line(self) -> str:
        elapsed = self.clock() - self.start
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        return (f"{self.label}: step {self.done}/{self.total}, elapsed {format_duration(elapsed)}, "
                f"ETA {format_duration(eta)}")

    def __call__(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        now = self.clock()
        if self.written is None or self.done == self.total or now - self.written >= self.interval:
            self.written = now
            self.write(self.line())
