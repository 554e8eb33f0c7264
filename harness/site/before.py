"""The store as it was before a stored run was written, held in memory: what the site judges each
series' latest run and each upgrade's run against, as `ResultsStore.as_before(run)` shows it to
`judge_stored` (the gate's verdict, replayed), without a write transaction or a copy of the store.

`Written` holds the runs the site has read (every run, oldest first, as store.runs gives them), the
order they were written in and the baselines; `Written.before(run)` is a view answering the reads a
verdict makes (runs, baseline, fleet_baseline, stacks) as the store's own queries do on the rows
written before `run`: the runs with a smaller place in the written order, the baselines saved on
them. A verdict that comes to read anything else fails with AttributeError rather than read
something else, and tests/unit/test_site_before.py holds every answer to judge_stored's.

One view answers a query from the runs of one board, key or experiment (an index each), not from the
whole store, the newest first up to the `latest` asked for: 80 judgements of a lab's 10,000 runs
in memory take ~0.3 s of their ~4 s (the rest is the verdicts' own arithmetic)."""
from __future__ import annotations

from collections import defaultdict

from ..results.records import Run

__all__ = ["Written", "Before"]


class Written:
    """Every run of a store with its place in the order written, and its baselines."""

    def __init__(self, runs: list[Run], order: dict[tuple[str, str], int],
                 baselines: list[tuple[str, str, str, str]]):
        """`runs`: store.runs() (time order); `order`: store.written_order(); `baselines`:
        store.baseline_pairs() (the one saved last last)."""
        self.place = {id(r): order[(r.run_id, r.key.case)] for r in runs}
        self.all = runs
        self.index: dict[str, defaultdict[object, list[Run]]] = {
            name: defaultdict(list) for name in ("board", "key", "experiment", "board_model", "board+key",
                                                 "board+experiment")}
        for r in runs:
            for name, value in (("board", r.board_id), ("key", r.key.digest), ("experiment", r.key.experiment),
                                ("board_model", r.board_model), ("board+key", (r.board_id, r.key.digest)),
                                ("board+experiment", (r.board_id, r.key.experiment))):
                self.index[name][value].append(r)
        stored = {(r.run_id, r.key.case): r for r in runs}
        self.baselines = [(stored[(run_id, case)], reason) for _, run_id, case, reason in baselines]

    def before(self, run: Run) -> Before:
        """The view of the store as it was before the stored `run` was written."""
        return Before(self, self.place[id(run)])


class Before:
    """The reads of ResultsStore that a verdict makes, on the runs written before a place."""

    def __init__(self, written: Written, upto: int):
        self.written, self.upto = written, upto

    def _seen(self, run: Run) -> bool:
        return self.written.place[id(run)] < self.upto

    # The same keyword-only filters as ResultsStore.runs, which this answers in memory.
    def runs(self, *, board: str | None = None, board_model: str | None = None,  # noqa: PLR0913
             key: str | None = None,
             experiment: str | None = None, valid: bool | None = None, case: str | None = None,
             backend: str | None = None, run_id: str | None = None, other_than_board: str | None = None,
             cpus: int | None = None, latest: int | None = None, whole: bool = True) -> list[Run]:
        """ResultsStore.runs on the runs written before (time order; `whole` as the runs were read)."""
        index = self.written.index
        indexed = [index[name].get(value, []) for name, value in
                   (("board", board), ("key", key), ("experiment", experiment), ("board_model", board_model),
                    ("board+key", (board, key)), ("board+experiment", (board, experiment)))
                   if value is not None and None not in (value if isinstance(value, tuple) else (value,))]
        pool = min(indexed, key=len) if indexed else self.written.all
        place, upto = self.written.place, self.upto

        def wanted(r: Run) -> bool:
            k = r.key
            return (place[id(r)] < upto and (board is None or r.board_id == board)
                    and (board_model is None or r.board_model == board_model)
                    and (key is None or k.digest == key) and (experiment is None or k.experiment == experiment)
                    and (valid is None or r.valid == valid) and (case is None or k.case == case)
                    and (backend is None or k.backend == backend) and (run_id is None or r.run_id == run_id)
                    and (other_than_board is None or r.board_id != other_than_board)
                    and (cpus is None or r.host_cpus is None or r.host_cpus == cpus))
        # every list of Written is in the store's order (time, then the order written): the newest
        # first, up to `latest` of them, as the store's ORDER BY ... DESC LIMIT reads them
        found = []
        for r in reversed(pool):
            if wanted(r):
                found.append(r)
                if latest is not None and len(found) == latest:
                    break
        return found[::-1]

    def baseline(self, board: str, experiment: str) -> tuple[Run, str] | None:
        return next(((r, reason) for r, reason in self.written.baselines
                     if r.board_id == board and r.key.experiment == experiment and self._seen(r)), None)

    def fleet_baseline(self, board_model: str, experiment: str, exclude_board: str) -> tuple[Run, str] | None:
        return next(((r, reason) for r, reason in reversed(self.written.baselines)
                     if r.board_model == board_model and r.key.experiment == experiment
                     and r.board_id != exclude_board and self._seen(r)), None)

    def stacks(self, board: str, experiment: str) -> list[tuple[str, int, int]]:
        """ResultsStore.stacks: (key digest, runs, valid runs) in the order of each key's first run."""
        first: dict[str, tuple[str, int]] = {}
        counts: dict[str, list[int]] = {}
        for r in self.runs(board=board, experiment=experiment):
            digest, place = r.key.digest, self.written.place[id(r)]
            seen = first.get(digest)
            # the store's min(time), min(id) of the key's runs: each taken alone
            first[digest] = (r.time, place) if seen is None else (min(seen[0], r.time), min(seen[1], place))
            counts.setdefault(digest, [0, 0])
            counts[digest][0] += 1
            counts[digest][1] += bool(r.valid)
        return [(digest, counts[digest][0], counts[digest][1]) for digest in sorted(first, key=lambda d: first[d])]
