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
import subprocess
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
# A profile's name and login reach LAVA's shell as they are: letters, digits, '.', '_', '-' only.
_WORD = re.compile(r"[A-Za-z0-9._-]+")
# LAVA writes each parameter as KEY='value' into its run.sh: a quote ends it early, and the rest is shell
# text. Refused in every value: quotes and what a shell would act on were the quoting ever lost.
_NEVER = set("'`$\\;|<>")
_SPACED = {"GATE_OPTIONS"}      # pytest options: spaces and double quotes (-k "a or b") are its own syntax
_URLS = {"PARTITION_URL", "UPLOAD_URL"}     # '&' separates a URL's query arguments
# The overlay's transfer on a board that boots its own OS. LAVA types, in the login shell, `rm OVERLAY`,
# then DOWNLOAD_COMMAND URL, then UNPACK_COMMAND OVERLAY, and checks none of them: an overlay that is not
# unpacked left its test shell waiting for the tier's timeout (or ran a previous job's, downloaded into
# the same folder). The download goes into a new folder; the unpack checks the file first, and when it
# cannot unpack puts lava-test-raise's signal into the prompt: the first prompt of the test shell
# then ends the job Incomplete, in seconds (the overlay's own lava-test-raise is what is missing).
DOWNLOAD_COMMAND = ('anima_overlay() { if [ -s "$1" ] && gzip -t "$1" && tar -C / -xzf "$1"; then rm -f "$1"; '
                    'else PS1="<LAVA_SIGNAL_TESTRAISE overlay-not-unpacked:$1> $PS1"; fi; }; '
                    'anima_dir="$(mktemp -d)" && cd "$anima_dir" && curl -fsS --retry 3 -O')
UNPACK_COMMAND = "anima_overlay"
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
    if lava["login"] != "root":
        # LAVA unpacks its overlay at / as the login user and its test runner writes the results there: a
        # user cannot unpack it, and under sudo the runner cannot write, so no definition runs (docs/lab.md).
        raise ConfigError(f"{path} [lava]: login '{lava['login']}': LAVA's test shell needs root (a user "
                          "cannot unpack LAVA's overlay at / nor, unpacked by sudo, write its results)")
    absent = [tier for tier in TIERS if tier not in lava["timeout_minutes"]]
    if absent:
        raise ConfigError(f"{path} [lava] timeout_minutes: no '{absent[0]}'")
    return {**lava, "title": data.get("board", {}).get("name", path.stem)}


def load_board(name: str, boards_dir: Path = BOARDS_DIR) -> LabBoard:
    """The board profile boards/NAME.toml as a LAVA device."""
    if not _WORD.fullmatch(name):
        raise ConfigError(f"--board {name}: a profile's name is letters, digits, '.', '_' and '-' only "
                          "(it reaches LAVA's run.sh as BOARD_PROFILE)")
    path = boards_dir / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(b.name for b in lab_boards(boards_dir))
        raise ConfigError(f"--board {name}: no board profile {path} (LAVA boards: {known})")
    lava = _lava_table(path)
    profile = path.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT) else str(path)
    return LabBoard(name, profile, lava["title"], lava["device_type"], lava["boot"], lava["login"],
                    lava.get("login_prompt"), tuple(lava["prompts"]), dict(lava["timeout_minutes"]))


def _unsafe(key: str, value: str) -> str | None:
    """The first character of a job's value that LAVA's run.sh or a shell would act on, or None."""
    allowed_space = key in _SPACED
    for char in value:
        if char in _NEVER or (ord(char) < 32 and char != "\t") or ord(char) == 127:
            return char
        if (char == '"' or char.isspace()) and not allowed_space:
            return char
        if char == "&" and key not in _URLS:
            return char
    return None


def _check_values(parameters: dict) -> None:
    for key, value in parameters.items():
        char = _unsafe(key, value)
        if char is not None:
            raise ConfigError(f"--set {key}={value!r}: {char!r} is refused in a job's value (LAVA writes it "
                              f"into its run.sh as {key}='...')")


def commit_of(revision: str, board: LabBoard, root: Path = REPO_ROOT) -> str:
    """The full id of `revision` in this checkout, where the board's profile is committed as it is here."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=60)
    found = git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{revision}^{{commit}}")
    if revision.startswith("-") or found.returncode != 0:
        raise ConfigError(f"--suite-sha {revision}: not a commit of this checkout ({root}): fetch it first")
    sha = found.stdout.decode().strip()
    committed = git("show", f"{sha}:{board.profile}")
    if committed.returncode != 0:
        raise ConfigError(f"--board {board.name}: {board.profile} is not committed at {sha[:12]}: the job "
                          "would name a profile its checkout does not have")
    if committed.stdout != (root / board.profile).read_bytes():
        raise ConfigError(f"--board {board.name}: {board.profile} differs from its copy at {sha[:12]}: commit "
                          "it, or name the commit whose profile this job is for")
    return sha


def lab_boards(boards_dir: Path = BOARDS_DIR) -> list[LabBoard]:
    """Every board profile with a [lava] table."""
    return [load_board(p.stem, boards_dir) for p in sorted(boards_dir.glob("*.toml"))
            if "lava" in read_toml(p, "board profile")]


def definition_params(root: Path = REPO_ROOT) -> dict:
    """The test definition's parameters and their defaults (its `params`)."""
    from ruamel.yaml import YAML
    return dict(YAML(typ="safe").load((root / DEFINITION).read_text())["params"])


def _parameters(board: LabBoard, tier: str, values: dict, allow_placeholders: bool) -> dict:
    known = definition_params()
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(f"--set {unknown[0]}: not a parameter of {DEFINITION} (known: {', '.join(known)})")
    given = {k: str(v) for k, v in values.items()}
    left = [key for key in PLACEHOLDERS if key not in given or ".invalid/" in given[key]]
    if left and not allow_placeholders:
        raise ConfigError(f"--set {left[0]}: not given, and the job would name the placeholder "
                          f"{given.get(left[0], PLACEHOLDERS[left[0]])} (a host under .invalid never resolves; "
                          "--allow-placeholders writes a template the lab fills in)")
    parameters = {**PLACEHOLDERS, "BOARD_PROFILE": board.profile, "TIER": tier, **given}
    _check_values({**{k: str(v) for k, v in known.items() if v is not None}, **parameters})
    return parameters


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
             "transfer_overlay": {"download_command": DOWNLOAD_COMMAND, "unpack_command": UNPACK_COMMAND},
             "timeout": {"minutes": _SETUP_MINUTES["boot"]}})


def lava_job(board: LabBoard, tier: str, *, suite_sha: str | None = None, suite_repo: str = SUITE_REPO,
             values: dict | None = None, health_check: bool = False, allow_placeholders: bool = False) -> dict:
    """The LAVA job running `tier` of the suite at `suite_sha` (a commit of this checkout, where the
    board's profile is committed) on `board` (a health check: the smoke tier at the default branch)."""
    if tier not in TIERS:
        raise ConfigError(f"--tier {tier}: choose {', '.join(TIERS)}")
    if health_check and (tier != "smoke" or suite_sha):
        raise ConfigError("--health-check: the smoke tier of the default branch (no --suite-sha, --tier smoke)")
    if not health_check and suite_sha is None:
        raise ConfigError("--suite-sha: a job runs one reviewed commit (a health check runs the default branch)")
    if suite_sha is not None:
        suite_sha = commit_of(suite_sha, board)
    if _unsafe("suite_repo", suite_repo):
        raise ConfigError(f"--suite-repo {suite_repo!r}: {_unsafe('suite_repo', suite_repo)!r} is refused")
    minutes = int(board.timeout_minutes[tier])
    deploy, boot = _boot(board)
    definition = {"from": "git", "repository": suite_repo, "path": DEFINITION, "name": "anima-npu",
                  **({"revision": suite_sha} if suite_sha else {}),
                  "parameters": _parameters(board, tier, values or {}, allow_placeholders)}
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
