"""Terminal output (rich): progress bars and tables. Kept apart from the math and the I/O."""
from __future__ import annotations

import contextlib
import sys

from .history import LIFECYCLE_STAGES   # one list of stage names for every table

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


# ---------------------------------------------------------------- run summaries

HOST_CATEGORIES = ("adaln", "embed", "cast", "residual", "final")


def summarize(records: list[dict], host: list[dict], step_walls: list[float], hidden_s: float = 0.0) -> dict:
    """Per-step tables from raw records, in the board profile's terms.

    lifecycle_pass: mean seconds per pass over the subgraphs (one pass = one step) by stage, as the
    profile's [lifecycle_pass]; core_per_step: mean inference seconds per step by branch, as
    [denoise_20_steps]; step_split: where a step's wall time went (lifecycle, host math, the rest).
    hidden_s: lifecycle seconds a background strategy (prefetch) ran behind inference: they are in
    the stage tables but not in the step's wall time, so the split leaves them out.
    """
    steps = len(step_walls)
    body = [r for r in records if r["branch"] != "decoder" and r["step"] < max(steps, 1)]
    per = max(steps, 1)
    stage = {s: sum(r["seconds"] for r in body if r["stage"] == s) / per for s in LIFECYCLE_STAGES}
    branches = sorted({r["branch"] for r in body})
    core = {b: sum(r["seconds"] for r in body if r["stage"] == "run" and r["branch"] == b) / per
            for b in branches}
    host_per = {c: sum(h["seconds"] for h in host if h["category"] == c and h["step"] < per) / per
                for c in HOST_CATEGORIES}
    wall = sum(step_walls) / per if steps else 0.0
    lifecycle = sum(stage.values()) - hidden_s / per
    host_total = sum(host_per.values())
    return {
        "invocations": sum(1 for r in body if r["stage"] == "run"),
        "stage_records": len(body),
        "lifecycle_records": records,
        "host_times": host,
        "step_seconds": step_walls,
        "tables": {
            "lifecycle_pass": {**stage, "stage_sum": stage["load"] + stage["init"] + stage["release"]},
            "core_per_step": core,
            "step_split": {"step": wall, "lifecycle": lifecycle, "host": host_total, **{f"host_{k}": v for k, v in host_per.items()},
                           "rest": wall - lifecycle - host_total},
        },
        "denoise_seconds": sum(step_walls),
    }


def print_run_tables(report: dict, out=None) -> None:
    """The one-pass lifecycle table and core time per branch per step, like the board profile."""
    from rich.table import Table
    con = out or console(stderr=False)
    tables = report.get("tables", {})
    lp = tables.get("lifecycle_pass", {})
    t = Table(title="lifecycle, one pass over the subgraphs (mean per step)")
    t.add_column("stage")
    t.add_column("board call")
    t.add_column("seconds", justify="right")
    from .lifecycle import STAGES as names
    for s in LIFECYCLE_STAGES:
        t.add_row(s, names[s], f"{lp.get(s, 0.0):.4f}")
    t.add_row("stage_sum", "load+init+release", f"{lp.get('stage_sum', 0.0):.4f}")
    con.print(t)
    c = Table(title="core time per branch per step")
    c.add_column("branch")
    c.add_column("seconds", justify="right")
    for b, v in tables.get("core_per_step", {}).items():
        c.add_row(b, f"{v:.4f}")
    con.print(c)
    sp = tables.get("step_split", {})
    if sp.get("step"):
        s = Table(title=f"step split (mean step {sp['step']:.4f} s)")
        s.add_column("part")
        s.add_column("seconds", justify="right")
        s.add_column("share", justify="right")
        for k in ("lifecycle", "host", "rest"):
            s.add_row(k, f"{sp[k]:.4f}", f"{100 * sp[k] / sp['step']:.1f} %")
        con.print(s)
    mem = report.get("memory")
    if mem:
        con.print(f"peak PSS added: {mem.get('peak_pss_added_bytes', 0) / 2**20:.1f} MiB, "
                  f"min MemAvailable: {mem.get('min_mem_available_bytes', 0) / 2**20:.0f} MiB")
