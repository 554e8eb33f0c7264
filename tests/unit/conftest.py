"""Fixtures shared by the unit tests' modules."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from harness.model.config import REPO_ROOT


@pytest.fixture(scope="module", autouse=True)
def one_blas_thread():
    """The unit tests' numpy on one BLAS thread, as the pipeline's host math already is (each module's,
    restored after it: the acceptance gates a worker runs next keep the machine's): their matrices are
    small (width 64), and OpenBLAS's second thread adds only its busy-waiting, which under bin/test's
    two workers spins on the core the other worker needs. test_cli_generate, test_pipeline and six other
    modules of the reference took 33 s with the default two threads, 19 s with one (-n 0)."""
    from threadpoolctl import threadpool_limits
    with threadpool_limits(limits=1, user_api="blas"):
        yield


@pytest.fixture(scope="session")
def suite_help() -> str:
    """This suite's `pytest --help`, run once for every module that reads it (a pytest process of its
    own, loading every plugin: seconds each time). --noconftest: the options come from pytest.ini's plugins
    (-p harness.pytest_plugin); no conftest adds one, and tests/conftest.py's libraries cost ~1.7 s of CPU."""
    return subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), "--noconftest",
                           "--help"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120).stdout


@pytest.fixture(scope="session")
def suite_options(suite_help) -> set[str]:
    """Every option this suite's pytest accepts, from its own --help."""
    return set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", suite_help))
