"""Verdict benchmark, run by hand: false positives and detection of the three verdicts side by side.

    .venv/bin/python tools/bench_verdicts.py [--trials 2000] [--seed 0]
        [--only board-sim|real-board-sim|onnxruntime|onnxruntime-load]

For A/A comparisons (nothing changed) and injected slowdowns of +2, +3, +5 and +10 % it counts how
often each verdict says "regression":
  fixed      today's rule: one candidate run's mean step time over one baseline run's by > 10 %;
  history    the store's verdict (judge.judge_values: every figure, the NPU core first) on each
             of the 5 runs after the change, each with the runs before it since the change as its
             group and its look's part of the run's confidence (judge.look_alpha), against the 20
             earlier valid runs, the noise factor learned from the board's record (the latest
             NOISE_LOOKBACK runs before the change: on the simulated board --record-runs more,
             on onnxruntime the stream's baseline runs; harness/results/noise.py): each look, and
             a change flagged by any of them (the sequence); the
             first run judged alone at the whole confidence (a single verdict); the step alone as it
             was judged before (history_verdict on the 5-run mean); on the simulated board also a
             change point found at the change in those 25 runs;
  A/B        one interleaved session of --rounds pairs, every figure judged (judge_pairs): the
             session fails when any figure does.
(a) the simulated board: the board-sim timing model (boards/data/rock5c-anima.toml) with the drift
    model of boards/data/board-drift.toml, vectorised over --trials independent boards (a Monte
    Carlo of what board-sim does run by run, without its sleeps); the slowdown stretches every NPU
    stage (load, init, run, release) of every branch, as board-sim's `slowdown` option does. Runs of
    the history are --history-steps long and far apart (independent drift levels); an A/B round is
    one --ab-steps run per side, back to back.
(a') a few real board-sim A/B sessions (scaled sleeps, drift on) at A/A and +3 %, as a check of (a).
(b) onnxruntime here: the embedded model, real runs through the faults backend (slow=xFACTOR
    stretches load, init and run of every subgraph), one long interleaved stream of baseline and
    candidate runs per condition (the session's own loop and order), cut into sessions and history
    windows (from the first round with MIN_POSITIONS positions of record before it, so that every
    window is judged with a learned noise factor, and also without one to compare); the streams are
    kept in --out, and --ort-pairs judges kept ones again (tools/data/streams keeps the streams the
    README's figures come from, gzipped). --memory-probe also times a memory-bound
    probe (MemoryProbe) around every run and prints how closely the step follows it and the
    calibration probe.
(b') the same while the load trends: CPU burners switched on in every second block of rounds, every
    run inside a HostCondition (CPU count, load, calibration probe); history windows judged by the
    step alone (the verdict before the host's condition was recorded) and by the store's verdict with
    it, which answers "not comparable" across a change of load, counted apart from regressions.
(c) --spending-grid: the board-sim history of (a), every look's figures judged once, then the
    sequence's false positives and detection within 5 runs for each alpha spending exponent (--rho),
    NPU core share (--share) and look 1's part (--first): how judge.SPENDING_RHO, PRIMARY_SHARE and
    FIRST_LOOK_SHARE were chosen (on one --seed; the rates reported come from (a) on another);
    --grid-cells keeps the looks' p-values so other rules are judged on them without running again.
Rates are printed with a 95 % Clopper-Pearson interval. Nothing is asserted: this is a measurement.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.core.atomic import atomic_write_json  # noqa: E402
from harness.backends.board_drift import Drift, load_drift_model  # noqa: E402
from harness.backends.board_profile import BRANCH_ORDER, load_board_profile  # noqa: E402
from harness.results.ab import DEFAULT_THRESHOLD_PCT, judge_pairs, round_orders  # noqa: E402
from harness.results.judge import (FIRST_LOOK_SHARE, GROUP_RUNS, NPU_CORE, STEP, judge_values, look_alpha,  # noqa: E402
                                   npu_core)
from harness.results.noise import MIN_POSITIONS, NOISE_LOOKBACK  # noqa: E402
from harness.results.verdicts import HISTORY_FLOOR_PCT, change_points, fixed_verdict, history_verdict  # noqa: E402

SLOWDOWNS = (0.0, 0.02, 0.03, 0.05, 0.10)
STAGES = ("load", "init", "run", "release")
HISTORY_RUNS, AFTER_RUNS = 20, 5


class SimulatedBoard:
    """board-sim's step, vectorised: per branch and stage, the profile's seconds x slowdown x the
    branch's drift factor now, summed over the branch's subgraphs; plus the host's fixed time."""

    def __init__(self, drift: Drift):
        profile = load_board_profile()
        self.drift = drift
        self.blocks = profile.blocks
        self.seconds = {b: {**profile.stage_seconds(b), "run": profile.core_per_invocation(b)} for b in BRANCH_ORDER}
        self.host = profile.host_per_invocation() * profile.subgraphs
        self.t = 0.0

    def run(self, steps: int, slow: float) -> dict[str, np.ndarray]:
        """One run's figures (as harness.results.ab.session_figures names them), per trial."""
        totals: dict[str, np.ndarray] = {}
        for _ in range(steps):
            step = self.host
            for b in BRANCH_ORDER:
                for stage in STAGES:
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


def rate(hits: int, n: int) -> str:
    """'1.2 % [0.6, 2.1]': the rate and its 95 % Clopper-Pearson interval ('none judged' for none)."""
    if not n:
        return "none judged (too few rounds)"
    ci = stats.binomtest(hits, n).proportion_ci(0.95)
    return f"{100 * hits / n:5.1f} % [{100 * ci.low:.1f}, {100 * ci.high:.1f}]"


def per_trial(figures: dict[str, np.ndarray], i: int) -> dict[str, float]:
    return {k: float(v[i]) for k, v in figures.items()}


def product_figures(sim: dict[str, np.ndarray], i: int) -> dict[str, float]:
    """Trial i's run as harness.results.judge.figures names it: step, NPU core, branches, stages."""
    branches = {b: float(sim[f"{b} core"][i]) for b in BRANCH_ORDER}
    out = {STEP: float(sim["step"][i]), NPU_CORE: npu_core(branches), **{f"{b} core": v for b, v in branches.items()}}
    out.update({f"{s} stage": float(sim[s][i]) for s in ("load", "init", "release")})
    out["run stage"] = sum(branches.values())
    return out


def board_history(model, trials: int, slow: float, steps: int, seed: int, history_runs: int,
                  sequence: bool = False, record_runs: int = 0) -> dict[str, int]:
    """The history verdict as the store gives it (judge_values: every figure, the run's confidence
    shared out, the noise factor learned from the board's record: the history and `record_runs`
    runs before it), run by run after the change: look k judges the group of the first k runs."""
    board = SimulatedBoard(Drift(model, seed, trials=trials))
    runs = []
    for k in range(record_runs + history_runs + AFTER_RUNS):
        runs.append(board.run(steps, slow if k >= record_runs + history_runs else 0.0))
        board.idle(10 * model.correlation_s)        # the next run: another day, another level
    earlier, runs = runs[:record_runs], runs[record_runs:]
    series = np.stack([r["step"] for r in runs], axis=1)                 # [trials, runs]
    hits = {"fixed 1 run vs 1 run": 0, "step alone, 5 runs": 0, "history 1 run alone": 0,
            **{f"history look {k + 1}": 0 for k in range(AFTER_RUNS)}, "history any of looks 1-5": 0,
            "each alone, any of 1-5": 0, "change point 5 runs": 0}
    for i, row in enumerate(series):
        before, after = row[:history_runs], row[history_runs:]
        hits["fixed 1 run vs 1 run"] += fixed_verdict("step", before[-1:], after[:1]).regression
        hits["step alone, 5 runs"] += history_verdict("step", before, after).regression
        figs = [product_figures(r, i) for r in runs]
        record = [[product_figures(r, i) for r in earlier] + figs[:history_runs]]
        hits["history 1 run alone"] += all(_flagged(figs[:history_runs], [], figs[history_runs + j], None, record)
                                           for j in (0, 1))        # confirmed by the next run, as the gate does
        looks = store_looks(figs[:history_runs], figs[history_runs:], record)
        for k, flagged in enumerate(looks):
            hits[f"history look {k + 1}"] += flagged
        hits["history any of looks 1-5"] += any(looks)
        if sequence:        # the same 5 runs each judged alone (no group): the sequence's rate without it
            hits["each alone, any of 1-5"] += any(any(v.regression for v in judge_values(
                figs[:history_runs], [], figs[history_runs + k], 10.0, record=record)) for k in range(AFTER_RUNS))
        found = change_points(row)
        hits["change point 5 runs"] += (any(abs(p - history_runs) <= 1 for p in found) if slow
                                        else bool(found))
    return hits


def look_pvalues(model, trials: int, slow: float, steps: int, seed: int, history_runs: int):
    """(figure labels, one-sided p-values, shifts in %), each [trials, looks, figures]: every look's
    figures judged once (history_verdict at 99 %) and the p-value read back from the interval, which
    is delta +- t(df) x se, so that any level can be applied afterwards (regression: p < the
    figure's level and the shift over the floor, as the verdict decides)."""
    board = SimulatedBoard(Drift(model, seed, trials=trials))
    runs = []
    for k in range(history_runs + AFTER_RUNS):
        runs.append(board.run(steps, slow if k >= history_runs else 0.0))
        board.idle(10 * model.correlation_s)
    labels = list(product_figures(runs[0], 0))
    p = np.ones((trials, AFTER_RUNS, len(labels)))
    shift = np.zeros_like(p)
    for i in range(trials):
        figs = [product_figures(r, i) for r in runs]
        for k in range(AFTER_RUNS):
            for j, label in enumerate(labels):
                v = history_verdict(label, [f[label] for f in figs[:history_runs]],
                                    [f[label] for f in figs[history_runs:history_runs + k + 1]], confidence=0.99)
                df = v.n - 1 + v.runs - 1
                half = (np.log1p(v.ci_pct[1] / 100) - np.log1p(v.ci_pct[0] / 100)) / 2
                se = half / stats.t.ppf(0.995, df)
                p[i, k, j] = stats.t.sf(np.log1p(v.shift_pct / 100) / se, df) if se > 0 else 0.5
                shift[i, k, j] = v.shift_pct
    return labels, p, shift


def section_spending_grid(args) -> dict:
    model = load_drift_model()
    print(f"(c) alpha spending grid: {args.trials} trials per cell, seed {args.seed}; a change flagged by any "
          f"of its {GROUP_RUNS} looks")
    cells = _grid_cells(model, args)
    out = {}
    for rho in args.rho or [1.0, 2.0, 3.0, 4.0]:
        for share in args.share or [0.5, 0.6, 0.7, 0.75, 0.8, 0.9]:
            for first in args.first or [FIRST_LOOK_SHARE]:
                row = {f"{slow:+.0%}": _grid_flags(*cell, rho, share, first) for slow, cell in cells.items()}
                hits = {k: int(v.any(axis=1).sum()) for k, v in row.items()}
                look1 = {k: int(v[:, 0].sum()) for k, v in row.items()}
                out[f"rho {rho:g}, share {share:g}, first {first:g}"] = {"any": hits, "look 1": look1}
                flagged = row["+10%"].any(axis=1)
                at = np.where(flagged, row["+10%"].argmax(axis=1) + 1, GROUP_RUNS + 1)
                print(f"  rho {rho:g}, NPU core share {share:g}, look 1's part {first:g}: A/A "
                      f"{rate(hits['+0%'], args.trials)}; "
                      + "; ".join(f"{k} {rate(h, args.trials)}" for k, h in hits.items() if k != "+0%")
                      + f"; +10 % by look 1 {rate(look1['+10%'], args.trials)}, first flagged at look "
                        f"{at.mean():.2f} on average")
    return out


def _grid_cells(model, args) -> dict:
    """Every condition's look p-values, computed once (the costly part) and kept in --grid-cells."""
    if args.grid_cells and args.grid_cells.exists():
        kept = np.load(args.grid_cells, allow_pickle=False)
        labels = [str(x) for x in kept["labels"]]
        return {slow: (labels, kept[f"p{i}"], kept[f"s{i}"]) for i, slow in enumerate(SLOWDOWNS)}
    cells = {slow: look_pvalues(model, args.trials, slow, args.history_steps, args.seed + int(1000 * slow) + 1,
                                args.history_runs) for slow in SLOWDOWNS}
    if args.grid_cells:
        labels = next(iter(cells.values()))[0]
        np.savez(args.grid_cells, labels=np.array(labels), **{f"p{i}": c[1] for i, c in enumerate(cells.values())},
                 **{f"s{i}": c[2] for i, c in enumerate(cells.values())})
    return cells


def _grid_flags(labels, p, shift, rho: float, share: float, first: float = FIRST_LOOK_SHARE) -> np.ndarray:
    """[trials, looks]: flagged by some figure, each look's level split as judge._confidences does."""
    others = len(labels) - 1
    level = np.array([[look_alpha(k + 1, rho, first) * (share if label == NPU_CORE else (1 - share) / others)
                       for label in labels] for k in range(AFTER_RUNS)])
    return ((p < level[None]) & (shift > HISTORY_FLOOR_PCT)).any(axis=2)


def board_ab(model, trials: int, slow: float, steps: int, rounds: int, threshold: float, seed: int) -> int:
    board = SimulatedBoard(Drift(model, seed, trials=trials))
    pairs = []
    for baseline_first in round_orders(rounds, np.random.default_rng(seed)):     # as the session orders them
        order = ("baseline", "candidate") if baseline_first else ("candidate", "baseline")
        pairs.append({side: board.run(steps, slow if side == "candidate" else 0.0) for side in order})
    flagged = 0
    for i in range(trials):
        session = [{side: per_trial(p[side], i) for side in p} for p in pairs]
        flagged += any(v.regression for v in judge_pairs(session, threshold))
    return flagged


def section_board(args) -> dict:
    model = load_drift_model()
    print(f"(a) simulated board: drift sigma {100 * model.sigma:.2f} % per branch (from {model.pairs}), "
          f"correlation {model.correlation_s:g} s, invocation jitter {100 * model.jitter:g} %; "
          f"{args.trials} trials per cell, seed {args.seed}")
    out = {"seed": args.seed, "sigma": model.sigma, "correlation_s": model.correlation_s, "jitter": model.jitter,
           "rows": {}}
    taus = [] if args.no_ab else [model.correlation_s, *args.tau]
    for slow in SLOWDOWNS:
        hits = board_history(model, args.trials, slow, args.history_steps, seed=args.seed + int(1000 * slow) + 1,
                             history_runs=args.history_runs, sequence=args.sequence, record_runs=args.record_runs)
        if not args.sequence:
            del hits["each alone, any of 1-5"]
        for tau in taus:
            m = model.scaled(correlation_s=tau)
            name = "A/B session" + ("" if tau == model.correlation_s else f" (tau {tau:g} s)")
            hits[name] = board_ab(m, args.trials, slow, args.ab_steps, args.rounds, args.ab_threshold,
                                  seed=args.seed + int(1000 * slow) + 7)
        out["rows"][f"{slow:+.0%}"] = hits
        print_row(slow, hits, args.trials)
    return out


def print_row(slow: float, hits: dict, n: int) -> None:
    what = "A/A (false positives)" if slow == 0 else f"+{100 * slow:g} % (detection)"
    print(f"  {what}")
    for name, h in hits.items():
        print(f"    {name:<28} {rate(h, n)}")


def section_real_board_sim(args) -> dict:
    """A few real board-sim A/B sessions (sleeping through the scaled board time, drift on): the
    check that the vectorised model above is what board-sim does."""
    from harness.backends.board_sim import normalize_options
    from harness.model.bundle import load_bundle
    from harness.sampling.reference_run import sample_settings
    from harness.results.ab import Side, run_session
    from tools.bench_lifecycle import partition
    bundle = load_bundle(ROOT / "models" / "embedded")
    part = partition(bundle, "float16")
    print(f"(a') real board-sim sessions: {args.real_sessions} per condition, {args.rounds} rounds, "
          f"time scale {args.time_scale:g}, drift on")
    out = {}
    for slow in (0.0, 0.03):
        flagged, shifts = 0, []
        for k in range(args.real_sessions):
            base = normalize_options({"time_scale": args.time_scale, "drift": 100 + k})
            cand = {**base, "slowdown": f"x{1 + slow}"}
            session = run_session(bundle, Side("baseline", part, "board-sim", base),
                                  Side("candidate", part, "board-sim", cand),
                                  sample_settings(bundle, steps=args.ab_steps), rounds=args.rounds,
                                  threshold_pct=args.ab_threshold)
            flagged += bool(session.regressions)
            shifts.append(next(v.shift_pct for v in session.verdicts if v.label == "step"))
        out[f"{slow:+.0%}"] = {"flagged": flagged, "n": args.real_sessions, "step_shift_pct": shifts}
        print(f"  {'A/A' if slow == 0 else '+3 %'}: {rate(flagged, args.real_sessions)} of sessions flagged; "
              f"step shift {np.mean(shifts):+.2f} % (sd {np.std(shifts):.2f}), load {os.getloadavg()[0]:.2f}")
    return out


def section_onnxruntime(args) -> dict:
    from harness.model.bundle import load_bundle
    from tools.bench_lifecycle import partition
    bundle = load_bundle(ROOT / "models" / "embedded")
    # kept streams are judged without running anything: no partition to export for them
    part = None if args.ort_pairs else partition(bundle, "float16")
    streams = (f"the streams recorded in {', '.join(p.name for p in args.ort_pairs)}" if args.ort_pairs else
               f"{args.ort_runs} rounds (baseline + candidate run, {args.ort_steps} step each, each inside a "
               f"HostCondition) per condition")
    print(f"(b) onnxruntime here: embedded model, {streams}, A/B sessions of {args.rounds} rounds")
    sources = recorded_streams(args.ort_pairs) if args.ort_pairs else [("", {})]
    out, totals = {"rows": {}, "streams": {}}, {}
    for name, recorded in sources:
        if name:
            print(f"  {name}")
        rows = {}
        for slow in args.ort_slow or SLOWDOWNS:
            if recorded and f"{slow:+.0%}" not in recorded:
                continue
            rows[f"{slow:+.0%}"] = row = ort_row(bundle, part, slow, recorded.get(f"{slow:+.0%}"), args)
            total = totals.setdefault(f"{slow:+.0%}", {})
            counted = {**{v: (h, row["n"][v]) for v, h in row["hits"].items()},
                       **{f"{v} + condition": (h, n)
                          for v, (h, _, n) in row["windows"].items() if v.startswith("store")}}
            for verdict, (hits, n) in counted.items():
                cell = total.setdefault(verdict, [0, 0])
                cell[0], cell[1] = cell[0] + hits, cell[1] + n
        out["streams"][name] = rows
    if not args.ort_pairs:      # a stream run now: its rows where a kept --out file has them
        out["rows"] = out["streams"].pop("")
    if len(sources) > 1:
        print(f"  all {len(sources)} streams")
        for slow, cells in totals.items():
            print(f"    {slow}")
            for verdict, (hits, n) in cells.items():
                print(f"    {verdict:<28} {rate(hits, n)}")
    out["total"] = totals
    return out


def recorded_streams(paths: list[Path]) -> list[tuple[str, dict]]:
    """(file name, its onnxruntime rows) of each kept --out file, plain or gzipped (the streams under
    tools/data/streams are kept gzipped)."""
    import gzip
    sources = []
    for path in paths:
        with (gzip.open(path, "rt") if path.suffix == ".gz" else path.open()) as handle:
            sources.append((path.name, json.load(handle)["onnxruntime"]["rows"]))
    return sources


def ort_row(bundle, part, slow: float, kept: dict | None, args) -> dict:
    """One condition's stream (run now, or `kept` from a recorded one) judged by every verdict."""
    started = time.perf_counter()
    if kept is not None:        # a recorded stream judged again (by today's verdicts): nothing is run
        pairs = kept["pairs"]       # a stream kept without its hosts' conditions has no such windows
        hosts = [{side: _host(h) for side, h in pair.items()} for pair in kept["hosts"]] if "hosts" in kept else None
        memory = kept.get("memory_probe")
    else:
        memory = [] if args.memory_probe else None
        pairs, hosts, _ = ort_load_stream(bundle, part, slow, args.ort_runs, args.ort_runs, Burners(0),
                                          steps=args.ort_steps, memory=memory)
    base = np.array([p["baseline"]["step"] for p in pairs])
    cand = np.array([p["candidate"]["step"] for p in pairs])
    hits, n = judge_stream(pairs, base, cand, args.rounds, args.ab_threshold)
    windows = judge_load_windows(pairs, hosts, [False] * len(pairs)).get("quiet", {}) if hosts else {}
    cv = float(np.std(np.log(base), ddof=1))
    pair_sd = float(np.std(np.log(cand / base), ddof=1))
    row = {"hits": hits, "n": n, "windows": windows, "baseline_step_log_sd": cv,
           "pair_step_log_sd": pair_sd, "seconds": time.perf_counter() - started,
           "pairs": pairs, "hosts": [{side: vars(_cond(h)) for side, h in pair.items()} for pair in hosts or []],
           **({"memory_probe": memory} if memory else {})}
    print(f"  {'A/A (false positives)' if slow == 0 else f'+{100 * slow:g} % (detection)'}: run-to-run sd "
          f"of the step {100 * cv:.1f} %, within a pair {100 * pair_sd:.1f} %, {time.perf_counter() - started:.0f} s, "
          f"load {os.getloadavg()[0]:.2f}")
    for name, h in hits.items():
        print(f"    {name:<28} {rate(h, n[name])}")
    if memory and hosts:
        print("    " + _what_moves(base, [h["baseline"].probe_s for h in hosts], [m["baseline"] for m in memory]))
    for name, (h, nc, total) in windows.items():
        if name.startswith("store"):
            print(f"    {name + ' + condition':<28} {rate(h, total)}, not comparable {nc} of {total}")
    return row


def _what_moves(steps, probes, memory) -> str:
    """How closely the baseline runs' step follows each probe (correlation of the logs, run by run)."""
    log = np.log(np.asarray(steps, dtype=float))
    r = {name: float(np.corrcoef(log, np.log(np.asarray(v, dtype=float)))[0, 1])
         for name, v in (("calibration probe", probes), ("memory probe", memory))}
    return ("correlation of the step's log with the calibration probe's "
            f"{r['calibration probe']:+.2f}, with the memory probe's {r['memory probe']:+.2f} (baseline runs)")


def _host(kept: dict):
    """A kept run's host condition in the shape HostCondition has."""
    from types import SimpleNamespace
    return SimpleNamespace(cpus=kept["host_cpus"], load_per_cpu=kept["host_load"], probe_s=kept["host_probe_s"])


class Burners:
    """CPU-burning processes (a busy loop each) switched on and off: the machine's load trend made on
    purpose, so the run does not wait for other jobs to make one."""

    def __init__(self, count: int):
        self.count, self.procs = count, []

    def set(self, on: bool) -> None:
        import subprocess
        if on and not self.procs:
            self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.count)]
        elif not on:
            self.stop()

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait()
        self.procs = []


def ab_figures(fig: dict) -> dict:
    """An A/B run's figures (session_figures) named as harness.results.judge.figures names them."""
    branches = {k[:-5]: v for k, v in fig.items() if k.endswith(" core")}
    out = {STEP: fig["step"], **{f"{b} core": v for b, v in branches.items()},
           **{f"{s} stage": fig[s] for s in ("load", "init", "release")}, "run stage": sum(branches.values())}
    npu = npu_core(branches)
    return {**out, NPU_CORE: npu} if npu else out


class MemoryProbe:
    """A fixed piece of memory-bound work: a sum over a 32 MiB array gathered in a fixed random order
    (a 32 MiB index; together twice this machine's 32 MiB last-level cache, so most reads miss it). The
    calibration probe's 256 KiB stay in a core's own cache and do not see what other tenants of the machine do to the
    shared cache and memory; this one does. Timed around every run of a stream with --memory-probe,
    a measurement of what moves the runs, not part of the store's verdict."""

    def __init__(self):
        self.values = np.ones(4 << 20)
        self.order = np.random.default_rng(7).permutation(self.values.size)

    def seconds(self) -> float:
        started = time.perf_counter()
        self.values[self.order].sum()
        return time.perf_counter() - started


def ort_load_stream(bundle, part, slow: float, rounds: int, block: int, burners: Burners, steps: int = 1,
                    memory: list | None = None):
    """`rounds` rounds of a baseline and a faults-backend candidate run (in the session's drawn order),
    each run inside a HostCondition; the burners run in every second block of `block` rounds. With a
    `memory` list, a MemoryProbe is timed before and after every run and each round's {side: mean
    seconds} appended to it."""
    from harness.results.ab import session_figures
    from harness.results.condition import HostCondition
    from harness.runtime.run import RunRequest, run_partitioned
    from harness.sampling.reference_run import sample_settings
    settings, prompt = sample_settings(bundle, steps=steps), bundle.cfg.prompt["default"]
    pairs, hosts, loaded = [], [], []
    orders = round_orders(rounds + 1, np.random.default_rng())      # as the session orders them
    probe = MemoryProbe() if memory is not None else None
    for r in range(rounds + 1):                     # round 0 builds the sessions: not counted
        on = r > 0 and ((r - 1) // block) % 2 == 1
        burners.set(on)
        pair, host, held = {}, {}, {}
        for side in (("baseline", "candidate") if orders[r] else ("candidate", "baseline")):
            options = {"slowdown": 1 + slow} if side == "candidate" and slow else {}
            before = probe.seconds() if probe else 0.0
            with HostCondition() as cond:
                report = run_partitioned(RunRequest(bundle, part, "faults", prompt, settings, options,
                                                    lifecycle="on-demand", verify=r == 0)).report
            pair[side], host[side] = session_figures(report), cond
            if probe:
                held[side] = (before + probe.seconds()) / 2
        if r > 0:
            pairs.append(pair), hosts.append(host), loaded.append(on)
            if probe:
                memory.append(held)
        if r % 200 == 0 and r:
            print(f"    {r}/{rounds} rounds, load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    burners.stop()
    return pairs, hosts, loaded


def judge_load_windows(pairs, hosts, loaded) -> dict[str, dict[str, list[int]]]:
    """History windows (20 baseline runs, then 5 candidate runs) sliding by 5 rounds, judged by the
    step alone without the host's condition (the verdict before it was recorded) and by the store's
    verdict with it (judge.comparability, then judge_values), look 1 and the group of 5; windows in
    one load condition and windows across a change of load counted apart.
    Returns {window class: {verdict: [regression, not comparable, windows]}}."""
    from harness.results.judge import comparability
    out: dict[str, dict[str, list[int]]] = {}
    for i in range(_first_window(), len(pairs) - AFTER_RUNS + 1, AFTER_RUNS):
        span = loaded[i - HISTORY_RUNS:i + AFTER_RUNS]
        where = ("loaded" if span[0] else "quiet") if len(set(span)) == 1 else "load changed"
        cells = out.setdefault(where, {})
        base = [pairs[j]["baseline"]["step"] for j in range(i - HISTORY_RUNS, i)]
        cand = [pairs[j]["candidate"]["step"] for j in range(i, i + AFTER_RUNS)]
        history = [ab_figures(pairs[j]["baseline"]) for j in range(i - HISTORY_RUNS, i)]
        pool = [_cond(hosts[j]["baseline"]) for j in range(i - HISTORY_RUNS, i)]
        group = [ab_figures(pairs[j]["candidate"]) for j in range(i, i + AFTER_RUNS)]
        conds = [_cond(hosts[j]["candidate"]) for j in range(i, i + AFTER_RUNS)]
        results = {"step alone, 1 run": (history_verdict("step", base, cand[0]).regression, False),
                   "step alone, 5 runs": (history_verdict("step", base, cand).regression, False)}
        flags = store_looks(history, group, board_record_before(pairs, i))
        looks = [(False, True) if comparability(pool, conds[:k + 1])[2] else (flags[k], False)
                 for k in range(AFTER_RUNS)]
        results["store, 1 run"], results["store, 5 runs"] = looks[0], looks[-1]
        for name, (regressed, not_comparable) in results.items():
            cell = cells.setdefault(name, [0, 0, 0])
            cell[0] += regressed
            cell[1] += not_comparable
            cell[2] += 1
    return out


def _cond(host):
    from types import SimpleNamespace
    return SimpleNamespace(host_cpus=host.cpus, host_load=host.load_per_cpu, host_probe_s=host.probe_s)


def section_onnxruntime_load(args) -> dict:
    """(b') onnxruntime here while the load trends: blocks of rounds with and without CPU burners."""
    from harness.model.bundle import load_bundle
    from tools.bench_lifecycle import partition
    bundle = load_bundle(ROOT / "models" / "embedded")
    part = partition(bundle, "float16")
    burners = Burners(args.burners or os.cpu_count() or 1)
    print(f"(b') onnxruntime while the load trends: {args.load_rounds} rounds per condition, "
          f"{burners.count} CPU burner(s) on in every second block of {args.load_block} rounds")
    out = {}
    try:
        for slow in (0.0, *args.load_slow):
            started = time.perf_counter()
            pairs, hosts, loaded = ort_load_stream(bundle, part, slow, args.load_rounds, args.load_block, burners)
            out[f"{slow:+.0%}"] = row = _load_row(pairs, hosts, loaded, args)
            row["seconds"] = time.perf_counter() - started
            print(f"  {'A/A (false positives)' if slow == 0 else f'+{100 * slow:g} % (detection)'}: "
                  f"{row['seconds']:.0f} s, load {os.getloadavg()[0]:.2f}")
            for name, value in row["noise"].items():
                print(f"    {name}: {value}")
            for where, cells in row["windows"].items():
                for name, (hits, nc, n) in cells.items():
                    print(f"    {where:<13} {name:<20} regression {rate(hits, n)}, not comparable {nc} of {n}")
            print(f"    A/B sessions: {rate(*row['ab'])}; fixed rule: {rate(*row['fixed'])}")
    finally:
        burners.stop()
    return out


def _load_row(pairs, hosts, loaded, args) -> dict:
    windows = judge_load_windows(pairs, hosts, loaded)
    noise = {}
    for state, name in ((False, "quiet"), (True, "loaded")):
        steps = np.array([p["baseline"]["step"] for p, on in zip(pairs, loaded) if on == state])
        probes = np.array([h["baseline"].probe_s for h, on in zip(hosts, loaded) if on == state])
        load = [h["baseline"].load_per_cpu for h, on in zip(hosts, loaded) if on == state]
        if steps.size > 1:
            sd = {k: 100 * np.std(np.log(v), ddof=1) for k, v in (("step", steps), ("probe", probes))}
            noise[name] = (f"step {np.median(steps):.3f} s, run-to-run sd {sd['step']:.1f} %; "
                           f"probe {1000 * np.median(probes):.2f} ms (sd {sd['probe']:.1f} %); "
                           f"load per CPU {min(load):.2f}-{max(load):.2f}")
    ab = [any(v.regression for v in judge_pairs(pairs[i:i + args.rounds], args.ab_threshold))
          for i in range(0, len(pairs) - args.rounds + 1, args.rounds)]
    fixed = [fixed_verdict("step", [p["baseline"]["step"]], [p["candidate"]["step"]]).regression for p in pairs]
    return {"windows": windows, "noise": noise, "ab": (sum(ab), len(ab)), "fixed": (sum(fixed), len(fixed)),
            "steps": [[p["baseline"]["step"], p["candidate"]["step"]] for p in pairs],
            "probes": [[h["baseline"].probe_s, h["candidate"].probe_s] for h in hosts],
            "loads": [[h["baseline"].load_per_cpu, h["candidate"].load_per_cpu] for h in hosts], "loaded": loaded}


def store_looks(history: list[dict], after: list[dict], record: list[list[dict]] = ()) -> list[bool]:
    """Per look k at a change: the store's verdict (judge_values) on the k-th run after it, with the
    runs before it since the change as its group, at look k's part of the change's alpha, the noise
    factor learned from `record` (the board's earlier runs, as judge.board_record gives them); look 1
    flagged only when the second run, judged against the same history, is flagged too (the gate's
    confirmation, judge.confirm: there the second run is one more run of the same job, here the
    change's run 2, which look 2 judges as well)."""
    looks = [_flagged(history, after[:k], after[k], k + 1, record) for k in range(len(after))]
    if len(after) > 1 and looks[0]:     # the gate's confirmation (judge.confirm): the second run, same history
        looks[0] = _flagged(history, [], after[1], 1, record)
    return looks


def _flagged(history: list[dict], group: list[dict], new: dict, look: int | None, record) -> bool:
    return any(v.regression for v in judge_values(history, group, new, 10.0, look=look, record=record))


def board_record_before(pairs, i: int) -> list[list[dict]]:
    """The board's record before round i of a stream: its latest NOISE_LOOKBACK baseline runs."""
    return [[ab_figures(p["baseline"]) for p in pairs[max(0, i - NOISE_LOOKBACK):i]]]


def _first_window() -> int:
    """The first round a history window starts at once the record is long enough for the noise
    factor of a 5-run group (MIN_POSITIONS positions)."""
    first = HISTORY_RUNS + AFTER_RUNS - 1 + MIN_POSITIONS
    return first + (-(first - HISTORY_RUNS)) % AFTER_RUNS


def judge_stream(pairs, base, cand, rounds: int, threshold: float):
    """The stream cut into non-overlapping A/B sessions, and history windows sliding over it: 20
    baseline runs, then the 5 candidate runs after them, every 5 rounds (so neighbouring windows
    share 15 of their 20 history runs: the rate is the rate, its interval is narrower than it should
    be). The step alone (history_verdict) and the store's verdict (judge_values: every figure, the
    NPU core first, the runs since the change as a group), look 1, look 5 and any of the 5."""
    hits = {"fixed 1 run vs 1 run": 0, "step alone, 1 run": 0, "step alone, 5 runs": 0, "store, 1 run": 0,
            "store, 5 runs": 0, "store, any of runs 1-5": 0, "no noise factor, any of 1-5": 0, "A/B session": 0}
    n = dict.fromkeys(hits, 0)
    for i in range(len(pairs)):
        hits["fixed 1 run vs 1 run"] += fixed_verdict("step", base[i:i + 1], cand[i:i + 1]).regression
        n["fixed 1 run vs 1 run"] += 1
    for i in range(_first_window(), len(pairs) - AFTER_RUNS + 1, AFTER_RUNS):
        history = base[i - HISTORY_RUNS:i]
        hits["step alone, 1 run"] += history_verdict("step", history, cand[i]).regression
        hits["step alone, 5 runs"] += history_verdict("step", history, cand[i:i + AFTER_RUNS]).regression
        before = [ab_figures(p["baseline"]) for p in pairs[i - HISTORY_RUNS:i]]
        after = [ab_figures(p["candidate"]) for p in pairs[i:i + AFTER_RUNS]]
        looks = store_looks(before, after, board_record_before(pairs, i))
        hits["store, 1 run"] += looks[0]
        hits["store, 5 runs"] += looks[-1]
        hits["store, any of runs 1-5"] += any(looks)
        hits["no noise factor, any of 1-5"] += any(store_looks(before, after))
        for name in ("step alone, 1 run", "step alone, 5 runs", "store, 1 run", "store, 5 runs",
                     "store, any of runs 1-5", "no noise factor, any of 1-5"):
            n[name] += 1
    for i in range(0, len(pairs) - rounds + 1, rounds):
        hits["A/B session"] += any(v.regression for v in judge_pairs(pairs[i:i + rounds], threshold))
        n["A/B session"] += 1
    return hits, n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=2000, help="simulated boards per cell (default %(default)s)")
    p.add_argument("--rounds", type=int, default=12, help="pairs per A/B session (default %(default)s)")
    p.add_argument("--ab-steps", type=int, default=1, help="board steps per A/B run (default %(default)s)")
    p.add_argument("--ab-threshold", type=float, default=DEFAULT_THRESHOLD_PCT,
                   help="A/B threshold in %% (default %(default)s)")
    p.add_argument("--history-steps", type=int, default=20, help="board steps per history run (default %(default)s)")
    p.add_argument("--history-runs", type=int, default=HISTORY_RUNS,
                   help="earlier runs before the change (default %(default)s; the store looks back on 30)")
    p.add_argument("--record-runs", type=int, default=NOISE_LOOKBACK - HISTORY_RUNS,
                   help="board-sim: the board's earlier runs before the history, which the noise factor is learned "
                        "from with it (default %(default)s: the store's NOISE_LOOKBACK)")
    p.add_argument("--no-ab", action="store_true", help="board-sim: the history rows only")
    p.add_argument("--seed", type=int, default=0,
                   help="board-sim: added to every cell's drift seed (default %(default)s; choose parameters on "
                        "one seed, report them on another)")
    p.add_argument("--sequence", action="store_true",
                   help="board-sim: also judge each of the 5 runs after the change alone (doubles the time)")
    p.add_argument("--spending-grid", action="store_true",
                   help="board-sim: the alpha spending grid (section c) instead of section (a)")
    p.add_argument("--rho", type=float, action="append", help="(c) spending exponents (default 1, 2, 3, 4)")
    p.add_argument("--first", type=float, action="append",
                   help="(c) look 1's parts of a change's false-alarm rate (default judge.FIRST_LOOK_SHARE)")
    p.add_argument("--grid-cells", type=Path,
                   help="(c) keep the looks' p-values in this .npz, or read them from it when it exists")
    p.add_argument("--share", type=float, action="append",
                   help="(c) NPU core shares (default 0.5, 0.6, 0.7, 0.75, 0.8, 0.9)")
    p.add_argument("--tau", type=float, action="append", default=[],
                   help="also run the A/B rows with this drift correlation time in board seconds")
    p.add_argument("--ort-runs", type=int, default=240, help="onnxruntime rounds per condition (default %(default)s)")
    p.add_argument("--ort-steps", type=int, default=1)
    p.add_argument("--memory-probe", action="store_true",
                   help="(b) time a memory-bound probe around every run and say how the step follows it")
    p.add_argument("--ort-pairs", type=Path, action="append",
                   help="(b) judge the streams recorded in this earlier --out file (.json, or .json.gz as kept in "
                        "tools/data/streams) instead of running them; repeat it for several, counted together too")
    p.add_argument("--ort-slow", type=float, action="append", default=[],
                   help="(b) only these slowdowns, e.g. 0 for the A/A row alone (default: 0, 0.02, 0.03, 0.05, 0.1)")
    p.add_argument("--real-sessions", type=int, default=5,
                   help="real board-sim A/B sessions per condition in section real-board-sim (default %(default)s)")
    p.add_argument("--time-scale", type=float, default=0.005, help="board-sim time scale for those")
    p.add_argument("--load-rounds", type=int, default=120, help="(b') rounds per condition (default %(default)s)")
    p.add_argument("--load-block", type=int, default=30, help="(b') rounds per load block (default %(default)s)")
    p.add_argument("--load-slow", type=float, action="append", default=[],
                   help="(b') slowdowns to detect under load, e.g. 0.1 (default: 0.1 and 0.3)")
    p.add_argument("--burners", type=int, help="(b') CPU burners (default: one per CPU)")
    p.add_argument("--only", choices=("board-sim", "real-board-sim", "onnxruntime", "onnxruntime-load"),
                   action="append")
    p.add_argument("--out", type=Path, default=ROOT / "out" / "bench-verdicts.json")
    args = p.parse_args()
    only = set(args.only or ("board-sim", "real-board-sim", "onnxruntime", "onnxruntime-load"))
    args.load_slow = args.load_slow or [0.1, 0.3]
    result = {"args": {k: str(v) for k, v in vars(args).items()}, "machine": platform.platform(),
              "cpus": os.cpu_count(), "load_start": os.getloadavg()}
    print(f"{platform.node()}: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; A/B threshold "
          f"{args.ab_threshold:g} %, history floor 3 %, fixed rule 10 %")
    if "board-sim" in only and args.spending_grid:
        result["spending_grid"] = section_spending_grid(args)
    elif "board-sim" in only:
        result["board_sim"] = section_board(args)
    if "real-board-sim" in only:
        result["real_board_sim"] = section_real_board_sim(args)
    if "onnxruntime" in only:
        result["onnxruntime"] = section_onnxruntime(args)
    if "onnxruntime-load" in only:
        result["onnxruntime_load"] = section_onnxruntime_load(args)
    result["load_end"] = os.getloadavg()
    atomic_write_json(args.out, json.loads(json.dumps(result, default=float)))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
