"""A test that needs a tool the machine lacks skips here and fails in CI, where the set-up installs it."""
from __future__ import annotations

import pytest

from tests.helpers import missing_tool


def test_skips_off_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no browser"):
        missing_tool("no browser")


def test_fails_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no browser .CI=true"):
        missing_tool("no browser")
