"""The plan across partition granularities and NPU core masks, beside the lifecycle strategies.

The board measured one case: the 84-branch partition, one context on one core (planner.py plans it
as measured). Every other case is modelled from that case's figures with the models the board
profile's [plan] table names (boards/data/rock5c-anima.toml), each an assumption:
  - lifecycle and PSS per context: a fixed part per context + a part per weight MiB, fitted to the
    per-branch lifecycle means and to the residency probe (`fits`);
  - inference and host seconds per step: the branch partition's, whatever the granularity (the host
    part per subgraph from the profile's `host_before`, which board-sim pauses too);
  - core masks: "stream-per-core" (a context per CFG stream, each on its own core) and
    "all-cores" (one context on 0_1_2 at [sim] multi_core_speedup).
The choice is the fastest within the budget; among those within [plan] equal_within of it, the one
with the least added memory.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..backends.board_profile import fits
from ..core.errors import ConfigError
from ..partition.granularity import BRANCH, Granularity, parse_granularity
from .assumptions import Assumptions, board_assumptions
from .budget import derived_budget
from .planner import PlanInputs, inputs_from_profile, plan

__all__ = ["CORE_MASKS", "inputs_for", "plan_space", "choose", "assumptions", "budget_effect"]

CORE_MASKS = ("auto", "stream-per-core", "all-cores")
GRANULARITIES = ("branch", "block", "blocks:2", "blocks:4", "blocks:7", "blocks:14")


def _streams(profile, core_mask: str, assumed: Assumptions) -> tuple[int, float]:
    """(contexts per subgraph, inference time factor) of a core mask choice."""
    if core_mask == "auto":
        return 1, 1.0
    if core_mask == "stream-per-core":
        return profile.sim("streams_measured", int), 1.0 / assumed.stream_per_core_speedup.value
    if core_mask == "all-cores":
        return 1, 1.0 / assumed.multi_core_speedup.value
    raise ConfigError(f"core mask choice '{core_mask}': choose {', '.join(CORE_MASKS)}")


def inputs_for(profile, granularity: Granularity, core_mask: str, budget_mib: float,
               assumed: Assumptions | None = None) -> PlanInputs:
    """PlanInputs of one granularity and core mask: the measured branch case, remodelled."""
    assumed = assumed or board_assumptions(profile)
    measured = replace(inputs_from_profile(profile.path, budget_mib),
                       holds_core=bool(assumed.lifecycle_holds_core.value))
    if granularity == BRANCH and core_mask == "auto":
        return measured
    f = replace(fits(profile), lifecycle=assumed.lifecycle.value)
    per_context, time_factor = _streams(profile, core_mask, assumed)
    branches = profile.get("model.branches", list)
    shares = profile.stage_shares()
    blocks = profile.blocks
    groups = granularity.groups(blocks) if granularity.fused else [[b] for b in range(blocks) for _ in branches]
    names, stages, run, weights = [], {}, {}, []
    for index, group in enumerate(groups):
        name = f"{granularity}#{index}" if granularity.fused else branches[index % len(branches)]
        if granularity.fused:
            weight = sum(f.weights_mib.values()) * len(group)
            life = f.lifecycle_of(weight)
            core = sum(measured.run[b] for b in branches) * len(group)
        else:
            weight, life, core = f.weights_mib[name], profile.lifecycle_of(name), measured.run[name]
        names.append(name)
        weights.append(weight)
        stages[name] = {s: life * share * per_context for s, share in shares.items()}
        run[name] = core * time_factor
    # the branch partition keeps its measured pass (the per-branch means round to 31.72, not 31.708)
    pass_sum = (measured.pass_stage_sum * per_context if not granularity.fused
                else sum(sum(stages[n].values()) for n in names))
    npu_saved = sum(measured.run[b] for b in measured.order) - sum(run[n] for n in names)
    # [plan] host_model through the profile, as board-sim pauses it: per subgraph, its branch bodies' share
    host_step = sum(profile.host_before(len(g) * len(branches) if granularity.fused else 1) for g in groups)
    mean_weight = sum(f.weights_mib.values()) / len(branches)
    weight_of_one = f.pss_of(float(np.mean(weights))) * per_context / f.pss_of(mean_weight)
    total = measured.image_total + measured.passes * (pass_sum - measured.pass_stage_sum - npu_saved)
    return replace(measured, source=f"{granularity}, {core_mask}", order=names, stages=stages, run=run,
                   host_per_invocation=host_step / len(names), image_total=total, pass_stage_sum=pass_sum,
                   pass_wall=None, lifecycle_total=pass_sum * measured.passes, context_weight=weight_of_one,
                   notes=[])


def _row(granularity: str, core_mask: str, result: dict) -> dict:
    on_demand = result["choices"][0]
    resident = next(c for c in result["choices"] if c["strategy"] == "resident")
    return {"granularity": granularity, "core_mask": core_mask, "contexts": len(result["_order"]),
            "on_demand": on_demand, "resident": resident, "best": result["best"],
            "choices": result["choices"]}


def plan_space(profile, budget_mib: float | None = None, granularities=GRANULARITIES,
               core_masks=CORE_MASKS, assumed: Assumptions | None = None, ceiling: int | None = None) -> dict:
    """Every granularity x core mask, each with its lifecycle strategies, and the choice; `assumed`
    (board_assumptions) carries what probe-board measured in place of the profile's assumptions."""
    assumed = assumed or board_assumptions(profile)
    derived = derived_budget(profile)
    budget = derived.mib if budget_mib is None else budget_mib
    rows = []
    for text in granularities:
        granularity = parse_granularity(text, profile.blocks)
        for mask in core_masks:
            inp = replace(inputs_for(profile, granularity, mask, budget, assumed), context_ceiling=ceiling)
            n = inp.subgraphs
            result = plan(inp, pools=tuple(k for k in (4, 8, 16) if k < n),
                          pins=tuple(k for k in (8, 16) if k < n),
                          prefetch=tuple(k for k in (1, 2, 3, 4) if k <= n))
            result["_order"] = inp.order
            rows.append(_row(str(granularity), mask, result))
    fixed, per_mib = assumed.lifecycle.value
    f = fits(profile)
    return {"budget_mib": budget, "derived_budget": {"mib": derived.mib, "how": derived.how},
            "budget_given": budget_mib is not None, "rows": rows,
            "fits": {"lifecycle_fixed_s": fixed, "lifecycle_per_mib_s": per_mib,
                     "pss_fixed_mib": f.pss[0], "pss_per_mib": f.pss[1]},
            "assumptions": assumed.lines(), "equal_within": profile.get("plan.equal_within"),
            "choice": choose(rows, profile.get("plan.equal_within"), budget)}


def choose(rows: list[dict], equal_within: float, budget: float) -> dict | None:
    """The fastest fitting choice; within `equal_within` of it, the least added memory."""
    fitting = [(r, c) for r in rows for c in r["choices"] if c["fits"]]
    if not fitting:
        return None
    fastest = min(c["seconds"] for _, c in fitting)
    near = [(r, c) for r, c in fitting if c["seconds"] <= fastest * (1 + equal_within)]
    row, best = min(near, key=lambda rc: (rc[1]["added_mib"], rc[1]["seconds"]))
    return {"granularity": row["granularity"], "core_mask": row["core_mask"], **best,
            "reason": (f"{row['granularity']} / {row['core_mask']} / {best['strategy']}: "
                       f"{best['seconds']:.1f} s per image, the fastest within the {budget:.0f} MiB budget "
                       f"(fastest {fastest:.1f} s; {len(near)} choices within {100 * equal_within:g} % of it), "
                       f"and the least memory of those ({best['added_mib']:.0f} MiB)")}


def assumptions(profile, result: dict) -> list[str]:
    """Each assumption the chosen estimate rests on, named as the data file names it."""
    choice, f = result["choice"], result["fits"]
    named = [f"budget: {result['derived_budget']['how']}" if not result["budget_given"]
             else f"budget: given, {result['budget_mib']:.0f} MiB",
             "per image: [spectrum_28] 13 computed steps of 28 (15 forecast), on-demand image "
             f"{profile.get('spectrum_28.image_total_mean'):.2f} s measured",
             "stages: [sim] stage_split (each branch's lifecycle split like the pass: load, init, release)"]
    if choice is None:
        return named
    if choice["strategy"].startswith("prefetch"):
        named.append("prefetch: an event simulation of K workers whose load/init overlap inference "
                     "unless a lifecycle holds the core (below)")
    if choice["granularity"] != "branch":
        named += [f"[plan] lifecycle_model: {f['lifecycle_fixed_s']:.3f} s per context + "
                  f"{1000 * f['lifecycle_per_mib_s']:.2f} ms per weight MiB",
                  f"[plan] pss_model: {f['pss_fixed_mib']:.1f} MiB per context + {f['pss_per_mib']:.3f} MiB "
                  "per weight MiB, relative to the measured branch context",
                  "[plan] context_weights_mib: FP16 weights from the architecture",
                  "[plan] npu_model: inference per step unchanged", "[plan] host_model: host per step unchanged"]
    if choice["core_mask"] == "stream-per-core":
        named.append(f"[plan] core_masks stream-per-core: {profile.sim('streams_measured', int)} contexts per "
                     "subgraph, one per core")
    return named


def budget_effect(derived: dict, given: dict, derived_mib: float, given_mib: float) -> str:
    """One line: why a given budget changes the choice made under the derived one, or does not."""
    def label(c):
        return f"{c['granularity']} / {c['core_mask']} / {c['strategy']}" if c else "nothing"
    if not derived or not given:
        return (f"--budget {given_mib:.0f} MiB (derived {derived_mib:.0f} MiB): the choice is {label(given)}"
                + (" (nothing fits the given budget)" if not given else " (nothing fits the derived one)"))
    if label(derived) == label(given):
        return (f"--budget {given_mib:.0f} MiB keeps {label(given)} (derived budget {derived_mib:.0f} MiB): it needs "
                f"{given['added_mib']:.0f} MiB, within both, and "
                + ("nothing the larger budget admits is faster by more than the rule's share"
                   if given_mib >= derived_mib else "the smaller budget still holds it"))
    if given["added_mib"] > derived_mib:
        why = (f"{label(given)} needs {given['added_mib']:.0f} MiB, over the derived budget, and is "
               f"{derived['seconds'] - given['seconds']:.1f} s faster per image")
    else:
        why = f"{label(derived)} needs {derived['added_mib']:.0f} MiB, over {given_mib:.0f} MiB"
    return (f"--budget {given_mib:.0f} MiB changes the choice from {label(derived)} to {label(given)} "
            f"(derived budget {derived_mib:.0f} MiB): {why}")
