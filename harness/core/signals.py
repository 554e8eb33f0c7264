"""SIGINT, SIGTERM, SIGHUP and SIGQUIT become exceptions in the main thread, so a stopped run
unwinds like Ctrl-C: every context released, the partial report written and marked "interrupted"
(SIGINT) or "terminated" (the others: an SSH drop on the board is a SIGHUP, Ctrl-backslash a SIGQUIT, and
neither may leave a report saying "running" or a shared-memory block behind).

Only the first signal raises: a second one while the run is cleaning up (a CI runner often sends
SIGTERM twice) is noted and ignored, so the report and releases in `finally` blocks complete.
"""
from __future__ import annotations

import contextlib
import signal
import threading

from .errors import HungUp, Interrupted, Quit, Terminated

__all__ = ["StopSignals", "stop_status", "STOP_SIGNALS", "GROUP_SIGNALS", "group_signals_blocked"]

# signal -> (how the error line names it, the exception it raises)
STOP_SIGNALS = {signal.SIGINT: ("SIGINT (Ctrl-C)", Interrupted), signal.SIGTERM: ("SIGTERM", Terminated),
                signal.SIGHUP: ("SIGHUP (the terminal hung up)", HungUp),
                signal.SIGQUIT: ("SIGQUIT (Ctrl-\\)", Quit)}
# What a terminal sends to its whole foreground process group: a child process (a prefetch
# worker) ignores these and lets the run, which got the same signal, stop it in order.
GROUP_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


@contextlib.contextmanager
def group_signals_blocked():
    """Block the terminal's group signals while a helper process is started: it inherits the mask
    and so survives the hang-up its parent is still cleaning up after (multiprocessing's resource
    tracker ignores SIGINT and SIGTERM only; killed by a SIGHUP, it takes the shared blocks' records
    with it and the run's own unlink ends in a traceback)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, GROUP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class StopSignals:
    """Install on enter (main thread only), restore the previous handlers on exit."""

    def __init__(self, where: str = "the run"):
        self.where = where
        self.received: int | None = None
        self._previous: dict = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
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
        return STOP_SIGNALS[signal.Signals(self.received)][1]

    def _handle(self, signum, frame) -> None:
        if self.received is not None:
            return                  # already stopping: let the cleanup finish
        self.received = signum
        raise self.exception(f"{STOP_SIGNALS[signal.Signals(signum)][0]} received during {self.where}")


def stop_status(exc: BaseException) -> str:
    """How a run that raised `exc` ended, as its report says it: interrupted, terminated or crashed."""
    if isinstance(exc, Terminated):
        return "terminated"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return "crashed"
