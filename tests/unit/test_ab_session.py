"""The interleaved A/B session and what it is measured with: board-sim's per-branch slowdown and
drift model, the faults backend's exact small slowdown, the session's verdicts, and the
`bench-ab` command (real runs of the embedded model on onnxruntime)."""
import json
import math
import statistics
import subprocess
import sys
import time

import numpy as np
import pytest

from harness.backends import create_context
from harness.backends.base import BackendOptions
from harness.backends.board_drift import Drift, load_drift_model
from harness.backends.board_sim import normalize_options
from harness.backends.faults import FaultInjectionContext, wait_until
from harness.core.errors import ConfigError
from harness.model.config import REPO_ROOT
from harness.partition.manifest import load_manifest, manifest_sha256
from harness.results.ab import (
    A,
    ABRequest,
    B,
    Side,
    judge_pairs,
    parse_confidence,
    round_orders,
    run_session,
    without_fault,
)
from harness.results.store import ResultsStore
from harness.sampling.reference_run import sample_settings
from tests.helpers import export_fp32, random_bundle
from tests.load import Watch, too_busy

FAULTS = BackendOptions("faults")     # a side on the faults backend with nothing injected


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return random_bundle(tmp_path_factory, seed=17)


@pytest.fixture(scope="module")
def partition(model, tmp_path_factory):
    return export_fp32(model, tmp_path_factory)


def _run_seconds(manifest, branch, **options):
    from harness.backends import board_sim
    entry = next(e for e in manifest.subgraphs if e.branch == branch)
    ctx = create_context(BackendOptions("board-sim", normalize_options({"time_scale": 0.01, **options})), entry.label)
    ctx.load(manifest.path_of(entry))
    ctx.init()
    try:
        inputs = [np.zeros(s.shape, s.dtype) for s in entry.inputs]
        took = []
        for _ in range(3):
            board_sim._CLOCK = board_sim.Clock()   # no overshoot debt to shorten this run
            start = time.perf_counter()
            ctx.run(inputs)
            took.append(time.perf_counter() - start)
        return min(took), ctx.run_s_per_row * inputs[0].shape[0], ctx.slowdown
    finally:
        ctx.release()


def test_board_sim_slows_only_the_named_branch(partition):
    manifest = load_manifest(partition)
    slow, target, factor = _run_seconds(manifest, "ffn", slowdown="ffn=x1.5")
    assert factor == 1.5 and slow >= 1.5 * target       # a pause never ends early
    _, _, factor = _run_seconds(manifest, "self_attn", slowdown="ffn=x1.5")
    assert factor == 1.0


@pytest.mark.parametrize("spec", ["ffn=1.5x", "mlp=x1.1", "x0", "x1e9", "x nan"])
def test_bad_slowdowns_name_the_option(spec):
    with pytest.raises(ConfigError, match="'slowdown'"):
        normalize_options({"slowdown": spec})


def test_drift_seed_must_be_a_whole_number():
    with pytest.raises(ConfigError, match="'drift'"):
        normalize_options({"drift": -1})
    assert normalize_options({"drift": 3, "slowdown": "x1.03"})["slowdown"] == \
        {"self_attn": 1.03, "cross_attn": 1.03, "ffn": 1.03}


def test_drift_spread_comes_from_the_measured_pairs(tmp_path):
    data = tmp_path / "drift.toml"
    data.write_text("[measured.a]\ncore_per_step = [10.0, 11.0]\n[measured.b]\ncore_per_step = [4.0, 4.0]\n"
                    "[model]\ncorrelation_s = 100.0\ninvocation_jitter = 0.0\n")
    model = load_drift_model(data)
    assert model.sigma == pytest.approx(math.log(1.1) / 2)      # mean of (log 1.1)^2 and 0, halved
    data.write_text("[measured.a]\ncore_per_step = [10.0]\n[model]\ncorrelation_s = 1\ninvocation_jitter = 0\n")
    with pytest.raises(ConfigError, match=str(data)):
        load_drift_model(data)


def test_drift_is_shared_at_short_range_and_forgotten_at_long_range():
    model = load_drift_model()
    drift = Drift(model, seed=1, trials=20000)
    start = drift.mean_factor("ffn", 0.0, 28)
    soon = drift.mean_factor("ffn", 0.01 * model.correlation_s, 28)
    later = drift.mean_factor("ffn", 20 * model.correlation_s, 28)
    assert np.std(np.log(start)) == pytest.approx(model.sigma, rel=0.05)
    assert np.corrcoef(np.log(start), np.log(soon))[0, 1] > 0.9
    assert abs(np.corrcoef(np.log(start), np.log(later))[0, 1]) < 0.05


def test_faults_slowdown_is_exact_for_short_stages():
    """The median of 15 stretches of a 2 ms stage is 1.05 within 0.01. Where it is not, the stretches in
    which this thread waited less than that 0.01's share of the stage (20 us) for a CPU are judged instead,
    as a neighbour's preemption moves a ratio by more than the tolerance: up to 15 such of at most 100, and
    with fewer than 5 the machine was too busy to measure it (one line)."""
    ctx = FaultInjectionContext("subgraph 0 (block 0 ffn)", BackendOptions("faults", {"slowdown": 1.05}))

    def stage():
        start = time.perf_counter()
        while time.perf_counter() < start + 0.002:
            pass
        inner.append(time.perf_counter() - start)

    def stretch() -> tuple[float, Watch]:
        with Watch("faults' 1.05x stretch of a 2 ms stage") as watch:
            start = time.perf_counter()
            ctx._stretched(stage)
            took = time.perf_counter() - start
        return took / inner[-1], watch
    inner: list[float] = []
    ratios = [stretch() for _ in range(15)]
    CLEAN = 0.01 * 0.002            # the tolerance's share of the stage: 20 us
    if statistics.median(r for r, _ in ratios) == pytest.approx(1.05, abs=0.01):
        return
    while sum(w.waited < CLEAN for _, w in ratios) < 15 and len(ratios) < 100:
        ratios.append(stretch())
    clean = [r for r, w in ratios if w.waited < CLEAN]
    if len(clean) < 5:              # fewer than a median two stray stretches cannot move
        too_busy(f"too busy to measure faults' 1.05x stretch of a 2 ms stage: {len(clean)} of {len(ratios)} ran "
                 f"without waiting 20 us for a CPU ({ratios[-1][1].seen()})")
    assert statistics.median(clean) == pytest.approx(1.05, abs=0.01)


def _stages(backend: str, path, wait_as: float = 1.0, **options) -> tuple[float, float]:
    """One context's (init, release) seconds. With `wait_as`, init is followed by the wait a slowdown
    of that factor adds to it, so the release comes after the same pause as a slowed context's does:
    after a pause a release runs on a cold cache and takes 2-4x as long (measured here, quiet and under
    load), which is no slowdown of its own."""
    ctx = create_context(BackendOptions(backend, options), "release probe")
    ctx.load(path)
    start = time.perf_counter()
    ctx.init()
    init = time.perf_counter() - start
    wait_until(start + wait_as * init)
    middle = time.perf_counter()
    ctx.release()
    return init, time.perf_counter() - middle


def test_faults_slowdown_leaves_release_alone(partition):
    # a slowed candidate stretches load, init and run 20x; its release must stay as it was: measured
    # against plain contexts released after the same pause, the two sides in turn, so a busy machine
    # moves both alike; the least of nine each (a busy machine only ever adds time)
    manifest = load_manifest(partition)
    path = manifest.path_of(manifest.subgraphs[0])
    plain, slowed = [], []
    for _ in range(9):
        plain.append(_stages("onnxruntime", path, wait_as=20.0))
        slowed.append(_stages("faults", path, slowdown=20.0))
    (plain_init, plain_release), (slowed_init, slowed_release) = (np.min(plain, axis=0), np.min(slowed, axis=0))
    assert slowed_init / plain_init > 10, (slowed_init, plain_init)
    assert slowed_release / plain_release < 5, (slowed_release, plain_release)


def _pairs(a, b):
    return [{A: x, B: y} for x, y in zip(a, b)]


def test_session_judges_every_figure_with_a_time_and_shares_the_confidence():
    rng = np.random.default_rng(0)
    base = [{"step": 1.0 * f, "ffn core": 0.5 * f, "load": 0.0} for f in np.exp(rng.normal(0, 0.1, 8))]
    cand = [{"step": b["step"] * 1.001, "ffn core": b["ffn core"] * 1.10, "load": 0.0} for b in base]
    verdicts = judge_pairs(_pairs(base, cand), threshold_pct=2, confidence=0.99)
    assert [v.label for v in verdicts] == ["step", "ffn core"]           # load never took time
    assert all(v.confidence == pytest.approx(0.995) for v in verdicts)
    assert [v.label for v in verdicts if v.regression] == ["ffn core"]


def _disturbed_shift(orders, period=4, hit=0.05):
    """The mean log ratio B/A when every `period`-th run is `hit` slower, both sides otherwise
    identical: what a session run in these orders makes of a periodic disturbance."""
    runs = [side for first in orders for side in ((A, B) if first else (B, A))]
    slow = [math.log(1 + hit) if i % period == 0 else 0.0 for i in range(len(runs))]
    per_round = [dict(zip(runs[2 * r:2 * r + 2], slow[2 * r:2 * r + 2])) for r in range(len(orders))]
    return statistics.fmean(r[B] - r[A] for r in per_round)


def test_round_orders_are_balanced_and_meet_a_periodic_disturbance_on_both_sides():
    orders = round_orders(400, np.random.default_rng(5))
    assert all(a != b for a, b in zip(orders[::2], orders[1::2]))      # each two rounds: an order and its reverse
    assert sum(orders) == 200
    # A fixed alternation (A B | B A | ...) puts every 4th run on A: a 5 % disturbance
    # there is a -2.5 % shift. Drawn orders leave it as spread: over 400 rounds the shift's sd is
    # 5 % / sqrt(400) / 2 = 0.13 %.
    assert _disturbed_shift([r % 2 == 0 for r in range(400)]) == pytest.approx(-math.log(1.05) / 2)
    assert abs(_disturbed_shift(orders)) < 0.006
    assert round_orders(3, np.random.default_rng(0))[:2] in ([True, False], [False, True])


@pytest.mark.slow      # real sessions; the fast tier keeps round_orders' own test
def test_a_sessions_order_is_recorded_and_drawn_afresh(model, partition):
    settings = sample_settings(model, steps=1)
    request = ABRequest(Side(A, partition, FAULTS), Side(B, partition, FAULTS), settings, rounds=2, warmup=0)
    sessions = [run_session(model, request, rng=np.random.default_rng(seed)) for seed in (1, 2)]
    expected = [[A if a_first else B for a_first in round_orders(2, np.random.default_rng(seed))]
                for seed in (1, 2)]
    assert [s.first for s in sessions] == expected and expected[0] != expected[1]
    assert [s.as_dict()["first"] for s in sessions] == expected


def test_confidence_is_a_fraction_or_a_percentage():
    assert parse_confidence("0.99") == parse_confidence("99%") == 0.99
    assert parse_confidence("99.99%") == 0.9999
    for bad in ("1", "abc", "40%"):
        with pytest.raises(ConfigError, match=f"--ab-confidence '{bad}'"):
            parse_confidence(bad, "--ab-confidence")


def test_the_suites_fault_is_side_bs_only():
    options = BackendOptions("faults", {"slowdown": 3.0, "threads": 1})
    assert without_fault(options, "slow=x3") == BackendOptions("faults", {"threads": 1})
    assert without_fault(options, None) == options


def test_a_request_is_checked_where_it_is_built(model, partition):
    settings = sample_settings(model, steps=1)
    sides = Side(A, partition, FAULTS), Side(B, partition, FAULTS)
    with pytest.raises(ConfigError, match="1 A/B rounds: a paired verdict needs at least 2"):
        ABRequest(*sides, settings, rounds=1)
    with pytest.raises(ConfigError, match="A/B sides named 'candidate' and 'baseline'"):
        ABRequest(*reversed(sides), settings, rounds=2)


@pytest.mark.slow
def test_a_session_finds_a_slowed_b_and_passes_an_unchanged_one(model, partition):
    # The unchanged B gets 8 pairs, the slowed one 16. Under load the x4 verdict had the
    # thinner margin: with 10 sessions of each at load average 10-17 (bursty CPU burners beside the
    # other jobs, 2026-12-01), the A/A figures' t statistics stayed within |2.7| of the 5.08 a
    # figure needs at 8 pairs (99 % shared over 7 figures), while the x4 step's fell to 6.2: a
    # busier host spreads the step's log ratios further and the slowed session stops calling it.
    # 16 pairs raise the x4 step's t by sqrt(2) and lower the bar to 4.0.
    # The A/A session is judged at 99.99 %: at the product's 99 % an unchanged B fails 1 % of
    # sessions by design (`results simulate` measures that rate), and a test must not fail one
    # CI run in a hundred for it. A verdict that took invocations for independent samples, or a
    # session whose order let one side meet a periodic disturbance, still fails it: their t statistics
    # run far past the 10.6 a figure needs at 99.99 % over 7 figures (an A/A figure's, 100 sessions
    # here, quiet: within |5.7|).
    settings = sample_settings(model, steps=1)
    same = run_session(model, ABRequest(Side(A, partition, FAULTS), Side(B, partition, FAULTS), settings,
                                        rounds=8, confidence=0.9999))
    slowed = run_session(model, ABRequest(Side(A, partition, FAULTS),
                                          Side(B, partition, BackendOptions("faults", {"slowdown": 4.0})), settings,
                                          rounds=16))
    assert len(same.pairs) == 8 and not same.regressions, [v.line() for v in same.regressions]
    flagged = {v.label for v in slowed.regressions}
    # The fault stretches load, init and run and leaves release alone
    # (test_faults_slowdown_leaves_release_alone); a release right after a 4x slower init is itself
    # measured slower on a busy host, so the session's release figure is no evidence either way.
    assert "step" in flagged and "init" in flagged, [v.line() for v in slowed.verdicts]


def _bench_ab(*args):
    return subprocess.run([sys.executable, "-m", "harness", "bench-ab", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.results
def test_bench_ab_fails_a_slowed_b_naming_the_figure_and_stores_the_session(model, partition, tmp_path,
                                                                                   results_url):
    out = tmp_path / "ab.json"
    run = _bench_ab("--a", str(partition), "--b", str(partition), "--model-dir",
                    str(model.model_dir), "--backend", "faults", "--fault", "slow=x4",
                    "--steps", "1", "--rounds", "8", "--out", str(out), "--results", results_url)
    assert run.returncode == 1, run.stderr
    assert any(line.startswith("REGRESSION init +") and "over the 2 % threshold" in line
               for line in run.stdout.splitlines()), run.stdout
    assert json.loads(out.read_text())["regression"] is True
    with ResultsStore(results_url) as store:
        (session,) = store.ab_sessions()
        assert session.regression and len(session.pairs) == 8 and session.b_options == {"slowdown": 4.0}
        # the stored pairs judge to the lines printed (what the verdicts could detect is judged again
        # from the pairs; the store keeps the shifts and intervals)
        assert [v.line() for v in judge_pairs(list(session.pairs), session.threshold_pct, session.confidence)] == \
            [line.removeprefix("REGRESSION ") for line in run.stdout.splitlines()[:len(session.verdicts)]]
        assert [v.shift() for v in session.verdicts] == [v.shift() for v in judge_pairs(
            list(session.pairs), session.threshold_pct, session.confidence)]
        # both sides are runs of the partition's key, their figures the mean over the 8 rounds
        # (B's run id is the stored "<session>-candidate", as in every store written before A and B)
        b = store.run(f"{session.session_id}-candidate", "default-prompt")
        assert b == session.b
        assert b.key.manifest_hash == manifest_sha256(partition) and b.key.backend == "faults"
        assert b.mean_step_s == pytest.approx(statistics.fmean(p[B]["step"] for p in session.pairs), rel=0.05)
        assert len(b.subgraphs) == len(load_manifest(partition).entries())      # the decoder too


def test_bench_ab_bad_option_is_one_line():
    run = _bench_ab("--a", "x", "--b", "y", "--fault", "slow=x2")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1].endswith("--fault needs --backend faults (got --backend onnxruntime)")
    assert "Traceback" not in run.stderr


def test_bench_ab_takes_the_old_side_names_saying_the_new_ones():
    # --baseline and --candidate, as users' CI scripts spell them: still A and B, one line each
    run = _bench_ab("--baseline", "x", "--candidate", "y", "--fault", "slow=x2")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [
        "--baseline is deprecated and will go: it is --a now", "--candidate is deprecated and will go: it is --b now",
        "error: --fault needs --backend faults (got --backend onnxruntime)"], run.stderr
    both = _bench_ab("--a", "x", "--baseline", "y", "--b", "z")
    assert both.returncode == 2 and "argument --baseline: not allowed with argument --a" in both.stderr, both.stderr
    none = _bench_ab("--b", "z")
    assert none.returncode == 2 and "one of the arguments --a is required" in none.stderr, none.stderr


@pytest.mark.slow
def test_bench_ab_on_the_simulated_board_names_the_slowed_branch(model, partition, tmp_path):
    run = _bench_ab("--a", str(partition), "--b", str(partition), "--model-dir",
                    str(model.model_dir), "--backend", "board-sim", "--slowdown", "ffn=x1.5", "--drift", "1",
                    "--time-scale", "0.01", "--steps", "1", "--rounds", "6",
                    "--results", f"sqlite:///{tmp_path / 'results.sqlite'}")
    assert run.returncode == 1, run.stderr
    lines = run.stdout.splitlines()
    assert any(line.startswith("REGRESSION ffn core +") for line in lines), run.stdout
    assert not any(line.startswith(("REGRESSION self_attn", "REGRESSION cross_attn")) for line in lines), run.stdout
