"""No job of the board workflow replaces another that must run: GitHub keeps one running and one pending
job per concurrency group and cancels the older pending one, so every job that must run needs a group of
its own. The jobs are enumerated as GitHub would start them (tests/github_actions.py): the plan job runs in
a real git repository for each event, its matrices are expanded, and each job's `concurrency.group` is
evaluated by GitHub's own evaluator with that job's matrix values and the run's context. The runs: a
pull request that upgrades the toolkit (two targets x old and new), and a push, the nightly and a manual
toolkit upgrade of one and the same commit."""
from __future__ import annotations

import tomllib
from collections import defaultdict

import pytest

from harness.model.config import REPO_ROOT
from tests.github_actions import (
    Run,
    commit,
    evaluate,
    git,
    load_yaml,
    main_repo,
    pull_request_runs,
    run_job,
    workflows_started,
)

REPO = "anima-npu/anima-npu"
WORKFLOW = REPO_ROOT / ".github" / "workflows" / "npu-acceptance.yml"
# The groups before issue #31: one per board and change, shared by every leg, target and event of it.
PER_BOARD_GROUPS = {"board": "anima-board-${{ matrix.board }}-${{ github.event.pull_request.number || github.sha }}",
                    "upgrade": "anima-board-${{ matrix.board }}-${{ github.event.pull_request.number || github.sha "
                               "}}-upgrade"}


def _other_toolkit(versions: str) -> str:
    """A toolkit version of toolkit/versions.toml other than its default: what an upgrade moves to."""
    table = tomllib.loads(versions)
    return next(v for v in table["versions"] if v != table["default"])


def _pull_request(base: str, head: str, action: str) -> dict:
    return {"action": action, "number": 12,
            "pull_request": {"number": 12, "base": {"sha": base, "ref": "main", "repo": {"full_name": REPO}},
                             "head": {"sha": head, "ref": "upgrade", "repo": {"full_name": REPO}}}}


def _pull_request_run(repo, event: dict, run_id: int) -> Run:
    """The run of the board workflow GitHub starts for a pull request's event (by whichever trigger it has)."""
    return next(run for run in pull_request_runs(event, run_id) if workflows_started(repo, run))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """[(label, run, plan outputs)]: each run's plan job run as the workflow says, in one repository."""
    tmp = tmp_path_factory.mktemp("concurrency")
    repo = tmp / "repo"
    first = main_repo(repo)
    commit_sha = commit(repo, "main", {"harness/model/config.py": "# a change to the model code\n"}, "model")
    versions = (repo / "toolkit" / "versions.toml").read_text()
    old_default = tomllib.loads(versions)["default"]
    upgrade = _other_toolkit(versions)
    upgraded = versions.replace(f'default = "{old_default}"', f'default = "{upgrade}"')
    head = commit(repo, "upgrade", {"toolkit/versions.toml": upgraded,
                                    "harness/model/config.py": "# the model code for the new toolkit\n"},
                  "upgrade", start=commit_sha)
    newer = commit(repo, "upgrade", {"harness/model/bundle.py": "# and the model loader\n"}, "newer head")
    git(repo, "checkout", "-q", "main")
    main_ref = "refs/heads/main"
    planned = [
        ("push", Run("push", {"before": first, "after": commit_sha, "ref": main_ref}, commit_sha, main_ref, 1)),
        ("nightly", Run("schedule", {"schedule": "17 1 * * *"}, commit_sha, main_ref, 2)),
        ("manual upgrade", Run("workflow_dispatch", {"inputs": {"toolkit_upgrade": upgrade}}, commit_sha, main_ref, 3,
                               inputs={"toolkit_upgrade": upgrade})),
        ("upgrade pull request", _pull_request_run(repo, _pull_request(commit_sha, head, "opened"), 4)),
        ("its newer head", _pull_request_run(repo, _pull_request(commit_sha, newer, "synchronize"), 6)),
    ]
    out = []
    for label, run in planned:
        (workflow,) = workflows_started(repo, run).values()
        pr_head = run.event.get("pull_request", {}).get("head", {}).get("sha")
        api = {} if pr_head is None else {
            f"repos/{REPO}/pulls/12/files": [{"filename": f}
                                             for f in git(repo, "diff", "--name-only", commit_sha, pr_head).split()],
            f"repos/{REPO}/pulls/12/reviews": [],
            f"repos/{REPO}/contents/toolkit/versions.toml?ref={pr_head}": git(repo, "show",
                                                                              f"{pr_head}:toolkit/versions.toml")}
        outputs = run_job(repo, workflow, "plan", run, tmp / f"run-{run.run_id}", api)
        out.append((label, run, outputs))
    return out


def jobs(workflow: dict, runs) -> list[dict]:
    """Every job the runs start: one per matrix entry (a job whose matrix is empty starts none), with its
    concurrency group evaluated as GitHub evaluates it."""
    started = [(label, run, {"plan": {"outputs": outputs, "result": "success"}}, name, job)
               for label, run, outputs in runs for name, job in workflow["jobs"].items()]
    matrices = evaluate({},
                        [{"value": str(job["strategy"]["matrix"]).strip()[3:-2], "context": run.context(needs=needs)}
                             for _, run, needs, _, job in started if "strategy" in job])
    found, items = [], []
    for label, run, needs, name, job in started:
        entries = matrices.pop(0).get("include", []) if "strategy" in job else [{}]
        for entry in entries:
            found.append({"run": label, "job": name, "leg": entry.get("key", "")})
            items.append({"template": job["concurrency"]["group"], "context": run.context(needs=needs, matrix=entry)})
    for job, group in zip(found, evaluate({}, items)):
        job["group"] = group
    return found


def collisions(found: list[dict]) -> dict[str, list[str]]:
    by_group = defaultdict(list)
    for job in found:
        by_group[job["group"]].append(f"{job['run']}: {job['job']} {job['leg']}".strip())
    return {group: names for group, names in by_group.items() if len(names) > 1}


def _without_newer_head(runs):
    return [r for r in runs if r[0] != "its newer head"]


def test_the_runs_plan_what_the_test_needs(runs):
    """The scenario holds: the pull request plans two targets x old and new, the push and the nightly one
    leg each of the same commit."""
    found = jobs(load_yaml(WORKFLOW.read_text()), runs)
    legs = {(j["run"], j["job"]): set() for j in found}
    for j in found:
        legs[(j["run"], j["job"])].add(j["leg"])
    assert len(legs[("upgrade pull request", "board")]) == 4 and len(legs[("upgrade pull request", "upgrade")]) == 2
    assert all(leg.endswith(("-old", "-new")) for leg in legs[("upgrade pull request", "board")])
    assert len(legs[("push", "board")]) == len(legs[("nightly", "board")]) == 2
    assert {run.sha for label, run, _ in runs if label in ("push", "nightly", "manual upgrade")} == \
        {runs[0][1].sha}


def test_every_job_of_an_upgrade_a_push_and_the_nightly_has_a_group_of_its_own(runs):
    found = jobs(load_yaml(WORKFLOW.read_text()), _without_newer_head(runs))
    assert collisions(found) == {}


def test_only_the_same_pull_requests_newer_head_replaces_its_pending_board_jobs(runs):
    found = jobs(load_yaml(WORKFLOW.read_text()), runs)
    groups = defaultdict(set)
    for job in found:
        groups[(job["run"], job["job"])].add(job["group"])
    for name in ("board", "upgrade"):
        assert groups[("its newer head", name)] == groups[("upgrade pull request", name)]
    for name in ("plan", "convert"):
        assert not groups[("its newer head", name)] & groups[("upgrade pull request", name)]


def test_per_board_groups_are_found_to_cancel_legs(runs):
    """The check finds what the groups before issue #31 did: the legs of one change on one board in one group."""
    workflow = load_yaml(WORKFLOW.read_text())
    for name, group in PER_BOARD_GROUPS.items():
        workflow["jobs"][name]["concurrency"]["group"] = group
    found = collisions(jobs(workflow, _without_newer_head(runs)))
    assert any(len([n for n in names if n.startswith("upgrade pull request: board")]) == 4 for names in found.values())
    assert any({n.split(":")[0] for n in names} == {"push", "nightly", "manual upgrade"} for names in found.values())
