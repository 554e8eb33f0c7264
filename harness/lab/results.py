"""One pytest run's artifacts as LAVA results: one `lava-test-set` per gate (the test module:
test_quality -> quality), one `lava-test-case` per test with its duration as the measurement (s) and its
result (pass, fail: its gate judged and failed, unknown: a JUnit error, nothing judged, skip), and
after a test the figures it recorded, each a case with its units and the test's own result:
- JUnit properties: SSIM, PSNR (dB), the baseline delta (%);
- the benchmark JSON (pytest-benchmark's extra_info): the mean step time (s), the core time per branch
  per step (s), and each judged figure's shift against its reference (%, failed when it regressed).

Prints the shell commands, one a line, for the LAVA test shell to run (`... | sh`): the helpers exist
only there. Standard library only, run by the board's system Python with the checkout on the path, so
it reports whether or not the suite's venv works:

    python3 -m harness.lab.results ARTIFACTS_DIR | sh
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

__all__ = ["case_key", "lava_commands", "main"]

_NAME = re.compile(r"[^-_a-zA-Z0-9.]+")     # LAVA's test name pattern: ^[-_a-zA-Z0-9.]+$
_UNITS = {"ssim": "SSIM", "psnr": "dB", "cosine": "cosine", "baseline_delta_pct": "%"}


def _name(text: str) -> str:
    return _NAME.sub("_", text).strip("_") or "unnamed"


def _gate(classname: str) -> str:
    module = classname.rsplit(".", 1)[-1]
    return _name(module.removeprefix("test_"))


def case_key(case: ET.Element) -> tuple[str, str]:
    """(test set, test case) LAVA reports a JUnit test case under."""
    return _gate(case.get("classname", "")), _name(case.get("name", ""))


def _result(case: ET.Element) -> str:
    # A JUnit error is a test whose run failed before its gate judged (a driver error, a hung NPU call, a
    # partition that does not open: docs/gates.md): LAVA's "unknown", so a lab's query for failed gates
    # finds judged failures only, and one for unknown results finds the boards to look at.
    if case.find("failure") is not None:
        return "fail"
    if case.find("error") is not None:
        return "unknown"
    return "skip" if case.find("skipped") is not None else "pass"


def _case(name: str, result: str, measurement=None, units: str | None = None) -> str:
    args = ["lava-test-case", name, "--result", result]
    if measurement is not None:
        args += ["--measurement", f"{measurement:.10g}", "--units", units or "value"]
    return shlex.join(args)


def _numeric(text) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if value == value and abs(value) != float("inf") else None      # LAVA takes finite numbers


def _node_id(case: ET.Element) -> str:
    """pytest's node id of a JUnit test case (tests.acceptance.test_x + name -> tests/acceptance/test_x.py::name)."""
    return case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")


def _benchmark_figures(extra: dict) -> list[tuple[str, float, str, bool]]:
    """(figure, value, units, regressed) of one benchmark's extra_info."""
    figures = [("step", extra.get("mean_step_s"), "s", False)]
    figures += [(f"{branch}_core", seconds, "s", False) for branch, seconds in extra.get("core_s_per_step", {}).items()]
    for verdict in (extra.get("verdict") or {}).get("verdicts", []):
        figures.append((f"shift.{verdict['label']}", verdict.get("shift_pct"), "%", bool(verdict.get("regression"))))
    return [(name, number, units, regressed) for name, value, units, regressed in figures
            if (number := _numeric(value)) is not None]


def _benchmarks(path: Path) -> dict[str, dict]:
    """node id -> extra_info of every benchmark in pytest-benchmark's JSON ({} when the run wrote none)."""
    if not path.is_file():
        return {}
    return {b["fullname"]: b.get("extra_info", {}) for b in json.loads(path.read_text()).get("benchmarks", [])}


def _test_commands(case: ET.Element, benchmarks: dict[str, dict]) -> list[str]:
    name, result = case_key(case)[1], _result(case)
    commands = [_case(name, result, _numeric(case.get("time")), "s")]
    for prop in case.iter("property"):
        value = _numeric(prop.get("value"))
        if value is not None:
            key = prop.get("name", "")
            units = _UNITS.get(key) or ("bytes" if key.endswith("_bytes") else None)
            commands.append(_case(f"{name}.{_name(key)}", result, value, units))
    for figure, value, units, regressed in _benchmark_figures(benchmarks.get(_node_id(case), {})):
        commands.append(_case(f"{name}.{_name(figure)}", "fail" if regressed else result, float(value), units))
    return commands


def lava_commands(artifacts: Path) -> list[str]:
    """The lava-test-set/lava-test-case commands of one run's artifacts (junit.xml, benchmark.json)."""
    benchmarks = _benchmarks(artifacts / "benchmark.json")
    by_gate: dict[str, list[ET.Element]] = {}
    for case in ET.parse(artifacts / "junit.xml").getroot().iter("testcase"):
        by_gate.setdefault(case_key(case)[0], []).append(case)
    commands = []
    for gate, cases in by_gate.items():
        commands.append(shlex.join(["lava-test-set", "start", gate]))
        for case in cases:
            commands += _test_commands(case, benchmarks)
        commands.append(shlex.join(["lava-test-set", "stop", gate]))
    return commands


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m harness.lab.results", description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", type=Path, help="the run's --artifacts folder (junit.xml, benchmark.json)")
    args = parser.parse_args(argv)
    try:
        commands = lava_commands(args.artifacts)
    except (OSError, ET.ParseError, ValueError, KeyError) as exc:
        # The run wrote no readable results: that itself is the result LAVA must show.
        print(f"error: {args.artifacts}: {exc}", file=sys.stderr)
        print(_case(f"{_name(args.artifacts.name)}-results", "fail"))
        return 1
    print("\n".join(commands))
    return 0


if __name__ == "__main__":
    sys.exit(main())
