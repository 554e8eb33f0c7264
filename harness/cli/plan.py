"""`harness plan`: each lifecycle strategy's expected time and memory, and the best under a budget
(harness.memory.planner)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..core.errors import ConfigError
from ..memory.planner import MiB, inputs_from_profile, inputs_from_report, plan, read_ceiling


def add_command(sub) -> None:
    p = sub.add_parser("plan", help="expected per-image time and memory of each lifecycle strategy, "
                                    "and the best under a memory budget")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--profile", type=Path, help="board profile data file (default: boards/data/rock5c-anima.toml)")
    src.add_argument("--report", type=Path, help="a measured on-demand run's JSON report")
    p.add_argument("--budget", help="added memory allowed, e.g. 2GiB (default: derived from the profile's "
                                    "RAM, MemAvailable floor and residency probe; none for a report)")
    p.add_argument("--context-mib", type=float, help="with --report: added MiB per live context")
    p.add_argument("--measured", type=Path,
                   help="a probe-board data file: its measured figures replace the profile's assumptions")
    p.add_argument("--residency", type=Path,
                   help="a probe-memory probe.json: the context ceiling it measured caps every strategy's "
                        "live contexts")
    p.add_argument("--json", type=Path, help="also write the plan as JSON")
    p.set_defaults(func=_cmd_plan)


def _cmd_plan(args) -> int:
    from ..memory.guard import parse_size
    budget = parse_size(args.budget) / MiB if args.budget else None
    inp = (inputs_from_report(args.report, args.context_mib, budget) if args.report
           else inputs_from_profile(args.profile, budget))
    ceiling = read_ceiling(args.residency) if args.residency else None
    if ceiling is not None:
        inp = replace(inp, context_ceiling=ceiling, notes=inp.notes + [
            f"context ceiling: {ceiling} live contexts, measured ({args.residency})"])
    result = plan(inp)
    print_plan(result)
    if args.report and args.measured:
        raise ConfigError("--measured goes with a board profile, not with --report")
    if not args.report:
        result["space"] = _plan_space(args.profile, budget, args.measured, ceiling)  # the measured case stays on top
    if args.json:
        from ..core.atomic import atomic_write_json
        atomic_write_json(args.json, result)
    return 0


def _plan_space(profile_path, budget, measured, ceiling=None):
    """Granularities x core masks beside the strategies; the choice, its estimate and its reason."""
    from ..backends.board_profile import load_board_profile
    from ..memory.assumptions import board_assumptions
    from ..memory.plan_space import assumptions, budget_effect, plan_space
    from ..report.terminal import console
    profile = load_board_profile(profile_path)
    assumed = board_assumptions(profile, measured)
    result = plan_space(profile, budget, assumed=assumed, ceiling=ceiling)
    print_space(result)
    con = console(stderr=False)
    con.print(f"budget derived from RAM: {result['derived_budget']['mib']:.1f} MiB = "
              f"{result['derived_budget']['how']}", markup=False)
    if budget is not None:
        derived = plan_space(profile, assumed=assumed, ceiling=ceiling)
        con.print(budget_effect(derived["choice"], result["choice"], derived["budget_mib"], budget), markup=False)
    choice = result["choice"]
    if choice:
        con.print(f"estimate for a 28-step Spectrum image at the choice: {choice['seconds']:.1f} s "
                  f"({choice['seconds'] / 60:.1f} min), {choice['added_mib']:.0f} MiB added; it assumes:",
                  markup=False)
        for line in assumptions(profile, result)[1:]:      # the budget's is the line above
            con.print(f"  - {line}", markup=False)
    con.print("what the board was measured to do, or is assumed to:", markup=False)
    for line in result["assumptions"]:
        con.print(f"  - {line}", markup=False)
    con.print(f"choice: {choice['reason']}" if choice else "choice: none, nothing fits the budget", markup=False)
    if choice:
        result["choice_interval"] = _choice_interval(profile, budget, assumed, ceiling, choice)
        con.print(result["choice_interval"]["line"], markup=False)
    return result


def _choice_interval(profile, budget, assumed, ceiling, choice: dict) -> dict:
    """The choice's seconds per image with every measured input at the slow, then the fast end of its
    interval (the probe's); none where no input carries one."""
    from ..memory.plan_space import plan_space
    figures = (assumed.stream_per_core_speedup, assumed.multi_core_speedup, assumed.lifecycle)
    if not any(f.measured and f.interval is not None for f in figures):
        return {"line": "the choice's s / image has no interval: no input it rests on was measured with one"}
    ends = {}
    for end in ("slow", "fast"):
        space = plan_space(profile, budget, assumed=assumed.at(end), ceiling=ceiling)
        row = next(r for r in space["rows"] if (r["granularity"], r["core_mask"]) ==
                   (choice["granularity"], choice["core_mask"]))
        ends[end] = next(c["seconds"] for c in row["choices"] if c["strategy"] == choice["strategy"])
    return {"seconds": choice["seconds"], "fast": ends["fast"], "slow": ends["slow"],
            "line": f"the choice from the measured inputs' 95 % intervals: {choice['seconds']:.1f} s per image "
                    f"[{ends['fast']:.1f}, {ends['slow']:.1f}]"}


def print_space(result: dict) -> None:
    from rich import box
    from rich.table import Table

    from ..report.terminal import console
    t = Table(box=box.SIMPLE,
              title=f"granularity x core mask, per 28-step Spectrum image, budget {result['budget_mib']:.0f} MiB")
    for col in ("granularity", "core mask", "contexts", "on-demand s", "resident s", "resident MiB",
                "best fitting", "s", "MiB"):
        t.add_column(col, no_wrap=True,
                     justify="left" if col in ("granularity", "core mask", "best fitting") else "right")
    for r in result["rows"]:
        best, res = r["best"], r["resident"]
        t.add_row(r["granularity"], r["core_mask"], str(r["contexts"]), f"{r['on_demand']['seconds']:.1f}",
                  f"{res['seconds']:.1f}", f"{res['added_mib']:.0f}" + ("" if res["fits"] else " (over)"),
                  best["strategy"] if best else "-", f"{best['seconds']:.1f}" if best else "-",
                  f"{best['added_mib']:.0f}" if best else "-")
    con = console(stderr=False)
    con.width = max(con.width, 112)          # the nine columns on one line each
    con.print(t)


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
    con.print(f"best for this partition as measured: {best['strategy']} ({best['seconds']:.2f} s, "
              f"{best['added_mib']:.0f} MiB)"
              if best else "no strategy fits the budget")
