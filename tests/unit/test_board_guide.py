"""docs/board.md cannot drift: its commands are read from its ```bash blocks. Every `bin/test` and
`bin/harness` command in it, on the board or not, is checked against the suite's options and the
harness's own CLI; every block without a marker (`board-only`: needs the board, root or the network;
`anima`: needs the licensed checkpoint) is run, in order, against the simulated board tree
(tests/data/sysfs-rk3588 for /sys, /proc/device-tree, /dev's NPU nodes and /usr/lib/librknnrt.so), the
fake RKNNLite runtime (tests/fakes, with LIBRKNNRT_PATH set as the guide describes) and the embedded
model, with /opt/anima/partition-embedded an export of the embedded model and /var/lib/anima-ci (the
board profile's history and baselines too) and out/ in a temporary folder. A misspelt command fails."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from harness.model.config import EMBEDDED_DIR, REPO_ROOT
from tests.doc_commands import FAILED, bash_blocks, commands_of, run_script
from tests.unit.test_workflows import option_problems, pytest_commands, suite_options  # noqa: F401 (fixture)

GUIDE = REPO_ROOT / "docs" / "board.md"
TREE = REPO_ROOT / "tests" / "data" / "sysfs-rk3588"
FAKES = REPO_ROOT / "tests" / "fakes"
# A block's marker: "" (runs off the board), board-only or anima.
guide_blocks = bash_blocks


def harness_problems(script: str) -> list[str]:
    """Every `bin/harness ...` line that the harness's own parser refuses."""
    from harness.cli.main import build_parser
    problems = []
    for argv in commands_of(script, "bin/harness"):
        try:
            build_parser().parse_args(argv)
        except SystemExit:
            problems.append(f"`bin/harness {' '.join(argv)}` does not parse")
    return problems


def guide_problems(text: str, known: set[str]) -> list[str]:
    problems = []
    blocks = guide_blocks(text)
    if not any(m == "" for m, _ in blocks) or not all(m in ("", "board-only", "anima") for m, _ in blocks):
        problems.append(f"block markers {sorted({m for m, _ in blocks})}: expected '', board-only, anima")
    for _, script in blocks:
        problems += option_problems(pytest_commands(script), known) + harness_problems(script)
    return problems


def _offboard(script: str, tmp: Path) -> str:
    """The script pointed at the simulated board and the temporary folders."""
    rooted = {"/opt/anima/partition-embedded": tmp / "partition-embedded", "/var/lib/anima-ci": tmp / "state",
              "/usr/lib/librknnrt.so": TREE / "usr/lib/librknnrt.so", "/proc/device-tree": TREE / "proc/device-tree",
              "/sys/": f"{TREE}/sys/", "/dev/dri": TREE / "dev/dri", "/dev/rknpu": TREE / "dev/rknpu",
              "/dev/accel": TREE / "dev/accel"}
    for old, new in rooted.items():
        script = script.replace(old, str(new))
    script = re.sub(r"(?<![\w/.-])out/", f"{tmp}/out/", script)
    # The board profile's own paths (the results store, artifacts) also go to the temporary folder.
    state = f"--results=sqlite:///{tmp}/state/results.sqlite --artifacts={tmp}/artifacts"
    return re.sub(r"(?m)^(\s*)bin/test ", rf"\1bin/test --telemetry-root={TREE} {state} ", script)


def run_block(script: str, tmp: Path) -> str | None:
    """Run one block off the board; None, or the command that failed and its output's end."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(FAKES), os.environ.get("PYTHONPATH")])),
           "LIBRKNNRT_PATH": str(TREE / "usr/lib/librknnrt.so")}
    env.pop("RKNNLITE_FAKE_FAIL", None)
    status, tail = run_script(_offboard(script, tmp), REPO_ROOT, env)
    return None if status == 0 else tail


@pytest.fixture(scope="module")
def board_tmp(tmp_path_factory) -> Path:
    """Temporary folders, with the board's embedded partition: an FP16 ONNX export, which the fake
    runtime executes (it runs ONNX where the board runs .rknn)."""
    from harness.model.bundle import load_bundle
    from harness.partition.onnx_export import export_partition
    tmp = tmp_path_factory.mktemp("board-guide")
    bundle = load_bundle(EMBEDDED_DIR)
    export_partition(bundle.weights, bundle.cfg, tmp / "partition-embedded", dtype="float16")
    return tmp


def test_every_command_of_the_guide_is_a_known_command(suite_options):
    assert guide_problems(GUIDE.read_text(), suite_options) == []


@pytest.mark.parametrize("old, new, problem", [
    ("bin/test -m smoke --board-profile=", "bin/test -m smoke --board-profle=", "unknown option --board-profle"),
    ("bin/harness inspect-checkpoint", "bin/harness inspect-checkpiont", "does not parse"),
    ("--partition=/opt/anima/partition-float16", "--partition /opt/anima/partition-float16", "not with a space"),
])
def test_a_misspelt_command_is_found(suite_options, old, new, problem):
    text = GUIDE.read_text()
    assert old in text
    found = guide_problems(text.replace(old, new, 1), suite_options)
    assert len(found) == 1 and problem in found[0], found


@pytest.mark.slow          # runs the guide's blocks twice each (a pytest session among them)
@pytest.mark.parametrize("old, new", [
    ("grep -H DRIVER /sys/class/drm/renderD*", "grep -H DRIVER /sys/class/dmr/renderD*"),
    ("bin/test -m smoke --board-profile=", "bin/test -m smoek --board-profile="),
])
def test_a_misspelt_offboard_command_fails_when_run(board_tmp, old, new):
    [script] = [s for m, s in guide_blocks(GUIDE.read_text()) if m == "" and old in s]
    assert run_block(script, board_tmp) is None, "the guide's own command fails"
    failure = run_block(script.replace(old, new), board_tmp)
    assert failure is not None and FAILED in failure


@pytest.mark.slow
@pytest.mark.toolkit
def test_every_offboard_command_of_the_guide_runs(board_tmp, toolkit_version):
    blocks = [s for m, s in guide_blocks(GUIDE.read_text()) if m == ""]
    assert len(blocks) >= 6
    for script in blocks:
        failure = run_block(script, board_tmp)
        assert failure is None, f"docs/board.md block\n{script}\nfailed off the board:\n{failure}"
