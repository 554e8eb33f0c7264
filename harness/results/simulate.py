"""The verdicts' error rates, measured (`bin/harness results simulate`): how often the store's history
verdict and the A/B session say "regression" when nothing changed, and how often they find a change.

Two sources of runs, judged by the same code the gate uses (judge.judge_values, ab.judge_pairs):
  the simulated board: board-sim's timing model (boards/data/rock5c-anima.toml) with its drift model
    (boards/data/board-drift.toml), vectorised over `runs` independent boards, a slowdown stretching
    every NPU stage of every branch as board-sim's `slowdown` option does. A history is HISTORY_RUNS
    runs far apart (independent drift levels) after RECORD_RUNS more the noise factor is learned
    from, then AFTER_RUNS runs of the change, each judged as its look (the runs since the change its
    group); an A/B session is AB_ROUNDS interleaved pairs of one-step runs;
  the kept onnxruntime A/A streams (harness/results/streams/, recorded here on 2 December 2026): long
    interleaved streams of A and B runs of the same partition, cut into history windows
    (HISTORY_RUNS A runs, then AFTER_RUNS B runs, every AFTER_RUNS rounds) and judged
    again by today's verdicts.
Every cell has its own seed (the command's --seed plus the slowdown's), so two runs of the command on
the same seed judge the same simulated runs: the verdict code before and after a change is compared on
identical data.
"""
from __future__ import annotations

import gzip
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..backends.board_drift import Drift, load_drift_model
from ..backends.board_profile import BRANCH_ORDER, load_board_profile
from .ab import DEFAULT_THRESHOLD_PCT, judge_pairs, round_orders
from .records import Run, RunKey
from .verdict import Outcome
from .verdict.figures import NPU_CORE, STEP, npu_core
from .verdict.history import judge_values
from .verdict.noise import NOISE_LOOKBACK
from .verdict.verdict import HISTORY, Verdict

__all__ = ["RATES", "STREAMS_DIR", "LoadedHost", "outcome", "upgrade_path", "gate_judge", "UPGRADE_PATHS",
           "kept_streams", "simulate", "store_looks", "stream_figures", "stream_record", "holds", "bound_text"]

STREAMS_DIR = Path(__file__).resolve().parent / "streams"
HISTORY_RUNS, AFTER_RUNS = 20, 5       # the earlier runs a change is judged against; a change's looks
RECORD_RUNS = NOISE_LOOKBACK - HISTORY_RUNS     # the board's runs before them: the noise factor's record
HISTORY_STEPS = 20                     # denoise steps per simulated history run (a gate run's length)
AB_ROUNDS, AB_STEPS = 12, 1            # an A/B session as `bench-ab` runs it by default
# A kept stream's windows are judged once the record holds this many positions of a 5-run group
# (as since the rates were first measured, 2 December): a verdict on a younger record widens only
# on stronger evidence, and the streams' early windows would measure that, not the board's noise.
STREAM_RECORD_POSITIONS = 60
_STAGES = ("load", "init", "run", "release")
# the loaded host (LoadedHost): its level's scale and tail, and its bursts
LOADED_SCALE, LOADED_DF = 0.15, 3
LOADED_BURST_P, LOADED_BURST_RUNS, LOADED_BURST = 0.05, 3.0, 1.6

# name -> (what it counts, the bound it must hold: ("max" or "min", rate))
RATES = {
    "board A/A, 5 looks": ("simulated board, nothing changed: any of a change's 5 looks flagged", ("max", 0.01)),
    "board A/A, lone run": ("simulated board, nothing changed: one run judged alone (confirmed by the next)",
                            ("max", 0.01)),
    "board +5 %, 5 runs": ("simulated board +5 %: found by one of the change's first 5 looks", ("min", 0.95)),
    "board +3 %, A/B": ("simulated board +3 %: one interleaved A/B session fails", ("min", 0.95)),
    "board A/A, A/B": ("simulated board, nothing changed: one interleaved A/B session fails", ("max", 0.01)),
    "kept streams A/A, 5 looks": ("kept onnxruntime A/A streams: any of a window's 5 looks flagged", ("max", 0.01)),
    "loaded A/A, 5 looks": ("simulated board on a loaded host (LoadedHost), nothing changed: any of 5 looks "
                            "REGRESSION", ("max", 0.01)),
    "loaded 3x, look 1 PASS": ("simulated board on a loaded host, 3x slower: its first run PASSES", ("never", 0.0)),
    "loaded B then C 3x, C PASS": ("a store, loaded host: stack A x5, B, then C 3x slower x3: a C run PASSES",
                                   ("never", 0.0)),
}
# a path's trials are whole stores judged run by run (~1 s each here): a tenth of --runs
PATH_SHARE = 10
LOADED_SLOW = 2.0           # the stack 3x slower (+200 %) of issue 41


class LoadedHost:
    """The host's share of a run's time on a loaded machine, one factor per run and trial, on every
    figure of the run at once: a heavy-tailed level (a Student t, LOADED_DF degrees of freedom) and
    bursts (a run starts one with LOADED_BURST_P, a burst lasts LOADED_BURST_RUNS runs on average and
    slows every figure by LOADED_BURST). The whole has a log sd of about 27 %: the benchmark sessions
    of issue 41 on this 2-core machine beside other work (load 5-10 per CPU) measured 25-30 %."""

    def __init__(self, trials: int, seed: int):
        self.rng = np.random.default_rng(seed)
        self.burst = np.zeros(trials, dtype=bool)

    def factor(self) -> np.ndarray:
        n = self.burst.size
        ends = self.rng.random(n) < 1 / LOADED_BURST_RUNS
        starts = self.rng.random(n) < LOADED_BURST_P
        self.burst = np.where(self.burst, ~ends, starts)
        level = LOADED_SCALE * self.rng.standard_t(LOADED_DF, n)
        return np.exp(level + np.where(self.burst, np.log(LOADED_BURST), 0.0))


def outcome(decisions: list) -> Outcome:
    """A look's decisions (judge_values, held to DETECT_PCT) as the verdict package reads them: a
    history Verdict of those figures, so its outcome is the gate's (REGRESSION when a figure regressed,
    INCONCLUSIVE when neither the step nor the NPU core could have found the promised slowdown)."""
    judged = Verdict(HISTORY, "simulated history", list(decisions)).outcome
    assert judged is not None           # None only for an experiment's first run (Verdict.outcome)
    return judged


def _loaded_history(model, trials: int, slow: float, seed: int) -> dict[str, int]:
    """Per trial, a board on a loaded host (LoadedHost on every run): RECORD_RUNS + HISTORY_RUNS runs,
    then AFTER_RUNS at `slow`; the outcome of each look at the change, tallied: the first look's and
    the last's (PASS, REGRESSION, INCONCLUSIVE), and whether any look said REGRESSION."""
    board, host = SimulatedBoard(Drift(model, seed, trials=trials)), LoadedHost(trials, seed + 99)
    runs = []
    for k in range(RECORD_RUNS + HISTORY_RUNS + AFTER_RUNS):
        run, factor = board.run(HISTORY_STEPS, slow if k >= RECORD_RUNS + HISTORY_RUNS else 0.0), host.factor()
        runs.append({name: v * factor for name, v in run.items()})
        board.idle(10 * model.correlation_s)
    earlier, runs = runs[:RECORD_RUNS], runs[RECORD_RUNS:]
    looks = ("look 1", f"look {AFTER_RUNS}")
    tally = {f"{look} {o}": 0 for look in looks for o in Outcome} | {"any look regression": 0}
    for i in range(trials):
        figs = [_board_figures(r, i) for r in runs]
        history, after = figs[:HISTORY_RUNS], figs[HISTORY_RUNS:]
        record = [[_board_figures(r, i) for r in earlier] + history]
        outcomes = [outcome(judge_values(history, after[:k], after[k], 10.0, look=k + 1, record=record))
                    for k in range(AFTER_RUNS)]
        tally[f"look 1 {outcomes[0]}"] += 1
        tally[f"look {AFTER_RUNS} {outcomes[-1]}"] += 1
        tally["any look regression"] += Outcome.REGRESSION in outcomes
    return tally


UPGRADE_PATHS = ("B then C 3x", "accept B, revert to A")


def upgrade_path(judge: Callable, path: str, trials: int, seed: int, loaded: bool = True) -> dict[str, int]:
    """The outcomes of `path` (UPGRADE_PATHS) through a real store, one SQLite file per trial, each run
    judged by `judge(store, run) -> Outcome` before it is written (the seam: today's judge_run through
    outcome(), the verdict package's judge once merged). "B then C 3x": stack A five runs, stack B one
    run, then stack C 3x slower three times, each C run's outcome tallied; "accept B, revert to A": A
    five runs, B five runs accepted (its last a baseline), then A again, that run's outcome tallied."""
    import tempfile

    from .store import ResultsStore
    model = load_drift_model()
    board, host = SimulatedBoard(Drift(model, seed, trials=trials)), LoadedHost(trials, seed + 99)
    plan = [("A", 0.0)] * 5 + ([("B", 0.0), ("C", LOADED_SLOW), ("C", LOADED_SLOW), ("C", LOADED_SLOW)]
                               if path == UPGRADE_PATHS[0] else [("B", 0.0)] * 5 + [("A", 0.0)])
    sims = []
    for _, slow in plan:
        figs, factor = board.run(HISTORY_STEPS, slow), host.factor() if loaded else 1.0
        sims.append({name: v * factor for name, v in figs.items()})
        board.idle(10 * model.correlation_s)
    tally = {str(o): 0 for o in Outcome}
    for i in range(trials):
        with tempfile.TemporaryDirectory() as tmp, ResultsStore(f"sqlite:///{tmp}/sim.sqlite") as store:
            for k, ((stack, _), sim) in enumerate(zip(plan, sims)):
                run = _stored_run(f"r{k}", stack, {name: float(v[i]) for name, v in sim.items()}, k)
                judged = k >= 5 and (stack == "C" or k == len(plan) - 1)
                if judged:
                    tally[str(judge(store, run))] += 1
                store.add_run(run, baseline="accepted" if path != UPGRADE_PATHS[0] and k == 9 else None)
    return tally


def gate_judge(store, run) -> Outcome:
    """The gate's judge on a stored path: the verdict package's judge(store, run) and its outcome (the
    first run of an experiment, with nothing to judge against, starts the history: a PASS here)."""
    from .verdict.judging import judge
    return judge(store, run).outcome or Outcome.PASS


def _stored_run(run_id: str, stack: str, fig: dict[str, float], minute: int) -> Run:
    """A simulated run as the store keeps it: stack A, B (driver 0.9.9) or C (driver 0.9.10)."""
    versions = {"npu_driver": {"A": "0.9.6", "B": "0.9.9", "C": "0.9.10"}[stack], "runtime_lib": "2.3.2"}
    branches = {b: fig[f"{b} core"] for b in BRANCH_ORDER}
    stages = {s: fig[s] for s in ("load", "init", "release")} | {"run": sum(branches.values())}
    return Run(run_id=run_id, key=RunKey("sim", HISTORY_STEPS, "float16", "board-sim", "m1", versions),
               time=f"2026-12-01T{minute // 60:02d}:{minute % 60:02d}:00+00:00", board_id="sim-board-00000000",
               board_model="sim-board", model="embedded", valid=True, mean_step_s=fig["step"],
               total_denoise_s=fig["step"] * HISTORY_STEPS, stages=stages, branches=branches)


class SimulatedBoard:
    """board-sim's step, vectorised over trials: per branch and stage, the profile's seconds x the
    slowdown x the branch's drift factor now, summed over the branch's subgraphs; plus the host's time."""

    def __init__(self, drift: Drift):
        profile = load_board_profile()
        self.drift = drift
        self.blocks = profile.blocks
        self.seconds = {b: {**profile.stage_seconds(b), "run": profile.core_per_invocation(b)} for b in BRANCH_ORDER}
        self.host = profile.host_per_invocation() * profile.subgraphs
        self.t = 0.0

    def run(self, steps: int, slow: float) -> dict[str, np.ndarray]:
        """One run's figures (as ab.session_figures names them), one value per trial."""
        totals: dict[str, Any] = {}
        for _ in range(steps):
            step = self.host
            for b in BRANCH_ORDER:
                for stage in _STAGES:
                    drift = self.drift.mean_factor(b, self.t, self.blocks)
                    x = self.blocks * self.seconds[b][stage] * (1 + slow) * drift
                    name = f"{b} core" if stage == "run" else stage
                    totals[name] = totals.get(name, 0) + x
                    step = step + x
                    self.t += float(np.mean(x))
            totals["step"] = totals.get("step", 0) + step
            self.t += self.host
        return {k: v / steps for k, v in totals.items()}

    def idle(self, seconds: float) -> None:
        self.t += seconds


def stream_figures(fig: dict) -> dict:
    """A run's figures as ab.session_figures names them ('step', '<branch> core', stages), named as
    judge.figures names a stored run's."""
    branches = {k[:-5]: v for k, v in fig.items() if k.endswith(" core")}
    out = {STEP: fig["step"], **{f"{b} core": v for b, v in branches.items()},
           **{f"{s} stage": fig[s] for s in ("load", "init", "release")}, "run stage": sum(branches.values())}
    npu = npu_core(branches)
    return {**out, NPU_CORE: npu} if npu else out


def flagged(history: list[dict], group: list[dict], new: dict, look: int | None, record) -> bool:
    return any(v.regression for v in judge_values(history, group, new, 10.0, look=look, record=record))


def look_verdicts(history: list[dict], after: list[dict], record=()) -> list[list]:
    """Per look k at a change: the decisions on the k-th run after it, the runs before it since the
    change its group, the noise factor learned from `record`."""
    return [judge_values(history, after[:k], after[k], 10.0, look=k + 1, record=record) for k in range(len(after))]


def store_looks(history: list[dict], after: list[dict], record=(), verdicts: list[list] | None = None) -> list[bool]:
    """Per look k at a change: whether the store's verdict on it (look_verdicts, or `verdicts` already
    judged) flags it; look 1 flagged only when the second run, judged alone against the same history,
    is flagged too (the gate's confirmation, judge.confirm)."""
    looks = [any(v.regression for v in d) for d in verdicts or look_verdicts(history, after, record)]
    if len(after) > 1 and looks[0]:
        looks[0] = flagged(history, [], after[1], 1, record)
    return looks


# the outcomes of the quiet board tallied besides its hits: how often it cannot say (INCONCLUSIVE)
QUIET_OUTCOMES = ("lone run", "look 1", f"look {AFTER_RUNS}")


def _board_history(model, trials: int, slow: float, seed: int, progress: Callable[[str], None]) -> dict[str, int]:
    """Per trial (an independent board): RECORD_RUNS + HISTORY_RUNS runs, then AFTER_RUNS runs at
    `slow`; hits of a lone run (judged alone, confirmed by the next) and of the change's looks, and
    how often the lone run, the first look and the last were INCONCLUSIVE (QUIET_OUTCOMES)."""
    board = SimulatedBoard(Drift(model, seed, trials=trials))
    runs = []
    for k in range(RECORD_RUNS + HISTORY_RUNS + AFTER_RUNS):
        runs.append(board.run(HISTORY_STEPS, slow if k >= RECORD_RUNS + HISTORY_RUNS else 0.0))
        board.idle(10 * model.correlation_s)        # the next run: another day, another drift level
    earlier, runs = runs[:RECORD_RUNS], runs[RECORD_RUNS:]
    hits = {"lone run": 0, **{f"look {k + 1}": 0 for k in range(AFTER_RUNS)}, "any look": 0,
            **{f"{name} inconclusive": 0 for name in QUIET_OUTCOMES}}
    for i in range(trials):
        figs = [_board_figures(r, i) for r in runs]
        history, after = figs[:HISTORY_RUNS], figs[HISTORY_RUNS:]
        record = [[_board_figures(r, i) for r in earlier] + history]
        alone = judge_values(history, [], after[0], 10.0, record=record)
        hits["lone run"] += any(v.regression for v in alone) and flagged(history, [], after[1], None, record)
        verdicts = look_verdicts(history, after, record)
        for name, decisions in zip(QUIET_OUTCOMES, (alone, verdicts[0], verdicts[-1])):
            hits[f"{name} inconclusive"] += outcome(decisions) is Outcome.INCONCLUSIVE
        looks = store_looks(history, after, record, verdicts)
        for k, hit in enumerate(looks):
            hits[f"look {k + 1}"] += hit
        hits["any look"] += any(looks)
        if (i + 1) % 100 == 0:
            progress(f"board history {slow:+.0%}: {i + 1}/{trials} boards")
    return hits


def _board_figures(sim: dict[str, np.ndarray], i: int) -> dict[str, float]:
    return stream_figures({k: float(v[i]) for k, v in sim.items()})


def _board_ab(model, trials: int, slow: float, seed: int) -> int:
    """Sessions (of `trials` boards) that an A/B session of AB_ROUNDS pairs fails."""
    board = SimulatedBoard(Drift(model, seed, trials=trials))
    pairs = []
    for baseline_first in round_orders(AB_ROUNDS, np.random.default_rng(seed)):     # as the session orders them
        order = ("baseline", "candidate") if baseline_first else ("candidate", "baseline")
        pairs.append({side: board.run(AB_STEPS, slow if side == "candidate" else 0.0) for side in order})
    return sum(any(v.regression for v in judge_pairs([{side: {k: float(v[i]) for k, v in p[side].items()}
                                                             for side in p} for p in pairs], DEFAULT_THRESHOLD_PCT))
               for i in range(trials))


def kept_streams(where: Path = STREAMS_DIR) -> list[Path]:
    """The kept stream files: `where` itself, or the *.json.gz in it."""
    return [where] if where.is_file() else sorted(where.glob("*.json.gz"))


def read_stream(path: Path) -> list[dict]:
    """A kept stream's A/A rounds ({'baseline': figures, 'candidate': figures}), oldest first."""
    with (gzip.open(path, "rt") if path.suffix == ".gz" else path.open()) as handle:
        return json.load(handle)["onnxruntime"]["rows"]["+0%"]["pairs"]


def stream_record(pairs: list[dict], i: int) -> list[list[dict]]:
    """The board's record before round i of a stream: its latest NOISE_LOOKBACK baseline runs."""
    return [[stream_figures(p["baseline"]) for p in pairs[max(0, i - NOISE_LOOKBACK):i]]]


def first_window() -> int:
    """The first round a history window starts at once the record is long enough for a 5-run
    group's noise factor (STREAM_RECORD_POSITIONS positions)."""
    first = HISTORY_RUNS + AFTER_RUNS - 1 + STREAM_RECORD_POSITIONS
    return first + (-(first - HISTORY_RUNS)) % AFTER_RUNS


def judge_stream(pairs: list[dict]) -> dict[str, list[int]]:
    """A stream's history windows (HISTORY_RUNS baseline runs, then AFTER_RUNS candidate runs, every
    AFTER_RUNS rounds: neighbours share most of their history, so the interval of the rate is narrower
    than it should be) and its A/B sessions: {what: [flagged, judged]}."""
    out = {"any look": [0, 0], "look 1": [0, 0], "A/B session": [0, 0]}
    for i in range(first_window(), len(pairs) - AFTER_RUNS + 1, AFTER_RUNS):
        before = [stream_figures(p["baseline"]) for p in pairs[i - HISTORY_RUNS:i]]
        after = [stream_figures(p["candidate"]) for p in pairs[i:i + AFTER_RUNS]]
        looks = store_looks(before, after, stream_record(pairs, i))
        for name, hit in (("any look", any(looks)), ("look 1", looks[0])):
            out[name][0] += hit
            out[name][1] += 1
    for i in range(0, len(pairs) - AB_ROUNDS + 1, AB_ROUNDS):
        out["A/B session"][0] += any(v.regression for v in judge_pairs(pairs[i:i + AB_ROUNDS], DEFAULT_THRESHOLD_PCT))
        out["A/B session"][1] += 1
    return out


def rate(hits: int, n: int) -> dict:
    """The rate with its 95 % Clopper-Pearson interval."""
    from scipy import stats  # here: scipy.stats costs every `results simulate` ~1 s, a refused one too
    ci = stats.binomtest(hits, n).proportion_ci(0.95) if n else None
    return {"hits": int(hits), "n": int(n), "rate": hits / n if n else None,
            "ci95": [ci.low, ci.high] if ci else None}


def simulate(runs: int, seed: int = 0, streams: list[Path] | None = None, shifts: tuple[float, ...] = (),
             progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
             board_runs: int | None = None) -> dict:
    """Every rate of RATES (and detection within 5 runs at each extra shift of `shifts`, fractions),
    `runs` simulated boards per cell, `board_runs` (default `runs`) in the quiet board's cells (its
    history and A/B sessions: the promises, whose intervals need the most boards to be decided);
    `streams`: the kept stream files (default: every kept one)."""
    started, t0 = datetime.now(UTC), time.perf_counter()
    model = load_drift_model()
    quiet = board_runs or runs
    out: dict[str, Any] = {
        "what": "the verdicts' error rates (harness/results/simulate.py)", "seed": seed, "runs": runs,
        "board_runs": quiet,
        "machine": platform.platform(), "cpus": os.cpu_count(), "load_start": list(os.getloadavg()),
        "started": started.isoformat(timespec="seconds"), "board": {}, "streams": {}}
    for slow in sorted({0.0, 0.05, *shifts}):
        progress(f"board history {slow:+.0%}: {quiet} boards, seed {seed + int(1000 * slow) + 1}")
        out["board"][f"{slow:+.0%}"] = _board_history(model, quiet, slow, seed + int(1000 * slow) + 1, progress)
    ab = {}
    for slow in (0.0, 0.03):
        progress(f"board A/B {slow:+.0%}: {quiet} sessions")
        ab[slow] = _board_ab(model, quiet, slow, seed + int(1000 * slow) + 7)
    out["loaded"] = {}
    for slow in (0.0, LOADED_SLOW):
        progress(f"loaded host {slow:+.0%}: {runs} boards")
        out["loaded"][f"{slow:+.0%}"] = _loaded_history(model, runs, slow, seed + int(1000 * slow) + 11)
    out["paths"] = {}
    for walk in UPGRADE_PATHS:
        progress(f"upgrade path {walk}: {max(1, runs // PATH_SHARE)} stores")
        out["paths"][walk] = upgrade_path(gate_judge, walk, max(1, runs // PATH_SHARE), seed + 23)
    for path in kept_streams() if streams is None else streams:
        progress(f"kept stream {path.name}")
        out["streams"][path.name] = judge_stream(read_stream(path))
    total = [sum(s["any look"][j] for s in out["streams"].values()) for j in (0, 1)]
    counts = {"board A/A, 5 looks": (out["board"]["+0%"]["any look"], quiet),
              "board A/A, lone run": (out["board"]["+0%"]["lone run"], quiet),
              "board +5 %, 5 runs": (out["board"]["+5%"]["any look"], quiet),
              "board +3 %, A/B": (ab[0.03], quiet), "board A/A, A/B": (ab[0.0], quiet),
              "kept streams A/A, 5 looks": tuple(total),
              "loaded A/A, 5 looks": (out["loaded"]["+0%"]["any look regression"], runs),
              "loaded 3x, look 1 PASS": (out["loaded"][f"{LOADED_SLOW:+.0%}"]["look 1 pass"], runs),
              "loaded B then C 3x, C PASS": (out["paths"][UPGRADE_PATHS[0]]["pass"],
                                             sum(out["paths"][UPGRADE_PATHS[0]].values()))}
    out["rates"] = {name: {**rate(*counts[name]), "what": RATES[name][0], "bound": list(RATES[name][1]),
                           "holds": holds(rate(*counts[name]), RATES[name][1])} for name in RATES}
    for slow in shifts:
        out["rates"][f"board {slow:+.0%}, 5 runs"] = {**rate(out["board"][f"{slow:+.0%}"]["any look"], quiet),
                                                      "what": f"simulated board {slow:+.0%}: found within 5 runs"}
    for name in QUIET_OUTCOMES:     # how often the quiet board, nothing changed, cannot say
        out["rates"][f"board A/A, {name} inconclusive"] = {
            **rate(out["board"]["+0%"][f"{name} inconclusive"], quiet),
            "what": f"simulated board, nothing changed: {name} INCONCLUSIVE"}
    for slow, tally in out["loaded"].items():       # the three outcomes of the first and the last look
        for what, hits in tally.items():
            if what != "any look regression":
                out["rates"][f"loaded {slow}, {what}"] = {**rate(hits, runs),
                                                         "what": f"loaded host {slow}: {what.upper()}"}
    for walk, tally in out["paths"].items():
        for what, hits in tally.items():
            out["rates"][f"{walk}, {what}"] = {**rate(hits, sum(tally.values())),
                                              "what": f"upgrade path {walk} on a loaded host: {what.upper()}"}
    out["load_end"], out["seconds"] = list(os.getloadavg()), round(time.perf_counter() - t0, 1)
    return out


def holds(cell: dict, bound: tuple[str, float]) -> str | None:
    """'holds' when the rate's whole 95 % interval is on the bound's side, 'MISSED' when it is wholly on
    the other, 'undecided' when it straddles the bound (too few boards to tell: a rate of 0 of 40 is
    [0, 8.8] % and says nothing of a 1 % bound); None when nothing was judged. A "never" bound (what
    must not happen at all: a 3x slower stack passing) has no interval on its side to hold by: it
    is 'none in N' while no trial did it, which bounds the rate by the interval's top and nothing
    more, and 'MISSED' by one."""
    if cell["ci95"] is None:
        return None
    low, high = cell["ci95"]
    kind, limit = bound
    if kind == "never":
        return f"none in {cell['n']}" if cell["hits"] == 0 else "MISSED"
    inside, outside = (high <= limit, low > limit) if kind == "max" else (low >= limit, high < limit)
    return "holds" if inside else "MISSED" if outside else "undecided"


def bound_text(bound: tuple[str, float] | list) -> str:
    """'≤ 1 %', '≥ 95 %' or 'never': a rate's bound as the tables and the command's lines write it."""
    kind, limit = bound
    return "never" if kind == "never" else f"{'≤' if kind == 'max' else '≥'} {100 * limit:g} %"


def rates_table(results: dict[str, dict]) -> str:
    """The markdown tables of `results` ({column label: a `simulate` JSON}): the rates, one column per
    result, each cell the rate, its 95 % interval and the counts; then when and where each was measured."""
    found = {name for result in results.values() for name in result["rates"]}
    names = [name for name in RATES if name in found] + sorted(found - set(RATES))
    head = ["rate", "must be", *results]
    rows = [head, ["---"] * len(head)]
    for name in names:
        bound = RATES[name][1] if name in RATES else None
        rows.append([name, bound_text(bound) if bound else "",
                     *(_cell(result["rates"].get(name)) for result in results.values())])
    when = [["measured", "date (UTC)", "machine", "CPUs", "load (1 min) start, end", "boards per cell", "seed",
             "seconds"],
            ["---"] * 8]
    for label, r in results.items():
        when.append([label, r["started"].replace("T", " ").removesuffix("+00:00"), r["machine"], str(r["cpus"]),
                     f"{r['load_start'][0]:.1f}, {r['load_end'][0]:.1f}", _boards(r), str(r["seed"]),
                     f"{r['seconds']:.0f}"])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows) + "\n\n" + \
        "\n".join("| " + " | ".join(row) + " |" for row in when) + "\n"


def _boards(result: dict) -> str:
    """'200' or '200 (quiet board 1000)': the boards per cell, and the quiet board's where it had more."""
    quiet = result.get("board_runs", result["runs"])
    return str(result["runs"]) + (f" (quiet board {quiet})" if quiet != result["runs"] else "")


def _cell(cell: dict | None) -> str:
    if not cell or cell["rate"] is None:
        return "–"
    low, high = cell["ci95"]
    return f"{100 * cell['rate']:.1f} % [{100 * low:.1f}, {100 * high:.1f}] ({cell['hits']}/{cell['n']})"
