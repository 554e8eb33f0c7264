"""Which partitions a change needs on which boards, and how far the change is trusted:
`python .ci/plan.py --changed FILE...` (or the changed paths on stdin).

The workflow's plan job runs this script from its own checkout, which is never the change's: on
`pull_request_target` GitHub runs the base branch's workflow with the base branch checked out, so a pull
request that edits this script or the workflow changes neither its own plan nor its own trust. The change
reaches the plan only as data: its changed paths (--pr-files, GitHub's list) and its toolkit/versions.toml
(--head-versions).

Reads .ci/targets.toml and .ci/boards.toml; a target is planned when any changed path matches one of
its `paths` (fnmatch, where '*' crosses '/'), on every board. Prints the GitHub Actions matrix as JSON
({"include": [...]}, one entry per target x board x toolkit leg); with --github-output it also writes
`matrix`, `any`, `trust`, `sha` and `upgrade` to $GITHUB_OUTPUT.

Trust (--event-name/--event FILE/--reviews FILE, from the workflow's plan job):
    main    a push to main, a manual or scheduled run: everything, baselines and history written
    branch  a pull request from a branch of this repository (its author can push here anyway)
    fork    a fork's pull request, only on its `run-on-board` labelling, by someone with write, maintain
            or admin access (the event's sender, --sender-permission: GitHub's collaborator permission,
            not a review's author_association, where MEMBER is any member of the organisation), whose
            own standing review approves the head commit the event names: that commit is pinned (sha),
            no licensed target is planned, and its code runs only sealed (.ci/untrusted-run)
    none    anything else from a fork (a push after the label, another label), and any `pull_request`
            run (its workflow is the change's own copy): nothing runs

A toolkit upgrade (--toolkit-upgrade VERSION, or a pull request whose toolkit/versions.toml default
differs from its base's: --head-versions FILE against this checkout's) plans every target twice, legs
"old" and "new".
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import NoReturn

__all__ = ["bad_input", "load_targets", "load_boards", "plan", "trust", "toolkit_legs", "matrix", "convert_legs",
           "main"]

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ROOT / ".ci" / "targets.toml"
BOARDS = ROOT / ".ci" / "boards.toml"
VERSIONS = ROOT / "toolkit" / "versions.toml"
BOARD_LABEL = "run-on-board"
# Events whose workflow and checkout are main's own (a push to main, a run a maintainer started).
MAIN_EVENTS = {"push", "schedule", "workflow_dispatch"}
VERSION = re.compile(r"[0-9][0-9A-Za-z.+-]*")       # a toolkit version as toolkit/versions.toml writes it
WRITE_ACCESS = {"admin", "write"}         # the collaborator permission API's `permission` (maintain reads write)
STANDING = {"APPROVED", "CHANGES_REQUESTED", "DISMISSED"}   # review states that replace a reviewer's earlier one
# Where a target's x86 conversion runs (runs-on labels).
CONVERTERS = {"x86": ["ubuntu-24.04"], "anima-converter": ["self-hosted", "linux", "X64", "anima-converter"]}


def bad_input(message: str) -> NoReturn:
    """One `error:` line and exit 2: the plan writes nothing for input it cannot read."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def load_targets(path: Path = TARGETS) -> list[dict]:
    with open(path, "rb") as fh:
        targets = tomllib.load(fh)["target"]
    for t in targets:
        if t["convert_on"] not in CONVERTERS:
            bad_input(f"{path}: target {t['name']}: convert_on '{t['convert_on']}' is not one of "
                      f"{sorted(CONVERTERS)}")
    return targets


def plan(changed: list[str], targets: list[dict]) -> list[dict]:
    chosen = []
    for t in targets:
        if any(fnmatch.fnmatch(path, pattern) for path in changed for pattern in t["paths"]):
            chosen.append({"name": t["name"], "model_dir": t["model_dir"], "golden_dir": t["golden_dir"],
                           "precision": t["precision"], "converter": CONVERTERS[t["convert_on"]],
                           "licensed": bool(t.get("licensed", False))})
    return chosen


def load_boards(path: Path = BOARDS) -> list[dict]:
    with open(path, "rb") as fh:
        return tomllib.load(fh)["board"]


def _default_toolkit(path: Path) -> str:
    """The default version of a toolkit/versions.toml (a pull request's copy is data from the change)."""
    with open(path, "rb") as fh:
        version = tomllib.load(fh)["default"]
    if not isinstance(version, str) or not VERSION.fullmatch(version):
        bad_input(f"{path}: default {version!r} is not a toolkit version")
    return version


def trust(event_name: str, event: dict, repository: str, reviews: list[dict],
          permission: dict | None = None) -> tuple[str, str, str]:
    """(trust, the commit to run, why): see the module docstring. `permission`: GitHub's collaborator
    permission of the event's sender (repos/R/collaborators/SENDER/permission)."""
    permission = permission or {}
    if event_name in MAIN_EVENTS:
        return "main", event.get("after") or "", f"{event_name} of this repository"
    if event_name != "pull_request_target":
        return "none", "", f"a {event_name} run: its workflow is not main's, no board runs for it"
    pr = event["pull_request"]
    head = pr["head"]["sha"]
    if (pr["head"].get("repo") or {}).get("full_name") == repository:      # a deleted fork has no repo
        if event.get("action") == "labeled":
            return "none", head, "a label on a branch pull request: its push already ran"
        return "branch", head, "a pull request from a branch of this repository"
    if event.get("action") != "labeled" or event.get("label", {}).get("name") != BOARD_LABEL:
        return "none", head, f"a fork's pull request reaches the board only by the label {BOARD_LABEL}"
    sender = (event.get("sender") or {}).get("login", "")
    access = _write_access(sender, permission)
    if access is not True:
        return "none", head, access
    if not _approved_by(sender, reviews, head):
        return "none", head, (f"no approving review of {head[:12]}, the head the label was put on, by "
                              f"{sender}, who put it: review that commit, then label again")
    return "fork", head, f"a fork's pull request, head {head[:12]} approved and labelled by {sender}"


def _write_access(sender: str, permission: dict) -> str | bool:
    """True when the labeller has write, maintain or admin access (GitHub's collaborator permission
    API: `permission` says write for maintain, read for triage); else why not."""
    if not sender:
        return "the labelling event names no sender"
    if (permission.get("user") or {}).get("login") != sender:
        return f"no collaborator permission of {sender}, who put the label"
    role = permission.get("role_name") or permission.get("permission") or "no"
    if permission.get("permission") not in WRITE_ACCESS:
        return f"{sender} put the label with {role} access: it takes write, maintain or admin"
    return True


def _approved_by(login: str, reviews: list[dict], head: str) -> bool:
    """Whether `login`'s standing review is an approval of `head` (GitHub lists reviews oldest first; a
    comment leaves the standing review as it was, a dismissed approval reads DISMISSED)."""
    standing = [r for r in reviews if (r.get("user") or {}).get("login") == login and r.get("state") in STANDING]
    return bool(standing) and standing[-1]["state"] == "APPROVED" and standing[-1].get("commit_id") == head


def toolkit_legs(upgrade: str | None, head_versions: Path | None, versions: Path = VERSIONS) -> list[tuple[str, str]]:
    """[(leg, toolkit version)]: one leg normally; "old" (this checkout's default) and "new" for an
    upgrade, asked for by a manual run or by a pull request whose toolkit/versions.toml says another default."""
    current = _default_toolkit(versions)
    if upgrade and upgrade != current:
        if not VERSION.fullmatch(upgrade):
            bad_input(f"--toolkit-upgrade {upgrade!r} is not a toolkit version")
        return [("old", current), ("new", upgrade)]
    if head_versions is not None and head_versions.exists():
        new = _default_toolkit(head_versions)
        if new != current:
            return [("old", current), ("new", new)]
    return [("", current)]


def matrix(targets: list[dict], boards: list[dict], legs: list[tuple[str, str]], level: str) -> list[dict]:
    """One entry per target x board x leg; a fork's change gets no licensed target."""
    include = []
    for target in targets:
        if level == "fork" and target["licensed"]:
            continue
        for board in boards:
            for leg, toolkit in legs:
                include.append({**target, "board": board["name"], "profile": board["profile"],
                                "leg": leg, "toolkit": toolkit,
                                "key": "-".join(p for p in (target["name"], board["name"], leg) if p)})
    return include


def convert_legs(include: list[dict]) -> list[dict]:
    """The conversions a matrix needs: one per target and toolkit leg, whatever the number of boards."""
    seen = {}
    for entry in include:
        key = "-".join(p for p in (entry["name"], entry["leg"]) if p)
        seen.setdefault(key, {k: entry[k] for k in ("name", "model_dir", "precision", "converter", "licensed",
                                                    "leg", "toolkit")} | {"key": key})
    return list(seen.values())


def _json(path: Path | None, default):
    if path is None:
        return default
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _pages(path: Path | None) -> list[dict]:
    """A GitHub list read with `gh api --paginate --slurp` (a list of pages), as one list."""
    return [item for page in _json(path, []) for item in page]


def changed_paths(pr_files: Path | None, stdin) -> list[str]:
    """The change's paths: GitHub's file list of the pull request (a rename counts both names), else stdin."""
    if pr_files is None:
        return [line.strip() for line in stdin if line.strip()]
    files = _pages(pr_files)
    return [name for f in files for name in (f["filename"], f.get("previous_filename")) if name]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changed", nargs="*", default=None,
                        help="changed paths (default: read from stdin, one per line)")
    parser.add_argument("--event-name", default="workflow_dispatch", help="github.event_name")
    parser.add_argument("--event", type=Path, help="the event payload ($GITHUB_EVENT_PATH)")
    parser.add_argument("--repository", default="", help="github.repository (owner/name)")
    parser.add_argument("--reviews", type=Path,
                        help="the pull request's reviews (`gh api --paginate --slurp` of GitHub's list)")
    parser.add_argument("--sender-permission", type=Path,
                        help="the labeller's access (`gh api repos/R/collaborators/SENDER/permission`)")
    parser.add_argument("--pr-files", type=Path,
                        help="the pull request's changed files (`gh api --paginate --slurp` of GitHub's list)")
    parser.add_argument("--toolkit-upgrade", default="", help="a toolkit version to gate against the default")
    parser.add_argument("--head-versions", type=Path,
                        help="the change's toolkit/versions.toml (default: this checkout's)")
    parser.add_argument("--sha", default="", help="github.sha: the commit of a push or manual run")
    parser.add_argument("--github-output", action="store_true", help="also write to $GITHUB_OUTPUT")
    args = parser.parse_args(argv)
    level, sha, why = trust(args.event_name, _json(args.event, {}), args.repository, _pages(args.reviews),
                            _json(args.sender_permission, {}))
    changed = args.changed if args.changed is not None else changed_paths(args.pr_files, sys.stdin)
    legs = toolkit_legs(args.toolkit_upgrade or None, args.head_versions)
    include = [] if level == "none" else matrix(plan(changed, load_targets()), load_boards(), legs, level)
    text = json.dumps({"include": include})
    sha = sha or args.sha
    print(f"trust: {level} ({why}); toolkit legs: {legs}", file=sys.stderr)
    print(text)
    if args.github_output:
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as fh:
            fh.write(f"matrix={text}\nany={'true' if include else 'false'}\ntrust={level}\nsha={sha}\n"
                     f"upgrade={'true' if len(legs) > 1 else 'false'}\n"
                     f"convert_matrix={json.dumps({'include': convert_legs(include)})}\n"
                     f"upgrade_matrix={json.dumps({'include': [e for e in include if e['leg'] == 'new']})}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
