"""Which backends there are: the suite's own, and those that installed distributions add.

The suite is not installed (its checkout is on PYTHONPATH, its venv holds dependencies), so its own
backends are a table here. Another project's backend arrives as pytest plugins do: a distribution
installed in the suite's environment names a Context class under the `anima.backends` entry-point
group (docs/extending.md), and `--backend NAME` runs it in the commands and the gates alike.

Entry points are read once, at import (3-4 ms over the venv's distributions; importlib.metadata's own
import ~30 ms, which pytest pays anyway). A registration that would shadow a built-in backend or
another distribution's is refused, not ignored: every run then fails with one line naming it
(base.backend_options).
"""
from __future__ import annotations

from ..core import plugins

__all__ = ["ENTRY_POINT_GROUP", "BUILT_IN", "BACKENDS", "ORIGIN", "REFUSED", "installed"]

ENTRY_POINT_GROUP = "anima.backends"

# name -> "module:Class"; imported lazily so the board runtime is only imported where it is asked for.
BUILT_IN = {
    "onnxruntime": "harness.backends.onnxruntime:OnnxRuntimeContext",
    "rknnlite": "harness.backends.rknnlite:RknnLiteContext",
    "faults": "harness.backends.faults:FaultInjectionContext",
    "board-sim": "harness.backends.board_sim:BoardSimContext",
    "rknn-sim": "harness.backends.rknn_sim:RknnSimContext",
}

def installed() -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(name -> "module:Class", name -> distribution, refused registrations as one line each) of the
    backends installed distributions register (harness.core.plugins, shared with gates and commands)."""
    done = plugins.installed(ENTRY_POINT_GROUP, "backend", [*BUILT_IN, "auto"])
    return done.found, done.origin, done.refused


_INSTALLED, ORIGIN, REFUSED = installed()
BACKENDS = {**BUILT_IN, **_INSTALLED}
