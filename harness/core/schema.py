"""One way to read and check the suite's data files: model.toml, cases.toml, manifest.json, history.

A schema is a table {field name: Field(check, expect, required)}; `check_table` applies it and raises
the caller's error type with one line naming the file (and record) and the field:

    "<where>: missing field(s) ['seed']"
    "<where>: unknown field(s) ['sede']; allowed: [...]"
    "<where>: field 'steps' must be a positive whole number, got 0"

Why a small table-driven checker and not jsonschema: the files are TOML as well as JSON, several
checks are semantic (ISO time with an offset, a finite number, a file-safe name), and the messages
are the product: a board engineer reads them in a CI log. jsonschema's messages name neither the file
nor the field the way a person looks for them, and wrapping them would cost more than these lines.
"""
from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = ["Field", "check_table", "read_toml", "read_json", "is_int", "is_number", "positive_int",
           "non_empty_str", "one_of", "list_of"]


@dataclass(frozen=True)
class Field:
    check: Callable[[Any], bool]
    expect: str                 # what a good value is, in words: "a positive whole number"
    required: bool = True


def check_table(table, fields: dict[str, Field], where: str, error: type[Exception] = ConfigError,
                extra: bool = False) -> dict:
    """Check `table` against `fields`; return it. `extra=True` keeps unknown keys (forward-compatible
    records), otherwise an unknown key is an error (a misspelt option must not be ignored)."""
    if not isinstance(table, dict):
        raise error(f"{where}: expected a table/object, got {type(table).__name__}")
    missing = [k for k, f in fields.items() if f.required and k not in table]
    if missing:
        raise error(f"{where}: missing field(s) {missing}")
    unknown = sorted(set(table) - set(fields))
    if unknown and not extra:
        raise error(f"{where}: unknown field(s) {unknown}; allowed: {sorted(fields)}")
    for key, spec in fields.items():
        if key in table and not spec.check(table[key]):
            raise error(f"{where}: field '{key}' must be {spec.expect}, got {table[key]!r}")
    return table


def _read(path: str | Path, what: str, error: type[Exception], parse: Callable[[str], Any], kind: str,
          malformed: tuple[type[Exception], ...]):
    path = Path(path)
    unreadable: tuple[type[Exception], ...] = (*malformed, UnicodeDecodeError)
    try:
        return parse(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, expected a {what}") from None
    except unreadable as exc:
        raise error(f"{path}: not valid {kind} ({exc})") from None


def read_toml(path: str | Path, what: str = "file", error: type[Exception] = ConfigError) -> dict:
    """Parse a TOML file; a missing or malformed file is one error line naming it."""
    return _read(path, what, error, tomllib.loads, "TOML", (tomllib.TOMLDecodeError,))


def read_json(path: str | Path, what: str = "file", error: type[Exception] = ConfigError):
    """Parse a JSON file; a missing, unreadable or malformed file is one error line naming it."""
    return _read(path, what, error, json.loads, "JSON", (json.JSONDecodeError,))


# -- predicates ------------------------------------------------------------------------------------
def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def positive_int(v) -> bool:
    return is_int(v) and v > 0


def non_empty_str(v) -> bool:
    return isinstance(v, str) and bool(v)


def one_of(*choices) -> Callable[[Any], bool]:
    # Same type too: TOML's `true` must not pass for 1, nor 1 for 1.0's choice.
    return lambda v: any(type(v) is type(c) and v == c for c in choices)


def list_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(check(x) for x in v)


