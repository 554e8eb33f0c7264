"""`python -m harness COMMAND` (bin/harness): one module per command, each registered below.

Expected failures (HarnessError) print one line naming the culprit and exit non-zero without a
traceback; anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import sys

from ..core.errors import HarnessError, RunStopped

__all__ = ["COMMANDS", "build_parser", "main"]

# The registration table: each module of this package that has add_command(subparsers), with the
# commands it adds (tests/unit/test_cli_main.py checks the two agree); a new one joins here. main()
# imports only the module of the command it runs: importing all of them (onnx, scipy, ruptures)
# took 1.4 of the 1.6 s of every start on the development machine, for a parser that runs one.
COMMANDS = {
    "generate": ("generate",),
    "partition": ("export", "inspect", "inspect-checkpoint"),
    "toolkit": ("convert", "compare-toolkits"),
    "trend": ("trend",),
    "results": ("results",),
    "compare": ("compare",),
    "accept": ("accept-golden",),
    "probe_memory": ("probe-memory",),
    "probe_board": ("probe-board",),
    "plan": ("plan",),
    "capture": ("capture-calibration",),
    "accuracy": ("accuracy",),
    "reduce": ("reduce",),
    "search_precision": ("search-precision",),
    "bench_ab": ("bench-ab",),
    "lab": ("lab",),
    "goldens": ("goldens",),
}


def build_parser(modules=None) -> argparse.ArgumentParser:
    """The parser of every command, or of the commands of `modules` (names of COMMANDS)."""
    parser = argparse.ArgumentParser(prog="python -m harness", description="Anima DiT NPU acceptance harness")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in modules or COMMANDS:
        importlib.import_module(f"{__package__}.{name}").add_command(sub)
    return parser


def module_of(argv: list[str]) -> list[str] | None:
    """[the module adding the command argv names], or None (no command, -h, a misspelt one: the
    whole parser answers, listing every command)."""
    return next(([name] for name, commands in COMMANDS.items() if argv and argv[0] in commands), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(module_of(argv)).parse_args(argv)
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
