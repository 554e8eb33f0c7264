"""The run summary's benchmark table: a first run, judged against nothing, says no threshold rather
than 'nan %' (the history it starts has none yet)."""
import math

from harness.report.summary import markdown_summary


def _summary(threshold_pct: float) -> str:
    comparison = {"mean_s": 0.25, "baseline_mean_s": None, "delta_pct": None, "threshold_pct": threshold_pct,
                  "status": "no baseline yet", "message": "this run starts the history"}
    return markdown_summary({"counts": {}, "outcome": "passed", "tests": [],
                             "benchmarks": [{"case": "seven", "comparison": comparison,
                                                          "valid": True, "reasons": []}]})


def test_a_first_run_has_no_threshold_and_a_judged_run_has_its_own():
    first = next(line for line in _summary(math.nan).splitlines() if line.startswith("| seven"))
    assert "nan" not in first and "| - |" in first, first
    judged = next(line for line in _summary(6.6).splitlines() if line.startswith("| seven"))
    assert "| 6.6 % |" in judged, judged
