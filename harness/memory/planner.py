"""`harness plan`: expected per-image time and added memory of each lifecycle strategy, from a board
profile data file or a measured run report, and the best choice under a memory budget.

From the board profile it reproduces the write-up's arithmetic (boards/data/rock5c-anima.toml,
[spectrum_28]: 13 computed steps of 28, 84 subgraphs, 1,713.78 s per image on demand):
  - LRU: the fixed cyclic order evicts exactly the subgraph needed next, so any pool under 84 hits
    0 times in 84 x 13 = 1,092 invocations (simulated here, not assumed);
  - resident: the first pass still loads, the other 12 save one pass each: 31.708 x 12 = 380.50 s
    (1,713.78 -> 1,333.28 s);
  - pinned:K: K x the mean lifecycle of one subgraph (31.708 / 84 = 0.377 s, at the profile's
    millisecond precision) x 12 steps: 72.4 s for 16. Per-branch means give another figure: the
    16 dearest subgraphs are FFNs at 0.510 s each, 97.9 s;
  - memory: added PSS grows by the marginal slope of the probe's last two rows (138.25 MiB per
    context): 84 resident contexts need 11.3 GiB;
  - the bound for hiding every lifecycle second behind inference at on-demand memory: on-demand
    minus all 13 passes' lifecycle, 1,274 s (wall per pass, 33.84 s) to 1,302 s (stage sums,
    412.2 s in all). prefetch:K is estimated by an event simulation of K workers.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError
from ..core.run_report import read_run_report

__all__ = ["PlanInputs", "inputs_from_profile", "inputs_from_report", "lru_hits", "plan", "memory_mib",
           "PIN_ORDER", "read_ceiling"]

PIN_ORDER = ("ffn", "self_attn", "cross_attn")
MiB = 2 ** 20


@dataclass
class PlanInputs:
    source: str
    order: list[str]                       # branch of each subgraph, in execution order
    stages: dict[str, dict[str, float]]    # branch -> {load, init, release} seconds per subgraph
    run: dict[str, float]                  # branch -> inference seconds per invocation (all streams)
    host_per_invocation: float             # host math + loop per invocation (not lifecycle, not NPU)
    passes: int                            # passes over the subgraphs per image (computed steps)
    image_total: float                     # measured on-demand seconds per image
    pass_stage_sum: float                  # load+init+release of one pass (measured mean)
    pass_wall: float | None                # lifecycle wall of one pass incl. the loop, if measured
    lifecycle_total: float                 # lifecycle seconds of one image (all passes)
    probe: list[tuple[int, float]]         # (contexts, added MiB) measured
    budget_mib: float | None
    fit_rows: int = 2
    notes: list[str] = field(default_factory=list)
    context_weight: float = 1.0            # one context's memory in measured (probe) contexts
    holds_core: bool = False               # a lifecycle stage occupies the NPU core (no overlap with inference)
    context_ceiling: int | None = None     # most live contexts the runtime initialised (probe-memory), measured

    @property
    def subgraphs(self) -> int:
        return len(self.order)


def _order(blocks: int, branches) -> list[str]:
    return [b for _ in range(blocks) for b in branches]


def inputs_from_profile(path: str | Path | None = None, budget_mib: float | None = None) -> PlanInputs:
    """The branch partition on one core, as measured; without `budget_mib` the budget is derived
    from the board RAM (budget.derived_budget)."""
    from ..backends.board_profile import load_board_profile
    from .budget import derived_budget
    p = load_board_profile(path)
    branches = p.get("model.branches", list)
    order = _order(p.blocks, branches)
    core = {b: p.core_per_invocation(b) for b in branches}
    wall = p.get("lifecycle_pass.wall_with_loop")
    host = p.host_per_invocation()
    passes = p.get("spectrum_28.compute_steps", int)
    probe = [(int(r["contexts"]), float(r["pss_added_mib"])) for r in p.probe_rows()]
    budget = budget_mib if budget_mib is not None else derived_budget(p).mib
    return PlanInputs(
        source=str(p.path), order=order, stages={b: p.stage_seconds(b) for b in branches}, run=core,
        host_per_invocation=host, passes=passes, image_total=p.get("spectrum_28.image_total_mean"),
        pass_stage_sum=p.pass_stage_sum, pass_wall=wall, lifecycle_total=p.get("spectrum_28.lifecycle_total"),
        probe=probe, budget_mib=budget,
        notes=[f"per image: {passes} computed steps ([spectrum_28]); prefetch timings per branch from "
               "[lifecycle_per_model] split like [lifecycle_pass] (an assumption, [sim] stage_split), "
               "inference from [denoise_20_steps.float16]"])


def inputs_from_report(path: str | Path, context_mib: float | None, budget_mib: float | None) -> PlanInputs:
    """From a run's JSON report (harness generate ... writes one beside the PNG)."""
    try:
        report = read_run_report(path, finished=True)
    except ConfigError as exc:
        raise ConfigError(f"--report {exc}") from None
    try:
        records = report["lifecycle_records"]
        steps = len(report["step_seconds"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"--report {path}: not a run report with lifecycle records ({exc})") from None
    if report.get("lifecycle", "on-demand") != "on-demand" or not steps:
        raise ConfigError(f"--report {path}: plan from a complete on-demand run (this one: "
                          f"{report.get('lifecycle')}, {steps} steps)")
    body = [r for r in records if r["branch"] != "decoder" and r["step"] < steps]
    first = sorted({(r["subgraph"], r["branch"]) for r in body if r["step"] == 0})
    order = [b for _, b in first]
    branches = list(OrderedDict.fromkeys(order))

    def mean(branch, stage):
        vals = [r["seconds"] for r in body if r["branch"] == branch and r["stage"] == stage]
        return float(np.mean(vals)) if vals else 0.0
    stages = {b: {s: mean(b, s) for s in ("load", "init", "release")} for b in branches}
    per_inv = {b: sum(r["seconds"] for r in body if r["branch"] == b and r["stage"] == "run")
               / max(1, steps * order.count(b)) for b in branches}
    lifecycle_total = sum(r["seconds"] for r in body if r["stage"] in ("load", "init", "release"))
    total = float(report["denoise_seconds"])
    run_total = sum(r["seconds"] for r in body if r["stage"] == "run")
    per_ctx = context_mib if context_mib is not None else \
        report.get("memory", {}).get("run_peak_pss_added_bytes", 0) / MiB
    return PlanInputs(
        source=str(path), order=order, stages=stages, run=per_inv,
        host_per_invocation=(total - run_total - lifecycle_total) / (steps * len(order)), passes=steps,
        image_total=total, pass_stage_sum=lifecycle_total / steps, pass_wall=None,
        lifecycle_total=lifecycle_total, probe=[(1, per_ctx)], budget_mib=budget_mib,
        notes=[f"from a measured on-demand run of {steps} steps; memory per context "
               f"{per_ctx:.1f} MiB ({'given' if context_mib is not None else 'the run peak, one context live'})",
               "prefetch estimates assume loading runs beside inference on other hardware (the NPU's case); "
               "on a CPU backend both share the host's cores, so they are upper bounds there"])


def read_ceiling(path: str | Path) -> int | None:
    """The context ceiling a probe-memory probe.json measured (None: the probe met none)."""
    import json
    try:
        data = json.loads(Path(path).read_text())
        ceiling = data["ceiling"]
    except FileNotFoundError:
        raise ConfigError(f"--residency {path}: no such file") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"--residency {path}: not a probe-memory probe.json ({exc})") from None
    if ceiling is None:
        return None
    if not isinstance(ceiling, dict) or not isinstance(ceiling.get("contexts"), int) or ceiling["contexts"] < 1:
        raise ConfigError(f"--residency {path}: its ceiling names no number of contexts")
    return ceiling["contexts"]


# ---------------------------------------------------------------- the arithmetic

def lru_hits(subgraphs: int, passes: int, pool: int) -> int:
    """Hits of an LRU pool of `pool` contexts over `passes` passes in the fixed cyclic order."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for _ in range(passes):
        for index in range(subgraphs):
            if index in cache:
                hits += 1
                cache.move_to_end(index)
                continue
            if len(cache) >= pool:
                cache.popitem(last=False)
            cache[index] = None
    return hits


def memory_mib(inp: PlanInputs, contexts: int) -> float:
    """Added PSS with `contexts` live: the measured table inside its range, the marginal growth of
    its last `fit_rows` rows beyond it."""
    from .residency import extrapolate
    weighted = contexts * inp.context_weight
    c = [r[0] for r in inp.probe]
    p = [r[1] for r in inp.probe]
    if weighted <= c[-1] and len(c) > 1:
        return float(np.interp(weighted, [0] + c, [0.0] + p))
    if len(c) == 1:
        return p[0] * weighted / c[0]
    return extrapolate(c, p, weighted, inp.fit_rows)


def mean_lifecycle(inp: PlanInputs) -> float:
    """Mean load+init+release of one subgraph, at the profile's millisecond precision (as the
    write-up's 0.377 s)."""
    return round(inp.pass_stage_sum / inp.subgraphs, 3)


def pinned_set(inp: PlanInputs, k: int) -> list[int]:
    ranked = sorted(range(inp.subgraphs), key=lambda i: (PIN_ORDER.index(inp.order[i])
                                                         if inp.order[i] in PIN_ORDER else 9, i))
    return ranked[:k]


def prefetch_wait(inp: PlanInputs, k: int) -> float:
    """Seconds the pipeline waits for lifecycle per image under prefetch:k: K workers in turn, each
    releasing its last context and loading the one K ahead as soon as that finished running.
    When a lifecycle holds the NPU core (`holds_core`), load and init wait for the core, and
    inference waits for them: only the host's time between invocations can hide a lifecycle."""
    seq = inp.order * inp.passes
    released = [0.0] * len(seq)
    t, waited, core_free = 0.0, 0.0, 0.0
    for i, branch in enumerate(seq):
        st = inp.stages[branch]
        start_load = released[i - k] if i >= k else 0.0
        if inp.holds_core:
            start_load = max(start_load, core_free)
        ready = start_load + st["load"] + st["init"]
        want = t + inp.host_per_invocation
        waited += max(0.0, ready - want)
        t = max(want, ready) + inp.run[branch]
        released[i] = t + st["release"]
        core_free = released[i]
    return waited


@dataclass
class Choice:
    strategy: str
    seconds: float
    added_mib: float
    live: int
    note: str = ""
    fits: bool = True
    reach: float = 0.0            # share of the hide-everything bound's saving reached


def plan(inp: PlanInputs, pools=(4, 8, 16, 83), pins=(8, 16), prefetch=(1, 2, 3, 4)) -> dict:
    n, passes, total = inp.subgraphs, inp.passes, inp.image_total
    keep_passes = passes - 1                        # the first pass loads whatever is kept
    choices = [Choice("on-demand", total, memory_mib(inp, 1), 1, "measured")]
    choices.append(Choice("resident", total - inp.pass_stage_sum * keep_passes, memory_mib(inp, n), n,
                          f"{inp.pass_stage_sum:.3f} s x {keep_passes} passes = "
                          f"{inp.pass_stage_sum * keep_passes:.2f} s saved"))
    for pool in pools:
        if pool >= n:
            continue
        hits = lru_hits(n, passes, pool)
        per_hit = inp.pass_stage_sum / n
        choices.append(Choice(f"lru:{pool}", total - hits * per_hit, memory_mib(inp, pool), pool,
                              f"{hits} hits / {n * passes} invocations"))
    mean = mean_lifecycle(inp)
    for k in pins:
        by_branch = sum(sum(inp.stages[inp.order[i]].values()) for i in pinned_set(inp, k)) * keep_passes
        saving = k * mean * keep_passes
        choices.append(Choice(f"pinned:{k}", total - saving, memory_mib(inp, k + 1), k + 1,
                              f"{k} x {mean:.3f} s (pass mean) x {keep_passes} = {saving:.1f} s saved "
                              f"(per-branch means: {by_branch:.1f} s)"))
    for k in prefetch:
        waited = prefetch_wait(inp, k)
        hidden = inp.lifecycle_total - waited
        choices.append(Choice(f"prefetch:{k}", total - hidden, memory_mib(inp, k), k,
                              f"waits {waited:.1f} of {inp.lifecycle_total:.1f} s lifecycle (event sim.)"))
    bound_sums = total - inp.lifecycle_total
    bound_wall = total - inp.pass_wall * passes if inp.pass_wall else bound_sums
    low, high = sorted((bound_wall, bound_sums))
    for c in choices:
        c.fits = inp.budget_mib is None or c.added_mib <= inp.budget_mib
        if inp.context_ceiling is not None and c.live > inp.context_ceiling:
            c.fits = False
            c.note += f"; over the measured context ceiling ({inp.context_ceiling} live contexts)"
        c.reach = (total - c.seconds) / (total - high) if total > high else 0.0
    fitting = [c for c in choices if c.fits]
    best = min(fitting, key=lambda c: (round(c.seconds, 6), c.added_mib)) if fitting else None
    return {"source": inp.source, "notes": inp.notes, "budget_mib": inp.budget_mib,
            "choices": [asdict(c) for c in choices], "best": asdict(best) if best else None,
            "bound": {"low": low, "high": high, "added_mib": memory_mib(inp, 1),
                      "what": "hide every lifecycle second behind inference at on-demand memory: on-demand "
                              f"minus all {passes} passes' lifecycle (wall per pass {inp.pass_wall}, stage sums "
                              f"{inp.lifecycle_total:.1f} s)"},
            "mean_lifecycle_s": mean, "full_residency_added_gib": memory_mib(inp, n) / 1024,
            "invocations": n * passes}
