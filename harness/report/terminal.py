"""Terminal output (rich): progress bars and tables. Kept apart from the math and the I/O; the
figures it prints come from steptimes.py, the JSON run report from run.py."""
from __future__ import annotations

import contextlib
import sys

from ..lifecycle.steptimes import BOARD_CALLS, STAGE_NAMES

__all__ = ["progress_bar", "console", "print_run_tables"]


def console(stderr: bool = True):
    from rich.console import Console
    return Console(stderr=stderr)


@contextlib.contextmanager
def progress_bar(total: int, label: str, disable: bool = False):
    """Yield an `advance()` callable: a live rich bar when stderr is a terminal, one plain line per
    step (step k/N, elapsed, ETA) when it is a log; nothing when disabled."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    if disable:
        yield lambda n=1: None
        return
    if not sys.stderr.isatty():
        from ..core.progress import StepLines
        yield StepLines(total, label, lambda line: print(line, file=sys.stderr, flush=True))
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
    with Progress(*columns, console=console()) as progress:
        task = progress.add_task(label, total=total)
        yield lambda n=1: progress.advance(task, n)


def print_run_tables(report: dict, out=None) -> None:
    """The one-pass lifecycle table and core time per branch per step, like the board profile."""
    from rich.table import Table
    con = out or console(stderr=False)
    tables = report.get("tables", {})
    lp = tables.get("lifecycle_pass", {})
    t = Table(title="lifecycle, one pass over the subgraphs (mean per computed step)")
    t.add_column("stage")
    t.add_column("board call")
    t.add_column("seconds", justify="right")
    for stage in STAGE_NAMES:
        t.add_row(stage, BOARD_CALLS[stage], f"{lp.get(stage, 0.0):.4f}")
    t.add_row("stage_sum", "load+init+release", f"{lp.get('stage_sum', 0.0):.4f}")
    con.print(t)
    c = Table(title="core time per branch per computed step")
    c.add_column("branch")
    c.add_column("seconds", justify="right")
    for b, v in tables.get("core_per_step", {}).items():
        c.add_row(b, f"{v:.4f}")
    con.print(c)
    sp = tables.get("step_split", {})
    if sp.get("step"):
        s = Table(title=f"step split (mean computed step {sp['step']:.4f} s)")
        s.add_column("part")
        s.add_column("seconds", justify="right")
        s.add_column("share", justify="right")
        for k in ("lifecycle", "host", "rest"):
            s.add_row(k, f"{sp[k]:.4f}", f"{100 * sp[k] / sp['step']:.1f} %")
        con.print(s)
    image = tables.get("per_image", {})
    if image.get("forecast_steps"):
        fs = tables["forecast_step"]
        con.print(f"per image: {image['denoise']:.3f} s = {image['computed_steps']} computed steps x "
                  f"{image['per_computed_step']:.4f} s + {image['forecast_steps']} forecast steps x "
                  f"{image['per_forecast_step']:.4f} s (forecast {fs.get('host_forecast', 0.0):.4f} s, "
                  f"final layer {fs.get('host_final', 0.0):.4f} s); {image['invocations']} invocations")
    mem = report.get("memory")
    if mem:
        workers = mem.get("run_peak_workers_pss_added_bytes")
        parts = (f" (each at its own peak: pipeline {mem['run_peak_pipeline_pss_added_bytes'] / 2**20:.1f} MiB, "
                 f"child processes {workers / 2**20:.1f} MiB)") if workers else ""
        con.print(f"peak PSS added: {mem.get('peak_pss_added_bytes', 0) / 2**20:.1f} MiB{parts}"
                  + f", min MemAvailable: {mem.get('min_mem_available_bytes', 0) / 2**20:.0f} MiB")
