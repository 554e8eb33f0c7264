"""The board's directories, made once at bring-up (`bin/harness lab setup-board`, docs/lab.md):
/var/lib/anima-ci and the folders the sessions write, owned by the board's CI user (the GitHub runner's
user, or root on a LAVA device, which LAVA logs in as). Nothing else makes them: a session that finds
them missing stops and names this command. Idempotent: an existing folder is given to the user again."""
from __future__ import annotations

import os
import pwd
from pathlib import Path

from ..core.errors import ConfigError

__all__ = ["WORK_ROOT", "SUBFOLDERS", "setup_board"]

WORK_ROOT = Path("var/lib/anima-ci")        # under --root: / on the board, a throw-away folder in the tests
# What the sessions write under it, besides the results store (results.sqlite, made by its first run):
SUBFOLDERS = {
    "venvs": "one venv per pyproject.toml (.ci/board-run, lava/board-session)",
    "partitions": "the partition cache, one folder per manifest sha256 (.ci/fetch-partition)",
    "lava": "each LAVA session's run folder until its artifacts are uploaded (lava/board-session)",
}


def _account(user: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(user)
    except KeyError:
        raise ConfigError(f"--user {user}: no such user on this machine (create the CI user first, docs/lab.md)") \
            from None


def setup_board(root: Path, user: str) -> list[Path]:
    """Make ROOT/var/lib/anima-ci and its subfolders, owned by `user`, mode 0755; the folders."""
    account = _account(user)
    if os.geteuid() != 0 and account.pw_uid != os.geteuid():
        raise ConfigError(f"--user {user}: giving the folders to another user needs root (run it with sudo)")
    base = root / WORK_ROOT
    folders = [base, *(base / name for name in SUBFOLDERS)]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            os.chown(folder, account.pw_uid, account.pw_gid)
        folder.chmod(0o755)
    return folders
