"""docs/extending.md, followed step by step: its file blocks written where their paths say, its
distribution's entry point recorded (setuptools' egg_info, in place of the page's `pip install -e`:
the shared venv has no `wheel` to build with offline and is not the test's to change), and its
*Run them* block run line by line in a temporary folder. The new backend, found only through its
entry point, must then run `generate` and pass the page's new gate and the suite's numerics and
quality gates through a real bin/test run, its run reports naming it."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.doc_commands import bash_blocks, run_script, suite_wrappers

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "extending.md"
BACKEND = "ort-optimized"
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


def test_the_page_has_the_three_files_an_install_and_a_run():
    files, blocks = page_files(PAGE.read_text()), bash_blocks(PAGE.read_text())
    assert sorted(files) == ["anima-extras/ort-host.toml", "anima-extras/ort_optimized.py",
                             "anima-extras/pyproject.toml", "anima-extras/test_released.py"]
    assert [marker for marker, _ in blocks] == ["install", ""]
    assert f'{BACKEND} = "ort_optimized:' in files["anima-extras/pyproject.toml"]


@pytest.mark.slow       # bin/test: three gates on one case, and a 4-step generate (20 s quiet, 47 s at load 10)
def test_a_backend_registered_by_entry_point_runs_the_pages_gates(tmp_path):
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
    assert json.loads((tmp_path / "out" / "ort.json").read_text())["backend"] == BACKEND
    reports = sorted((tmp_path / "artifacts" / "runs").glob("*.json"))
    assert reports and {json.loads(r.read_text())["backend"] for r in reports} == {BACKEND}
    cases = ET.parse(tmp_path / "artifacts" / "junit.xml").getroot().iter("testcase")
    outcomes = {case.get("name"): [child.tag for child in case] for case in cases}
    assert sorted(name.split("[")[0] for name in outcomes) == [
        "test_a_case_run_leaves_no_context_loaded", "test_matches_golden", "test_no_nan_or_inf_in_any_subgraph_output"]
    assert all(tags in ([], ["properties"]) for tags in outcomes.values()), outcomes
