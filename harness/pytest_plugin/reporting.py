"""What a person reads about a run: step progress in the log while it runs, and at the end a markdown
summary (artifacts/summary.md, and $GITHUB_STEP_SUMMARY when set) and a self-contained HTML report
(artifacts/report.html). Written only for sessions that ran npu tests."""
from __future__ import annotations

import os
from pathlib import Path

from ..core.errors import HarnessError
from .state import is_worker, settings_of, state_of


class LogProgress:
    """GateRunner.progress: per step, a plain line in a log, or one rewritten line on a terminal."""

    def __init__(self, config):
        self.config = config

    def _write(self, line: str, final: bool) -> None:
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        if tr is None:
            return
        # The test's output is captured; progress must reach the log while the test runs.
        with capture.global_and_fixture_disabled() if capture else _nothing():
            if tr.isatty:
                tr.rewrite(line, erase=True)
                if final:
                    tr.write_line("")
            else:
                tr.write_line(line)

    def __call__(self, label: str, total: int):
        from ..core.progress import LOG_INTERVAL, StepLines
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        live = tr is not None and tr.isatty         # a rewritten line: every step; a log: a few lines a run
        lines = StepLines(total, label, lambda text: self._write(text, final=lines.done == total),
                          interval=0.0 if live else LOG_INTERVAL)

        def step(i: int) -> None:
            lines()
        return step


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def configure(config):
    from .fixtures import runner_of
    runner_of(config).progress = LogProgress(config)


def runtest_makereport(item, report):
    # One outcome per test for the summary: the call phase, or setup/teardown when they failed or
    # skipped it. A failed setup or teardown is an error, as pytest and the JUnit XML count it: the run the
    # gate needed did not happen (fixtures.judged_run), so nothing was judged.
    if report.when == "call" or report.outcome != "passed":
        message = ""
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            text = crash.message if crash is not None else report.longreprtext
            message = text.strip().splitlines()[0] if text.strip() else ""
        elif report.skipped and isinstance(report.longrepr, tuple):
            message = report.longrepr[2]
        kind = "error" if report.failed and report.when != "call" else report.outcome
        state_of(item.config).test_outcomes.append({"nodeid": report.nodeid, "outcome": kind,
                                               "seconds": report.duration, "message": message,
                                               "npu": item.get_closest_marker("npu") is not None})


def summary_data(config, exitstatus) -> dict:
    state = state_of(config)
    s = state.settings
    tests = [t for t in state.test_outcomes if t["npu"]]
    counts = {k: sum(1 for t in tests if t["outcome"] == k) for k in ("passed", "failed", "error", "skipped")}
    run = {"run_id": None, "git_revision": None, "board": state.board, "backend": s.backend}
    from ..results.provenance import git_revision, run_id
    run.update(run_id=run_id(), git_revision=git_revision())
    facts = _merged_facts(state.worker_facts or [runner_facts(config)])
    run.update(facts["run"])
    benchmarks = [{"case": b["case"], "comparison": b["comparison"], "valid": b["valid"],
                   "reasons": b["reasons"]} for b in state.bench_results]
    bench_infos = [b["info"] for b in state.bench_results]
    slowest = bench_infos[0]["slowest_subgraphs"] if bench_infos else facts["slowest"]
    memory = _memory_rows(config, facts["reports"])
    return {"outcome": "passed" if exitstatus == 0 and counts["failed"] + counts["error"] == 0 else "failed",
            "counts": counts, "run": run, "tests": tests, "quality": state.quality_results,
            "benchmarks": benchmarks, "slowest": slowest, "memory": memory,
            "baselines": [f"{nodeid}: {message}" for nodeid, _, message in state.baseline_outcomes]}


def runner_facts(config) -> dict:
    """What the summary reads of this process's gate runner: the model, precision and partition it ran,
    the slowest subgraphs of its first case run, and each kept run's memory and lifecycle (an xdist
    worker sends these to the controller: workers.py)."""
    from ..results.compare import slowest_subgraphs
    runner = state_of(config).runner
    facts: dict = {"run": {}, "slowest": [], "reports": []}
    if runner is None:
        return facts
    if runner.loaded():
        facts["run"]["model"] = runner.bundle.cfg.name
        used = runner.used_partition()      # a session that ran no partition names none (and exports none)
        try:
            if used is not None:
                facts["run"]["precision"], facts["run"]["partition"] = runner.precision, str(used)
        except (HarnessError, OSError):     # a partition that never loaded: the tests already said why
            pass
    reports = list(runner.case_reports().items())
    if reports:
        first = reports[0][1]
        computed = (first.get("steps") or {}).get("computed") or len(first["step_seconds"])
        facts["slowest"] = slowest_subgraphs(first["lifecycle_records"], computed)
    facts["reports"] = [(name, {"memory": r.get("memory"), "lifecycle": r.get("lifecycle")}) for name, r in reports]
    return facts


def _merged_facts(parts: list[dict]) -> dict:
    """Several workers' runner facts as one: the first run named, the first slowest list, every report."""
    merged: dict = {"run": {}, "slowest": [], "reports": []}
    for part in parts:
        merged["run"] = merged["run"] or part["run"]
        merged["slowest"] = merged["slowest"] or part["slowest"]
        merged["reports"] += part["reports"]
    return merged


def _memory_rows(config, reports: list) -> list[dict]:
    """Per kept run (golden cases, benchmark): its own peak added PSS and the guard's lowest MemAvailable."""
    s = settings_of(config)
    reports = list(reports)
    reports += [(f"{b['case']} (benchmark)", {"memory": b.get("memory"), "lifecycle": b.get("lifecycle")})
                for b in state_of(config).bench_results]
    rows = []
    for name, report in reports:
        mem = report.get("memory") or {}
        if mem:
            rows.append({"run": name, "peak_pss_added_bytes": mem.get("run_peak_pss_added_bytes"),
                         "lifecycle": report.get("lifecycle"),
                         "pipeline_pss_added_bytes": mem.get("run_peak_pipeline_pss_added_bytes"),
                         "workers_pss_added_bytes": mem.get("run_peak_workers_pss_added_bytes"),
                         "pss_budget_bytes": s.pss_budget, "floor_bytes": mem.get("floor_bytes"),
                         "min_mem_available_bytes": mem.get("min_mem_available_bytes")})
    return rows


def _curve_files(config) -> list:
    """The memory curve worth a picture: the memory gate's window, else the first npu test's."""
    files = state_of(config).memory_samples
    chosen = [path for name, path in files if "pss" in name] or [path for _, path in files[:1]]
    return chosen[:1]


def _trend_png(config, artifacts: Path) -> bytes | None:
    from ..core.errors import HarnessError
    from ..results.store import ResultsStore
    from ..results.trend import trend
    s = settings_of(config)
    try:
        with ResultsStore(s.results, create=False) as store:
            runs = store.runs(board=state_of(config).board, backend=s.backend)
        if not runs:
            return None
        out = artifacts / "trend.png"
        trend(runs, out, threshold_pct=s.fixed_threshold)
        return out.read_bytes()
    except HarnessError:
        return None


def sessionfinish(session, exitstatus):
    config = session.config
    state = state_of(config)
    if is_worker(config):
        return          # under xdist the controller writes them, with every worker's share (workers.py)
    # a session stopped before its npu tests because --results could not be opened still reports why
    if not any(t["npu"] for t in state.test_outcomes) and state.store_failure is None:
        return
    from ..core.atomic import atomic_write_text
    from ..report.html import write_html_report
    from ..report.summary import markdown_summary
    artifacts = Path(state.settings.artifacts)
    data = summary_data(config, exitstatus)
    text = markdown_summary(data)
    atomic_write_text(artifacts / "summary.md", text)
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")
    write_html_report(artifacts / "report.html", data, _trend_png(config, artifacts), _curve_files(config))
    state.written = [artifacts / "summary.md", artifacts / "report.html"]


def terminal_summary(terminalreporter, exitstatus, config):
    for case, written, why in state_of(config).golden_updates:
        terminalreporter.write_line(f"golden {case}: {why}" + "".join(f"\n  wrote {p}" for p in written))
    written = state_of(config).written
    if written:
        terminalreporter.write_line("run summary: " + ", ".join(str(p) for p in written))
