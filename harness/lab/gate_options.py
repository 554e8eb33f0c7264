"""A LAVA job's GATE_OPTIONS beside the tier's marker expression: pytest takes the last `-m` it is given,
so a `-m` in GATE_OPTIONS would replace the tier's (`npu and not smoke`) and run other tests than the
tier's. It is combined with the tier's instead, with "and", and the session says so.

Prints the marker expression on the first line, then the other options one a line, for
lava/board-session (split as a shell would, quotes kept). Standard library only: the board's system
Python runs it before the suite's venv exists.

    python3 -m harness.lab.gate_options "npu and not smoke" '--backend=faults -m numerics'
"""
from __future__ import annotations

import shlex
import sys

__all__ = ["combine", "main"]


def _marker(options: list[str], i: int) -> tuple[str | None, int]:
    """(the marker expression option i gives, how many words it takes), or (None, 1)."""
    word = options[i]
    if word in ("-m", "--markexpr"):
        if i + 1 == len(options):
            raise ValueError(f"GATE_OPTIONS: {word} without an expression")
        return options[i + 1], 2
    if word.startswith("--markexpr="):
        return word.split("=", 1)[1], 1
    if word.startswith("-m") and not word.startswith("--"):
        return word[2:], 1
    return None, 1


def combine(marks: str, text: str) -> tuple[str, list[str]]:
    """(the tier's expression and every -m of GATE_OPTIONS joined by "and", the other options)."""
    options = shlex.split(text)
    rest, extra, i = [], [], 0
    while i < len(options):
        expression, taken = _marker(options, i)
        if expression is None:
            rest.append(options[i])
        else:
            extra.append(expression)
        i += taken
    combined = " and ".join(f"({e})" for e in [marks, *extra]) if extra else marks
    return combined, rest


def main(argv: list[str] | None = None) -> int:
    marks, text = sys.argv[1:] if argv is None else argv
    try:
        combined, rest = combine(marks, text)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if combined != marks:
        print(f"board-session: GATE_OPTIONS' -m combined with the tier's: -m '{combined}'", file=sys.stderr)
    print("\n".join([combined, *rest]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
