"""Which partitions a change needs on the board: `python tools/ci_plan.py --changed FILE...`.

Reads .ci/targets.toml; a target is planned when any changed path matches one of its `paths` (fnmatch,
where '*' crosses '/'). Prints the GitHub Actions matrix as JSON ({"include": [...]}); with
--github-output it also writes `matrix=...` and `any=true|false` to $GITHUB_OUTPUT.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import tomllib
from pathlib import Path

__all__ = ["load_targets", "plan", "main"]

TARGETS = Path(__file__).resolve().parents[1] / ".ci" / "targets.toml"
# Where a target's x86 conversion runs (runs-on labels).
CONVERTERS = {"x86": ["ubuntu-24.04"], "anima-converter": ["self-hosted", "linux", "X64", "anima-converter"]}


def load_targets(path: Path = TARGETS) -> list[dict]:
    with open(path, "rb") as fh:
        targets = tomllib.load(fh)["target"]
    for t in targets:
        if t["convert_on"] not in CONVERTERS:
            raise SystemExit(f"{path}: target {t['name']}: convert_on '{t['convert_on']}' is not one of "
                             f"{sorted(CONVERTERS)}")
    return targets


def plan(changed: list[str], targets: list[dict]) -> list[dict]:
    chosen = []
    for t in targets:
        if any(fnmatch.fnmatch(path, pattern) for path in changed for pattern in t["paths"]):
            chosen.append({"name": t["name"], "model_dir": t["model_dir"], "golden_dir": t["golden_dir"],
                           "precision": t["precision"], "converter": CONVERTERS[t["convert_on"]]})
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changed", nargs="*", default=None,
                        help="changed paths (default: read from stdin, one per line)")
    parser.add_argument("--github-output", action="store_true", help="also write to $GITHUB_OUTPUT")
    args = parser.parse_args(argv)
    changed = args.changed if args.changed is not None else [l.strip() for l in sys.stdin if l.strip()]
    include = plan(changed, load_targets())
    matrix = json.dumps({"include": include})
    print(matrix)
    if args.github_output:
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as fh:
            fh.write(f"matrix={matrix}\nany={'true' if include else 'false'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
