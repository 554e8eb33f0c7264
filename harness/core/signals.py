"""SIGINT and SIGTERM become exceptions in the main thread, so a stopped run unwinds like Ctrl-C:
every context released, the partial report written and marked "interrupted" or "terminated".

Only the first signal raises: a second one while the run is cleaning up (a CI runner often sends
SIGTERM twice) is noted and ignored, so the report and releases in `finally` blocks complete.
"""
from __future__ import annotations

import signal
import threading

from .errors import Interrupted, Terminated

__all__ = ["StopSignals", "stop_status"]

_NAMES = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM"}


class StopSignals:
    """Install on enter (main thread only), restore the previous handlers on exit."""

    def __init__(self, where: str = "the run"):
        self.where = where
        self.received: int | None = None
        self._previous: dict = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for signum in _NAMES:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        self.restore()

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    @property
    def exception(self):
        """The exception class of the signal received (None if none was)."""
        if self.received is None:
            return None
        return Terminated if self.received == signal.SIGTERM else Interrupted

    def _handle(self, signum, frame) -> None:
        if self.received is not None:
            return                  # already stopping: let the cleanup finish
        self.received = signum
        raise self.exception(f"{_NAMES[signum]} received during {self.where}")


def stop_status(exc: BaseException) -> str:
    """How a run that raised `exc` ended, as its report says it: interrupted, terminated or crashed."""
    if isinstance(exc, Terminated):
        return "terminated"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return "crashed"
