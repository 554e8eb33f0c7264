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

import re
from importlib.metadata import entry_points

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

_OBJECT_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def installed() -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(name -> "module:Class", name -> distribution, refused registrations as one line each) of the
    backends installed distributions register."""
    found: dict[str, str] = {}
    origin: dict[str, str] = {}
    refused: list[str] = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        dist = point.dist.name if point.dist else "a distribution"
        where = f"{dist}: {ENTRY_POINT_GROUP} entry point '{point.name}'"
        if point.name in BUILT_IN or point.name == "auto":
            refused.append(f"{where}: '{point.name}' is the suite's own backend (choose another name)")
        elif point.name in found:
            refused.append(f"{where}: '{point.name}' is also registered by {origin[point.name]}")
        elif not _OBJECT_REF.fullmatch(point.value):
            refused.append(f"{where}: '{point.value}' is not module:Class")
        else:
            found[point.name], origin[point.name] = point.value, dist
    return found, origin, refused


_INSTALLED, ORIGIN, REFUSED = installed()
BACKENDS = {**BUILT_IN, **_INSTALLED}
