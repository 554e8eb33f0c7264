"""The README's set-up on a board, checked here: bin/test's own bootstrap run in its dry-run mode
(ANIMA_SETUP=dry-run) against the board-shaped tree tests/data/sysfs-rk3588 (ANIMA_TELEMETRY_ROOT), and
off it, with what each would install read from its output; the interpreter check of bin/_requirements.py
under an interpreter that lacks what 3.11 added; the toolkit tests deselected on a board."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.model.config import REPO_ROOT
from tests.helpers import missing_tool

TREE = REPO_ROOT / "tests" / "data" / "sysfs-rk3588"
BOARD_LIST = REPO_ROOT / "bin" / "debian-packages-board.txt"
HOST_LIST = REPO_ROOT / "bin" / "debian-packages.txt"
DEV_TOOLS = ("mypy", "ruff", "zizmor", "check-jsonschema", "scipy-stubs", "types-psutil")


def packages(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def dry_run(tmp_path: Path, board: bool) -> dict:
    """bin/test's set-up plan: {"role", "venv", "requirements", "debian", "toolkit"} from its [setup] lines."""
    env = {k: v for k, v in os.environ.items() if k not in ("ANIMA_EXTRAS", "ANIMA_TELEMETRY_ROOT", "ANIMA_PYTHON")}
    env.update(ANIMA_SETUP="dry-run", ANIMA_VENV=str(tmp_path / "venv"), ANIMA_TOOLKIT_HOME=str(tmp_path / "toolkit"))
    if board:
        env["ANIMA_TELEMETRY_ROOT"] = str(TREE)
    done = subprocess.run([str(REPO_ROOT / "bin" / "test")], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    lines = [line.removeprefix("[setup] ") for line in done.stdout.splitlines()]
    plan = {"requirements": [line.removeprefix("requirement: ") for line in lines if line.startswith("requirement: ")]}
    for key, start in (("role", "dry run: "), ("venv", "venv "), ("debian", "Debian packages: "),
                       ("toolkit", "rknn-toolkit2 environments: ")):
        plan[key] = next(line.removeprefix(start) for line in lines if line.startswith(start))
    assert not (tmp_path / "venv").exists() and not (tmp_path / "toolkit").exists(), "a dry run installed something"
    return plan


def names(requirements: list[str]) -> set[str]:
    from packaging.requirements import Requirement
    return {Requirement(line).name for line in requirements}


def test_on_a_board_the_set_up_installs_the_board_extra_and_its_packages_only(tmp_path):
    plan = dry_run(tmp_path, board=True)
    assert plan["role"].startswith("board (rockchip,rk3588 in ")
    assert "extras board" in plan["venv"]
    assert "rknn-toolkit-lite2" in names(plan["requirements"])
    assert {"pytest", "pytest-benchmark", "pytest-timeout"} <= names(plan["requirements"])
    assert not set(DEV_TOOLS) & names(plan["requirements"])
    assert plan["debian"].split(" (missing")[0].split() == packages(BOARD_LIST)
    assert plan["toolkit"].startswith("none")


def test_off_a_board_the_set_up_is_the_pcs_whole_one(tmp_path):
    plan = dry_run(tmp_path, board=False)
    assert plan["role"] == "host" and "extras test" in plan["venv"]
    assert set(DEV_TOOLS) <= names(plan["requirements"])
    assert "rknn-toolkit-lite2" not in names(plan["requirements"])
    assert plan["debian"].split(" (missing")[0].split() == packages(BOARD_LIST) + packages(HOST_LIST)
    assert plan["toolkit"].startswith("every version in toolkit/versions.toml")


def test_the_boards_debian_packages_start_no_service():
    """What a board installs ships no systemd unit or init script (checked on the packages installed here)."""
    installed = [p for p in packages(BOARD_LIST)
                 if subprocess.run(["dpkg-query", "-W", p], capture_output=True).returncode == 0]
    if not installed:
        missing_tool("none of bin/debian-packages-board.txt is installed here (bin/test installs it as root)")
    for package in installed:
        files = subprocess.run(["dpkg-query", "-L", package], capture_output=True, text=True).stdout.splitlines()
        services = [f for f in files if f.endswith((".service", ".socket")) or f.startswith("/etc/init.d/")]
        assert not services, f"{package} installs a service: {services}"


def old_python(version: tuple[int, int, int], *args: str) -> subprocess.CompletedProcess:
    """bin/_requirements.py under this interpreter made to look like `version` without 3.11's tomllib."""
    script = REPO_ROOT / "bin" / "_requirements.py"
    code = ("import runpy, sys; sys.modules['tomllib'] = None; "
            f"sys.version_info = {(*version, 'final', 0)!r}; sys.argv = {[str(script), *args]!r}; "
            f"runpy.run_path({str(script)!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_python_below_3_11_is_one_line_naming_it_and_how_to_get_3_11():
    done = old_python((3, 10, 12), str(REPO_ROOT / "pyproject.toml"), "board", "board")
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: Python 3.10.12 (") and "too old" in lines[0]
    assert "python3.11" in lines[0] and "ANIMA_PYTHON" in lines[0] and "Ubuntu 22.04" in lines[0]


def test_python_newer_than_the_runtimes_wheels_is_one_line_on_a_board_only():
    done = old_python((3, 13, 1), str(REPO_ROOT / "pyproject.toml"), "board", "board")
    assert done.returncode == 2 and "3.13.1" in done.stderr and "rknn-toolkit-lite2" in done.stderr
    assert len(done.stderr.splitlines()) == 1
    host = subprocess.run([sys.executable, str(REPO_ROOT / "bin" / "_requirements.py"),
                           str(REPO_ROOT / "pyproject.toml"), "test", "host"], capture_output=True, text=True)
    assert host.returncode == 0 and "mypy>=" in host.stdout


@pytest.mark.slow          # a pytest session of its own
def test_the_toolkit_tests_are_deselected_on_a_board_with_one_line(tmp_path):
    toolkit_tests = REPO_ROOT / "tests" / "unit" / "test_toolkit_attention_layout.py"
    cmd = [sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), str(toolkit_tests), "--collect-only",
           "-q", "-p", "no:cacheprovider", "-p", "no:xdist", f"--artifacts={tmp_path / 'artifacts'}",
           "--backend=onnxruntime"]
    board = subprocess.run([*cmd, f"--telemetry-root={TREE}"], capture_output=True, text=True, cwd=REPO_ROOT)
    lines = [line for line in board.stdout.splitlines() if "toolkit test(s) deselected" in line]
    assert len(lines) == 1 and "an RK3588" in lines[0], board.stdout[-2000:]
    assert "no tests collected" in board.stdout
