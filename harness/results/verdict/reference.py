"""What a run is compared with: its board's accepted stack (a saved baseline, else the stack the board
first ran the experiment on, else the fleet's baseline of its board model), the runs since a change
(its group and its look), a probation's count and whether the run's host is comparable."""
from __future__ import annotations

from ..condition import condition_line, memory_gib, memory_label
from ..constants import CONFIDENCE, GROUP_RUNS, LOOKBACK, NOISE_LOOKBACK
from ..records import Run
from ..store import ResultsStore
from .decision import Decision
from .looks import since_change
from .probe import probe_verdict
from .record import same_cpus
from .verdict import HISTORY

__all__ = ["reference", "split", "is_confirmation", "since_stack_change", "ran_before", "comparability",
           "READ_RUNS"]

# Runs of a key read from the store for one judgement: the noise factor's record; the lookback, a
# change's group and the host's condition need fewer. A fleet's store holds thousands, each with
# its subgraphs' rows, and a verdict must not read them all.
READ_RUNS = max(NOISE_LOOKBACK, LOOKBACK + GROUP_RUNS)


def reference(store: ResultsStore, run: Run) -> tuple[Run, str, bool, bool] | None:
    """(reference run, how it was chosen, from the fleet?, a saved baseline?) or None: a run of the
    board's accepted stack (the module docstring), never merely its latest run, so a new stack stays
    on probation run after run until it is accepted."""
    saved = store.baseline(run.board_id, run.key.experiment)
    if saved:
        return saved[0], f"the baseline of board {run.board_id} ({saved[1]}, run {saved[0].run_id})", False, True
    # no baseline: the stack the board first ran the experiment on with a valid run
    accepted = next((digest for digest, _, valid in store.stacks(run.board_id, run.key.experiment) if valid), None)
    latest = store.runs(board=run.board_id, key=accepted, valid=True, latest=1) if accepted else []
    if latest:
        return latest[-1], f"the latest valid run of board {run.board_id} (run {latest[-1].run_id})", False, False
    fleet = store.fleet_baseline(run.board_model, run.key.experiment, exclude_board=run.board_id)
    if fleet:
        return fleet[0], (f"the fleet's baseline of board model {run.board_model} (board {fleet[0].board_id}, "
                          f"run {fleet[0].run_id}): this board has none of its own yet"), True, True
    return None


def is_confirmation(run: Run) -> bool:
    """A run the gate measured to confirm or clear another's regression (gates.benchmark.decide)."""
    return run.run_id.endswith("-confirm")


def since_stack_change(store: ResultsStore, run: Run) -> list[Run]:
    """The board's runs of `run`'s experiment since it last ran another stack, all of `run`'s key,
    oldest first (at most READ_RUNS): what a probation counts and its looks are made of."""
    recent = store.runs(board=run.board_id, experiment=run.key.experiment, latest=READ_RUNS)
    start = len(recent)
    while start and recent[start - 1].key.digest == run.key.digest:
        start -= 1
    return recent[start:]


def ran_before(store: ResultsStore, run: Run, accepted: Run) -> bool:
    """Whether the board ran `run`'s stack before the accepted one (`accepted`'s) first ran: a return
    to it is a revert."""
    order = [digest for digest, _, _ in store.stacks(run.board_id, run.key.experiment)]
    return run.key.digest in order and accepted.key.digest in order and \
        order.index(run.key.digest) < order.index(accepted.key.digest)


def split(pool: list[Run], run: Run, kind: str, from_fleet: bool,
           streak: list[Run]) -> tuple[list[Run], list[Run], int | None]:
    """(history, group since the change, look): for an upgrade the group is the valid runs of the new
    stack since the board last ran another (`streak`) while they are fewer than GROUP_RUNS; for a
    history, see since_change."""
    if from_fleet:
        return pool, [], None
    if kind == HISTORY:
        return since_change(pool, run)
    ours = [r for r in streak if r.valid][-GROUP_RUNS:]
    return (pool, ours, len(ours) + 1) if len(ours) + 1 <= GROUP_RUNS else (pool, [], None)


def comparability(pool: list[Run], judged: list[Run]) -> tuple[list[Run], Decision | None, str | None]:
    """(the history runs of the judged runs' CPU count and memory size, the probe's verdict, why not
    comparable or None).

    The judged runs (the group since the change and the new run, last) are compared with the runs of
    `pool` on the same number of CPUs and memory size (condition.memory_gib); when the new run and
    enough of those carry a calibration probe, the judged runs' probes are judged against theirs, both
    ways (condition.probe_verdict)."""
    run = judged[-1]
    if run.host_cpus is not None:
        same = [r for r in pool if same_cpus(run, r)]
        if pool and not same:
            cpus = sorted({r.host_cpus for r in pool}, key=lambda c: -1 if c is None else c)   # None: not recorded
            return pool, None, f"the history ran on {cpus} CPUs, this run on {run.host_cpus}"
        pool = same
    if run.host_memory_bytes is not None:
        same = [r for r in pool if _same_memory(run, r)]
        if pool and not same:
            sizes = sorted({memory_label(memory_gib(r.host_memory_bytes)) for r in pool})
            return pool, None, (f"the history ran with {', '.join(sizes)} of memory, this run with "
                                f"{memory_label(memory_gib(run.host_memory_bytes))}")
        pool = same
    probes = [r.host_probe_s for r in pool[-LOOKBACK:] if r.host_probe_s is not None]
    mine = [r.host_probe_s for r in judged if r.host_probe_s is not None]
    if run.host_probe_s is None:
        return pool, None, None
    verdict = probe_verdict(probes, mine, CONFIDENCE)
    if verdict is None or not verdict.regression:
        return pool, verdict, None
    then = [r.host_load for r in pool[-LOOKBACK:] if r.host_load is not None]
    history = f"load {sum(then) / len(then):.2f} per CPU on average" if then else "no load recorded"
    faster = "faster" if verdict.shift_pct < 0 else "slower"
    return pool, verdict, (f"{verdict.line()}: this machine ran {faster} than in the {verdict.n} runs it would be "
                           f"judged against ({condition_line(run.host_cpus, run.host_load, run.host_probe_s)} "
                           f"now; {history} in the history), so its times say nothing about the stack; "
                           f"run it on a quiet machine or use the interleaved A/B session")


def _same_memory(run: Run, other: Run) -> bool:
    """Whether `other` ran with `run`'s memory size (either without one recorded counts as the same,
    as same_cpus: a store from before the column must still judge)."""
    return other.host_memory_bytes is None or memory_gib(other.host_memory_bytes) == memory_gib(run.host_memory_bytes)
