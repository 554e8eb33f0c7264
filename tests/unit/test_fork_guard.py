"""A fork's pull request on the boards: the plan (.ci/plan.py, run by the workflow's plan job)
pins the head commit a maintainer's approving review is of, plans no licensed target and says "fork";
the board job then runs the suite through .ci/board-run, which for a fork keeps every write in the job's
temp folder and seals the run with .ci/untrusted-run (bubblewrap): the licensed folder reads as empty and
the board's shared state (the results store, shared venv) cannot be written. Both scripts run for real
here, with temporary folders standing in for /opt/anima and /var/lib/anima-ci."""
from __future__ import annotations

import os
import re
import shutil
import stat
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


def _event(action="labeled", label="run-on-board", fork=True, sender="maintainer") -> dict:
    return {"action": action, "label": {"name": label}, "sender": {"login": sender},
            "pull_request": {"number": 7,
                             "head": {"sha": HEAD, "repo": {"full_name": "someone/anima-npu" if fork else REPO}}}}


def _review(commit=HEAD, state="APPROVED", association="MEMBER", login="maintainer") -> dict:
    return {"state": state, "commit_id": commit, "author_association": association, "user": {"login": login}}


def _access(login="maintainer", permission="write", role=None) -> dict:
    """GitHub's answer to repos/R/collaborators/LOGIN/permission (`permission` says write for maintain)."""
    return {"permission": permission, "role_name": role or permission, "user": {"login": login}}


@pytest.mark.parametrize("access", [_access(), _access(role="maintain"), _access(permission="admin")])
def test_a_labelled_fork_head_approved_by_its_labeller_with_write_access_is_pinned(access):
    level, sha, why = trust("pull_request_target", _event(), REPO, [_review()], access)
    assert (level, sha) == ("fork", HEAD) and "approved and labelled by maintainer" in why


@pytest.mark.parametrize("event, reviews, access, why", [
    (_event(), [_review(commit="b" * 40)], _access(), "no approving review of aaaaaaaaaaaa"),  # pushed since
    (_event(), [_review(state="COMMENTED")], _access(), "no approving review"),
    (_event(label="documentation"), [_review()], _access(), "only by the label run-on-board"),
    (_event(action="synchronize"), [_review()], _access(), "only by the label"),              # a push after the label
    # an organisation member (author_association MEMBER) whose access to the repository is read or triage
    (_event(), [_review()], _access(permission="read"), "maintainer put the label with read access"),
    (_event(), [_review()], _access(permission="read", role="triage"), "with triage access"),
    (_event(), [_review()], _access(permission="none"), "with none access"),
    (_event(), [_review()], {}, "no collaborator permission of maintainer"),                # gh: 404
    (_event(sender=""), [_review()], _access(), "names no sender"),
    # the labeller has write access, the approval is someone else's
    (_event(sender="labeller"), [_review()], _access("labeller"), "head the label was put on, by labeller"),
    (_event(sender="labeller"), [_review()], _access(), "no collaborator permission of labeller"),
    # an approval dismissed before the label (GitHub lists it DISMISSED), or followed by a change request
    (_event(), [_review(state="DISMISSED")], _access(), "no approving review"),
    (_event(), [_review(), _review(state="CHANGES_REQUESTED")], _access(), "no approving review"),
])
def test_nothing_of_a_fork_runs_unreviewed(event, reviews, access, why):
    level, _, said = trust("pull_request_target", event, REPO, reviews, access)
    assert level == "none" and why in said, said


def test_an_approval_stands_through_a_later_comment():
    reviews = [_review(state="CHANGES_REQUESTED"), _review(), _review(state="COMMENTED")]
    assert trust("pull_request_target", _event(), REPO, reviews, _access())[0] == "fork"


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
    assert trust("pull_request_target", event, REPO, [_review()], _access())[0] == "fork"


def test_a_pull_request_run_is_never_trusted():
    """A `pull_request` run's workflow is the change's own copy: nothing it plans reaches a board."""
    assert trust("pull_request", _event(action="synchronize", fork=False), REPO, [])[0] == "none"
    assert trust("pull_request", _event(), REPO, [_review()], _access())[0] == "none"


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
    for script in ("board-run", "change-run", "untrusted-run", "copy-out"):
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
mkdir -p artifacts/sub && echo "<testsuites/>" > artifacts/junit.xml && echo figures > artifacts/sub/report.txt
ln -s {home}/.credentials artifacts/leak 2>/dev/null; ln -s {home} artifacts/home 2>/dev/null
mkfifo artifacts/pipe 2>/dev/null
ln {home}/.credentials artifacts/hard 2>/dev/null && echo "hard-linked credentials: yes" \\
    || echo "hard-linked credentials: no"
""")
    (checkout / "bin" / "test").chmod(0o755)

    def run(trust_level: str, script: str = "board-run", *args: str, code: int = 0) -> str:
        env = {**os.environ, "TRUST": trust_level, "RUNNER_TEMP": str(temp), "ANIMA_LICENSED": str(licensed),
               "ANIMA_SHARED": str(shared), "HOME": str(home), "GITHUB_ENV": str(github_env)}
        proc = subprocess.run([trusted / ".ci" / script, *(args or ("-m", "smoke or npu", "--require-npu"))],
                              cwd=checkout, env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == code, proc.stdout + proc.stderr
        return proc.stdout + proc.stderr
    run.shared, run.temp, run.github_env, run.trusted, run.checkout = shared, temp, github_env, trusted, checkout
    run.secret = home / ".credentials"
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


def _copy_out(board, src: str, dest) -> subprocess.CompletedProcess:
    return subprocess.run([board.trusted / ".ci" / "copy-out", src, str(dest)], cwd=board.checkout,
                          capture_output=True, text=True, timeout=30)


def test_what_leaves_a_sealed_run_is_its_regular_files_only(board):
    """The sealed run plants links to the runner's credentials in its artifacts (a symbolic link to the
    file and one to the home folder) and a FIFO; a hard link across the seal's mounts fails inside it,
    so the test plants one from outside (and a device node, as root), as an earlier step could have.
    Read unsealed, the link gives the secret; main's copy-out copies none of them, naming each."""
    out = board("fork")
    assert "hard-linked credentials: no" in out
    artifacts, secret = board.checkout / "artifacts", board.secret.read_text()
    assert (artifacts / "leak").read_text() == secret            # what an upload that follows links would read
    os.link(board.secret, artifacts / "hard")
    planted = {"leak": "a symbolic link", "home": "a symbolic link", "pipe": "a FIFO",
               "hard": "a hard link (2 names, 1 of them outside)"}
    if os.geteuid() == 0:
        os.mknod(artifacts / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        planted["null"] = "a character device"
    dest = board.temp / "out" / "artifacts"
    proc = _copy_out(board, "artifacts", dest)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    refused = set(proc.stderr.splitlines())
    assert refused == {f"copy-out: artifacts/{name}: {why}, not copied" for name, why in planted.items()}, refused
    copied = {p.relative_to(dest).as_posix() for p in dest.rglob("*")}
    assert copied == {"junit.xml", "sub", "sub/report.txt"}, copied
    assert not [p for p in dest.rglob("*") if p.is_symlink()]
    assert not [p for p in dest.rglob("*") if p.is_file() and secret in p.read_text()]
    assert (dest / "sub" / "report.txt").read_text() == "figures\n"
    assert proc.stdout == f"copy-out: 2 file(s) of artifacts copied to {dest}, {len(planted)} refused\n"


def test_copy_out_refuses_a_linked_folder_and_an_existing_destination(board, tmp_path):
    (board.checkout / "artifacts").symlink_to(board.secret.parent)
    proc = _copy_out(board, "artifacts", tmp_path / "dest")
    assert proc.returncode == 1 and proc.stderr == "copy-out: artifacts: a symbolic link, not a folder\n"
    assert list((tmp_path / "dest").iterdir()) == []
    proc = _copy_out(board, "artifacts", tmp_path / "dest")
    assert proc.returncode == 2 and "dest exists: the copy goes into a new folder" in proc.stderr
    # two names of one file, both in the folder: nothing outside, each copied as its own file
    (board.checkout / "out").mkdir()
    (board.checkout / "out" / "a").write_text("x")
    os.link(board.checkout / "out" / "a", board.checkout / "out" / "b")
    proc = _copy_out(board, "out", tmp_path / "both")
    assert proc.returncode == 0 and sorted(p.name for p in (tmp_path / "both").iterdir()) == ["a", "b"]
    assert _copy_out(board, "missing", tmp_path / "none").returncode == 0      # a run that wrote nothing


def test_the_workflow_uploads_and_publishes_only_what_copy_out_copied():
    """Every upload-artifact step and the partition's publication read a folder copy-out made, never the
    change's checkout (fails if a step's path goes back to change/...)."""
    from tests.github_actions import load_yaml
    workflow = load_yaml((REPO_ROOT / ".github" / "workflows" / "npu-acceptance.yml").read_text())
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    made = {m for step in steps for m in re.findall(r'copy-out" \S+ "\$RUNNER_TEMP/out/([\w-]+)"', step.get("run", ""))}
    uploads = [step["with"]["path"] for step in steps if "upload-artifact" in step.get("uses", "")]
    assert uploads and made
    for path in uploads:
        assert re.fullmatch(r"\$\{\{ runner\.temp \}\}/out/([\w-]+)/.*", path), path
        assert path.split("/")[2] in made, (path, made)
    publish = [step["run"] for step in steps if "publish-partition" in step.get("run", "")]
    assert publish and all('"$RUNNER_TEMP/out/partition"' in run for run in publish), publish
