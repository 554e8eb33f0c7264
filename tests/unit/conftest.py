"""Fixtures shared by the unit tests' modules."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from harness.model.config import REPO_ROOT


@pytest.fixture(scope="module")
def suite_options() -> set[str]:
    """Every option this suite's pytest accepts, from its own --help."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), "--help"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=120).stdout
    return set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", out))
