"""`harness plan`: each lifecycle strategy's expected time and memory, and the best under a budget (harness.memory.planner)."""
from __future__ import annotations

from pathlib import Path

from ..memory.planner import MiB, inputs_from_profile, inputs_from_report, plan

__all__ = ["add_command"]


def add_command(sub) -> None:
    p = sub.add_parser("plan", help="expected per-image time and memory of each lifecycle strategy, "
                                    "and the best under a memory budget")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--profile", type=Path, help="board profile data file (default: boards/data/rock5c-anima.toml)")
    src.add_argument("--report", type=Path, help="a measured on-demand run's JSON report")
    p.add_argument("--budget", help="added memory allowed, e.g. 2GiB (default: the profile's "
                                    "[sim] context_budget_mib; none for a report)")
    p.add_argument("--context-mib", type=float, help="with --report: added MiB per live context")
    p.add_argument("--json", type=Path, help="also write the plan as JSON")
    p.set_defaults(func=_cmd_plan)


def _cmd_plan(args) -> int:
    from ..memory.guard import parse_size
    budget = parse_size(args.budget) / MiB if args.budget else None
    inp = (inputs_from_report(args.report, args.context_mib, budget) if args.report
           else inputs_from_profile(args.profile, budget))
    result = plan(inp)
    print_plan(result)
    if args.json:
        from ..core.atomic import atomic_write_json
        atomic_write_json(args.json, result)
    return 0


def print_plan(result: dict) -> None:
    from rich.markup import escape
    from rich.table import Table
    from ..report.terminal import console
    con = console(stderr=False)
    budget = result["budget_mib"]
    t = Table(title=f"lifecycle plan per image ({result['source']})"
                    + (f", budget {budget:.0f} MiB added" if budget else ""))
    for col in ("strategy", "s / image", "added MiB", "live", "fits", "reach of bound", "how"):
        t.add_column(col, justify="left" if col in ("strategy", "how") else "right")
    for c in result["choices"]:
        t.add_row(c["strategy"], f"{c['seconds']:.2f}", f"{c['added_mib']:.0f}", str(c["live"]),
                  "yes" if c["fits"] else "NO", f"{100 * c['reach']:.0f} %", c["note"])
    con.print(t)
    b = result["bound"]
    digits = 0 if b["high"] >= 100 else 2
    con.print(f"bound: {b['low']:.{digits}f}-{b['high']:.{digits}f} s per image at {b['added_mib']:.0f} MiB "
              f"({escape(b['what'])})")
    con.print(f"mean lifecycle per subgraph {result['mean_lifecycle_s']:.3f} s; full residency needs "
              f"{result['full_residency_added_gib']:.1f} GiB added")
    for note in result["notes"]:
        con.print(f"note: {escape(note)}")
    best = result["best"]
    con.print(f"best within the budget: {best['strategy']} ({best['seconds']:.2f} s, {best['added_mib']:.0f} MiB)"
              if best else "no strategy fits the budget")
