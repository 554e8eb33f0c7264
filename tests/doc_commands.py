"""The shell commands a markdown file documents (the README, docs/board.md): its ```bash blocks, the
command lines in them, and a script run the way a reader would paste it, failing on its first
failing command and naming it."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

__all__ = ["bash_blocks", "command_lines", "commands_of", "run_script", "FAILED", "syntax_problem",
           "simple_commands", "suite_wrappers"]

ROOT = Path(__file__).resolve().parents[1]

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


def syntax_problem(script: str) -> str | None:
    """bash's own parser on the script without running it (`bash -n`): its message, or None."""
    proc = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=60)
    return proc.stderr.strip() or None if proc.returncode else None


# Words after which the next word is a command again; `for NAME in WORDS` runs none of its words.
_COMMAND_AFTER = {"|", "||", "&&", ";", "&", "(", ")", "{", "}", "!", "do", "done", "then", "else", "elif", "if", "fi",
                  "while", "until", "time"}
_REDIRECTS = {">", ">>", "<", "<<", ">&", "<&", "&>", ">|"}
# Commands that run the command named by their arguments: sudo [-opts] CMD, env [VAR=...] CMD, ...
_WRAPPERS = {"sudo", "env", "nohup", "exec", "command", "xargs", "nice"}
_SUDO_VALUE_OPTIONS = {"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U"}
_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)|`([^`]*)`")


def _words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)


def _unwrapped(argv: list[str]) -> list[str]:
    """argv with wrappers (sudo -E, env VAR=x, ...) and leading assignments taken off: the command run."""
    while argv and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0]) or argv[0] in _WRAPPERS):
        wrapper, argv = argv[0], argv[1:]
        while argv and argv[0].startswith("-") and wrapper in _WRAPPERS:
            option, argv = argv[0], argv[1:]
            if wrapper == "sudo" and option in _SUDO_VALUE_OPTIONS and argv:
                argv = argv[1:]
    return argv


def simple_commands(script: str) -> list[list[str]]:
    """Every simple command of the script, as [command, arguments...] with wrappers (sudo, env) and
    assignments taken off, those in $(...) too; `for NAME in WORDS` contributes none of its words."""
    found = []
    for line in command_lines(script):
        for groups in _SUBSTITUTION.findall(line):
            found += simple_commands("".join(groups))
        current, skipping, redirect = [], False, False
        for word in _words(_SUBSTITUTION.sub("SUBSTITUTED", line)) + [";"]:
            if redirect:
                redirect = False
            elif word in _REDIRECTS:
                redirect = True
            elif word in _COMMAND_AFTER and not (current and word in ("time", "if", "while", "until", "!")):
                found += [_unwrapped(current)] if current and not skipping else []
                current, skipping = [], False
            elif word == "for" and not current:
                skipping = True
            else:
                current.append(word)
    return [argv for argv in found if argv]


def run_script(script: str, cwd: Path, env: dict, timeout: float = 1800) -> tuple[int, str]:
    """Run the script with bash -e -o pipefail: (exit status, the output's last lines). A failing
    command stops it and is named after FAILED."""
    wrapped = f"set -eo pipefail\ntrap 'echo \"{FAILED} $BASH_COMMAND\" >&2' ERR\n{script}"
    proc = subprocess.run(["bash", "-c", wrapped], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])


def suite_wrappers(tmp: Path) -> None:
    """tmp/bin/harness: the harness in the working folder; tmp/bin/test: the real bin/test, its
    artifacts and results store in the working folder."""
    (tmp / "bin").mkdir(parents=True, exist_ok=True)
    state = f"--artifacts={tmp}/artifacts --results=sqlite:///{tmp}/.benchmarks/results.sqlite -p no:cacheprovider"
    scripts = {"harness": f'exec "{sys.executable}" -m harness "$@"\n',
               "test": f'exec "{ROOT}/bin/test" {state} "$@"\n'}
    for name, body in scripts.items():
        path = tmp / "bin" / name
        path.write_text("#!/usr/bin/env bash\n" + body)
        path.chmod(0o755)
