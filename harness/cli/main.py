"""`python -m harness COMMAND` (bin/harness): one module per command, each registered below.

Expected failures (HarnessError) print one line naming the culprit and exit non-zero without a
traceback; anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

import argparse
import contextlib
import sys

from ..core.errors import HarnessError, RunStopped
from . import (accept, accuracy, bench_ab, capture, compare, generate, partition, plan, probe_memory, results,
               search_precision, toolkit, trend)

__all__ = ["COMMANDS", "build_parser", "main"]

# The registration list: every command module has add_command(subparsers); a new one joins here.
COMMANDS = [
    generate,           # generate
    partition,          # export, inspect, inspect-checkpoint
    toolkit,            # convert, compare-toolkits
    trend,              # trend
    results,            # results import, export, check, boards, push
    compare,            # compare
    accept,             # accept-golden
    probe_memory,       # probe-memory
    plan,               # plan
    capture,            # capture-calibration
    accuracy,           # accuracy
    search_precision,   # search-precision
    bench_ab,           # bench-ab
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness", description="Anima DiT NPU acceptance harness")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from ..core.signals import StopSignals
    try:
        with StopSignals(f"harness {args.command}"):
            return args.func(args)
    except RunStopped as exc:       # a stop signal: the partial report is written and says so
        with contextlib.suppress(OSError):      # after SIGHUP the terminal may be gone (EIO)
            print(f"error: {exc.status}: {exc}", file=sys.stderr)
        return exc.exit_code
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:          # a file the user named cannot be read or written
        print(f"error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
