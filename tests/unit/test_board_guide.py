"""docs/board.md cannot drift: its commands are read from its ```bash blocks. Every `bin/test` and
`bin/harness` command in it, on the board or not, is checked against the suite's options and the
harness's own CLI; every block without a marker (`board-only`: needs the board, root or the network;
`anima`: needs the licensed checkpoint) is run, in order, against the simulated board tree
(tests/data/sysfs-rk3588 for /sys, /proc/device-tree, /dev's NPU nodes and /usr/lib/librknnrt.so), the
fake RKNNLite runtime (tests/fakes, with LIBRKNNRT_PATH set as the guide describes) and the embedded
model, with /opt/anima/partition-embedded an export of the embedded model and /var/lib/anima-ci (the
board profile's history and baselines too) and out/ in a temporary folder. The blocks that cannot run
here (board-only, anima) are parsed by bash (`bash -n`), and every command they name must be a shell
builtin, an executable here, a repository script or a Debian package (apt-cache), and every package an
`apt-get install` names a Debian package. A misspelt command fails."""
from __future__ import annotations

import os
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

from harness.model.config import EMBEDDED_DIR, REPO_ROOT
from tests.doc_commands import FAILED, bash_blocks, commands_of, run_script, simple_commands, syntax_problem
from tests.helpers import missing_tool
from tests.unit.test_workflows import option_problems, pytest_commands

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


# apt-get's commands that take package names (the others take none, or source packages).
_PACKAGE_COMMANDS = {"install", "reinstall", "remove", "purge", "download", "show", "depends"}


@cache
def _apt_commands() -> frozenset[str]:
    """apt-get's commands as its own --help lists them ("  install - Install new packages")."""
    text = subprocess.run(["apt-get", "--help"], capture_output=True, text=True, timeout=60).stdout
    return frozenset(re.findall(r"(?m)^\s+([a-z][a-z-]*) - ", text))


@cache
def _debian_names() -> frozenset[str]:
    """Every package name the Debian archives here know (apt-cache, after apt-get update), read once:
    apt keeps no cache of its lists in this image, so each apt-cache call reads them all again."""
    out = subprocess.run(["apt-cache", "pkgnames"], capture_output=True, text=True, timeout=300).stdout
    return frozenset(out.split())


def debian_packages(names) -> set[str]:
    """Those of `names` that are Debian packages here."""
    return set(names) & _debian_names()


def _kinds(names) -> dict[str, str]:
    """bash's `type -t` of each name (builtin, keyword, file, ...; "" when bash finds nothing), with
    the system folders on PATH (usermod and swapon live in /usr/sbin)."""
    script = 'for n in "$@"; do printf "%s\\t%s\\n" "$n" "$(type -t -- "$n")"; done'
    env = {**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin"}
    out = subprocess.run(["bash", "-c", script, "kinds", *names], capture_output=True, text=True, env=env,
                         timeout=60).stdout
    return dict(line.split("\t", 1) for line in out.splitlines())


def _package_args(argv: list[str]) -> list[str]:
    """The packages of `apt-get [options] install PKG...`: names without =version or /release."""
    args = [a for a in argv[1:] if not a.startswith("-")]
    if not args or args[0] not in _PACKAGE_COMMANDS:
        return []
    return [re.split(r"[=/]", a)[0] for a in args[1:]]


def _path_problem(command: str) -> str | None:
    if command.startswith(("~", "$")):
        return None         # made by an earlier command of the guide (uv's installer): not checkable here
    path = Path(command) if command.startswith("/") else REPO_ROOT / command
    if path.is_file() and os.access(path, os.X_OK):
        return None
    return "no such executable" + ("" if command.startswith("/") else " in the repository")


def shell_problems(text: str) -> list[str]:
    """Every block that bash cannot parse, every command that is no builtin, executable here,
    repository script or Debian package, every apt-get command or package that does not exist."""
    problems, commands = [], []
    for number, (marker, script) in enumerate(bash_blocks(text), start=1):
        where = f"block {number} ({marker or 'runs off the board'})"
        syntax = syntax_problem(script)
        if syntax:      # its commands cannot be read either
            problems.append(f"{where}: bash -n: {syntax}")
            continue
        commands += [(where, argv) for argv in simple_commands(script)]
    names = {argv[0] for _, argv in commands if "/" not in argv[0]}
    kinds = _kinds(sorted(names))
    packages = debian_packages({n for n in names if not kinds.get(n)} |
                               {p for _, argv in commands if argv[0] in ("apt-get", "apt")
                                for p in _package_args(argv)})
    for where, argv in commands:
        problems += [f"{where}: `{' '.join(argv)}`: {p}" for p in _command_problems(argv, kinds, packages)]
    return problems


def _command_problems(argv: list[str], kinds: dict, packages: set[str]) -> list[str]:
    command = argv[0]
    if "/" in command:
        return [p for p in [_path_problem(command)] if p]
    if not kinds.get(command) and command not in packages:
        return [f"{command}: not a shell builtin, an executable here, a repository script or a Debian package"]
    if command not in ("apt-get", "apt"):
        return []
    operation = next((a for a in argv[1:] if not a.startswith("-")), None)
    if operation not in _apt_commands():
        return [f"{command} {operation}: not an apt-get command (apt-get --help lists "
                f"{', '.join(sorted(_apt_commands()))})"]
    return [f"{name}: no such Debian package" for name in _package_args(argv) if name not in packages]


@pytest.fixture(scope="module")
def apt_lists():
    """Debian's package lists, fetched once (as root) where the machine has none yet."""
    if not _kinds(["apt-cache"]).get("apt-cache"):
        missing_tool("no apt-cache here: the guide's packages cannot be checked")
    if not debian_packages(["bash"]):
        if os.geteuid() != 0:
            missing_tool("no Debian package lists here: run apt-get update (as root)")
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=600)
        _debian_names.cache_clear()
        if not debian_packages(["bash"]):
            missing_tool("apt-get update gave no package lists")


def test_every_shell_command_of_the_guide_parses_and_exists(apt_lists):
    assert shell_problems(GUIDE.read_text()) == []


@pytest.mark.parametrize("old, new, problem", [
    ('sudo usermod -aG render,video "$USER"', 'sudo usermdo -aG render,video "$USER"',
     "usermdo: not a shell builtin, an executable here, a repository script or a Debian package"),
    ("sudo apt-get install -y git", "sudo apt-get instal -y git", "apt-get instal: not an apt-get command"),
    ("install -y git curl python3-venv bubblewrap", "install -y git curl python3-venv bubblewarp",
     "bubblewarp: no such Debian package"),
    ("; done", "; dnoe", "bash -n: "),
    ("rsync -a out/embedded-rknn/", "rsycn -a out/embedded-rknn/", "rsycn: not a shell builtin"),
])
def test_a_misspelt_board_only_command_is_found(apt_lists, old, new, problem):
    text = GUIDE.read_text()
    assert old in text
    found = shell_problems(text.replace(old, new, 1))
    assert len(found) == 1 and problem in found[0], found


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
    from harness.partition.onnx_export import ExportSettings, export_partition
    tmp = tmp_path_factory.mktemp("board-guide")
    bundle = load_bundle(EMBEDDED_DIR)
    export_partition(bundle.weights, bundle.cfg, tmp / "partition-embedded", ExportSettings(precision="float16"))
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
