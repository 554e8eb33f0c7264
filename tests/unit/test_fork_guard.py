"""A fork's pull request on the boards: the plan (.ci/plan.py, run by the workflow's plan job)
pins the head commit a maintainer's approving review is of, plans no licensed target and says "fork";
the board job then runs the suite through .ci/board-run, which for a fork keeps every write in the job's
temp folder and seals the run with .ci/untrusted-run (bubblewrap): the licensed folder reads as empty and
the board's shared state (the results store, shared venv) cannot be written. Both scripts run for real
here, with temporary folders standing in for /opt/anima and /var/lib/anima-ci."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from harness.model.config import REPO_ROOT
from tests.helpers import ci_plan, missing_tool

_plan = ci_plan()
load_boards, load_targets, matrix, plan, toolkit_legs, trust = (
    _plan.load_boards, _plan.load_targets, _plan.matrix, _plan.plan, _plan.toolkit_legs, _plan.trust)

REPO = "anima-npu/anima-npu"
HEAD = "a" * 40


def _event(action="labeled", label="run-on-board", fork=True) -> dict:
    return {"action": action, "label": {"name": label},
            "pull_request": {"number": 7,
                             "head": {"sha": HEAD, "repo": {"full_name": "someone/anima-npu" if fork else REPO}}}}


def _review(commit=HEAD, state="APPROVED", association="MEMBER") -> dict:
    return {"state": state, "commit_id": commit, "author_association": association, "user": {"login": "maintainer"}}


def test_a_labelled_fork_head_with_a_maintainers_approval_is_pinned():
    level, sha, why = trust("pull_request_target", _event(), REPO, [_review()])
    assert (level, sha) == ("fork", HEAD) and "approved by maintainer" in why


@pytest.mark.parametrize("event, reviews", [
    (_event(), [_review(commit="b" * 40)]),                        # approved an older head: pushed since
    (_event(), [_review(association="CONTRIBUTOR")]),              # not a maintainer's approval
    (_event(), [_review(state="COMMENTED")]),
    (_event(label="documentation"), [_review()]),                  # another label
    (_event(action="synchronize"), [_review()]),                   # a push after the label
])
def test_nothing_of_a_fork_runs_unreviewed(event, reviews):
    assert trust("pull_request_target", event, REPO, reviews)[0] == "none"


def test_branches_and_main_are_trusted_and_a_branch_label_runs_nothing_twice():
    assert trust("pull_request_target", _event(action="synchronize", fork=False), REPO, [])[:2] == ("branch", HEAD)
    assert trust("pull_request_target", _event(fork=False), REPO, [])[0] == "none"
    assert trust("push", {"after": HEAD}, REPO, [])[:2] == ("main", HEAD)


def test_a_fork_plans_no_licensed_target():
    targets = plan(["models/profiles/anima-2b.toml"], load_targets())
    assert any(t["licensed"] for t in targets), "the change must touch a licensed target for this test"
    legs = toolkit_legs(None, None)
    trusted = matrix(targets, load_boards(), legs, "main")
    forked = matrix(targets, load_boards(), legs, "fork")
    assert any(e["licensed"] for e in trusted)
    assert forked and not any(e["licensed"] for e in forked)


def test_a_toolkit_change_plans_old_and_new(tmp_path):
    head = tmp_path / "versions.toml"
    head.write_text('default = "2.3.2"\n')
    legs = toolkit_legs(None, head)
    assert [leg for leg, _ in legs] == ["old", "new"] and legs[1][1] == "2.3.2"
    assert toolkit_legs(None, None) == [("", legs[0][1])]


def test_a_deleted_forks_pull_request_is_a_forks():
    event = _event()
    event["pull_request"]["head"]["repo"] = None
    assert trust("pull_request_target", event, REPO, [_review()])[0] == "fork"


def test_a_pull_request_run_is_never_trusted():
    """A `pull_request` run's workflow is the change's own copy: nothing it plans reaches a board."""
    assert trust("pull_request", _event(action="synchronize", fork=False), REPO, [])[0] == "none"
    assert trust("pull_request", _event(), REPO, [_review()])[0] == "none"


def test_a_toolkit_version_from_the_change_is_checked(tmp_path):
    """The change's toolkit/versions.toml is data: a default that is no version stops the plan (exit 2)."""
    head = tmp_path / "versions.toml"
    head.write_text('default = "2.5.0; rm -rf /"\n')
    out = tmp_path / "github-output"
    proc = subprocess.run([sys.executable, REPO_ROOT / ".ci" / "plan.py", "--changed", "harness/x.py",
                           f"--head-versions={head}", "--github-output"], env={**os.environ, "GITHUB_OUTPUT": str(out)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == f"error: {head}: default '2.5.0; rm -rf /' is not a toolkit version\n"
    assert not out.exists()


@pytest.fixture
def board(tmp_path):
    """A runner's layout (its home with its credentials, the job's temp folder with the step's GITHUB_ENV
    file, main's checkout beside the change's) whose bin/test reports what it was given and tries what
    fork code might try."""
    if shutil.which("bwrap") is None:
        missing_tool("bubblewrap is not installed (bin/debian-packages-board.txt; bin/test installs it as root)")
    home, licensed, shared = (tmp_path / n for n in ("runner-home", "licensed", "shared"))
    temp, trusted, checkout = home / "_work" / "_temp", home / "_work" / "trusted", home / "_work" / "change"
    github_env = temp / "_runner_file_commands" / "set_env_1"
    for d in (checkout / "bin", checkout / ".git", trusted / ".ci", licensed, shared, github_env.parent):
        d.mkdir(parents=True)
    github_env.touch()
    (home / ".credentials").write_text("the runner's key")
    (licensed / "dit.safetensors").write_text("licensed weights")
    (checkout / "pyproject.toml").write_text("[project]\n")
    for script in ("board-run", "change-run", "untrusted-run"):
        shutil.copy2(REPO_ROOT / ".ci" / script, trusted / ".ci" / script)
    (checkout / "bin" / "test").write_text(f"""#!/bin/sh
echo "args: $*"
echo "venv: $ANIMA_VENV"
cat {licensed}/dit.safetensors 2>/dev/null && echo "read licensed: yes" || echo "read licensed: no"
cat {home}/.credentials 2>/dev/null && echo "read runner credentials: yes" || echo "read runner credentials: no"
touch {shared}/results.sqlite 2>/dev/null && echo "wrote results: yes" || echo "wrote results: no"
mkdir -p {shared}/venvs/x 2>/dev/null && echo "wrote shared venv: yes" || echo "wrote shared venv: no"
echo LD_PRELOAD=/tmp/x.so >> {github_env} 2>/dev/null && echo "wrote GITHUB_ENV: yes" || echo "wrote GITHUB_ENV: no"
touch .git/config 2>/dev/null && echo "wrote .git: yes" || echo "wrote .git: no"
touch {trusted}/.ci/board-run 2>/dev/null && echo "wrote main's checkout: yes" || echo "wrote main's checkout: no"
test -e /proc/{os.getpid()} && echo "saw the runner: yes" || echo "saw the runner: no"
touch artifacts-ok && echo "wrote checkout: yes"
""")
    (checkout / "bin" / "test").chmod(0o755)

    def run(trust_level: str, script: str = "board-run", *args: str, code: int = 0) -> str:
        env = {**os.environ, "TRUST": trust_level, "RUNNER_TEMP": str(temp), "ANIMA_LICENSED": str(licensed),
               "ANIMA_SHARED": str(shared), "HOME": str(home), "GITHUB_ENV": str(github_env)}
        proc = subprocess.run([trusted / ".ci" / script, *(args or ("-m", "smoke or npu", "--require-npu"))],
                              cwd=checkout, env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == code, proc.stdout + proc.stderr
        return proc.stdout + proc.stderr
    run.shared, run.temp, run.github_env = shared, temp, github_env
    return run


def test_a_fork_board_run_writes_no_shared_state_and_reads_no_licensed_input(board):
    out = board("fork")
    assert "read licensed: no" in out and "licensed weights" not in out
    assert "read runner credentials: no" in out and "the runner's key" not in out
    assert "wrote results: no" in out and "wrote shared venv: no" in out
    # Nothing reaches a later, unsealed step: not its env file, not the git metadata its checkout runs in.
    assert "wrote GITHUB_ENV: no" in out and board.github_env.read_text() == ""
    assert "wrote .git: no" in out and "wrote main's checkout: no" in out
    assert "saw the runner: no" in out
    assert "wrote checkout: yes" in out
    assert f"--results=sqlite:///{board.temp}/untrusted/anima-state/results.sqlite " \
           f"--no-save-baseline -m smoke or npu --require-npu" in out
    assert f"venv: {board.temp}/untrusted/anima-state/venvs/" in out
    assert not (board.shared / "results.sqlite").exists() and not (board.shared / "venvs").exists()


def test_a_trusted_board_run_uses_the_shared_state(board):
    out = board("main")
    assert "wrote results: yes" in out and "read licensed: yes" in out and "saw the runner: yes" in out
    assert f"--results=sqlite:///{board.shared}/results.sqlite --save-baseline" in out
    assert "--no-save-baseline" in board("branch")


def test_the_changes_commands_run_sealed_for_a_fork_only(board):
    """.ci/change-run (the conversion's commands): sealed for a fork, as they are for main and branches."""
    sealed = board("fork", "change-run", "bin/test", "export")
    assert "args: export" in sealed and "read runner credentials: no" in sealed and "wrote GITHUB_ENV: no" in sealed
    assert "wrote results: no" in sealed and "wrote checkout: yes" in sealed
    assert "read licensed: yes" in board("branch", "change-run", "bin/test", "export")
    assert "TRUST=none is not main, branch or fork" in board("none", "change-run", "bin/test", code=2)
