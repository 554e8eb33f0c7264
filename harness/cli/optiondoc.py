"""docs/options.md's table, generated from the declaration (harness/cli/options.py) and the commands'
parsers: each suite option, its default, what it does, and the `bin/harness` commands that take it, or
"bin/test only" for an option of the suite alone (--require-npu is not a `generate` option)."""
from __future__ import annotations

import argparse

from .main import build_parser
from .options import SUITE_OPTIONS, flag_of

__all__ = ["options_table", "commands_taking"]


def commands_taking() -> dict[str, list[str]]:
    """{flag: the commands (`results import`, ...) that accept it}: whether `bin/harness X --flag` parses, which
    is what a user copying an option from the suite needs to know."""
    taking: dict[str, list[str]] = {}

    def walk(command: str, parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(f"{command} {name}".strip(), child)
            for flag in action.option_strings:
                if command not in taking.setdefault(flag, []):
                    taking[flag].append(command)
    walk("", build_parser())
    return taking


def options_table() -> str:
    """The suite's options as a markdown table (docs/options.md is this, checked by a test)."""
    taking = commands_taking()
    rows = ["| option | default | what it does | `bin/harness` commands |", "|---|---|---|---|"]
    for name, option in SUITE_OPTIONS.items():
        default = "off" if option.default is False else "-" if option.default is None else f"`{option.default}`"
        if name == "model_dir":
            default = "`models/embedded`"
        if name == "telemetry_root":
            default = "`/`"
        commands = ", ".join(taking.get(flag_of(name), [])) or "bin/test only"
        text = option.help.replace('|', '/')
        if option.renamed_from:     # the old spelling still works, with a line saying this one
            text += f" (was `{flag_of(option.renamed_from)}`, still taken, deprecated)"
        rows.append(f"| `{flag_of(name)}` | {default} | {text} | {commands} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":        # docs/options.md's table: python -m harness.cli.optiondoc
    print(options_table(), end="")
