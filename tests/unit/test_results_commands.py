"""`bin/harness results ...` and the verdicts of a run against its store, on real stores (SQLite and
PostgreSQL). The store's failures: test_store_failures.py."""
from __future__ import annotations

import csv
import io
import re
from dataclasses import replace

import pytest

from harness.cli.main import main
from harness.results.store import ResultsStore
from harness.results.verdict import Outcome
from harness.results.verdict.judging import judge_run
from harness.results.verdict.verdict import FIRST, HISTORY, UPGRADE
from tests.results_data import VERSIONS_NEW, make_ab_record, make_run

pytestmark = pytest.mark.results

_NOISE = (0.0, 0.012, -0.008, 0.005, -0.011, 0.009, -0.004, 0.007, -0.006, 0.003)  # ~0.8 % spread


def test_export_writes_one_csv_row_per_run(results_url, capsys):
    with ResultsStore(results_url) as store:
        store.add_run(make_run("r1", 1.0))
        store.add_run(replace(make_run("r2", 1.5, minute=1, valid=False), host_cpus=2, host_load=0.75,
                              host_probe_s=0.02, host_memory_bytes=8 << 30))
    assert main(["results", "export", "--results", results_url]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["run_id"], float(r["mean_step_s"]), r["valid"]) for r in rows] == [("r1", 1.0, "1"), ("r2", 1.5, "0")]
    assert float(rows[1]["core_ffn_s"]) == pytest.approx(0.375) and rows[0]["runtime_lib"] == "2.3.2"
    # the host's condition travels with the run (empty for a run that has none)
    assert (rows[0]["host_cpus"], rows[0]["host_probe_s"], rows[0]["host_memory_bytes"]) == ("", "", "")
    assert (int(rows[1]["host_cpus"]), float(rows[1]["host_load"]), float(rows[1]["host_probe_s"]),
            int(rows[1]["host_memory_bytes"])) == (2, 0.75, 0.02, 8 << 30)


def _history(store, count=8, step=1.0, **kw):
    for i in range(count):
        store.add_run(make_run(f"old{i}", step * (1 + _NOISE[i % len(_NOISE)]), minute=i, **kw))


def test_a_first_run_starts_the_history_and_a_later_one_is_judged_by_it(results_url):
    with ResultsStore(results_url) as store:
        assert judge_run(store, make_run("first"), 10.0).kind == FIRST
        _history(store)
        ok = judge_run(store, make_run("same", 1.001, minute=50), 10.0)
        assert ok.kind == HISTORY and not ok.regressed
        assert {v.kind for v in ok.verdicts} == {"history"} and len(ok.verdicts) == 9      # with the NPU core
        slow = judge_run(store, make_run("slow", 1.0, minute=50, branch_factor={"ffn": 1.07}), 10.0)
        assert slow.regressed and [v.label for v in slow.regressions][0] == "ffn core"
        assert re.search(r"ffn core \+[67]\.\d % \[[\d.]+, [\d.]+\] over the [3-6](\.\d)? % threshold", slow.headline())


def test_a_stack_upgrade_is_an_upgrade_comparison_and_a_slower_branch_fails_naming_it(results_url):
    with ResultsStore(results_url) as store:
        _history(store)
        store.set_baseline(store.runs()[-1], "saved")
        same = judge_run(store, make_run("new", 1.0, minute=50, versions=VERSIONS_NEW, manifest_hash="m2"), 10.0)
        assert same.kind == UPGRADE and not same.regressed
        assert "runtime_lib 2.3.2 -> 2.5.0" in same.differences and "manifest_hash m1 -> m2" in same.differences
        assert "8 valid run(s) of the accepted stack" in same.reference
        # the stack's first run is the first look at the change, at a lone run's false-alarm rate
        # (judge.look_alpha): an upgrade is gated on its first run
        worse = judge_run(store, make_run("new", 1.0, minute=50, versions=VERSIONS_NEW,
                                          branch_factor={"cross_attn": 1.10}), 10.0)
        assert worse.regressed and worse.regressions[0].label == "cross_attn core"
        assert worse.headline().startswith("upgrade under probation, run 1 of the new stack, against")


def test_a_new_board_starts_from_the_fleet_baseline_of_its_model(results_url):
    with ResultsStore(results_url) as store:
        _history(store, board="rock-5c-aaaa")
        store.set_baseline(store.runs()[-1], "saved")
        fresh = judge_run(store, make_run("fresh", 1.2, board="rock-5c-ffff", minute=60), 10.0)
        assert fresh.kind == HISTORY and "fleet's baseline of board model Radxa ROCK 5C" in fresh.reference
        assert fresh.regressed                              # 20 % slower than the fleet: not "no baseline yet"
        other_model = judge_run(store, make_run("x", board="orange-5", board_model="Orange Pi 5"), 10.0)
        assert other_model.kind == FIRST


def test_check_reports_the_latest_regression_and_the_change_point(results_url, capsys):
    with ResultsStore(results_url) as store:
        _history(store, count=8)
        for i in range(6):
            store.add_run(make_run(f"new{i}", 1.2 * (1 + _NOISE[i]), minute=20 + i))
    assert main(["results", "check", "--results", results_url]) == 1
    out = capsys.readouterr().out
    assert "change point at run new0" in out and "denoise step +" in out


def test_push_twice_copies_once(tmp_path, postgres_cluster, capsys):
    local = f"sqlite:///{tmp_path / 'board.sqlite'}"
    fleet = postgres_cluster.database()
    with ResultsStore(local) as store:
        _history(store, count=3)
    assert main(["results", "push", "--results", local, "--to", fleet]) == 0
    assert main(["results", "push", "--results", local, "--to", fleet]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("3 run(s) pushed, 0 already there") and out[1].endswith("0 run(s) pushed, 3 already there")


def test_a_reading_command_never_makes_a_store(tmp_path, capsys):
    missing = tmp_path / "typo.sqlite"
    assert main(["results", "export", "--results", f"sqlite:///{missing}"]) == 2
    assert f"no results store at {missing}" in capsys.readouterr().err and not missing.exists()


def test_a_run_with_nothing_changed_fails_about_1_percent_of_the_time_over_all_its_figures():
    # 400 A/A runs against 10 earlier ones, every figure with its own 5 % log-normal noise: the eight
    # figures share the run's 99 % (each judged alone at 99 %, the run failed 5 % of the time)
    from dataclasses import replace

    import numpy as np

    from harness.results.verdict.history import judge_figures
    rng = np.random.default_rng(1)

    def noisy(i):
        run = make_run(f"r{i}")
        def jitter(v):
            return float(v * np.exp(rng.normal(0, 0.05)))
        return replace(run, mean_step_s=jitter(run.mean_step_s),
                       branches={k: jitter(v) for k, v in run.branches.items()},
                       stages={k: jitter(v) for k, v in run.stages.items()})

    failed = sum(any(v.regression for v in judge_figures([noisy(i) for i in range(10)], noisy(99), 10.0))
                 for _ in range(400))
    assert failed <= 10, f"{failed} of 400 A/A runs failed"


def test_runs_that_merely_happened_before_judge_only_once_they_are_enough(results_url):
    # a developer's repeated runs on a busy machine: 20 % slower than the last, but no saved baseline
    with ResultsStore(results_url) as store:
        _history(store, count=3)
        early = judge_run(store, make_run("new", 1.2, minute=50), 10.0)
        assert not early.regressed and early.verdicts == []
        # no noise estimate: never a PASS (issue 41), and the line says how many runs would give one
        assert early.outcome is Outcome.INCONCLUSIVE
        assert "too few for a learned threshold (5 needed) and no saved baseline, so no noise estimate yet" in \
            early.headline()
        assert "to decide it: 2 more valid run(s) of the accepted stack give a noise estimate" in early.decider()
        store.set_baseline(store.runs()[-1], "saved")
        assert judge_run(store, make_run("new", 1.2, minute=50), 10.0).regressed     # the fixed rule, saved


def test_export_and_check_read_the_ab_sessions(results_url, tmp_path, capsys):
    with ResultsStore(results_url) as store:
        store.add_ab_session(make_ab_record("s1", 1.0))
        store.add_ab_session(make_ab_record("s2", 1.10, minute=5))     # the latest of the same two keys
    out, ab = tmp_path / "runs.csv", tmp_path / "ab.csv"
    assert main(["results", "export", "--results", results_url, "--out", str(out), "--ab-out", str(ab)]) == 0
    runs = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [r["run_id"] for r in runs] == ["s1-baseline", "s1-candidate", "s2-baseline", "s2-candidate"]
    rows = list(csv.DictReader(io.StringIO(ab.read_text())))
    step = [r for r in rows if r["figure"] == "step"]
    assert [(r["session_id"], r["regression"]) for r in step] == [("s1", "0"), ("s2", "1")]
    s2 = step[1]
    assert (s2["baseline_manifest_hash"], s2["candidate_manifest_hash"]) == ("m1", "m2")
    assert s2["candidate_run_id"] == "s2-candidate"
    assert float(s2["ci_low_pct"]) < float(s2["shift_pct"]) < float(s2["ci_high_pct"])
    assert 9 < float(s2["shift_pct"]) < 11
    capsys.readouterr()
    assert main(["results", "check", "--results", results_url]) == 1
    text = capsys.readouterr().out
    assert ("A/B cat on rock-5c-aaaa: /parts/new against /parts/old (manifest_hash m1 -> m2), session s2, "
            "6 pairs") in text
    assert re.search(r"REGRESSION step \+\d+\.\d % \[[\d.]+, [\d.]+\] over the 2 % threshold, detects \+[\d.]+ % "
                     r"\(paired, n=6\)", text)
    assert "session s1" not in text


def test_an_unchanged_ab_session_passes_check_and_push_copies_it_once(results_url, tmp_path, capsys):
    local = f"sqlite:///{tmp_path / 'board.sqlite'}"
    with ResultsStore(local) as store:
        store.add_ab_session(make_ab_record("s1", 1.0))
        store.add_run(make_run("plain", minute=9))
    # the store's lone runs are too few for a noise estimate (INCONCLUSIVE, which a lab may let pass);
    # the A/B session itself passes
    assert main(["results", "check", "--results", local]) == 1
    assert main(["results", "check", "--results", local, "--inconclusive=warn"]) == 0
    out = capsys.readouterr().out
    assert "session s1, 6 pairs: PASS" in out and "INCONCLUSIVE: " in out
    assert main(["results", "push", "--results", local, "--to", results_url]) == 0
    assert main(["results", "push", "--results", local, "--to", results_url]) == 0
    assert "0 run(s) pushed, 3 already there" in capsys.readouterr().out
    with ResultsStore(local) as board, ResultsStore(results_url) as fleet:
        assert fleet.ab_sessions() == board.ab_sessions() and len(fleet.runs()) == 3
