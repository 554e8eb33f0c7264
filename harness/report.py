"""Terminal output (rich): progress bars and tables. Kept apart from the math and the I/O."""
from __future__ import annotations

import contextlib
import sys

__all__ = ["progress_bar", "console"]


def console(stderr: bool = True):
    from rich.console import Console
    return Console(stderr=stderr)


@contextlib.contextmanager
def progress_bar(total: int, label: str, disable: bool = False):
    """Yield an `advance()` callable; a rich bar on stderr (hidden when disabled)."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    if disable:
        yield lambda n=1: None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
    with Progress(*columns, console=console(), transient=not sys.stderr.isatty()) as progress:
        task = progress.add_task(label, total=total)
        yield lambda n=1: progress.advance(task, n)
