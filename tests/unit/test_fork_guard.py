"""A fork's pull request on the boards: the plan (tools/ci_plan.py, run by the workflow's plan job)
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

from tests.helpers import missing_tool

from harness.model.config import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "tools"))
try:
    from ci_plan import load_boards, load_targets, matrix, plan, toolkit_legs, trust
finally:
    sys.path.pop(0)

REPO = "anima-npu/anima-npu"
HEAD = "a" * 40


def _event(action="labeled", label="run-on-board", fork=True) -> dict:
    return {"action": action, "label": {"name": label},
            "pull_request": {"number": 7, "head": {"sha": HEAD, "repo": {"full_name": "someone/anima-npu" if fork else REPO}}}}


def _review(commit=HEAD, state="APPROVED", association="MEMBER") -> dict:
    return {"state": state, "commit_id": commit, "author_association": association, "user": {"login": "maintainer"}}


def test_a_labelled_fork_head_with_a_maintainers_approval_is_pinned():
    level, sha, why = trust("pull_request", _event(), REPO, [_review()])
    assert (level, sha) == ("fork", HEAD) and "approved by maintainer" in why


@pytest.mark.parametrize("event, reviews", [
    (_event(), [_review(commit="b" * 40)]),                        # approved an older head: pushed since
    (_event(), [_review(association="CONTRIBUTOR")]),              # not a maintainer's approval
    (_event(), [_review(state="COMMENTED")]),
    (_event(label="documentation"), [_review()]),                  # another label
    (_event(action="synchronize"), [_review()]),                   # a push after the label
])
def test_nothing_of_a_fork_runs_unreviewed(event, reviews):
    assert trust("pull_request", event, REPO, reviews)[0] == "none"


def test_branches_and_main_are_trusted_and_a_branch_label_runs_nothing_twice():
    assert trust("pull_request", _event(action="synchronize", fork=False), REPO, [])[:2] == ("branch", HEAD)
    assert trust("pull_request", _event(fork=False), REPO, [])[0] == "none"
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
    base = tmp_path / "versions.toml"
    base.write_text('default = "2.3.2"\n')
    legs = toolkit_legs(None, base)
    assert [leg for leg, _ in legs] == ["old", "new"] and legs[0][1] == "2.3.2"
    assert toolkit_legs(None, None) == [("", legs[1][1])]


@pytest.fixture
def board(tmp_path):
    """A checkout whose bin/test reports what it was given and tries what fork code might try."""
    if shutil.which("bwrap") is None:
        missing_tool("bubblewrap is not installed (bin/debian-packages.txt; bin/test installs it as root)")
    checkout, licensed, shared, temp = (tmp_path / n for n in ("checkout", "licensed", "shared", "runner-temp"))
    for d in (checkout / "bin", checkout / ".ci", licensed, shared, temp):
        d.mkdir(parents=True)
    (licensed / "dit.safetensors").write_text("licensed weights")
    (checkout / "pyproject.toml").write_text("[project]\n")
    for script in ("board-run", "untrusted-run"):
        shutil.copy2(REPO_ROOT / ".ci" / script, checkout / ".ci" / script)
    (checkout / "bin" / "test").write_text(f"""#!/bin/sh
echo "args: $*"
echo "venv: $ANIMA_VENV"
cat {licensed}/dit.safetensors 2>/dev/null && echo "read licensed: yes" || echo "read licensed: no"
touch {shared}/results.sqlite 2>/dev/null && echo "wrote results: yes" || echo "wrote results: no"
mkdir -p {shared}/venvs/x 2>/dev/null && echo "wrote shared venv: yes" || echo "wrote shared venv: no"
touch artifacts-ok && echo "wrote checkout: yes"
""")
    (checkout / "bin" / "test").chmod(0o755)

    def run(trust_level: str) -> str:
        env = {**os.environ, "TRUST": trust_level, "RUNNER_TEMP": str(temp), "ANIMA_LICENSED": str(licensed),
               "ANIMA_SHARED": str(shared)}
        proc = subprocess.run([".ci/board-run", "-m", "smoke or npu", "--require-npu"], cwd=checkout, env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout
    run.shared, run.temp = shared, temp
    return run


def test_a_fork_board_run_writes_no_shared_state_and_reads_no_licensed_input(board):
    out = board("fork")
    assert "read licensed: no" in out and "licensed weights" not in out
    assert "wrote results: no" in out and "wrote shared venv: no" in out
    assert "wrote checkout: yes" in out
    assert f"--results=sqlite:///{board.temp}/anima-state/results.sqlite " \
           f"--no-save-baseline -m smoke or npu --require-npu" in out
    assert f"venv: {board.temp}/anima-state/venvs/" in out
    assert not (board.shared / "results.sqlite").exists() and not (board.shared / "venvs").exists()


def test_a_trusted_board_run_uses_the_shared_state(board):
    out = board("main")
    assert "wrote results: yes" in out and "read licensed: yes" in out
    assert f"--results=sqlite:///{board.shared}/results.sqlite --save-baseline" in out
    assert "--no-save-baseline" in board("branch")
