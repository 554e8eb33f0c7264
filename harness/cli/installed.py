"""Commands that installed distributions add under the `anima.commands` entry-point group
(docs/extending.md): the entry point names a module with `add_command(subparsers)`, or that function
itself, which adds the one subcommand named as the entry point and sets its `func`, as the suite's own
command modules do. main() reads the group only for a command that is not the suite's own, and for
the listing, so a built-in command starts as fast as before.
"""
from __future__ import annotations

import functools

from ..core import plugins
from ..core.errors import ConfigError

__all__ = ["ENTRY_POINT_GROUP", "commands", "add_installed"]

ENTRY_POINT_GROUP = "anima.commands"


@functools.cache
def commands(own: tuple[str, ...]) -> plugins.Registered:
    """The installed commands; `own` are the suite's, which none may take."""
    return plugins.installed(ENTRY_POINT_GROUP, "command", own, module_ok=True)


def add_installed(sub, name: str, own: tuple[str, ...]) -> None:
    """Add the installed command `name` to the subparsers `sub`: a refused registration, an import
    failure or an entry point that does not add exactly that command is one ConfigError."""
    registered = commands(own)
    if registered.refused:
        raise ConfigError(registered.refused[0])
    target = plugins.load(registered, name)
    add = getattr(target, "add_command", target)
    if not callable(add):
        raise ConfigError(f"{registered.where(name)}: has no add_command(subparsers)")
    add(sub)
    if list(sub.choices) != [name] or sub.choices[name].get_default("func") is None:
        raise ConfigError(f"{registered.where(name)}: must add the one command '{name}' and set its func "
                          f"(it added {', '.join(sub.choices) or 'none'})")
