"""`harness probe-memory`: the residency probe as a command, on any backend.

Loads and keeps contexts one at a time, sampling process PSS, added PSS, MemAvailable delta and
swap growth after each (the board profile's [[residency_probe]] table), stops at the memory gates,
releases everything (timed), fits the growth and extrapolates to all subgraphs with a verdict.
Writes probe.csv, probe.json and probe.png (memory against contexts, with the gate lines) to --out.

On the simulated board the memory is real but scaled ([sim] memory_scale): the table shows what
was measured here, the verdict also says it in board terms (divided by the scale).
"""
from __future__ import annotations

import argparse
import csv
import io
from pathlib import Path

from ..core.atomic import atomic_write_bytes, atomic_write_json
from ..core.errors import ConfigError
from .options import (
    add_options,
    board_sim_options,
    check_precision,
    checked,
    default_partition,
    positive_int,
    resolve_backend,
    size,
)

__all__ = ["add_command", "verdict"]

MiB = 2 ** 20
GiB = 2 ** 30
_FIELDS = ("contexts", "pss_mib", "pss_added_mib", "mem_available_delta_mib", "swap_growth_mib")


def add_command(sub) -> None:
    p = sub.add_parser("probe-memory", help="load and keep contexts one at a time until a memory gate; "
                                            "fit and extrapolate to full residency")
    add_options(p, "backend", "model_dir", "partition", "precision", "core_mask", "board_profile_data", "time_scale",
                "fault", "calibration", "cache_dir")
    p.add_argument("--limit", type=positive_int, help="most contexts to hold (default: the subgraph count)")
    add_options(p, "mem_floor", "swap_limit")
    p.add_argument("--pss-budget", type=checked(size),
                   help="memory gate: most PSS the held contexts may add (default on board-sim: the data file's "
                        "[sim] context_budget_mib x memory_scale; elsewhere none)")
    p.add_argument("--fit-rows", type=positive_int, default=2,
                   help="rows at the top of the table the growth is fitted over (default: %(default)s)")
    p.add_argument("--warm-up", action=argparse.BooleanOptionalAction, default=True,
                   help="load and release one context before the start (the first reading), so the runtime's one-off "
                        "start-up is not billed to the first context (default: on)")
    p.add_argument("--out", type=Path, default=Path("out/probe"), help="folder for probe.csv/json/png")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_cmd_probe)


def _cmd_probe(args) -> int:
    from ..memory.guard import MemoryGuard, parse_size
    from ..memory.residency import residency_probe
    from ..model.bundle import load_bundle
    from ..results.telemetry import detect_rk3588
    from ..runtime.run import open_partition
    args.backend = resolve_backend(args.backend, detect_rk3588(Path("/")))
    check_precision(args.backend, args.precision)
    bundle = load_bundle(args.model_dir)
    partition = args.partition or default_partition(bundle, args.backend, args.precision, args.quiet,
                                                    args.calibration, args.cache_dir)
    manifest = open_partition(bundle, partition, verify=True)
    options, scale, board = _backend(args, bundle.cfg)
    budget = parse_size(args.pss_budget) if args.pss_budget else None
    if budget is None and board is not None:
        budget = int(board.sim("context_budget_mib") * MiB * scale)
    limit = args.limit or len(manifest.subgraphs)
    print(f"probe-memory: {args.backend}, up to {limit} contexts, memory gates: MemAvailable >= {args.mem_floor}, "
          f"swap growth <= {args.swap_limit}" + (f", PSS added <= {budget / MiB:.1f} MiB" if budget else ""))
    with MemoryGuard(args.mem_floor, args.swap_limit, interval=0.05) as guard:
        result = residency_probe(options, manifest, guard, limit, budget_bytes=budget, warm_up=args.warm_up,
                                 on_row=None if args.quiet else _print_row)
    if not result.rows:
        raise ConfigError(f"probe-memory: no context could be held ({result.tripped})")
    info = verdict(result, len(manifest.subgraphs), args.fit_rows, scale, board, guard.floor_bytes, budget)
    info["warm_up"] = args.warm_up
    info["swap_limit_bytes"] = guard.swap_limit_bytes
    write_outputs(args.out, result, info)
    print_table(result, args.backend)
    for line in info["lines"]:
        print(line)
    print(f"wrote {args.out / 'probe.csv'}, probe.json, probe.png")
    return 0


def print_table(result, backend: str) -> None:
    """The board profile's [[residency_probe]] columns, one row per context held."""
    from rich.table import Table

    from ..report.terminal import console
    t = Table(title=f"residency probe ({backend}, measured here, MiB)")
    for name in _FIELDS:
        t.add_column(name.replace("_mib", "").replace("_", " "), justify="right")
    for r in result.rows:
        t.add_row(str(r.contexts), *(f"{getattr(r, k):.1f}" for k in _FIELDS[1:]))
    console(stderr=False).print(t)


def _print_row(row) -> None:
    print("  " + "  ".join(f"{k} {getattr(row, k):.1f}" if k != "contexts" else f"{k} {row.contexts:3d}"
                           for k in _FIELDS), flush=True)


def _backend(args, cfg):
    """(options, memory scale, board profile or None) for the chosen backend."""
    from ..backends import backend_options
    options = backend_options(args.backend, vars(args), cfg)
    if args.backend == "board-sim":
        from ..backends.board_profile import load_board_profile
        options = board_sim_options(args)
        return options, options.get("memory_scale"), load_board_profile(options.get("profile_data"))
    return options, 1.0, None


def verdict(result, subgraphs: int, fit_rows: int, scale: float, board, floor_bytes: int,
            budget: int | None) -> dict:
    from ..memory.residency import extrapolate, growth_per_context
    c = [r.contexts for r in result.rows]
    p = [r.pss_added_mib for r in result.rows]
    slope = growth_per_context(c, p, fit_rows)
    full = extrapolate(c, p, subgraphs, fit_rows)
    if board is not None:       # board terms: the scaled memory back at 1:1, against the board's RAM
        need_gib, have_gib = full / scale / 1024, board.get("board.ram_total_gib")
        where = f"the {board.get('board.name', str)} ({have_gib:.2f} GiB RAM)"
    else:
        need_gib = full / 1024
        have_gib = (result.mem_available_start_mib * MiB - floor_bytes) / GiB
        where = f"this machine ({have_gib:.2f} GiB MemAvailable above the floor at the start)"
    ceiling = result.ceiling["contexts"] if result.ceiling else None
    fits = need_gib <= have_gib and (ceiling is None or ceiling >= subgraphs)
    lines = [f"stopped: {result.tripped or 'limit reached, no memory gate tripped'}",
             f"held {c[-1]} contexts, PSS added {p[-1]:.1f} MiB; released all in {result.release_seconds:.3f} s; "
             f"contexts loaded now: {result.live_after}",
             f"growth {slope:.2f} MiB per context (fit over the last {min(fit_rows, len(c))} rows)"
             + (f" = {slope / scale:.1f} MiB per board context" if board is not None else ""),
             f"verdict: full residency of {subgraphs} contexts needs "
             f"{f'{need_gib:.1f} GiB' if need_gib >= 1 else f'{need_gib * 1024:.0f} MiB'} of PSS added, "
             f"of {have_gib:.2f} GiB on {where}: "
             + ("fits" if fits else f"fails: the runtime holds at most {ceiling} contexts" if ceiling is not None
                and ceiling < subgraphs else "fails the memory gate")]
    return {"growth_mib_per_context": slope, "full_residency_added_mib": full, "memory_scale": scale,
            "need_gib": need_gib, "have_gib": have_gib, "fits": fits, "subgraphs": subgraphs,
            "fit_rows": fit_rows, "pss_budget_bytes": budget, "floor_bytes": floor_bytes, "lines": lines,
            "context_ceiling": ceiling}


def write_outputs(out: Path, result, info: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(_FIELDS)
    for r in result.rows:
        writer.writerow([r.contexts] + [f"{getattr(r, k):.3f}" for k in _FIELDS[1:]])
    atomic_write_bytes(out / "probe.csv", text.getvalue().encode())
    atomic_write_json(out / "probe.json", {**result.as_dict(), "verdict": info})
    _plot(out / "probe.png", result, info)


def _plot(path: Path, result, info: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    c = [r.contexts for r in result.rows]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(c, [r.pss_added_mib for r in result.rows], "o-", label="PSS added")
    ax.plot(c, [-r.mem_available_delta_mib for r in result.rows], "s--", label="MemAvailable drop")
    ax.plot(c, [r.swap_growth_mib for r in result.rows], "^:", label="swap growth")
    if info["pss_budget_bytes"]:
        ax.axhline(info["pss_budget_bytes"] / MiB, color="red", label="memory gate: PSS budget")
    headroom = result.mem_available_start_mib - info["floor_bytes"] / MiB
    if 0 < headroom < 4 * max(r.pss_added_mib for r in result.rows):
        ax.axhline(headroom, color="darkred", linestyle="-.", label="memory gate: MemAvailable floor")
    ax.axhline(info["swap_limit_bytes"] / MiB, color="orange", linestyle=":", label="memory gate: swap growth limit")
    ax.set_xlabel("contexts held")
    ax.set_ylabel("MiB (measured here)")
    ax.set_title(info["lines"][-1].replace("verdict: ", ""), fontsize=8)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
