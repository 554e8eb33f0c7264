"""Fixtures shared by the test modules (the suite's own options and gate fixtures live in
harness/pytest_plugin/)."""
import pytest

from tests.fakes import forget_rknnlite, use_fake_rknnlite


@pytest.fixture
def fake_rknnlite(monkeypatch):
    """The fake RKNNLite runtime importable as `rknnlite.api` for one test, forgotten afterwards."""
    try:
        yield use_fake_rknnlite(monkeypatch)
    finally:
        forget_rknnlite()
