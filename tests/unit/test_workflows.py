"""The CI definitions cannot drift from the suite: the GitHub workflow and the LAVA job are read as data
and checked against the suite's real options (`pytest --help` of this suite, every plugin loaded), the
jobs' shape and the runner labels; check-jsonschema (GitHub's workflow schema, bundled) and zizmor
(static analysis of Actions) run offline on them."""
import json
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from ruamel.yaml import YAML

from harness.model.config import REPO_ROOT
from harness.cli.options import OPTIONS

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "npu-acceptance.yml"
LAVA_JOB = REPO_ROOT / "lava" / "npu-acceptance.yaml"
BOARD_LABELS = ["self-hosted", "linux", "ARM64", "rk3588"]
# Options that take a path: written --opt=PATH (with a space pytest may read PATH as a test location).
PATH_OPTIONS = {"--board-profile"} | {"--" + n.replace("_", "-") for n in
                                      ("model_dir", "partition", "golden_dir", "artifacts", "results",
                                       "cache_dir", "telemetry_root")}


def load_yaml(text: str):
    return YAML(typ="safe").load(text)


@pytest.fixture(scope="module")
def suite_options() -> set[str]:
    """Every option this suite's pytest accepts, from its own --help."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), "--help"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=120).stdout
    return set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", out))


def pytest_commands(script: str) -> list[list[str]]:
    """The token lists of every `bin/test` / `pytest` command in a shell script (continuations joined)."""
    joined = re.sub(r"\\\n\s*", " ", script)
    commands = []
    for line in joined.splitlines():
        for part in re.split(r";|&&|\|\|", line):
            try:
                tokens = shlex.split(part, comments=True)
            except ValueError:
                continue
            if tokens and (tokens[0].endswith("bin/test") or "pytest" in tokens[:3]):
                commands.append(tokens)
    return commands


def option_problems(commands: list[list[str]], known: set[str]) -> list[str]:
    problems = []
    for tokens in commands:
        for i, token in enumerate(tokens):
            if not token.startswith("--"):
                continue
            name = token.split("=", 1)[0]
            if name not in known:
                problems.append(f"unknown option {name}")
            elif name in PATH_OPTIONS and "=" not in token:
                problems.append(f"write {name}=PATH, not with a space")
    return problems


def workflow_scripts(workflow: dict) -> dict[str, list[str]]:
    return {name: [step.get("run", "") for step in job["steps"]] for name, job in workflow["jobs"].items()}


def workflow_problems(text: str, known: set[str]) -> list[str]:
    """Everything wrong with the workflow text's structure, as one line each (empty: fine)."""
    wf = load_yaml(text)
    problems = []
    jobs = wf.get("jobs", {})
    if sorted(jobs) != ["board", "convert", "plan"]:
        return [f"jobs are {sorted(jobs)}, expected plan, convert, board"]
    board, convert = jobs["board"], jobs["convert"]
    if board.get("runs-on") != BOARD_LABELS:
        problems.append(f"board runs-on {board.get('runs-on')}, expected {BOARD_LABELS}")
    if "convert" not in board.get("needs", []):
        problems.append("board does not need convert: it would not test the converted partition")
    for name in ("convert", "board"):
        if "needs.plan.outputs.trusted == 'true'" not in jobs[name].get("if", ""):
            problems.append(f"{name} runs without the fork guard")
    group = (board.get("concurrency") or {}).get("group", "")
    if not group or board["concurrency"].get("cancel-in-progress") is not False:
        problems.append("board has no concurrency group per board (or cancels a running board job)")
    if "pull_request_target" in wf.get("on", {}):
        problems.append("pull_request_target would run fork code with secrets")
    uploads = [s for s in convert["steps"] if "upload-artifact" in s.get("uses", "")]
    downloads = [s for s in board["steps"] if "download-artifact" in s.get("uses", "")]
    if not uploads or not downloads or uploads[0]["with"]["name"] != downloads[0]["with"]["name"]:
        problems.append("the board does not download the partition the convert job uploaded")
    if not any("bin/harness convert" in s.get("run", "") for s in convert["steps"]):
        problems.append("convert does not run `harness convert`")
    commands = [c for run in workflow_scripts(wf)["board"] for c in pytest_commands(run)]
    gates = [c for c in commands if "-m" in c and c[c.index("-m") + 1] == "npu"]
    if not gates or "--require-npu" not in gates[0] or not any(t.startswith("--partition=") for t in gates[0]):
        problems.append("board does not run `-m npu --require-npu --partition=` on the downloaded partition")
    problems += option_problems(commands, known)
    if not any(s.get("if") == "failure()" and ".ci/board-diagnostics" in s.get("run", "") for s in board["steps"]):
        problems.append("board does not keep dmesg / NPU driver state on failure")
    for job in jobs.values():
        for step in job["steps"]:
            if "actions/checkout" in step.get("uses", "") and step.get("with", {}).get("persist-credentials") is not False:
                problems.append("a checkout persists its credentials (they would land in the artifacts)")
    return problems


def test_workflow_structure_matches_the_suite(suite_options):
    assert workflow_problems(WORKFLOW.read_text(), suite_options) == []


def test_a_misspelt_option_in_the_workflow_fails_the_check(suite_options):
    text = WORKFLOW.read_text()
    assert "--require-npu" in text
    assert workflow_problems(text.replace("--require-npu", "--require-nup"), suite_options) == \
        ["board does not run `-m npu --require-npu --partition=` on the downloaded partition",
         "unknown option --require-nup"]
    spaced = text.replace("--board-profile=boards", "--board-profile boards")
    assert workflow_problems(spaced, suite_options) == ["write --board-profile=PATH, not with a space"]
    unguarded = text.replace("needs.plan.outputs.trusted == 'true'", "true")
    assert "board runs without the fork guard" in workflow_problems(unguarded, suite_options)


def test_lava_job_runs_the_same_gates_with_known_options(suite_options):
    job = load_yaml(LAVA_JOB.read_text())
    [test] = [a["test"] for a in job["actions"] if "test" in a]
    steps = test["definitions"][0]["repository"]["run"]["steps"]
    commands = [c for step in steps for c in pytest_commands(step)]
    assert commands and "--require-npu" in commands[0] and "npu" in commands[0]
    assert option_problems(commands, suite_options) == []
    assert any(".ci/board-diagnostics" in s for s in steps)


def test_board_profile_keys_are_suite_options():
    import tomllib
    profile = tomllib.loads((REPO_ROOT / "boards" / "rock5c-8gb.toml").read_text())
    assert set(profile["suite"]) <= set(OPTIONS)
    assert "partition" not in profile["suite"], "the partition comes from the convert job, not the board"


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(REPO_ROOT / ".venv" / "bin")) or shutil.which(name) \
        or shutil.which(name, path=str(__import__("pathlib").Path(sys.executable).parent))
    if path is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return path


def test_workflow_validates_against_githubs_schema():
    proc = subprocess.run([_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows",
                           str(WORKFLOW)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_zizmor_finds_nothing_and_the_auditors_self_hosted_warning_is_answered():
    default = subprocess.run([_tool("zizmor"), "--offline", "--format=json", str(WORKFLOW.parent)],
                             capture_output=True, text=True, timeout=120)
    assert default.returncode == 0 and json.loads(default.stdout) == [], default.stdout + default.stderr
    auditor = subprocess.run([_tool("zizmor"), "--offline", "--persona=auditor", "--format=json",
                              str(WORKFLOW.parent)], capture_output=True, text=True, timeout=120)
    findings = {f["ident"] for f in json.loads(auditor.stdout)}
    assert findings == {"self-hosted-runner"}, auditor.stdout
    # The answer: the fork guard, explained in the workflow where a reviewer looks for it.
    text = WORKFLOW.read_text()
    assert "Fork guard:" in text and "self-hosted-runner" in text


def _job_env(job: dict) -> dict:
    """The job's env with matrix values taken from the first target of .ci/targets.toml."""
    sys.path.insert(0, str(REPO_ROOT / "tools"))
    try:
        from ci_plan import load_targets, plan
    finally:
        sys.path.pop(0)
    target = plan(["harness/cli.py"], load_targets())[0]
    env = {}
    for name, value in (job.get("env") or {}).items():
        match = re.fullmatch(r"\$\{\{\s*matrix\.(\w+)\s*\}\}", str(value).strip())
        env[name] = str(target[match.group(1)]) if match else str(value)
    return env


def test_harness_commands_in_the_workflow_parse():
    """Every `bin/harness ...` line of the workflow parses with this harness's own CLI, with the job's
    env (and a planned target's matrix values) filled in."""
    import os
    from harness.cli.main import build_parser
    parser = build_parser()
    commands = sorted({sub for action in parser._subparsers._group_actions for sub in action.choices})
    lines = []
    for job in load_yaml(WORKFLOW.read_text())["jobs"].values():
        env = _job_env(job)
        for step in job["steps"]:
            for line in step.get("run", "").splitlines():
                if line.strip().startswith("bin/harness "):
                    expanded = re.sub(r"\$(\w+)", lambda m: env.get(m.group(1), os.environ.get(m.group(1), m.group(1))),
                                      line.strip().split(" || ")[0])
                    lines.append(expanded)
    assert len(lines) >= 3
    missing = []
    for line in lines:
        argv = shlex.split(line)[1:]
        if argv[0] not in commands:
            missing.append(argv[0])
            continue
        parser.parse_args(argv)     # argparse exits (SystemExit) on an unknown option
    if missing:
        pytest.skip(f"`harness {missing[0]}` is not on this branch yet (it comes with the toolkit branch)")
