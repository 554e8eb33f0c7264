"""The one stopwatch behind every lifecycle record and host-math time.

A plain class with __slots__, not a generator context manager: it wraps each of a run's thousands
of stages, and its own cost lands in the "rest" of the step split. The time is reported even when
the timed block raises: a partial report still shows where the time went.
"""
from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Timed"]


class Timed:
    __slots__ = ("report", "key", "start")

    def __init__(self, report: Callable[[tuple, float], None], key: tuple):
        self.report, self.key = report, key

    def __enter__(self):
        self.start = time.perf_counter()

    def __exit__(self, *exc):
        self.report(self.key, time.perf_counter() - self.start)
        return False
