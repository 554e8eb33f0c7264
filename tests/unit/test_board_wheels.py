"""Every requirement of a board's install (bin/_requirements.py's lines for the `board` extra, and all
they pull in) has an aarch64 wheel for each Python a board may run (3.11, 3.12): pip resolves them from
the registry for the aarch64 manylinux platforms (manylinux_2_17 to _2_35) with binaries only, as a dry
run (metadata, no install), and its report must name a wheel for every package. Slow tier: it needs the
registry."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.model.config import REPO_ROOT

pytestmark = pytest.mark.slow
# The glibc of the board images (Ubuntu 22.04: 2.35, Debian 12: 2.36) runs every manylinux tag up to 2.35;
# pip takes only the tags it is given (manylinux_2_28 alone drops the manylinux2014-only wheels).
PLATFORMS = [arg for minor in range(17, 36) for arg in ("--platform", f"manylinux_2_{minor}_aarch64")] + \
    ["--platform", "manylinux2014_aarch64"]
BOARD = {"platform_machine": "aarch64", "platform_system": "Linux", "sys_platform": "linux",
         "os_name": "posix", "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def board_requirements(python: str) -> list[str]:
    """The board's lines with their markers decided for an aarch64 board (pip would ask this machine)."""
    from packaging.requirements import Requirement
    lines = subprocess.run([sys.executable, str(REPO_ROOT / "bin" / "_requirements.py"),
                            str(REPO_ROOT / "pyproject.toml"), "board", "board"],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    kept = []
    for line in lines:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({**BOARD, "python_version": python,
                                                      "python_full_version": f"{python}.0"}):
            req.marker = None
            kept.append(str(req))
    return kept


@pytest.mark.parametrize("python", ["3.11", "3.12"])
def test_every_board_requirement_has_an_aarch64_wheel(python, tmp_path):
    requirements = board_requirements(python)
    assert any(r.startswith("rknn-toolkit-lite2") for r in requirements)
    (tmp_path / "requirements.txt").write_text("\n".join(requirements) + "\n")
    # --isolated: a board's pip, not this machine's configuration (its local indexes and constraints)
    cert = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    cmd = [sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed", "--quiet",
           "--disable-pip-version-check", "--report", str(tmp_path / "report.json"), "--target", str(tmp_path / "t"),
           *PLATFORMS, "--python-version", python, "--implementation", "cp",
           "--only-binary=:all:", "-r", str(tmp_path / "requirements.txt"), *(["--cert", cert] if cert else [])]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"no aarch64 wheel set for Python {python}: {done.stderr[-2000:]}"
    report = json.loads(Path(tmp_path / "report.json").read_text())
    wheels = {item["metadata"]["name"].lower(): item["download_info"]["url"].rsplit("/", 1)[-1]
              for item in report["install"]}
    assert "rknn-toolkit-lite2" in wheels and "onnxruntime" in wheels
    for name, wheel in wheels.items():
        assert wheel.endswith(".whl"), f"{name}: {wheel} is not a wheel"
        platform = wheel.removesuffix(".whl").split("-")[-1]
        assert "aarch64" in platform or platform == "any", f"{name}: {wheel} is not for aarch64"
