"""docs/extending.md, followed step by step: its file blocks written where their paths say, its
distribution's entry point recorded (setuptools' egg_info, in place of the page's `pip install -e`:
the shared venv has no `wheel` to build with offline and is not the test's to change), and its
*Run them* block run line by line in a temporary folder. The new backend, found only through its
entry point, must then run `generate` and pass the page's new gate (found through its own entry
point) and the suite's numerics and quality gates through a real bin/test run, its run reports
naming it; the page's command, found the same way, must print it. The gate, made to return a
message, must then fail the same bin/test line, named by its entry point."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.doc_commands import bash_blocks, run_script, suite_wrappers

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "extending.md"
BACKEND = "ort-optimized"
GATE = "no-context-left"
_FILE_BLOCK = re.compile(r"^```\w+ ([\w.-]+/[\w./-]+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def page_files(text: str) -> dict[str, str]:
    """path -> content of every fenced block whose language is followed by a path (FOLDER/FILE)."""
    return dict(_FILE_BLOCK.findall(text))


def install(extras: Path) -> None:
    """What `pip install -e EXTRAS` records for the entry point: the distribution's metadata beside
    its module (the folder then goes on PYTHONPATH, as an editable install's path entry does)."""
    done = subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q", "egg_info"],
                          cwd=extras, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_page_has_its_five_files_an_install_and_a_run():
    files, blocks = page_files(PAGE.read_text()), bash_blocks(PAGE.read_text())
    assert sorted(files) == ["anima-extras/backends_command.py", "anima-extras/ort-host.toml",
                             "anima-extras/ort_optimized.py", "anima-extras/pyproject.toml", "anima-extras/released.py"]
    assert [marker for marker, _ in blocks] == ["install", ""]
    project = tomllib.loads(files["anima-extras/pyproject.toml"])["project"]["entry-points"]
    assert sorted(project) == ["anima.backends", "anima.commands", "anima.gates"]
    assert project["anima.gates"] == {GATE: "released:no_context_left"}


def junit_outcomes(tmp_path: Path) -> dict[str, list]:
    """test name -> the tags under its <testcase> ([] or ["properties"]: passed; "failure"...)."""
    cases = ET.parse(tmp_path / "artifacts" / "junit.xml").getroot().iter("testcase")
    return {case.get("name"): [child for child in case if child.tag != "properties"] for case in cases}


@pytest.mark.slow       # bin/test: three gates on one case, and a 4-step generate (20 s quiet, 47 s at load 10)
def test_a_backend_gate_and_command_registered_by_entry_point_run(tmp_path):
    text = PAGE.read_text()
    for path, content in page_files(text).items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(content)
    extras = tmp_path / "anima-extras"
    install(extras)
    suite_wrappers(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(extras), str(ROOT)]),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    [run] = [script for marker, script in bash_blocks(text) if marker == ""]
    script = re.sub(r"(?m)^EXTRAS=\S+$", f"EXTRAS={extras}", run)     # the reader's folder is this test's
    status, tail = run_script(script, tmp_path, env, timeout=600)
    assert status == 0, f"docs/extending.md's run block exited {status}:\n{tail}"
    assert f"{BACKEND}: anima-ort-optimized (ort_optimized:OptimizedOnnxRuntimeContext)" in tail.splitlines(), tail
    assert json.loads((tmp_path / "out" / "ort.json").read_text())["backend"] == BACKEND
    reports = sorted((tmp_path / "artifacts" / "runs").glob("*.json"))
    assert reports and {json.loads(r.read_text())["backend"] for r in reports} == {BACKEND}
    outcomes = junit_outcomes(tmp_path)
    assert sorted(name.split("[")[0] for name in outcomes) == [
        "test_installed_gate", "test_matches_golden", "test_no_nan_or_inf_in_any_subgraph_output"]
    assert all(children == [] for children in outcomes.values()), outcomes
    assert any((name.startswith("test_installed_gate[") and name.endswith(f"-{GATE}]")) for name in outcomes), outcomes
    gate_fails(tmp_path, extras, env, text)


def gate_fails(tmp_path: Path, extras: Path, env: dict, text: str) -> None:
    """The page's gate, made to return a message on a clean run, fails its test, which names it."""
    gate = extras / "released.py"
    gate.write_text(gate.read_text().replace("    return None\n", '    return "judged by the test"\n'))
    [line] = [line for line in bash_blocks(text)[1][1].splitlines() if line.startswith("bin/test")]
    line = re.sub(r" tests/acceptance/test_(numerics|quality)\.py", "", line)     # the gate's test alone
    status, tail = run_script(f"EXTRAS={extras}\n{line}", tmp_path, env, timeout=600)
    assert status == 1, tail
    [(name, children)] = junit_outcomes(tmp_path).items()
    assert (name.startswith("test_installed_gate[") and name.endswith(f"-{GATE}]")), name
    assert [c.tag for c in children] == ["failure"] and f"{GATE}: judged by the test" in children[0].get("message")
