"""`bin/harness results simulate`: the verdicts' error rates on simulated board histories and the
kept onnxruntime A/A streams (harness/results/simulate.py), written as JSON.

    results simulate --out FILE.json [--runs 2000] [--board-runs N] [--seed 0] [--streams PATH] [--shift PCT]...
    results simulate --table FILE.json [--table FILE.json]...     markdown tables of earlier results
    results simulate --page docs/results-statistics.md            its tables, rewritten from the files it names

The same --seed judges the same simulated runs every time: two versions of the verdict code are
compared on identical data. Progress goes to standard error; a summary of the rates to standard output.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..core.atomic import atomic_write_json
from ..core.errors import ConfigError

__all__ = ["add_subcommand", "summary_lines"]


def add_subcommand(sub) -> argparse.ArgumentParser:
    sim = sub.add_parser("simulate", help="measure the verdicts' false alarms and detection (Monte Carlo, JSON)")
    sim.add_argument("--out", type=Path, help="JSON file of the rates, written whole (required unless --table)")
    sim.add_argument("--runs", type=int, default=2000,
                     help="simulated boards (and A/B sessions) per condition (default %(default)s)")
    sim.add_argument("--board-runs", type=int, metavar="N",
                     help="simulated boards per cell of the quiet board's history and A/B sessions, the promises' "
                          "cells (default: --runs)")
    sim.add_argument("--seed", type=int, default=0, help="added to every condition's seed (default %(default)s)")
    sim.add_argument("--streams", type=Path,
                     help="a kept stream file (.json.gz) or a folder of them (default: harness/results/streams)")
    sim.add_argument("--shift", action="append", default=[], metavar="PCT",
                     help="also the simulated board's detection within 5 runs of a slowdown of PCT %% (repeatable)")
    sim.add_argument("--table", type=Path, action="append", metavar="FILE.json",
                     help="print the markdown tables of these earlier --out files side by side (no simulation); "
                          "a column is named by its file's name")
    sim.add_argument("--page", type=Path, metavar="FILE.md",
                     help="rewrite the tables of this page (between its '<!-- results simulate --table ...' marker "
                          "and '<!-- end of generated tables -->') from the files its marker names")
    sim.set_defaults(func=_cmd_simulate)
    return sim


def _shift(text: str) -> float:
    try:
        value = float(str(text).strip().removesuffix("%"))
    except ValueError:
        raise ConfigError(f"--shift {text!r}: expected a slowdown in %, e.g. 20") from None
    if not 0 < value <= 1000:
        raise ConfigError(f"--shift {text!r}: expected a slowdown in (0, 1000] %")
    return value / 100


def _cmd_simulate(args) -> int:
    from ..results.simulate import kept_streams, rates_table, simulate
    if args.page:
        return _rewrite_page(args.page)
    if args.table:
        print(rates_table({path.stem: _read_result(path) for path in args.table}), end="")
        return 0
    if args.out is None:
        raise ConfigError("--out FILE.json is required (or --table FILE.json to print earlier results)")
    for option, value in (("--runs", args.runs), ("--board-runs", args.board_runs)):
        if value is not None and value < 1:
            raise ConfigError(f"{option} {value}: expected at least 1 simulated board per condition")
    if args.out.is_dir():
        raise ConfigError(f"--out {args.out}: is a folder, expected a JSON file")
    shifts = tuple(_shift(s) for s in args.shift)
    streams = None
    if args.streams is not None:
        if not args.streams.exists():
            raise ConfigError(f"--streams {args.streams}: no such file or folder")
        streams = kept_streams(args.streams)
        if not streams:
            raise ConfigError(f"--streams {args.streams}: no kept stream (*.json.gz) in it")
    result = simulate(args.runs, args.seed, streams, shifts, board_runs=args.board_runs)
    atomic_write_json(args.out, json.loads(json.dumps(result, default=float)))
    print("\n".join(summary_lines(result)))
    print(f"wrote {args.out}")
    return 0


MARKER, END = "<!-- results simulate --table ", "<!-- end of generated tables -->"


def _rewrite_page(page: Path) -> int:
    """The page's generated tables rewritten from the result files its marker names (paths from the
    repository root, as `--table` takes them), written whole."""
    from ..core.atomic import atomic_write_bytes
    from ..model.config import REPO_ROOT
    from ..results.simulate import rates_table
    try:
        text = page.read_text()
    except OSError as exc:
        raise ConfigError(f"--page {page}: {exc.strerror or exc}") from None
    marker = next((line for line in text.splitlines() if line.startswith(MARKER)), None)
    if marker is None or END not in text:
        raise ConfigError(f"--page {page}: no '{MARKER}...' marker and '{END}' around its tables")
    files = marker.removeprefix("<!-- results simulate ").removesuffix(" -->").split()[1::2]
    start = text.index(marker) + len(marker) + 1
    table = rates_table({Path(name).stem: _read_result(REPO_ROOT / name) for name in files})
    atomic_write_bytes(page, (text[:start] + table + text[text.index(END, start):]).encode())
    print(f"rewrote the tables of {page} from {', '.join(files)}")
    return 0


def _read_result(path: Path) -> dict:
    try:
        result = json.loads(path.read_text())
        result["rates"], result["started"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"--table {path}: not a `results simulate` JSON file "
                          f"({exc.__class__.__name__}: {exc})") from None
    return result


def summary_lines(result: dict) -> list[str]:
    """One line per rate: its value, 95 % interval and bound."""
    from ..results.simulate import bound_text, holds
    lines = []
    for name, cell in result["rates"].items():
        value = "none judged" if cell["rate"] is None else \
            f"{100 * cell['rate']:5.1f} % [{100 * cell['ci95'][0]:.1f}, {100 * cell['ci95'][1]:.1f}]"
        # judged again from the counts: a file written before a bound's kind changed says what it says now
        bound = f"  ({bound_text(cell['bound'])}: {holds(cell, tuple(cell['bound']))})" \
            if "bound" in cell else ""
        lines.append(f"{name:<28} {value} of {cell['n']}{bound}")
    return lines
