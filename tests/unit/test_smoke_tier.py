"""The smoke tier: its checks against the simulated board tree (tests/data/sysfs-rk3588, copied where
changed), and `pytest -m smoke` itself off the board: passing in under a minute, with --require-npu
failing with the line that names the missing NPU device node, and on the simulated board without
--partition failing tests 2-4 with one line each. A driver loaded with no /dev node (a container) is told
from a kernel without the driver, and every docs/board.md section a message cites exists."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.gates.smoke import GUIDE, SECTIONS, find_npu_node, npu_node_problem, version_problem
from harness.model.config import REPO_ROOT
from tests.fakes import FAKES_DIR, SIM_LIBRKNNRT
from tests.load import Watch

BOARD = REPO_ROOT / "tests" / "data" / "sysfs-rk3588"
# A citation of the guide in a message or docstring: docs/board.md, 'Heading' (or section 'Heading').
CITATION = re.compile(r"docs/board\.md,\s+(?:section\s+)?['\"]([^'\"]+)['\"]")


@pytest.fixture
def board(tmp_path) -> Path:
    copy = tmp_path / "board"
    shutil.copytree(BOARD, copy)
    return copy


def test_the_npu_render_node_is_the_rknpu_drivers_not_the_gpus():
    node = find_npu_node(BOARD)
    assert (node.shown(BOARD), node.driver) == ("/dev/dri/renderD129", "rknpu")
    assert npu_node_problem(BOARD) is None


def test_a_gpu_render_node_alone_is_no_npu(board):
    (board / "sys/class/drm/renderD129").rename(board / "gone")
    problem = npu_node_problem(board)
    assert problem.startswith(f"no NPU device node under {board} and no sign of the RKNPU driver: neither "
                              "/dev/rknpu nor"), problem
    assert "Boot a vendor (BSP) kernel" in problem and "container" not in problem


def test_a_loaded_driver_without_its_node_is_a_container_not_a_kernel(board):
    (board / "dev/dri/renderD129").unlink()      # /sys still says DRIVER=RKNPU: the host's kernel has it
    problem = npu_node_problem(board)
    assert problem.startswith("the RKNPU driver is loaded (/sys/class/drm/renderD129/device/uevent says "
                              "DRIVER=RKNPU) but its device node /dev/dri/renderD129 is not visible under "), problem
    assert "container" in problem and "pass /dev/dri/renderD129 into it" in problem
    assert "Boot a vendor" not in problem


@pytest.mark.parametrize("sign, node", [("proc/misc", "/dev/rknpu"),
                                        ("sys/bus/platform/drivers/RKNPU", "/dev/rknpu or /dev/dri/renderD*")])
def test_the_misc_device_and_the_platform_driver_are_signs_too(board, sign, node):
    shutil.rmtree(board / "sys/class/drm")
    shutil.rmtree(board / "dev/dri")
    assert "no sign of the RKNPU driver" in npu_node_problem(board)
    if sign == "proc/misc":
        (board / sign).write_text(" 58 rknpu\n 59 rga\n")
    else:
        (board / sign).mkdir(parents=True)
    problem = npu_node_problem(board)
    assert problem.startswith("the RKNPU driver is loaded (") and f"its device node {node} is not visible" in problem


def _headings() -> set[str]:
    """docs/board.md's headings, each without its number ("4. The NPU ..." -> "The NPU ...")."""
    text = (REPO_ROOT / GUIDE).read_text()
    return {re.sub(r"^\d+\.\s+", "", m) for m in re.findall(r"(?m)^#{1,6}\s+(.+?)\s*$", text)}


def test_every_section_the_smoke_messages_cite_exists(board):
    headings = _headings()
    assert {title for title in SECTIONS.values() if title not in headings} == set()
    # the messages as a user reads them, each with its citation
    (board / "dev/dri/renderD129").unlink()
    container = npu_node_problem(board)
    shutil.rmtree(board / "sys/class/drm")
    messages = [container, npu_node_problem(board), version_problem({"api": "2.3.2"}, "2.5.0")]
    for message in messages:
        [cited] = CITATION.findall(message)
        assert cited in headings, message


def test_every_citation_of_the_guide_in_the_code_names_a_section_that_exists():
    """Also the literal ones (a docstring, another module's message): each cited heading exists."""
    headings, missing = _headings(), []
    for folder in ("harness", "tests/acceptance", "bin", "tools"):
        for path in sorted((REPO_ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".sh", ".toml", "") and path.is_file():
                text = path.read_text(errors="replace")
                missing += [f"{path.relative_to(REPO_ROOT)}: '{c}'" for c in CITATION.findall(text)
                            if c not in headings]
    assert missing == []


def test_the_vendor_misc_node_counts(board):
    shutil.rmtree(board / "sys/class/drm")
    (board / "dev/rknpu").touch()
    assert find_npu_node(board).shown(board) == "/dev/rknpu" and npu_node_problem(board) is None


def test_the_mainline_rocket_driver_is_named_as_the_problem(board):
    shutil.rmtree(board / "sys/class/drm")
    uevent = board / "sys/class/accel/accel0/device/uevent"
    uevent.parent.mkdir(parents=True)
    uevent.write_text("DRIVER=rocket\nOF_NAME=npu\n")
    problem = npu_node_problem(board)
    assert "/dev/accel/accel0 belongs to the mainline Rocket driver" in problem


def _problem_without_root_powers(board: Path) -> str | None:
    """npu_node_problem as a user without root's file powers sees it: root passes every access check,
    so as root the check runs in a child whose capability bounding set lacks CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH (setpriv, util-linux), where the node's mode bits decide as for anyone."""
    if os.geteuid() != 0:
        return npu_node_problem(board)
    code = "import sys; from harness.gates.smoke import npu_node_problem; print(npu_node_problem(sys.argv[1]))"
    done = subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-c",
                           code, str(board)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.strip()
    return None if printed == "None" else printed


def test_a_node_without_access_names_the_group(board):
    assert _problem_without_root_powers(board) is None
    (board / "dev/dri/renderD129").chmod(0o444)
    assert "not read-write for this user: add the user to the node's group" in _problem_without_root_powers(board)


@pytest.mark.parametrize("api, toolkit, ok", [("2.3.2", "2.5.0", False), ("2.5.0", "2.5.0", True),
                                              ("2.5.0b1", "2.3.2", True), ("2.3.2", None, True)])
def test_librknnrt_must_be_as_new_as_the_converting_toolkit(api, toolkit, ok):
    problem = version_problem({"api": api, "driver": "0.9.8"}, toolkit)
    assert (problem is None) is ok
    if not ok:
        assert f"librknnrt {api} is older than rknn-toolkit2 {toolkit}" in problem and "LIBRKNNRT_PATH" in problem


def _smoke(tmp_path, *extra) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), "-m", "smoke",
                           "-p", "no:cacheprovider", "-q", "-rfs", f"--artifacts={tmp_path / 'artifacts'}", *extra],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    return proc, time.monotonic() - start


def test_smoke_passes_off_the_board_in_under_a_minute(tmp_path):
    with Watch("the smoke tier off the board") as watch:
        proc, seconds = _smoke(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed, " in proc.stdout and "skipped" not in proc.stdout
    assert "anima: 3 board-only check(s) deselected: not an RK3588" in proc.stdout
    watch.at_most(seconds, 60)


@pytest.mark.slow          # a pytest session of its own
def test_smoke_with_require_npu_fails_off_the_board_naming_the_device_node(tmp_path):
    proc, _ = _smoke(tmp_path, "--require-npu")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED tests/acceptance/test_smoke.py::test_1_npu_device_node" in proc.stdout
    assert ("no NPU device node and no sign of the RKNPU driver: neither /dev/rknpu nor a /dev/dri/renderD* of "
            "the RKNPU driver") in proc.stdout
    assert "FAILED tests/acceptance/test_smoke.py::test_0_stack_preflight" in proc.stdout
    assert "5 failed" in proc.stdout          # the preflight fails too, and does not stop the others


@pytest.mark.slow          # a pytest session of its own
def test_without_a_partition_the_board_checks_run_the_shipped_partition_and_stop_at_the_npu(tmp_path):
    """On the simulated board with the fake runtime and no --partition, the checks take the embedded model's
    shipped partition (models/, as a fresh board has no toolkit to convert one) and reach the runtime: with
    no NPU behind it, init_runtime fails, and tests 2-4 each fail on that one line (the wheel's own output in
    the run report), never a ConfigError traceback nor the old "must name the converted" line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FAKES_DIR), str(REPO_ROOT)]),
           "LIBRKNNRT_PATH": str(SIM_LIBRKNNRT)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), "-m", "smoke",
                           "-p", "no:cacheprovider", "-p", "no:randomly", "-q", f"--telemetry-root={BOARD}",
                           f"--artifacts={tmp_path / 'artifacts'}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "3 failed, 2 passed" in out, out
    line = ("rknnlite: subgraph 0 (block 0 self_attn): init failed: init_runtime(core_mask=auto) returned -1; "
            "rknn-toolkit-lite2's own output is the run report's runtime_log")
    failures = out.split("= FAILURES =")[1].split("short test summary")[0]
    for test in ("test_2_runtime_and_driver_versions", "test_3_one_subgraph_lifecycle", "test_4_model_for_two_steps"):
        [body] = re.findall(rf"_+ {test} _+\n(.*?)(?=\n_{{3,}} |\n[^\n]*run summary|\Z)", failures, re.S)
        first, _, rest = body.partition("\n")
        assert line in first, body
        assert rest.strip() in ("", ) or "Captured stderr" in rest and "unpacking the shipped partition" in rest, body
    assert "embedded-rk3588-float16" in failures       # the shipped partition is the one that ran
    assert "must name the converted" not in out
    assert "Traceback" not in out and "ConfigError" not in out and "During handling" not in out, out


def _collect(tmp_path, *extra) -> str:
    profile = tmp_path / "board.toml"
    profile.write_text('[suite]\nbackend = "onnxruntime"\nbench_rounds = 2\n'
                       '[duration]\nstep_seconds = { "embedded-digits" = 120.4 }\n'
                       '[tier.pr]\ncase_limit = 1\nbench_rounds = 1\n')
    proc = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), "--co", "-q",
                           "-p", "no:cacheprovider", "-m", "npu and not slow", f"--board-profile={profile}",
                           f"--artifacts={tmp_path / 'artifacts'}", *extra],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.slow          # two collections of the whole suite
def test_a_session_prints_its_expected_length_and_a_tier_shortens_it(tmp_path):
    from harness.gates.cases import golden_dir_for, load_cases
    from harness.model.config import EMBEDDED_DIR, load_model_dir
    cases = load_cases(golden_dir_for(load_model_dir(EMBEDDED_DIR).name) / "cases.toml")
    steps = [c.steps for c in cases]
    full = _collect(tmp_path)
    # every case's run, plus the benchmark's 2 rounds less the one the first case's gates share
    minutes = (sum(steps) + steps[0]) * 120.4 / 60
    assert f"anima: expected duration {minutes:.0f} min = ({len(cases)} cases x" in full
    pr = _collect(tmp_path, "--tier=pr")
    assert f"anima: expected duration {steps[0] * 120.4 / 60:.0f} min, tier pr = (1 cases x {steps[0]} steps" in pr
    # the smoke tier is collected first
    first = [line for line in full.splitlines() if line.startswith("tests/")][0]
    assert first.startswith("tests/acceptance/test_smoke.py::")


def test_an_unknown_tier_names_the_profile_and_its_tiers(tmp_path):
    profile = tmp_path / "board.toml"
    profile.write_text("[suite]\n[tier.pr]\ncase_limit = 1\n[tier.nightly]\n")
    from harness.core.errors import ConfigError
    from harness.pytest_plugin.options import resolve_settings
    with pytest.raises(ConfigError,
                       match=rf"--tier weekly: {profile} has no \[tier.weekly\] table \(tiers: nightly, pr\)"):
        resolve_settings({"tier": "weekly"}, str(profile))
    profile.write_text("[suite]\n[tier.pr]\ncase_limt = 1\n")
    with pytest.raises(ConfigError, match=r"unknown \[tier.pr\] option 'case_limt'"):
        resolve_settings({"tier": "pr"}, str(profile))
