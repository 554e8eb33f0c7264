"""The LAVA job templates (lava/*.yaml) pass LAVA's own validator, `lava_common.schemas.validate(job,
strict=True)` from Debian's lava-common (bin/debian-packages.txt), run in the system Python it is
installed for; a misspelt key fails it. The jobs check out an exact commit, reach the board's OS through
transfer_overlay, and hand every parameter lava/board-session needs; tools/lava_results.py turns a real
run's JUnit into one test set per gate and one case per test with its timing."""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from harness.model.config import REPO_ROOT
from tests.helpers import missing_tool

LAVA = REPO_ROOT / "lava"
JOBS = sorted(LAVA.glob("*.yaml"))
SESSION = LAVA / "board-session"
SYSTEM_PYTHON = "/usr/bin/python3"
# Runs in the system Python: prints {file: null | "the validator's message"} for every file named.
VALIDATE = """
import json, sys, yaml
from lava_common.schemas import validate
out = {}
for name in sys.argv[1:]:
    try:
        validate(yaml.safe_load(open(name)), strict=True)
        out[name] = None
    except Exception as exc:
        out[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def lava_validate(*paths: Path) -> dict[str, str | None]:
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import lava_common.schemas"], capture_output=True, text=True)
    if probe.returncode != 0:
        missing_tool(f"Debian's lava-common is not installed for {SYSTEM_PYTHON}: bin/test installs it as root")
    proc = subprocess.run([SYSTEM_PYTHON, "-c", VALIDATE, *map(str, paths)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return {Path(k).name: v for k, v in json.loads(proc.stdout).items()}


def load(path: Path) -> dict:
    return YAML(typ="safe").load(path.read_text())


def test_there_are_job_templates_and_each_validates_strictly():
    assert {p.name for p in JOBS} >= {"npu-acceptance.yaml", "npu-smoke.yaml"}
    assert lava_validate(*JOBS) == {p.name: None for p in JOBS}


@pytest.mark.parametrize("old, new, named", [
    ("    transfer_overlay:\n", "    transfer_overlays:\n", "transfer_overlays"),
    ("      login_prompt:", "      login_promt:", "login_promt"),
    # a definition matches none of LAVA's three kinds: the message points at the definition
    ("      repository:\n", "      repositroy:\n", "['definitions'][0]"),
    ("timeouts:\n", "timeout:\n", "timeout"),
])
def test_a_misspelt_key_fails_the_validation(tmp_path, old, new, named):
    text = (LAVA / "npu-acceptance.yaml").read_text()
    assert text.count(old) == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(old, new))
    message = lava_validate(bad)["bad.yaml"]
    assert message is not None and named in message, message


def test_parameters_beside_an_inline_definition_fail_as_lava_says(tmp_path):
    # LAVA takes an inline definition's parameters inside its repository, not beside it.
    job = load(LAVA / "npu-acceptance.yaml")
    [test] = [a["test"] for a in job["actions"] if "test" in a]
    definition = test["definitions"][0]
    definition["parameters"] = definition["repository"].pop("parameters")
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps(job))
    assert "['definitions'][0]" in (lava_validate(bad)["bad.yaml"] or "")


def _parts(job: dict) -> tuple[dict, dict, dict]:
    actions = {next(iter(a)): a[next(iter(a))] for a in job["actions"]}
    return actions["deploy"], actions["boot"], actions["test"]["definitions"][0]["repository"]


@pytest.mark.parametrize("job_file", JOBS, ids=lambda p: p.name)
def test_the_job_reaches_the_board_and_checks_out_the_exact_commit(job_file):
    deploy, boot, repository = _parts(load(job_file))
    assert deploy["to"] == "overlay" and boot["method"] == "minimal"
    assert {"download_command", "unpack_command"} <= set(boot["transfer_overlay"])
    assert boot["auto_login"]["username"] and boot["prompts"]
    steps = repository["run"]["steps"]
    fetch = [s for s in steps if "git fetch" in s]
    assert fetch and '"$SUITE_SHA"' in fetch[0] and "--branch" not in " ".join(steps)
    assert any('git rev-parse HEAD)" = "$SUITE_SHA"' in s for s in steps), "the checkout is not verified"
    assert re.fullmatch(r"[0-9a-f]{40}", str(repository["parameters"]["SUITE_SHA"]))
    assert steps[-1] == "lava/board-session"


@pytest.mark.parametrize("job_file", JOBS, ids=lambda p: p.name)
def test_the_job_hands_the_session_every_variable_it_needs(job_file):
    needed = set(re.findall(r"\$\{(\w+):\?\}", SESSION.read_text()))
    assert {"PARTITION_URL", "PARTITION_MANIFEST_SHA256", "UPLOAD_URL", "MARKERS"} <= needed
    _, _, repository = _parts(load(job_file))
    assert needed <= set(repository["parameters"]), needed - set(repository["parameters"])


def test_the_session_uploads_before_the_job_ends_and_reports_per_gate():
    lines = [line.strip() for line in SESSION.read_text().splitlines() if not line.strip().startswith("#")]
    run = next(i for i, line in enumerate(lines) if line.startswith("bin/test "))
    results = next(i for i, line in enumerate(lines) if "tools/lava_results.py" in line)
    upload = next(i for i, line in enumerate(lines) if line.startswith("curl") and "-T" in line)
    reference = next(i for i, line in enumerate(lines) if line.startswith("lava-test-reference"))
    assert run < results < upload < reference < len(lines) - 1
    assert lines[-1] == 'exit "$status"'


def test_the_device_type_template_is_shipped_beside_the_jobs():
    from jinja2 import Environment, FileSystemLoader, meta
    env = Environment(loader=FileSystemLoader([str(LAVA / "device-types"), str(LAVA / "devices")]))
    for job_file in JOBS:
        device_type = load(job_file)["device_type"]
        template = LAVA / "device-types" / f"{device_type}.jinja2"
        assert template.is_file(), f"{job_file.name}: no device-type template {template}"
        ast = env.parse(template.read_text())
        assert list(meta.find_referenced_templates(ast)) == ["base-uboot.jinja2"]
    for device in (LAVA / "devices").glob("*.jinja2"):
        parents = list(meta.find_referenced_templates(env.parse(device.read_text())))
        assert [(LAVA / "device-types" / p).is_file() for p in parents] == [True], device


def _junit(tmp_path) -> Path:
    """A real JUnit XML: pytest on a module with a passing, a failing, a skipped test and a property."""
    module = tmp_path / "test_quality.py"
    module.write_text("import pytest, time\n"
                      "def test_matches_golden_seven(record_property):\n"
                      "    time.sleep(0.05); record_property('ssim', 0.99995); record_property('quality_on', 'image')\n"
                      "def test_matches_golden_three():\n    assert False\n"
                      "@pytest.mark.skip(reason='no board')\ndef test_skipped():\n    pass\n")
    junit = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit1",
                    f"--junitxml={junit}", str(module)], cwd=tmp_path, capture_output=True, timeout=120)
    return junit


def test_junit_becomes_one_set_per_gate_and_one_case_per_test_with_its_timing(tmp_path):
    sys.path.insert(0, str(REPO_ROOT / "tools"))
    try:
        from lava_results import lava_commands
    finally:
        sys.path.pop(0)
    commands = [shlex.split(c) for c in lava_commands(_junit(tmp_path))]
    assert commands[0] == ["lava-test-set", "start", "quality"] and commands[-1] == ["lava-test-set", "stop", "quality"]
    cases = {c[1]: c for c in commands if c[0] == "lava-test-case"}
    seven = cases["test_matches_golden_seven"]
    assert seven[2:4] == ["--result", "pass"] and seven[6:] == ["--units", "seconds"]
    assert float(seven[5]) >= 0.05
    assert cases["test_matches_golden_three"][3] == "fail" and cases["test_skipped"][3] == "skip"
    assert cases["test_matches_golden_seven.ssim"][3:] == ["pass", "--measurement", "0.99995", "--units", "ssim"]
    assert "test_matches_golden_seven.quality_on" not in cases       # not a number: no measurement


def test_a_missing_junit_is_one_failed_case(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "lava_results.py"), str(tmp_path / "none.xml")],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stdout.strip() == "lava-test-case junit --result fail"
    assert "none.xml" in proc.stderr and "Traceback" not in proc.stderr
