"""The run summary people read: one markdown page per pytest session of the gates.

It goes to `$GITHUB_STEP_SUMMARY` when that is set (the pull request's checks page shows it) and to
`artifacts/summary.md`. Built from a plain dict (see harness/pytest_plugin/reporting.py) so it can be
tested and rendered without pytest:

    outcome, counts{passed, failed, error, skipped}, run{run_id, git_revision, board, backend, model,
    precision, partition}, tests[{nodeid, outcome, seconds, message}] (outcome "error": the test's run
    failed for a reason of the board or its inputs, nothing judged; "failed": its gate judged and failed),
    quality[{case, ssim, psnr,
    ssim_min, psnr_min, passed}], benchmarks[{case, mean_s, comparison{}, valid, reasons}],
    slowest[{subgraph, block, branch, seconds_per_step}], memory[{run, peak_pss_added_bytes,
    min_mem_available_bytes, pss_budget_bytes, floor_bytes}], baselines[str], reduced[{subgraph, toolkit,
    diverges, remedy, written, report, repro}] (harness reduce's results beside the run reports)
"""
from __future__ import annotations

import math

__all__ = ["markdown_summary", "verdict_line", "reduced_section", "REDUCED_TITLE"]

MiB = 2 ** 20


def verdict_line(data: dict) -> str:
    c = data["counts"]
    errors = f", {c['error']} error(s) (infrastructure, not judged)" if c.get("error") else ""
    return (f"{'PASSED' if data['outcome'] == 'passed' else 'FAILED'}: {c.get('passed', 0)} passed, "
            f"{c.get('failed', 0)} failed{errors}, {c.get('skipped', 0)} skipped")


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _mib(value) -> str:
    return "-" if value is None else f"{value / MiB:.1f} MiB"


def _run_lines(run: dict) -> list[str]:
    keys = (("run", "run_id"), ("revision", "git_revision"), ("board", "board"), ("backend", "backend"),
            ("model", "model"), ("precision", "precision"), ("partition", "partition"))
    return [" · ".join(f"{label} `{run[k]}`" for label, k in keys if run.get(k))]


_MARKS = {"passed": "✅ passed", "failed": "❌ failed", "error": "⚠️ error", "skipped": "⏭ skipped", "pass": "✅ pass",
          "fail": "❌ fail"}


def gate_rows(tests: list[dict], marks: dict = _MARKS, code: str = "`") -> list[list]:
    return [[f"{code}{t['nodeid']}{code}", marks.get(t["outcome"], t["outcome"]), f"{t['seconds']:.1f} s",
             _message(t)[:240]] for t in tests]


def _message(test: dict) -> str:
    """A test's message without the exception or outcome name pytest puts before it."""
    message = test.get("message") or ""
    return message.removeprefix("AssertionError: ").removeprefix("Skipped: ").removeprefix("Failed: ")


def quality_rows(quality: list[dict], marks: dict = _MARKS) -> list[list]:
    return [[q["case"], f"{q['ssim']:.6f}", f">= {q['ssim_min']:g}", f"{q['psnr']:.2f} dB",
             f">= {q['psnr_min']:g} dB", marks["pass" if q["passed"] else "fail"]] for q in quality]


def bench_rows(benchmarks: list[dict]) -> list[list]:
    rows = []
    for b in benchmarks:
        c = b["comparison"]
        base = "-" if c.get("baseline_mean_s") is None else f"{c['baseline_mean_s']:.4f} s"
        delta = "-" if c.get("delta_pct") is None else f"{c['delta_pct']:+.1f} %"
        clocks = "valid" if b["valid"] else "**INVALID**: " + "; ".join(b["reasons"])
        status = c["status"] + (f": {c['moved']}" if c.get("moved") else "")    # the figure that failed, not the step
        # no verdict (the first run of a history): no threshold was learned, so none is printed
        threshold = f"{c['threshold_pct']:g} %" if math.isfinite(c.get("threshold_pct", math.nan)) else "-"
        rows.append([b["case"], f"{c['mean_s']:.4f} s", base, delta, threshold, status, clocks])
    return rows


def memory_table(memory: list[dict]) -> tuple[list[str], list[list]]:
    """One row per run: the peak PSS its process tree added over its own start (what the memory gate
    checks against the budget), each part's own peak (the pipeline process; the processes it started,
    such as prefetch workers), and the lowest MemAvailable the guard saw (against its floor)."""
    return (["run", "lifecycle", "peak added PSS", "pipeline's peak", "child processes' peak", "PSS budget",
             "min MemAvailable", "guard floor"],
            [[m["run"], m.get("lifecycle") or "-", _mib(m.get("peak_pss_added_bytes")),
              _mib(m.get("pipeline_pss_added_bytes")), _mib(m.get("workers_pss_added_bytes")),
              _mib(m.get("pss_budget_bytes")), _mib(m.get("min_mem_available_bytes")),
              _mib(m.get("floor_bytes"))] for m in memory])


REDUCED_TITLE = "### Reduced subgraphs (harness reduce)"


def reduced_section(rows: list[dict]) -> list[str]:
    """The summary's table of harness reduce's results beside the run reports, each repro linked."""
    return [REDUCED_TITLE, ""] + _table(
        ["subgraph", "toolkit", "diverges at", "repro", "remedy"],
        [[r["subgraph"], r["toolkit"], r["diverges"], f"[{r['repro']}]({r['repro']})" if r["repro"] else "none kept",
          (r["remedy"] or "none restores the check") + (f" (written to `{r['written']}`)" if r.get("written") else "")]
         for r in rows]) + [""]


def markdown_summary(data: dict) -> str:
    lines = [f"## Anima NPU acceptance: {verdict_line(data)}", ""]
    lines += _run_lines(data.get("run", {})) + [""]
    lines += ["### Gates", ""] + _table(["test", "result", "time", "message"], gate_rows(data["tests"])) + [""]
    if data.get("quality"):
        lines += ["### Quality against the goldens", ""]
        lines += _table(["case", "SSIM", "threshold", "PSNR", "threshold", "verdict"], quality_rows(data["quality"]))
        lines.append("")
    if data.get("benchmarks"):
        lines += ["### Benchmark against the baseline", ""]
        lines += _table(["case", "mean denoise", "baseline", "delta", "threshold", "comparison", "clocks"],
                        bench_rows(data["benchmarks"]))
        lines += [""] + [f"- {b['comparison']['message']}" for b in data["benchmarks"]]
        lines += [f"- {b['case']} on the results site: {b['comparison']['site']}" for b in data["benchmarks"]
                  if b["comparison"].get("site")] + [""]
    if data.get("slowest"):
        lines += ["### Slowest subgraphs (load + init + run + release, per step)", ""]
        lines += _table(["subgraph", "block", "branch", "seconds per step"],
                        [[s["subgraph"], s["block"], s["branch"], f"{s['seconds_per_step']:.4f}"]
                         for s in data["slowest"]])
        lines.append("")
    if data.get("memory"):
        lines += ["### Memory", ""] + _table(*memory_table(data["memory"])) + [""]
    if data.get("reduced"):
        lines += reduced_section(data["reduced"])
    for line in data.get("baselines", []):
        lines.append(f"- {line}")
    return "\n".join(lines).rstrip() + "\n"
