"""Where the suite's user stands, and what the tests' own processes import.

bin/test changes into the checkout before pytest starts (bin/_bootstrap.sh), saying where the user
stood in ANIMA_CWD: a path the user names (`--artifacts=out`, a test file `unit/test_x.py` typed in
tests/) is read from there, rewritten before pytest parses it, so the controller, its xdist workers and
the run's messages all see the same absolute path. Plain `pytest` from the checkout's root gets the
same subprocesses as bin/test: the checkout on PYTHONPATH, so a test's `python -m harness` finds it.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..cli.options import SUITE_OPTIONS, flag_of
from ..cli.usage import caller_cwd, sqlite_under, user_path
from ..model.config import REPO_ROOT

__all__ = ["PATH_FLAGS", "from_caller"]

# pytest's short options whose value is never a path here (a marker or keyword expression, a plugin).
VALUED = ("-m", "-k", "-p", "-n", "-o", "-W")

# The suite's options that name a file or folder (the results store's SQLite file included).
PATH_FLAGS = {flag_of(n) for n, o in SUITE_OPTIONS.items() if o.kind == "path"} | {"--results", "--board-profile"}


def load_initial_conftests(args) -> None:
    """Before pytest parses its arguments: the caller's paths made absolute, the checkout on the
    PYTHONPATH the tests' subprocesses inherit."""
    _export_checkout()
    here = caller_cwd()
    if here.resolve() != Path.cwd().resolve():
        args[:] = from_caller(args, here)


def _export_checkout() -> None:
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(REPO_ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *paths])


def from_caller(args: list[str], here: Path) -> list[str]:
    """args with every path option's relative value, and every test path that exists where the user
    stands, made absolute from there."""
    out: list[str] = []
    for arg in args:
        flag, eq, value = arg.partition("=")
        if out and out[-1] in VALUED:
            out.append(arg)
        elif out and out[-1] in PATH_FLAGS and not eq:
            out.append(_absolute(out[-1], arg, here))
        elif eq and flag in PATH_FLAGS:
            out.append(f"{flag}={_absolute(flag, value, here)}")
        elif not arg.startswith("-") and (here / arg.split("::")[0]).exists():
            out.append(str(here / arg))
        else:
            out.append(arg)
    return out


def _absolute(flag: str, value: str, here: Path) -> str:
    return sqlite_under(value, here) if flag == "--results" else str(user_path(value, here))
