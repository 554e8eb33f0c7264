"""`python -m harness compare A B`: two runs side by side, B against A.

A and B are each a run report (the JSON beside a generated image, or artifacts/runs/<case>.json) or a
run in the results store (`run:RUN_ID`, or `run:RUN_ID/CASE` when the id has several cases; --results
names the store). Both become one view: mean step time, lifecycle seconds per step by stage, core seconds per
step by branch, the 10 slowest subgraphs (all stages, per step) and the memory peak; the command prints each
with the delta.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ..core.errors import ConfigError
from ..core.run_report import check_run_report
from ..core.schema import read_json
from ..lifecycle.steptimes import STAGE_NAMES
from ..model.config import BRANCHES
from .records import Run

__all__ = ["RunView", "load_view", "view_of_report", "view_of_run", "slowest_subgraphs", "compare_lines"]

SLOWEST = 10


def slowest_subgraphs(lifecycle_records: list[dict], steps: int, n: int | None = SLOWEST) -> list[dict]:
    """The n (None: all) subgraphs with the most seconds per step over all four stages (decoder included)."""
    total: dict[tuple, float] = defaultdict(float)
    for r in lifecycle_records:
        total[(r["subgraph"], r["block"], r["branch"])] += r["seconds"]
    per = max(steps, 1)
    rows = [{"subgraph": s, "block": b, "branch": br, "seconds_per_step": t / per}
            for (s, b, br), t in total.items()]
    return sorted(rows, key=lambda r: r["seconds_per_step"], reverse=True)[:n]  # [:None] is all


def subgraph_label(row: dict) -> str:
    return "decoder" if row["branch"] == "decoder" else f"{row['subgraph']} (block {row['block']} {row['branch']})"


class RunView(dict):
    """label, precision, backend, steps, valid, step_s, lifecycle{}, core{}, slowest[], peak_pss_bytes."""


def view_of_report(report: dict, label: str) -> RunView:
    if not isinstance(report, dict) or "tables" not in report or "lifecycle_records" not in report:
        raise ConfigError(f"{label}: not a run report (no 'tables' / 'lifecycle_records')")
    t = report["tables"]
    steps = len(report.get("step_seconds") or []) or report.get("settings", {}).get("steps", 1)
    if isinstance(report.get("steps"), dict):     # Spectrum: subgraphs ran on the computed steps only
        steps = report["steps"].get("computed") or steps
    export = report.get("export") or {}
    memory = report.get("memory") or {}
    return RunView(
        label=label, backend=report.get("backend"), steps=steps, valid=None,
        precision=export.get("dtype", "unknown") + (f"+{export['fake_quant']}" if export.get("fake_quant") else ""),
        step_s=t["step_split"].get("step", 0.0),
        lifecycle={s: t["lifecycle_pass"].get(s, 0.0) for s in STAGE_NAMES},
        core={b: t["core_per_step"].get(b, 0.0) for b in BRANCHES},
        slowest=slowest_subgraphs(report["lifecycle_records"], steps, n=None),   # all, slowest first
        peak_pss_bytes=memory.get("run_peak_pss_added_bytes"))


def view_of_run(run: Run, label: str) -> RunView:
    slowest = sorted(({"subgraph": g.subgraph, "block": g.block, "branch": g.branch,
                       "seconds_per_step": g.seconds_per_step} for g in run.subgraphs),
                     key=lambda r: r["seconds_per_step"], reverse=True)
    return RunView(
        label=label, backend=run.key.backend, steps=run.key.steps, valid=run.valid, precision=run.key.precision,
        step_s=run.mean_step_s, lifecycle=dict(run.stages), core=dict(run.branches), slowest=slowest,
        peak_pss_bytes=run.peak_pss_added_bytes)


def load_view(spec: str, results: str | None = None) -> RunView:
    """'report.json', or 'run:RUN_ID[/CASE]' from the results store at `results`."""
    if spec.startswith("run:"):
        from .store import DEFAULT_RESULTS, ResultsStore
        run_id, _, case = spec[4:].partition("/")
        with ResultsStore(results or DEFAULT_RESULTS, create=False) as store:
            run = store.run(run_id, case or None)
            return view_of_run(run, f"{store.where} {run.label()}")
    path = Path(spec)
    data = read_json(path, "run report")
    if isinstance(data, dict) and "status" in data:
        check_run_report(data, str(path))
    return view_of_report(data, str(path))


def _delta(a, b, unit: str = "s", scale: float = 1.0) -> list[str]:
    if a is None or b is None:
        return [("-" if a is None else f"{a * scale:.4f}"), ("-" if b is None else f"{b * scale:.4f}"), "", ""]
    pct = f"{100 * (b - a) / a:+.1f} %" if a else ""
    return [f"{a * scale:.4f}", f"{b * scale:.4f}", f"{(b - a) * scale:+.4f}", pct]


def compare_rows(a: RunView, b: RunView) -> list[tuple[str, list[list[str]]]]:
    """Sections of (name, rows); each row is [what, A, B, B-A, %]."""
    sections = [("step", [["mean step [s]", *_delta(a["step_s"], b["step_s"])]])]
    sections.append(("lifecycle per stage [s/step]",
                     [[s, *_delta(a["lifecycle"].get(s), b["lifecycle"].get(s))] for s in STAGE_NAMES]))
    sections.append(("core per branch [s/step]",
                     [[br, *_delta(a["core"].get(br), b["core"].get(br))] for br in BRANCHES]))
    slow_a = {subgraph_label(r): r["seconds_per_step"] for r in a["slowest"]}
    slow_b = {subgraph_label(r): r["seconds_per_step"] for r in b["slowest"]}
    names = list(slow_b)[:SLOWEST]
    sections.append((f"{SLOWEST} slowest subgraphs of B [s/step]",
                     [[n, *_delta(slow_a.get(n), slow_b.get(n))] for n in names]))
    sections.append(("memory", [["peak added PSS [MiB]",
                                 *_delta(a["peak_pss_bytes"], b["peak_pss_bytes"], scale=1 / 2**20)]]))
    return sections


def compare_lines(a: RunView, b: RunView) -> list[str]:
    """Plain text (a CI log and a terminal read it the same)."""
    lines = [f"A: {a['label']}  ({a['backend']}, {a['precision']}, {a['steps']} steps)",
             f"B: {b['label']}  ({b['backend']}, {b['precision']}, {b['steps']} steps)"]
    for title, rows in compare_rows(a, b):
        lines.append("")
        lines.append(title)
        lines.append(f"  {'':<34} {'A':>10} {'B':>10} {'B-A':>10} {'':>9}")
        for what, *cells in rows:
            lines.append(f"  {what:<34} {cells[0]:>10} {cells[1]:>10} {cells[2]:>10} {cells[3]:>9}")
    return lines
