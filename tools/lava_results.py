"""The JUnit XML of a board run as LAVA results: one `lava-test-set` per gate (the test module:
test_quality -> quality), one `lava-test-case` per test with its duration as the measurement (seconds),
and one more case per numeric property the test recorded (SSIM, PSNR, the baseline delta).

Prints the shell commands, one a line, for the LAVA test shell to run (`... | sh`): the helpers
lava-test-set / lava-test-case exist only there. Standard library only: it runs under the board's
system Python before and whether or not the suite's venv works.

    python3 tools/lava_results.py artifacts/junit.xml | sh
"""
from __future__ import annotations

import argparse
import re
import shlex
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

__all__ = ["lava_commands", "main"]

_NAME = re.compile(r"[^-_a-zA-Z0-9.]+")     # LAVA's test name pattern: ^[-_a-zA-Z0-9.]+$
_UNITS = {"ssim": "ssim", "psnr": "dB", "cosine": "cosine", "baseline_delta_pct": "%"}


def _name(text: str) -> str:
    return _NAME.sub("_", text).strip("_") or "unnamed"


def _gate(classname: str) -> str:
    module = classname.rsplit(".", 1)[-1]
    return _name(module.removeprefix("test_"))


def _result(case: ET.Element) -> str:
    if case.find("failure") is not None or case.find("error") is not None:
        return "fail"
    return "skip" if case.find("skipped") is not None else "pass"


def _case(name: str, result: str, measurement=None, units: str | None = None) -> str:
    args = ["lava-test-case", name, "--result", result]
    if measurement is not None:
        args += ["--measurement", f"{measurement:g}", "--units", units or "value"]
    return shlex.join(args)


def _numeric(text: str | None):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def lava_commands(junit: Path) -> list[str]:
    """The lava-test-set/lava-test-case commands for every test case of one JUnit file."""
    by_gate: dict[str, list[ET.Element]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        by_gate.setdefault(_gate(case.get("classname", "")), []).append(case)
    commands = []
    for gate, cases in by_gate.items():
        commands.append(shlex.join(["lava-test-set", "start", gate]))
        for case in cases:
            name = _name(case.get("name", ""))
            commands.append(_case(name, _result(case), _numeric(case.get("time")), "seconds"))
            for prop in case.iter("property"):
                value = _numeric(prop.get("value"))
                if value is not None:
                    key = prop.get("name", "")
                    commands.append(_case(f"{name}.{_name(key)}", "pass", value, _UNITS.get(key)))
        commands.append(shlex.join(["lava-test-set", "stop", gate]))
    return commands


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", type=Path, help="the JUnit XML the run wrote (--artifacts/junit.xml)")
    args = parser.parse_args(argv)
    try:
        commands = lava_commands(args.junit)
    except (OSError, ET.ParseError) as exc:
        # The run wrote no readable JUnit: that itself is the result LAVA must show.
        print(f"lava_results: {args.junit}: {exc}", file=sys.stderr)
        print(_case("junit", "fail"))
        return 1
    print("\n".join(commands))
    return 0


if __name__ == "__main__":
    sys.exit(main())
