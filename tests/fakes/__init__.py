"""Test doubles for what cannot run off the board. Only the RKNNLite runtime qualifies.

`tests/fakes` is put first on sys.path (see `use_fake_rknnlite`) so that `from rknnlite.api import RKNNLite`
finds tests/fakes/rknnlite/api.py exactly where the board would find rknn-toolkit-lite2.
"""
from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["FAKES_DIR", "use_fake_rknnlite", "forget_rknnlite"]

FAKES_DIR = Path(__file__).resolve().parent


def forget_rknnlite() -> None:
    """Drop any imported rknnlite modules so the next import searches sys.path again."""
    for name in [m for m in sys.modules if m == "rknnlite" or m.startswith("rknnlite.")]:
        del sys.modules[name]


def use_fake_rknnlite(monkeypatch):
    """Make `rknnlite.api` the fake for one test; returns the fake RKNNLite class, switches reset.

    Call `forget_rknnlite()` at teardown (the fixtures do) so later tests see the real environment.
    """
    forget_rknnlite()
    monkeypatch.syspath_prepend(str(FAKES_DIR))
    from rknnlite.api import RKNNLite

    RKNNLite.reset()
    return RKNNLite
