"""The README stays on one screen and every command in it works: each `bin/harness` line parses with
the harness's own parser (a misspelt or removed command or option fails), each `bin/test` line
collects tests with pytest (a removed marker or path collects nothing and fails). The options table
in docs/options.md is the option declaration's."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.main import build_parser
from harness.cli.options import options_table

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def shell_commands(text: str, program: str) -> list[list[str]]:
    """Every line of the markdown's bash blocks that runs `program`, as argv (comments dropped)."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            argv = shlex.split(line, comments=True)
            if argv and argv[0] == program:
                found.append(argv[1:])
    return found


HARNESS = shell_commands(README.read_text(), "bin/harness")
TESTS = shell_commands(README.read_text(), "bin/test")


def test_readme_is_one_screen():
    assert len(README.read_text().splitlines()) <= 250


def test_the_readme_lists_every_command():
    listed = {argv[0] for argv in HARNESS}
    parser = build_parser()
    commands = set(next(a for a in parser._actions if a.dest == "command").choices)
    assert commands - listed == set(), "commands missing from the README's command list"


@pytest.mark.parametrize("argv", HARNESS, ids=[" ".join(a)[:60] for a in HARNESS])
def test_readme_harness_command_parses(argv, capsys):
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"bin/harness {shlex.join(argv)}: {capsys.readouterr().err.strip()} (exit {exc.code})")


def _markers() -> set[str]:
    block = re.search(r"^markers =\n((?:[ \t]+[^\n]*\n)+)", (ROOT / "pytest.ini").read_text(), flags=re.M).group(1)
    return {line.split(":")[0].strip() for line in block.splitlines()}


@pytest.fixture(scope="module")
def pytest_help() -> str:
    run = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pytest.ini"), "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    return run.stdout


@pytest.mark.parametrize("argv", TESTS, ids=[" ".join(a)[:60] or "(no arguments)" for a in TESTS])
def test_readme_test_command_uses_known_markers_and_options(argv, pytest_help):
    markers = _markers()
    for i, arg in enumerate(argv):
        if arg.startswith("-") and not arg.startswith("--no-"):
            assert re.search(rf"(^|[\s,]){re.escape(arg.split('=')[0])}[\s=,]", pytest_help, flags=re.M), \
                f"bin/test {shlex.join(argv)}: pytest has no option {arg}"
        if i and argv[i - 1] == "-m":
            words = set(re.findall(r"\w+", arg)) - {"and", "or", "not"}
            assert words <= markers, f"bin/test {shlex.join(argv)}: no marker {sorted(words - markers)} in pytest.ini"


@pytest.mark.slow
@pytest.mark.parametrize("argv", TESTS, ids=[" ".join(a)[:60] or "(no arguments)" for a in TESTS])
def test_readme_test_command_collects(argv, tmp_path):
    run = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pytest.ini"), "--collect-only", "-q",
                          "-p", "no:cacheprovider", f"--artifacts={tmp_path}", *argv],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"bin/test {shlex.join(argv)}:\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
    assert re.search(r"^\d+(/\d+)? tests? collected|^\d+ tests? collected", run.stdout, flags=re.M) or \
        re.search(r"\d+ tests? collected", run.stdout), run.stdout[-500:]


def test_the_shell_extraction_finds_a_misspelt_command(capsys):
    argv = shell_commands("```bash\nbin/harness genrate --seed 1   # misspelt\n```\n", "bin/harness")
    assert argv == [["genrate", "--seed", "1"]]
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv[0])


def test_options_table_is_the_declaration():
    text = (ROOT / "docs/options.md").read_text()
    table = text.split("<!-- options table: generated -->\n", 1)[1].split("<!-- end of the options table -->", 1)[0]
    assert table == options_table(), "docs/options.md is stale: python -m harness.cli.options"
