"""The shell commands a markdown file documents (the README, docs/board.md): its ```bash blocks, the
command lines in them, and a script run the way a reader would paste it, failing on its first
failing command and naming it."""
from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

__all__ = ["bash_blocks", "command_lines", "commands_of", "run_script", "FAILED"]

_BLOCK = re.compile(r"^```bash([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
# What run_script's ERR trap prints before the command that failed.
FAILED = "documented command failed:"


def bash_blocks(text: str) -> list[tuple[str, str]]:
    """(marker, script) of every ```bash block; the marker is what follows ```bash ("" for none)."""
    return [(marker.strip(), body) for marker, body in _BLOCK.findall(text)]


def command_lines(script: str) -> list[str]:
    """The script's commands, one a line: continuations joined, blank and comment-only lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", script)
    return [line.strip() for line in joined.splitlines() if shlex.split(line, comments=True)]


def commands_of(script: str, program: str) -> list[list[str]]:
    """The arguments of every line of the script that runs `program` (comments dropped)."""
    found = []
    for line in command_lines(script):
        argv = shlex.split(line, comments=True)
        if argv[0] == program:
            found.append(argv[1:])
    return found


def run_script(script: str, cwd: Path, env: dict, timeout: float = 1800) -> tuple[int, str]:
    """Run the script with bash -e -o pipefail: (exit status, the output's last lines). A failing
    command stops it and is named after FAILED."""
    wrapped = f"set -eo pipefail\ntrap 'echo \"{FAILED} $BASH_COMMAND\" >&2' ERR\n{script}"
    proc = subprocess.run(["bash", "-c", wrapped], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
