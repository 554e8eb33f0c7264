"""GitHub's side of a workflow run, for tests that must see what GitHub would do with this repository's
workflow: which workflow files an event starts and from which commit, the workflow's `${{ }}` expressions
evaluated by GitHub's own evaluator (@actions/expressions, tests/gha_expressions.mjs), and a job's
checkouts and `run:` steps executed as a runner executes them (bash, the job's and step's env, the
step's `if:`, GITHUB_OUTPUT read back into the job's outputs). GitHub's REST API is the one part not
here: a `gh` stand-in answers from the responses a test gives it (the pull request's files, reviews and
file contents, computed from the test's own git repository)."""
from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ruamel.yaml import YAML

from harness.model.config import REPO_ROOT
from tests.helpers import missing_tool

EVALUATOR = REPO_ROOT / "tests" / "gha_expressions.mjs"
# The `gh` stand-in: `gh api [--paginate] [--slurp] [--jq '.[]'] [-H HEADER] ENDPOINT`, answered from the
# JSON object at $GH_STANDIN (endpoint -> a list, or the raw text of a file); an unknown endpoint is a 404.
GH_STANDIN = """#!{python}
import json, os, sys
args = sys.argv[1:]
assert args and args[0] == "api", args
endpoint = [a for i, a in enumerate(args[1:], 1) if not a.startswith("-") and args[i - 1] not in ("-H", "--jq")][0]
answers = json.load(open(os.environ["GH_STANDIN"]))
if endpoint not in answers:
    sys.exit(f"gh: Not Found (HTTP 404): {{endpoint}}")
value = answers[endpoint]
if isinstance(value, str):
    sys.stdout.write(value)
elif "--jq" in args:
    assert args[args.index("--jq") + 1] == ".[]", "the stand-in answers --jq '.[]' only"
    sys.stdout.write("".join(json.dumps(v) + "\\n" for v in value))
else:
    json.dump([value] if "--slurp" in args else value, sys.stdout)
"""


def load_yaml(text: str):
    return YAML(typ="safe").load(text)


def evaluate(context: dict, items: list[dict]) -> list:
    """[{"template": TEXT} | {"expression": EXPR}] -> their values (a template's `${{ }}` substituted as
    strings; an expression's truthiness), by GitHub's evaluator."""
    node = shutil.which("node")
    if node is None or not (REPO_ROOT / "node_modules" / "@actions" / "expressions").is_dir():
        missing_tool("the expression evaluator needs Node and `npm ci` (bin/test runs it)")
    proc = subprocess.run([node, str(EVALUATOR)], input=json.dumps({"context": context, "items": items}),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def expression(text: str) -> str:
    """An `if:`'s expression, with or without its `${{ }}`."""
    match = re.fullmatch(r"\s*\$\{\{(.*)\}\}\s*", text, re.S)
    return match.group(1) if match else text


@dataclass
class Run:
    """One workflow run: its event as GitHub delivers it, and the commit and ref GitHub gives it."""
    event_name: str
    event: dict
    sha: str                    # GITHUB_SHA: the commit the workflow file is read from and checked out by default
    ref: str                    # GITHUB_REF
    run_id: int
    repository: str = "anima-npu/anima-npu"
    inputs: dict = field(default_factory=dict)

    def context(self, **more) -> dict:
        github = {"event_name": self.event_name, "event": self.event, "sha": self.sha, "ref": self.ref,
                  "run_id": str(self.run_id), "repository": self.repository, "workspace": "/workspace",
                  "token": "stand-in-token"}
        return {"github": github, "inputs": self.inputs, "env": {}, "runner": {"temp": "/runner-temp"},
                **more}


def pull_request_runs(event: dict, run_id: int) -> list[Run]:
    """The two runs a pull request's event can start, as GitHub defines them: `pull_request`, whose
    workflow and GITHUB_SHA are the pull request's merge commit (here its head: the head is based on the
    base), ref refs/pull/N/merge; `pull_request_target`, whose workflow and GITHUB_SHA are the base branch's
    head, ref the base branch."""
    pr = event["pull_request"]
    return [Run("pull_request", event, pr["head"]["sha"], f"refs/pull/{pr['number']}/merge", run_id),
            Run("pull_request_target", event, pr["base"]["sha"], f"refs/heads/{pr['base']['ref']}", run_id + 1)]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


# What main is made of in these repositories: whatever the workflow's plan job reads (the plan script
# lives in .ci/; tools/ci_plan.py is where it lived before, so the same tests run against that design).
MAIN_FILES = [".github", ".ci", "toolkit/versions.toml", "docs/lab.md", "tools/ci_plan.py"]


def main_repo(repo: Path) -> str:
    """A git repository at `repo` whose main holds this checkout's MAIN_FILES; returns main's commit."""
    for name in MAIN_FILES:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.exists():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, repo / name)
    git(repo.parent, "init", "-q", "-b", "main", str(repo))
    return commit(repo, "main", {}, "main")


def commit(repo: Path, branch: str, files: dict[str, str], message: str, start: str | None = None) -> str:
    """Write `files` (path -> text) on `branch` (created from `start` when given) and commit; returns the commit."""
    if start is not None:
        git(repo, "checkout", "-q", "-B", branch, start)
    elif git(repo, "branch", "--show-current").strip() != branch:
        git(repo, "checkout", "-q", branch)
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "-c", f"user.name={branch}", "-c", "user.email=ci@example.org", "commit", "-q", "--allow-empty", "-m",
        message)
    return git(repo, "rev-parse", "HEAD").strip()


def workflows_started(repo: Path, run: Run) -> dict[str, dict]:
    """{path: workflow} of the workflow files at the run's commit that its event (and action) starts."""
    started = {}
    for path in git(repo, "ls-tree", "--name-only", run.sha, ".github/workflows/").split():
        if not path.endswith((".yml", ".yaml")):
            continue
        wf = load_yaml(git(repo, "show", f"{run.sha}:{path}"))
        on = wf.get("on") or {}
        on = {name: None for name in on} if isinstance(on, list) else ({on: None} if isinstance(on, str) else on)
        if run.event_name in on:
            config = on[run.event_name] if isinstance(on[run.event_name], dict) else {}
            if config.get("types") is not None and run.event.get("action") not in config["types"]:
                continue
            if config.get("branches") is None or any(fnmatch.fnmatch(_branch(run), b) for b in config["branches"]):
                started[path] = wf
    return started


def _branch(run: Run) -> str:
    """The branch a trigger's `branches:` filter is matched against: a pull request's base, else the ref's."""
    pr = run.event.get("pull_request")
    return pr["base"]["ref"] if pr else run.ref.removeprefix("refs/heads/")


def self_hosted(job: dict) -> bool:
    """Whether a job may run on a self-hosted runner: labels that say so, or labels an expression picks."""
    runs_on = job.get("runs-on")
    labels = runs_on if isinstance(runs_on, list) else [runs_on]
    return any("self-hosted" in str(label) or "${{" in str(label) for label in labels)


def run_job(repo: Path, workflow: dict, job_name: str, run: Run, work: Path, api: dict,
            needs: dict | None = None) -> dict:
    """Run one job of a workflow as a runner would, in `work` (its workspace and temp folder): checkouts
    clone `repo` at the commit the step's `ref` evaluates to (default: the run's commit), `run:` steps run
    under bash with the env the workflow gives them. Returns the job's outputs."""
    job = workflow["jobs"][job_name]
    workspace, temp, tools = work / "workspace", work / "runner-temp", work / "bin"
    for d in (workspace, temp, tools):
        d.mkdir(parents=True, exist_ok=True)
    (tools / "gh").write_text(GH_STANDIN.format(python=sys.executable))
    (tools / "gh").chmod(0o755)
    if not (tools / "python3").exists():         # the runner image's python3 (3.11 or later: tomllib)
        (tools / "python3").symlink_to(sys.executable)
    (work / "api.json").write_text(json.dumps(api))
    event_path = work / "event.json"
    event_path.write_text(json.dumps(run.event))
    steps: dict[str, dict] = {}
    base_context = run.context(needs=needs or {}, matrix={})
    base_context["github"]["workspace"] = str(workspace)
    job_env = dict(zip(job.get("env") or {}, evaluate(base_context, [{"template": str(v)} for v in
                                                                      (job.get("env") or {}).values()])))
    defaults = (job.get("defaults") or {}).get("run") or {}
    for index, step in enumerate(job["steps"]):
        context = {**base_context, "steps": steps, "env": job_env}
        step_env = step.get("env") or {}
        # The step's `if:` and env in one evaluation (one Node start per step).
        values = evaluate(context, [{"expression": expression(str(step.get("if", "true")))},
                                    *({"template": str(v)} for v in step_env.values())])
        if not values[0]:
            continue
        if "actions/checkout" in step.get("uses", ""):
            _checkout(repo, step.get("with") or {}, context, workspace, run.sha)
        elif "run" in step:
            env = {**job_env, **dict(zip(step_env, values[1:]))}
            outputs = _run_step(step, defaults, env, workspace, temp, tools, work, event_path, run)
            steps[step.get("id", f"step{index}")] = {"outputs": outputs}
    context = {**base_context, "steps": steps}
    outputs = job.get("outputs") or {}
    return dict(zip(outputs, evaluate(context, [{"template": str(v)} for v in outputs.values()])))


def _checkout(repo: Path, with_: dict, context: dict, workspace: Path, default_sha: str) -> None:
    ref = evaluate(context, [{"template": str(with_["ref"])}])[0] if "ref" in with_ else default_sha
    target = workspace / with_.get("path", "")
    if target.exists() and target != workspace:
        shutil.rmtree(target)
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(repo), str(target)], check=True)
    git(target, "checkout", "-q", "--detach", ref)


def _run_step(step: dict, defaults: dict, env: dict, workspace: Path, temp: Path, tools: Path, work: Path,
              event_path: Path, run: Run) -> dict:
    output = temp / f"output-{len(list(temp.glob('output-*')))}"
    output.touch()
    script = temp / "step.sh"
    script.write_text(step["run"])
    shell = step.get("shell") or defaults.get("shell")
    # The runner's defaults: `bash -e` when no shell is named, bash's fail-fast flags when bash is named.
    command = ["bash", "--noprofile", "--norc", "-eo", "pipefail"] if shell == "bash" else ["bash", "-e"]
    cwd = workspace / (step.get("working-directory") or defaults.get("working-directory") or "")
    runner_env = {"PATH": f"{tools}{os.pathsep}{os.environ['PATH']}", "HOME": str(work), "GITHUB_OUTPUT": str(output),
                  "GITHUB_EVENT_PATH": str(event_path), "GITHUB_WORKSPACE": str(workspace),
                  "RUNNER_TEMP": str(temp), "GITHUB_SHA": run.sha, "GITHUB_REF": run.ref,
                  "GITHUB_EVENT_NAME": run.event_name, "GITHUB_REPOSITORY": run.repository,
                  "GH_STANDIN": str(work / "api.json")}
    proc = subprocess.run([*command, str(script)], cwd=cwd, env={**runner_env, **env}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"step {step.get('name', step.get('id'))!r} failed:\n{proc.stdout}{proc.stderr}"
    return dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
