"""How `bin/harness` talks to its user: one-line usage errors with the closest match (difflib), the
command listing read from the modules' source, an example per command from the README, and path
options read from where the user stands."""
from __future__ import annotations

import argparse
import ast
import difflib
import os
import re
from pathlib import Path

__all__ = ["PROG", "Parser", "caller_cwd", "closest", "examples_of", "summaries", "user_path", "user_paths",
           "actions", "CALLER_CWD", "sqlite_under",
           "NamedStore", "missing_store_folder"]

PROG = "bin/harness"
# Where the user stood: bin/_bootstrap.sh exports it before it changes into the checkout. Read once
# and taken out of the environment, so that the processes a command starts (and the tests' own)
# resolve their paths from their own working directory.
CALLER_CWD = "ANIMA_CWD"
_README = Path(__file__).resolve().parents[2] / "README.md"
_caller: list[Path] = []


def caller_cwd() -> Path:
    """The folder the user ran the command from (ANIMA_CWD, else this process's working directory)."""
    if not _caller:
        _caller.append(Path(os.environ.pop(CALLER_CWD, "") or os.getcwd()))
    return _caller[0]


def user_path(text: str, base: Path | None = None) -> Path:
    """An argparse type: a path as the user wrote it, made absolute from where the user stands (`base`)."""
    path = Path(text).expanduser()
    return path if path.is_absolute() else (base or caller_cwd()) / path


def sqlite_under(url: str, base: Path) -> str:
    """A results store URL with a relative SQLite file made absolute under `base`."""
    head, _, rest = url.partition(":///")
    if not head.startswith("sqlite") or not rest or rest.startswith("/") or rest == ":memory:":
        return url
    return f"{head}:///{base / rest}"


class _CheckoutStore(str):
    """The default store's URL: its folder in the checkout is made on first use."""


class NamedStore(str):
    """A store URL the user named (main() refuses one whose SQLite folder does not exist)."""


def _user_url(text: str) -> str:
    """An argparse type: a results store URL, its relative SQLite file read from where the user stands."""
    return str(text) if isinstance(text, _CheckoutStore) else NamedStore(sqlite_under(text, caller_cwd()))


def missing_store_folder(url: str) -> Path | None:
    """The folder a store the user named would be made in, when it does not exist: a mistyped path must not
    become a new, empty store while the command exits 0 (`results import`)."""
    head, sep, rest = url.partition(":///")
    if not isinstance(url, NamedStore) or not sep or not head.startswith("sqlite") or rest == ":memory:":
        return None
    folder = Path(rest).parent
    return None if folder.is_dir() else folder


def actions(parser: argparse.ArgumentParser):
    """Every action of a parser and of the subparsers under it."""
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from actions(child)


def user_paths(parser: argparse.ArgumentParser) -> None:
    """Every path option (type Path) and results URL of the parser reads from where the user stands;
    a default stays where the checkout puts it (bin/harness runs in the checkout), made absolute so that
    messages name it whole."""
    for action in actions(parser):
        if action.type is Path:
            action.type = user_path
            if isinstance(action.default, (str, Path)):
                action.default = Path.cwd() / action.default
        elif action.dest == "results" and isinstance(action.default, str):
            action.default = _CheckoutStore(sqlite_under(action.default, Path.cwd()))
            action.type = _user_url


def closest(word: str, known) -> str:
    """' (did you mean X?)' for the closest of `known`, or ''."""
    match = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: no usage block above the line, the closest option, command or
    choice named, and an option of the suite's (bin/test's) said to be bin/test's."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}{self._hint(message)}\n")

    def _hint(self, message: str) -> str:
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            return closest(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))
        unknown = re.match(r"unrecognized arguments: (\S+)", message)
        if unknown:
            return self._unknown_option(unknown.group(1).split("=")[0])
        return ""

    def _unknown_option(self, word: str) -> str:
        from .options import RENAMED, SUITE_OPTIONS, flag_of
        if word in {flag_of(name) for name in (*SUITE_OPTIONS, *RENAMED)}:
            return f" ({word} is an option of the suite's, bin/test {word}: docs/options.md)"
        known = {flag for action in actions(self) for flag in action.option_strings}
        return closest(word, known) or f" ({self.prog} COMMAND --help lists its options)"


def summaries(package: str, commands: dict) -> dict[str, str]:
    """{command: its one-line help} read from each module's add_parser(...) calls, in table order."""
    found: dict[str, str] = {}
    folder = Path(__file__).parent
    for module, names in commands.items():
        tree = ast.parse((folder / f"{module}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_parser" and node.args:
                name = node.args[0]
                if isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value in names:
                    help_text = next((k.value for k in node.keywords if k.arg == "help"), None)
                    found[name.value] = ast.literal_eval(help_text) if help_text is not None else ""
    return {name: found.get(name, "") for names in commands.values() for name in names}


def examples_of(commands: list[str]) -> dict[str, str]:
    """{command: 'examples:' and the README's lines running it}: the README's commands are run by a
    test (tests/unit/test_readme.py), so an example here is one that works."""
    try:
        text = _README.read_text(encoding="utf-8")
    except OSError:
        return {}
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) > 1 and words[0] == PROG and words[1] in commands:
            found.setdefault(words[1], []).append("  " + re.sub(r"\s{3,}#", "   #", line))
    return {command: "example:\n" + "\n".join(lines) for command, lines in found.items()}
