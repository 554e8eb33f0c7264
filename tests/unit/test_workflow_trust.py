"""Who decides a fork's trust, read as GitHub runs it: a fork's pull request whose head edits both the
workflow and the plan script to claim trust is still planned as untrusted, because the only runs that can
reach a board are main's workflow with main's plan (pull_request_target, admitted by the lab's runner
group) and the change is data to that plan. The settings a lab must set (docs/lab.md, "Repository
settings") are checked against the workflow where the repository can show them.

The repository is real (git, in a temporary folder: main as this checkout has it, and a fork's head);
the plan job runs as a runner would run it (tests/github_actions.py: its checkout, its steps under bash,
its `${{ }}` by GitHub's own evaluator); GitHub's REST API is answered by a stand-in from that repository."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.model.config import REPO_ROOT
from tests.github_actions import (
    commit,
    evaluate,
    git,
    load_yaml,
    main_repo,
    pull_request_runs,
    run_job,
    self_hosted,
    workflows_started,
)

REPO = "anima-npu/anima-npu"
LAB_DOC = REPO_ROOT / "docs" / "lab.md"
WORKFLOWS = REPO_ROOT / ".github" / "workflows"
# Triggers whose workflow file and checkout are main's own, never a change's (GitHub's semantics).
MAIN_TRIGGERS = {"push", "schedule", "workflow_dispatch", "pull_request_target", "workflow_run"}
# The fork's edit of the plan script: its trust() says main, whatever the event.
CLAIM_TRUST = '''

def trust(event_name, event, repository, reviews, *more):      # the fork's edit: every change is main's
    return "main", (event.get("pull_request") or {}).get("head", {}).get("sha", ""), "the change says so"
'''


def runner_groups(doc: str) -> set[tuple[str, str]] | None:
    """The (workflow path, ref) pairs docs/lab.md tells the lab to admit to its runner group; None when
    it names none (then any workflow of the repository reaches the runners)."""
    found = set(re.findall(rf"`{re.escape(REPO)}/(\.github/workflows/[\w.-]+\.ya?ml)@(refs/heads/[\w./-]+)`", doc))
    return found or None


def _plan_script(workflow: dict) -> str:
    """The script the plan job runs (`python3 PATH`)."""
    text = "\n".join(s.get("run", "") for s in workflow["jobs"]["plan"]["steps"])
    return re.search(r"python3 (\S+\.py)", text).group(1)


@pytest.fixture
def fork_pr(tmp_path):
    """A repository: main as this checkout has it, and a fork's head that edits the workflow (a
    `pull_request` trigger, a plan told it is a push) and the plan script (its trust says main)."""
    repo = tmp_path / "repo"
    base = main_repo(repo)
    workflow = ".github/workflows/npu-acceptance.yml"
    text = (repo / workflow).read_text()
    script = _plan_script(load_yaml(text))
    assert '--event-name="$EVENT"' in text, "the fork's edit of the workflow no longer applies"
    text = text.replace('--event-name="$EVENT"', "--event-name=push")
    if not re.search(r"^  pull_request:", text, re.M):
        text = text.replace("\non:\n", "\non:\n  pull_request:\n    types: [opened, synchronize, reopened, labeled]\n",
                            1)
    claimed = (repo / script).read_text().replace('\nif __name__ == "__main__":',
                                                  CLAIM_TRUST + '\n\nif __name__ == "__main__":')
    assert CLAIM_TRUST in claimed, "the fork's edit of the plan script no longer applies"
    head = commit(repo, "fork-head", {workflow: text, script: claimed}, "trust me", start=base)
    git(repo, "checkout", "-q", "main")
    return repo, base, head


def _event(base: str, head: str) -> dict:
    return {"action": "labeled", "label": {"name": "run-on-board"}, "number": 7, "sender": {"login": "maintainer"},
            "pull_request": {"number": 7, "base": {"sha": base, "ref": "main", "repo": {"full_name": REPO}},
                             "head": {"sha": head, "ref": "fork-head", "repo": {"full_name": "someone/anima-npu"}}}}


def _api(repo: Path, base: str, head: str, reviews: list[dict]) -> dict:
    """GitHub's answers about pull request 7, from the repository itself."""
    files = [{"filename": f} for f in git(repo, "diff", "--name-only", base, head).split()]
    return {f"repos/{REPO}/pulls/7/files": files, f"repos/{REPO}/pulls/7/reviews": reviews,
            f"repos/{REPO}/collaborators/maintainer/permission": {"permission": "write", "role_name": "maintain",
                                                                  "user": {"login": "maintainer"}},
            f"repos/{REPO}/contents/toolkit/versions.toml?ref={head}": git(repo, "show",
                                                                           f"{head}:toolkit/versions.toml")}


def board_trusts(repo: Path, base: str, head: str, reviews: list[dict], work: Path) -> list[tuple[str, str, str]]:
    """(event, workflow, trust) of every run GitHub starts for the fork's labelling that can reach a board
    runner: a workflow with self-hosted jobs that main's documented runner group admits, its plan job run."""
    allowed = runner_groups(git(repo, "show", f"{base}:docs/lab.md"))
    trusts = []
    for run in pull_request_runs(_event(base, head), run_id=100):
        for path, workflow in workflows_started(repo, run).items():
            if not any(self_hosted(job) for job in workflow["jobs"].values()):
                continue
            if allowed is not None and (path, run.ref) not in allowed:
                continue            # the runner group refuses every self-hosted job of this run
            outputs = run_job(repo, workflow, "plan", run, work / run.event_name, _api(repo, base, head, reviews))
            trusts.append((run.event_name, path, outputs["trust"]))
    return trusts


def _approval(head: str) -> dict:
    return {"state": "APPROVED", "commit_id": head, "author_association": "MEMBER", "user": {"login": "maintainer"}}


def test_the_forks_own_plan_would_claim_trust(fork_pr, tmp_path):
    """The fork's edits work: its own plan script, run on its own event, says main."""
    repo, base, head = fork_pr
    git(repo, "checkout", "-q", head)
    script = _plan_script(load_yaml((repo / ".github" / "workflows" / "npu-acceptance.yml").read_text()))
    proc = subprocess.run([sys.executable, script, "--event-name=pull_request_target", "--changed", "harness/x.py"],
                          cwd=repo, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr.startswith("trust: main"), proc.stderr


@pytest.mark.parametrize("approved, expected", [(True, "fork"), (False, "none")])
def test_a_fork_head_editing_the_workflow_and_the_plan_is_planned_untrusted(fork_pr, tmp_path, approved, expected):
    repo, base, head = fork_pr
    trusts = board_trusts(repo, base, head, [_approval(head)] if approved else [], tmp_path / "runs")
    assert trusts, "no run of this pull request reaches a board: the test would prove nothing"
    assert {trust for _, _, trust in trusts} == {expected}, trusts
    assert {event for event, _, _ in trusts} == {"pull_request_target"}, trusts


# --- The settings a lab must set, checked where the repository shows them ---

def _workflows() -> dict[str, dict]:
    return {str(p.relative_to(REPO_ROOT)): load_yaml(p.read_text()) for p in sorted(WORKFLOWS.glob("*.y*ml"))}


def test_every_self_hosted_job_is_in_a_workflow_only_main_starts():
    for path, workflow in _workflows().items():
        jobs = [name for name, job in workflow["jobs"].items() if self_hosted(job)]
        if jobs:
            assert set(workflow["on"]) <= MAIN_TRIGGERS, f"{path}: self-hosted jobs {jobs} on {sorted(workflow['on'])}"


def test_the_documented_runner_group_admits_exactly_the_board_workflow_on_main():
    with_runners = {path for path, wf in _workflows().items() if any(self_hosted(j) for j in wf["jobs"].values())}
    assert runner_groups(LAB_DOC.read_text()) == {(path, "refs/heads/main") for path in with_runners}


def test_the_board_jobs_wait_in_the_documented_environments():
    doc = LAB_DOC.read_text()
    settings = doc[doc.index("## Repository settings"):]
    settings = settings[:settings.find("\n## ", 3)]
    for path, workflow in _workflows().items():
        for name, job in workflow["jobs"].items():
            if not self_hosted(job) or "rk3588" not in str(job["runs-on"]):
                continue
            assert "environment" in job, f"{path}: board job {name} names no environment"
            names = [evaluate({"needs": {"plan": {"outputs": {"trust": t}}}},
                              [{"template": str(job["environment"])}])[0]
                     for t in ("fork", "branch", "main")]
            assert names == ["board-fork", "board", "board"], (name, names)
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| environment `([\w-]+)` .*$", settings, re.M)}
    assert set(rows) == {"board-fork", "board"}, rows
    assert "required reviewers" in rows["board-fork"].lower() and "`main`" in rows["board"]
