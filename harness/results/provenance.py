"""Where a run comes from: run id, git revision and the versions that decide whether two runs compare.

CI sets GITHUB_RUN_ID / GITHUB_SHA (GitHub Actions) or LAVA_JOB_ID; a run by hand gets a time-based id
and the checkout's `git rev-parse HEAD`. Nothing here fails a run: an unknown value reads as None.
"""
from __future__ import annotations

import os
import subprocess
import uuid
from datetime import UTC, datetime
from functools import lru_cache

from ..model.config import REPO_ROOT

__all__ = ["run_id", "git_revision", "ci_url", "comparable_versions", "VERSION_FIELDS"]

# Identity fields whose change makes two timings different experiments (a new NPU driver or runtime
# can move the step time on its own). The kernel is reported, but it changes with every security
# update while the NPU stack stays put, so it is not part of the comparison key.
VERSION_FIELDS = ("npu_driver", "runtime_lib", "toolkit_lite", "onnxruntime")


@lru_cache(maxsize=1)
def run_id() -> str:
    """One id per process, or per test session (the pytest plugin starts each with a new one): CI's run id
    (with the attempt), else UTC time plus a random suffix."""
    if os.environ.get("GITHUB_RUN_ID"):
        return f"gh-{os.environ['GITHUB_RUN_ID']}-{os.environ.get('GITHUB_RUN_ATTEMPT', '1')}"
    if os.environ.get("LAVA_JOB_ID"):
        return f"lava-{os.environ['LAVA_JOB_ID']}"
    return datetime.now(UTC).strftime("local-%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:6]


@lru_cache(maxsize=1)
def git_revision() -> str | None:
    """The commit under test: CI's GITHUB_SHA, else HEAD of the checkout (with '+dirty' if modified)."""
    if os.environ.get("GITHUB_SHA"):
        return os.environ["GITHUB_SHA"]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def ci_url() -> str | None:
    """The CI job's page (GitHub Actions' run, a LAVA job when LAVA_JOB_URL is set), or None by hand."""
    if os.environ.get("GITHUB_RUN_ID") and os.environ.get("GITHUB_REPOSITORY"):
        server = os.environ.get("GITHUB_SERVER_URL", "https://github.com")
        return f"{server}/{os.environ['GITHUB_REPOSITORY']}/actions/runs/{os.environ['GITHUB_RUN_ID']}"
    return os.environ.get("LAVA_JOB_URL") or None


def comparable_versions(identity: dict) -> dict:
    """The version fields of a board identity that belong in a baseline key and a history record."""
    return {name: identity.get(name) for name in VERSION_FIELDS}
