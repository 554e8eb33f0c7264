"""Test doubles for what cannot run off the board. Only the RKNNLite runtime qualifies.

`tests/fakes` is put first on sys.path (see `use_fake_rknnlite`) so that `from rknnlite.api import RKNNLite`
finds tests/fakes/rknnlite/api.py exactly where the board would find rknn-toolkit-lite2, and its package
metadata (rknn_toolkit_lite2-2.5.0.dist-info) gives the wheel version the fake behaves as, where the board's
installed wheel gives its own (importlib.metadata, as the stack preflight reads it).
"""
from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["FAKES_DIR", "SIM_LIBRKNNRT", "use_fake_rknnlite", "forget_rknnlite"]

FAKES_DIR = Path(__file__).resolve().parent
# The simulated board tree's runtime library (its bytes carry the version string the fake reports).
SIM_LIBRKNNRT = FAKES_DIR.parent / "data" / "sysfs-rk3588" / "usr" / "lib" / "librknnrt.so"


def forget_rknnlite() -> None:
    """Drop any imported rknnlite modules so the next import searches sys.path again."""
    for name in [m for m in sys.modules if m == "rknnlite" or m.startswith("rknnlite.")]:
        del sys.modules[name]


def use_fake_rknnlite(monkeypatch):
    """Make `rknnlite.api` the fake for one test; returns the fake RKNNLite class, switches reset.

    LIBRKNNRT_PATH points at the simulated board tree's librknnrt.so, as a board whose library is not
    in /usr/lib sets it; a test that removes it sees init_runtime return -1, as on such a board.

    Call `forget_rknnlite()` at teardown (the fixtures do) so later tests see the real environment.
    """
    forget_rknnlite()
    monkeypatch.syspath_prepend(str(FAKES_DIR))
    monkeypatch.setenv("LIBRKNNRT_PATH", str(SIM_LIBRKNNRT))
    from rknnlite.api import RKNNLite

    RKNNLite.reset()
    return RKNNLite
