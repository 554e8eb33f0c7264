"""`bin/harness COMMAND` (`python -m harness`): one module per command, each registered below.

Expected failures (HarnessError) print one line naming the culprit and exit non-zero without a
traceback; anything else is a bug and keeps its traceback. A misspelt command or option gets one line
with the closest match; a path the user names is read from where the user stands (ANIMA_CWD).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from pathlib import Path

from ..core.errors import ConfigError, HarnessError, RunStopped
from .usage import PROG, Parser, caller_cwd, closest, examples_of, missing_store_folder, summaries, user_paths

__all__ = ["COMMANDS", "build_parser", "main", "caller_cwd"]

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
DESCRIPTION = "Anima DiT NPU acceptance harness (bin/harness COMMAND --help: its options and an example)"
# Commands that measure a board: off an RK3588 only its simulation (board-sim) has one to measure.
BOARD_COMMANDS = ("probe-board",)


def own_commands() -> tuple[str, ...]:
    return tuple(command for commands in COMMANDS.values() for command in commands)


def build_parser(modules=None, installed: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, of the commands of `modules` (names of COMMANDS), or of the one
    command an installed distribution adds (harness.cli.installed)."""
    parser = Parser(prog=PROG, description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if installed:
        from .installed import add_installed
        add_installed(sub, installed, own_commands())
    for name in [] if installed else modules or COMMANDS:
        importlib.import_module(f"{__package__}.{name}").add_command(sub)
    examples = examples_of(list(sub.choices))
    for command, child in sub.choices.items():
        child.epilog = examples.get(command)
        child.formatter_class = argparse.RawDescriptionHelpFormatter
    user_paths(parser)
    return parser


def listing_parser() -> argparse.ArgumentParser:
    """`bin/harness --help`: every command and its one line, read from the modules' source without
    importing them (importing them all took 3-8 s on a loaded machine, for a list)."""
    parser = Parser(prog=PROG, description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command, text in summaries(__package__, COMMANDS).items():
        sub.add_parser(command, help=text)
    # the installed commands are read here and for a command not the suite's own, never else
    from .installed import commands
    for command, dist in commands(own_commands()).origin.items():
        sub.add_parser(command, help=f"(installed by {dist})")
    return parser


def module_of(argv: list[str]) -> list[str] | None:
    """[the module adding the command argv names], or None (no command, -h, a misspelt one: the
    listing answers)."""
    return next(([name] for name, commands in COMMANDS.items() if argv and argv[0] in commands), None)


def installed_of(argv: list[str]) -> str | None:
    """The command argv names when it is not the suite's own (an installed one, or a misspelt one)."""
    return None if not argv or argv[0].startswith("-") or module_of(argv) else argv[0]


def _unknown_command(argv: list[str]) -> str | None:
    """'unknown command X (did you mean Y?)' for a first word that names no command, else None."""
    asked = installed_of(argv)
    if asked is None:
        return None
    from .installed import commands
    known = [*own_commands(), *commands(own_commands()).found]
    if asked in known:
        return None
    return f"unknown command '{asked}'{closest(asked, known)}; {PROG} --help lists them"


def _refuse_off_board(args) -> None:
    """A run that needs an RK3588 says so first, before it reads a model or writes a report: rknnlite, and a
    board command on any backend but the simulated board."""
    backend = getattr(args, "backend", None)
    if backend != "rknnlite" and (args.command not in BOARD_COMMANDS or backend == "board-sim"):
        return
    from ..results.telemetry import detect_rk3588
    root = getattr(args, "telemetry_root", None) or "/"
    if detect_rk3588(root):
        return
    where = "" if str(root) == "/" else f" under {root}"
    if backend == "rknnlite":
        raise ConfigError(f"--backend rknnlite: not an RK3588{where} (no rockchip,rk3588 device tree, NPU device "
                          f"or librknnrt): use --backend onnxruntime, board-sim or rknn-sim here")
    raise ConfigError(f"{args.command} --backend {backend}: not an RK3588{where}, so no board to measure: "
                      f"--backend board-sim measures the simulated board")


def _refuse_missing_store_folder(args) -> None:
    folder = missing_store_folder(getattr(args, "results", None) or "")
    if folder is not None:
        raise ConfigError(f"--results {args.results}: no folder {folder}; a store is made only in a folder "
                          f"that exists")


def _held(args):
    """The command's --out held for its run (harness.core.locks.output_lock), or nothing to hold."""
    out = getattr(args, "out", None)
    if not isinstance(out, Path):
        return contextlib.nullcontext()
    from ..core.locks import output_lock
    return output_lock(out, "--out")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    modules, installed = module_of(argv), installed_of(argv)
    unknown = _unknown_command(argv)
    if unknown:
        print(f"{PROG}: error: {unknown}", file=sys.stderr)
        return 2
    try:
        parser = build_parser(modules, installed) if modules or installed else listing_parser()
    except ConfigError as exc:      # an installed command refused or not importable: names its distribution
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    from ..core.signals import StopSignals
    try:
        _refuse_off_board(args)
        _refuse_missing_store_folder(args)
        with StopSignals(f"harness {args.command}"), _held(args):
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
