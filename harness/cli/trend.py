"""`harness trend`: step and lifecycle time over the runs in the results store (harness.results.trend)."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..core.errors import ConfigError
from ..results.trend import DEFAULT_TREND_PNG, render_table, trend
from .results import add_results_option


def add_command(subparsers) -> argparse.ArgumentParser:
    """Register `trend` on the CLI's subparsers."""
    parser = subparsers.add_parser("trend", help="plot step and lifecycle time over the runs in the results store")
    add_results_option(parser)
    parser.add_argument("--out", type=Path, default=DEFAULT_TREND_PNG, help="PNG path (default: %(default)s)")
    parser.add_argument("--board", help="only the runs of this board_id")
    parser.add_argument("--backend", help="only the runs of this backend (e.g. leave out 'faults')")
    parser.add_argument("--threshold", default="10%", help="threshold shaded above a line with too few runs "
                        "for a learned one (default: %(default)s, as --fixed-threshold)")
    parser.set_defaults(func=_cmd_trend)
    return parser


def _cmd_trend(args) -> int:
    if args.out.suffix.lower() != ".png":
        raise ConfigError(f"--out {args.out}: the trend is written as PNG; use a .png path")
    from ..results.store import ResultsStore
    from ..results.verdict.figures import parse_threshold
    with ResultsStore(args.results, create=False) as store:
        runs = store.runs()
    rows = trend(runs, args.out, board=args.board, backend=args.backend, threshold_pct=parse_threshold(args.threshold))
    render_table(rows)
    print(f"{args.out}  {len(rows)} runs")
    return 0
