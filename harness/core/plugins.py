"""What installed distributions add to the suite through entry points: backends (`anima.backends`),
gates (`anima.gates`) and commands (`anima.commands`), docs/extending.md.

The suite is not installed, so its own backends and commands are tables and another project's
arrive as pytest plugins do: a distribution installed in the suite's environment names an object
under the group. A registration that would shadow the suite's own name or another distribution's is
refused, not ignored: the run that reads the group stops with its one line, which names the
distribution. importlib.metadata is imported here, lazily, and only when a distribution names the group.
"""
from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field

from .errors import ConfigError

__all__ = ["Registered", "installed", "load"]

_OBJECT_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
_MODULE_REF = re.compile(r"[A-Za-z_][\w.]*(:[A-Za-z_]\w*)?")


@dataclass
class Registered:
    """One group's registrations: name -> "module[:object]", name -> distribution, refused lines."""
    group: str
    found: dict[str, str] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)

    def where(self, name: str) -> str:
        return f"{self.origin[name]}: {self.group} entry point '{name}' ({self.found[name]})"


def _mentioned(group: str) -> bool:
    """Whether any distribution's entry_points.txt on the path names `group`: where none does (the
    usual case), importlib.metadata is not imported (20 ms of `bin/harness --help`'s 126 ms, measured
    with farm-bench). Only the metadata folders importlib.metadata's path finder reads are looked at."""
    from pathlib import Path
    for entry in sys.path:
        for text in Path(entry or ".").glob("*.*-info/entry_points.txt"):
            try:
                if f"[{group}]" in text.read_text(encoding="utf-8"):
                    return True
            except OSError:
                continue
    return False


def installed(group: str, kind: str, own: Iterable[str] = (), module_ok: bool = False) -> Registered:
    """The `group` entry points of the installed distributions; `own` are the suite's names of that
    `kind`, which no distribution may take. The value is module:object, or a module where `module_ok`."""
    own, shape = set(own), ("module or module:object" if module_ok else "module:object")
    done = Registered(group)
    if not _mentioned(group):
        return done
    from importlib.metadata import entry_points
    for point in entry_points(group=group):
        dist = point.dist.name if point.dist else "a distribution"
        where = f"{dist}: {group} entry point '{point.name}'"
        if point.name in own:
            done.refused.append(f"{where}: '{point.name}' is the suite's own {kind} (choose another name)")
        elif point.name in done.found:
            done.refused.append(f"{where}: '{point.name}' is also registered by {done.origin[point.name]}")
        elif not (_MODULE_REF if module_ok else _OBJECT_REF).fullmatch(point.value):
            done.refused.append(f"{where}: '{point.value}' is not {shape}")
        else:
            done.found[point.name], done.origin[point.name] = point.value, dist
    return done


def load(registered: Registered, name: str) -> object:
    """The object (or module) entry point `name` names, imported: one ConfigError naming the
    distribution when it cannot be."""
    module_name, _, attribute = registered.found[name].partition(":")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attribute) if attribute else module
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{registered.where(name)}: cannot be imported: {exc}") from exc
