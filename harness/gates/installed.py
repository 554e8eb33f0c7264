"""Gates that installed distributions register under the `anima.gates` entry-point group
(docs/extending.md): `gate(run) -> str | None`, given a golden case's shared run (runner.CaseRun,
as the numerics and quality gates read it) and returning None for a pass or the failure's one line.
tests/acceptance/test_installed_gates.py runs each on every selected case, as an `npu` test named
by its entry point.
"""
from __future__ import annotations

from collections.abc import Callable

from ..core import plugins
from ..core.errors import ConfigError

__all__ = ["ENTRY_POINT_GROUP", "GATES", "gate"]

ENTRY_POINT_GROUP = "anima.gates"
GATES = plugins.installed(ENTRY_POINT_GROUP, "gate")


def gate(name: str) -> Callable:
    """The gate function `name` registers, imported: one ConfigError naming its distribution when it
    cannot be imported or is not a function."""
    found = plugins.load(GATES, name)
    if not callable(found):
        raise ConfigError(f"{GATES.where(name)}: is not a function gate(run) -> str | None")
    return found
