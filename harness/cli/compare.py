"""`harness compare A B`: two runs side by side, B against A (harness.results.compare)."""
from __future__ import annotations

import argparse

from ..results.compare import compare_lines, load_view
from .results import add_results_option


def add_command(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("compare", help="compare two run reports or two runs of the results store")
    parser.add_argument("a", help="run report JSON, or run:RUN_ID[/CASE] in the results store")
    parser.add_argument("b", help="run report JSON, or run:RUN_ID[/CASE] in the results store")
    add_results_option(parser)
    parser.set_defaults(func=_cmd_compare)
    return parser


def _cmd_compare(args) -> int:
    a, b = load_view(args.a, args.results), load_view(args.b, args.results)
    print("\n".join(compare_lines(a, b)))
    return 0
