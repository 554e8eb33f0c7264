"""LAVA jobs for any board profile: the profile's [lava] table says the device type, how LAVA reaches
the board (boot `minimal` on the serial console of a board that boots its own OS, or `ssh`), the login
and the prompts; the tier picks the session's split (smoke, pr, nightly). Every job runs the one test
definition, lava/definitions/anima-npu.yaml, fetched by LAVA from the suite's repository at the
reviewed commit; its parameters are the definition's own `params` keys.

A health check (LAVA runs it on each device of a type before jobs and after failures) is the smoke tier
at the repository's default branch: no revision, since it checks the board, not a change.
"""
from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ConfigError
from ..core.schema import read_toml
from ..model.config import REPO_ROOT

__all__ = ["BOARDS_DIR", "DEFINITION", "TIERS", "LabBoard", "load_board", "lab_boards", "definition_params",
           "lava_job", "job_yaml"]

BOARDS_DIR = REPO_ROOT / "boards"
DEFINITION = "lava/definitions/anima-npu.yaml"
TIERS = ("smoke", "pr", "nightly")
SUITE_REPO = "https://github.com/anima-npu/anima-npu.git"
# What a job names until the lab fills it in (--set): the store's host is not a real one.
PLACEHOLDERS = {
    "PARTITION_URL": "http://lab-store.lab.invalid/anima/partitions/MANIFEST_SHA256.tar",
    "PARTITION_MANIFEST_SHA256": "MANIFEST_SHA256",
    "UPLOAD_URL": "http://lab-store.lab.invalid/anima/results/JOB/artifacts.tar.gz",
}
_BOOTS = ("minimal", "ssh")
_SHA = re.compile(r"[0-9a-f]{40}")
# Deploying the overlay and booting (a power cycle, the login) beside the test's own timeout.
_SETUP_MINUTES = {"deploy": 5, "boot": 10}


@dataclass(frozen=True)
class LabBoard:
    """One board profile as a LAVA device."""
    name: str                   # the profile's file stem: rock5c-8gb
    profile: str                # the profile's path in the checkout: boards/rock5c-8gb.toml
    title: str                  # its [board] name, or the stem
    device_type: str
    boot: str                   # minimal or ssh
    login: str
    login_prompt: str | None
    prompts: tuple[str, ...]
    timeout_minutes: dict


def _lava_table(path: Path) -> dict:
    data = read_toml(path, "board profile")
    lava = data.get("lava")
    if not isinstance(lava, dict):
        raise ConfigError(f"{path}: no [lava] table (device_type, boot, login, prompts, timeout_minutes)")
    missing = [key for key in ("device_type", "boot", "login", "prompts", "timeout_minutes") if key not in lava]
    if missing:
        raise ConfigError(f"{path} [lava]: '{missing[0]}' is missing")
    if lava["boot"] not in _BOOTS:
        raise ConfigError(f"{path} [lava]: boot '{lava['boot']}': choose {' or '.join(_BOOTS)}")
    if lava["boot"] == "minimal" and "login_prompt" not in lava:
        raise ConfigError(f"{path} [lava]: 'login_prompt' is missing (boot minimal logs in on the serial console)")
    absent = [tier for tier in TIERS if tier not in lava["timeout_minutes"]]
    if absent:
        raise ConfigError(f"{path} [lava] timeout_minutes: no '{absent[0]}'")
    return {**lava, "title": data.get("board", {}).get("name", path.stem)}


def load_board(name: str, boards_dir: Path = BOARDS_DIR) -> LabBoard:
    """The board profile boards/NAME.toml as a LAVA device."""
    path = boards_dir / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(b.name for b in lab_boards(boards_dir))
        raise ConfigError(f"--board {name}: no board profile {path} (LAVA boards: {known})")
    lava = _lava_table(path)
    profile = path.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT) else str(path)
    return LabBoard(name, profile, lava["title"], lava["device_type"], lava["boot"], lava["login"],
                    lava.get("login_prompt"), tuple(lava["prompts"]), dict(lava["timeout_minutes"]))


def lab_boards(boards_dir: Path = BOARDS_DIR) -> list[LabBoard]:
    """Every board profile with a [lava] table."""
    return [load_board(p.stem, boards_dir) for p in sorted(boards_dir.glob("*.toml"))
            if "lava" in read_toml(p, "board profile")]


def definition_params(root: Path = REPO_ROOT) -> dict:
    """The test definition's parameters and their defaults (its `params`)."""
    from ruamel.yaml import YAML
    return dict(YAML(typ="safe").load((root / DEFINITION).read_text())["params"])


def _parameters(board: LabBoard, tier: str, values: dict) -> dict:
    known = definition_params()
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(f"--set {unknown[0]}: not a parameter of {DEFINITION} (known: {', '.join(known)})")
    quoted = [key for key, value in values.items() if "'" in str(value)]
    if quoted:      # LAVA writes each parameter as KEY='value' into its run.sh
        raise ConfigError(f"--set {quoted[0]}: a value with a single quote breaks LAVA's run.sh")
    return {**PLACEHOLDERS, "BOARD_PROFILE": board.profile, "TIER": tier, **{k: str(v) for k, v in values.items()}}


def _boot(board: LabBoard) -> tuple[dict, dict]:
    """The deploy and boot actions that reach the board's shell."""
    if board.boot == "ssh":
        return ({"to": "ssh", "os": "debian", "timeout": {"minutes": _SETUP_MINUTES["deploy"]}},
                {"method": "ssh", "connection": "ssh", "prompts": list(board.prompts),
                 "timeout": {"minutes": _SETUP_MINUTES["boot"]}})
    return ({"to": "overlay", "timeout": {"minutes": _SETUP_MINUTES["deploy"]}},
            {"method": "minimal", "reset": True,
             "auto_login": {"login_prompt": board.login_prompt, "username": board.login},
             "prompts": list(board.prompts),
             # LAVA's helpers (lava-test-case, lava-test-set) reach the board's own OS this way: the
             # board fetches the overlay from the dispatcher and unpacks it at / as the login user.
             "transfer_overlay": {"download_command": "cd /tmp && curl -fsS --retry 3 -O",
                                  "unpack_command": "tar -C / -xzf"},
             "timeout": {"minutes": _SETUP_MINUTES["boot"]}})


def lava_job(board: LabBoard, tier: str, *, suite_sha: str | None = None, suite_repo: str = SUITE_REPO,
             values: dict | None = None, health_check: bool = False) -> dict:
    """The LAVA job running `tier` of the suite at `suite_sha` on `board` (a health check: the smoke
    tier at the default branch)."""
    if tier not in TIERS:
        raise ConfigError(f"--tier {tier}: choose {', '.join(TIERS)}")
    if health_check and (tier != "smoke" or suite_sha):
        raise ConfigError("--health-check: the smoke tier of the default branch (no --suite-sha, --tier smoke)")
    if suite_sha is not None and not _SHA.fullmatch(suite_sha):
        raise ConfigError(f"--suite-sha {suite_sha}: the reviewed commit's full id (40 hex digits)")
    if not health_check and suite_sha is None:
        raise ConfigError("--suite-sha: a job runs one reviewed commit (a health check runs the default branch)")
    minutes = int(board.timeout_minutes[tier])
    deploy, boot = _boot(board)
    definition = {"from": "git", "repository": suite_repo, "path": DEFINITION, "name": "anima-npu",
                  **({"revision": suite_sha} if suite_sha else {}),
                  "parameters": _parameters(board, tier, values or {})}
    what = "health check" if health_check else f"{tier} tier"
    return {
        "device_type": board.device_type,
        "job_name": f"anima npu {what} on {board.title} ({board.profile})",
        "priority": "medium",
        "visibility": "personal",
        "timeouts": {"job": {"minutes": minutes + sum(_SETUP_MINUTES.values())}, "action": {"minutes": minutes},
                     "connection": {"minutes": 5}},
        "actions": [{"deploy": deploy}, {"boot": boot},
                    {"test": {"timeout": {"minutes": minutes}, "definitions": [definition]}}],
    }


def job_yaml(job: dict, command: str) -> str:
    """The job as YAML, headed by the command that wrote it."""
    from ruamel.yaml import YAML
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096        # one line per value: a URL is not folded
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]  # ruamel declares it None-typed
    out = io.StringIO()
    yaml.dump(job, out)
    return f"# Written by `{command}` (harness/lab/jobs.py); docs/lab.md says how to submit it.\n" + out.getvalue()
