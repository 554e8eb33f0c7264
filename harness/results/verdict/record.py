"""The board's record: its latest valid runs of the experiment, the series every figure's noise factor
(noise.py) is learned from, and which runs of a history are on the run's CPU count."""
from __future__ import annotations

from collections.abc import Sequence

from ..constants import NOISE_LOOKBACK
from ..records import Run
from ..store import ResultsStore
from .figures import figures
from .noise import NoiseFactor, noise_factor

__all__ = ["board_record", "record_of", "record_before", "figure_noise", "same_cpus", "scope"]

def figure_noise(record: Sequence[list[dict]], label: str, n: int, k: int, alpha: float) -> NoiseFactor:
    """The noise factor of one figure for a group of k runs against n earlier ones, judged at the
    one-sided level `alpha` (noise.py)."""
    return noise_factor([[r[label] for r in series if r.get(label, 0) > 0] for series in record], n, k, alpha)


def board_record(store: ResultsStore, run: Run, from_fleet: bool = False,
                 group: Sequence[Run] = ()) -> list[list[dict]]:
    """The figures of the latest NOISE_LOOKBACK valid runs of `run`'s experiment on its board (on the
    other boards of its model when it is judged against the fleet) and its CPU count, one series per
    board, key and CPU count, oldest first, the runs of its `group` left out: what the noise factor
    is learned from."""
    found = store.runs(experiment=run.key.experiment, valid=True, latest=NOISE_LOOKBACK + len(group),
                       cpus=run.host_cpus, **scope(run, from_fleet))
    # a fleet's history interleaves its boards, and so does its record: one series in time order
    return record_of(found, group, by_board=not from_fleet)


def scope(run: Run, from_fleet: bool) -> dict:
    """The store filters for the runs `run` is judged by: its board's, or its board model's other boards'."""
    return {"board_model": run.board_model, "other_than_board": run.board_id} if from_fleet else {"board": run.board_id}


def record_of(runs: list[Run], group: Sequence[Run] = (), by_board: bool = True) -> list[list[dict]]:
    """board_record on runs at hand (valid, oldest first, all before the run judged): the latest
    NOISE_LOOKBACK of them but the runs of `group` (a change must not widen its own interval), one
    series of figures per board (with `by_board`), key and CPU count (a step between CPU counts is
    another machine, not noise)."""
    leave_out = {(g.run_id, g.key.case) for g in group}
    kept = [r for r in runs if (r.run_id, r.key.case) not in leave_out]
    series: dict[tuple, list[dict]] = {}
    for r in kept[-NOISE_LOOKBACK:]:
        series.setdefault((r.board_id if by_board else None, r.key.digest, r.host_cpus), []).append(figures(r))
    return list(series.values())


def record_before(runs: list[Run], run: Run, group: Sequence[Run] = ()) -> list[list[dict]]:
    """board_record on runs at hand (oldest first, `run` among them or newer than them all): the
    valid runs of `run`'s experiment on its board and CPU count that came before it."""
    upto = next((i for i, r in enumerate(runs) if r is run), len(runs))      # as the gate saw it
    return record_of([r for r in runs[:upto] if r.valid and r.board_id == run.board_id
                      and r.key.experiment == run.key.experiment and same_cpus(run, r)], group)


def same_cpus(run: Run, other: Run) -> bool:
    """Whether `other` ran on `run`'s CPU count (either without one recorded counts as the same):
    the Python twin of store.runs(cpus=)."""
    return run.host_cpus is None or other.host_cpus in (None, run.host_cpus)
