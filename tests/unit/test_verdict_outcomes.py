"""The three outcomes (issue 41): a verdict states the shift it could detect, says INCONCLUSIVE when
that is more than the promise (--detect), and a 3x slower stack never passes, whatever the accepted
stack's history length or noise. Through the real judge on a real SQLite store, with runs built the
way the benchmark gate builds them (tests/results_data.py) and log-normal noise of our choosing."""
import re
from dataclasses import replace

import numpy as np
import pytest

from harness.cli.main import main
from harness.model.config import REPO_ROOT
from harness.results.ab import A, B, judge_pairs, session_decider, session_outcome
from harness.results.store import ResultsStore
from harness.results.verdict import Outcome, judge, minimum_detectable_pct
from harness.results.verdict.decision import history_verdict
from harness.results.verdict.tables import mde_tables
from tests.results_data import VERSIONS_NEW, VERSIONS_OLD, make_run

pytestmark = pytest.mark.results

VERSIONS_C = {**VERSIONS_NEW, "npu_driver": "0.9.10"}


def _noisy(name: str, i: int, rng, sigma: float, factor: float = 1.0, **kw):
    """A run `factor` times the accepted stack's, every branch and the step with log-normal noise `sigma`."""
    run = make_run(name, factor * float(np.exp(rng.normal(0, sigma))), minute=i, **kw)
    branches = {b: v * float(np.exp(rng.normal(0, sigma))) for b, v in run.branches.items()}
    return replace(run, branches=branches, stages={**run.stages, "run": sum(branches.values())})


def _path(store, rng, history: int, sigma: float):
    """The accepted stack A `history` times, then B (another driver) once, as issue 41's sessions."""
    for i in range(history):
        store.add_run(_noisy(f"a{i}", i, rng, sigma))
    store.add_run(_noisy("b0", history, rng, sigma, versions=VERSIONS_NEW))


def _thresholds_within(lines: str) -> list[float]:
    return [float(x) for x in re.findall(r"within the ([\d.]+) % threshold", lines)]


@pytest.mark.slow         # 36 judgements: ~25 s on this machine under load
@pytest.mark.parametrize("history", [5, 30])
@pytest.mark.parametrize("sigma", [0.02, 0.3])
def test_a_3x_slower_stack_fails_every_run_whatever_the_history(tmp_path, history, sigma):
    for seed in range(3):
        rng = np.random.default_rng(seed)
        with ResultsStore(f"sqlite:///{tmp_path / f's{seed}.sqlite'}") as store:
            _path(store, rng, history, sigma)
            for k in range(3):
                run = _noisy(f"c{k}", 100 + k, rng, sigma, factor=3.0, versions=VERSIONS_C)
                verdict = judge(store, run)
                assert verdict.outcome in (Outcome.REGRESSION, Outcome.INCONCLUSIVE), verdict.lines()
                assert verdict.probation == k + 1 and "npu_driver 0.9.6 -> 0.9.10" in verdict.headline()
                # never "within" a threshold past the promise: such a verdict is INCONCLUSIVE
                assert all(t <= 25 for t in _thresholds_within("\n".join(verdict.lines()))), verdict.lines()
                if sigma == 0.02 and history == 30:
                    assert verdict.outcome is Outcome.REGRESSION, verdict.lines()
                store.add_run(run)


def test_a_groups_own_runs_never_widen_its_interval():
    # one normal run and one 3x run since a change: judged against the history's spread alone (the
    # group's pooled variance had widened the threshold to 204,628 %)
    rng = np.random.default_rng(4)
    history = np.exp(rng.normal(0, 0.02, 20))
    verdict = history_verdict("denoise step", history, [1.0, 3.0], confidence=0.99)
    assert verdict.regression and verdict.threshold_pct < 10 and verdict.mde_pct < 15, verdict


@pytest.mark.slow         # 1,600 verdicts: ~12 s
@pytest.mark.parametrize("sigma", [0.01, 0.03])
def test_a_shift_of_the_minimum_detectable_effect_is_found_95_percent_of_the_time(sigma):
    # the MDE of a lone run against 30 runs at the gate's one-sided 0.5 %, from the noise's true sd:
    # that shift is found POWER of the time (the floor of 3 % counts at the quiet sd)
    level, rng = 0.005, np.random.default_rng(7)
    mde = minimum_detectable_pct(sigma * np.sqrt(1 + 1 / 30), level, 29, floor_pct=3.0)
    found = sum(history_verdict("x", np.exp(rng.normal(0, sigma, 30)), np.exp(rng.normal(np.log1p(mde / 100), sigma)),
                                confidence=1 - 2 * level).regression for _ in range(800))
    assert 0.92 <= found / 800 <= 0.975, (mde, found)


def test_probation_counts_the_runs_since_the_change_and_a_return_is_a_revert(tmp_path):
    rng = np.random.default_rng(2)
    with ResultsStore(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        for i in range(8):
            store.add_run(_noisy(f"a{i}", i, rng, 0.02))
        for i in range(3):
            store.add_run(_noisy(f"b{i}", 10 + i, rng, 0.02, versions=VERSIONS_NEW))
        store.add_run(_noisy("b2-confirm", 13, rng, 0.02, versions=VERSIONS_NEW))
        assert judge(store, _noisy("b3", 14, rng, 0.02, versions=VERSIONS_NEW)).probation == 4, \
            "three runs before it, its confirming run apart"
        store.set_baseline(store.runs()[-1], "upgrade accepted")
        back = judge(store, _noisy("a8", 20, rng, 0.02, versions=VERSIONS_OLD))
    assert back.kind == "upgrade comparison" and back.probation == 1 and back.revert, back.lines()
    assert back.headline().startswith("revert under probation, run 1 of a stack this board ran before the "
                                      "accepted one, against 4 valid run(s) of the accepted stack"), back.headline()


def test_a_history_too_short_for_a_noise_estimate_is_inconclusive_and_says_how_many_runs_decide_it(tmp_path):
    rng = np.random.default_rng(3)
    with ResultsStore(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        _path(store, rng, 3, 0.02)
        new = judge(store, _noisy("c0", 50, rng, 0.02, versions=VERSIONS_C))
    assert new.outcome is Outcome.INCONCLUSIVE and new.verdicts and all(v.kind == "fixed" for v in new.verdicts)
    assert "inconclusive: under the fixed 10 % rule with no noise estimate" in new.headline(), new.headline()
    assert new.decider().startswith("to decide it: 2 more valid run(s) of the accepted stack give a noise estimate")


def test_a_burst_in_a_five_run_history_widens_its_spread_and_does_not_fail_an_unchanged_stack(tmp_path):
    # issue 41's loaded host: five runs of A, the first in a burst (1.9x), then B, unchanged, itself
    # slowed 18 % by the load. The screen drops the burst; four runs were too few for a spread and the
    # step went to the fixed 10 % rule, which failed B (+17.9 % over the last four of A)
    with ResultsStore(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        for i, level in enumerate((1.9, 1.0, 1.02, 0.98, 1.01)):
            store.add_run(make_run(f"a{i}", level, minute=i))
        verdict = judge(store, make_run("b0", 1.18, minute=10, versions=VERSIONS_NEW))
    step = next(v for v in verdict.verdicts if v.label == "denoise step")
    assert step.kind == "history" and step.n == 5, verdict.lines()        # the burst kept: a spread of five
    assert verdict.outcome is not Outcome.REGRESSION and not verdict.regressed, verdict.lines()
    assert verdict.outcome is Outcome.INCONCLUSIVE and "could detect only +" in verdict.headline(), verdict.lines()


def test_a_noisy_board_is_inconclusive_and_says_no_number_of_runs_will(tmp_path):
    rng = np.random.default_rng(5)
    with ResultsStore(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        for i in range(30):
            store.add_run(_noisy(f"a{i}", i, rng, 0.3))
        verdict = judge(store, _noisy("a30", 40, rng, 0.3))
    assert verdict.outcome is Outcome.INCONCLUSIVE and verdict.mde_pct > 25, verdict.lines()
    assert "could detect only +" in verdict.headline() and "not the promised 25 %" in verdict.headline()
    assert "no number of runs here will" in verdict.decider() and "A/B session" in verdict.decider()


@pytest.mark.parametrize("history, said", [(5, r"(REGRESSION|INCONCLUSIVE): upgrade under probation, run 3 of "),
                                            (30, r"REGRESSION: upgrade under probation, run 3 of ")])
def test_results_check_judges_the_latest_run_against_the_accepted_stack(tmp_path, capsys, history, said):
    rng = np.random.default_rng(6)
    url = f"sqlite:///{tmp_path / 'r.sqlite'}"
    with ResultsStore(url) as store:
        _path(store, rng, history, 0.02)
        for k in range(3):
            store.add_run(_noisy(f"c{k}", 100 + k, rng, 0.02, factor=3.0, versions=VERSIONS_C))
    assert main(["results", "check", "--results", url]) == 1
    out = capsys.readouterr().out
    assert re.search(said, out) and "npu_driver 0.9.6 -> 0.9.10" in out, out


def test_an_ab_session_with_a_wide_interval_is_inconclusive_and_a_quiet_one_passes():
    rng = np.random.default_rng(8)

    def pairs(n, sigma):
        return [{side: {"step": float(np.exp(rng.normal(0, sigma))), "ffn core": float(np.exp(rng.normal(0, sigma)))}
                 for side in (A, B)} for _ in range(n)]
    wide = judge_pairs(pairs(3, 0.4))
    assert session_outcome(wide) is Outcome.INCONCLUSIVE, [v.line() for v in wide]
    assert re.match(r"to decide it: \d+ more pair\(s\), --rounds \d+", session_decider(wide, 3))
    quiet = judge_pairs(pairs(8, 0.004))
    assert session_outcome(quiet) is Outcome.PASS and session_decider(quiet, 8) == "", [v.line() for v in quiet]


def test_the_verdict_page_holds_the_generated_tables():
    text = (REPO_ROOT / "docs" / "verdict.md").read_text()
    block = text.split("<!-- verdict tables: generated -->\n", 1)[1].split("<!-- end of the verdict tables -->", 1)[0]
    lone, ab = mde_tables().split("\n\n")
    assert lone in block and ab in block, "regenerate: python -m harness.results.verdict.tables"


def test_inconclusive_fails_a_boards_gate_and_warns_a_pcs_rehearsal_by_default(tmp_path):
    """--inconclusive auto: an RK3588 (here the board-shaped tree), --require-npu or a board profile fail an
    INCONCLUSIVE benchmark; a PC's rehearsal of the gates, whose step times say nothing of a board, is
    warned; either is overridden by saying fail or warn."""
    from harness.model.config import REPO_ROOT
    from harness.pytest_plugin.options import resolve_settings
    board = str(REPO_ROOT / "tests" / "data" / "sysfs-rk3588")
    pc = {"backend": "onnxruntime", "telemetry_root": str(tmp_path)}
    assert resolve_settings(pc, None).inconclusive == "warn"
    assert resolve_settings({**pc, "telemetry_root": board, "backend": "faults"}, None).inconclusive == "fail"
    assert resolve_settings({**pc, "require_npu": True}, None).inconclusive == "fail"
    profile = tmp_path / "board.toml"
    profile.write_text('[suite]\nbackend = "onnxruntime"\n')
    assert resolve_settings(pc, str(profile)).inconclusive == "fail"
    # the CI host's profile says warn: an x86 host rehearsing the gates (boards/host-ci.toml)
    assert resolve_settings(pc, str(REPO_ROOT / "boards" / "host-ci.toml")).inconclusive == "warn"
    assert resolve_settings({**pc, "inconclusive": "fail"}, None).inconclusive == "fail"
