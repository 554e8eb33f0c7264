"""Results store timings, run by hand: SQLite and PostgreSQL side by side in one run.

    .venv/bin/python tools/bench_results_store.py [--runs 200]

For each database: seconds to write one run (one transaction: the run, its 4 stages, 3 branches,
28 steps and 84 subgraphs, as a 28-step board run has), seconds to read every run back, and two
processes writing --runs runs each at once (wall time, runs stored). PostgreSQL is a throw-away
cluster (tests/postgres.py). Databases alternate write by write, so load from other users of the
machine hits both alike. Nothing is asserted: timings on a shared machine are noisy.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.results.records import SubgraphTime  # noqa: E402
from harness.results.store import ResultsStore  # noqa: E402
from tests.postgres import PostgresCluster, find_pg_bin  # noqa: E402
from tests.results_data import make_run  # noqa: E402

__all__ = ["board_sized_run", "main"]

_WRITER = """
import sys
from tools.bench_results_store import board_sized_run
from harness.results.store import ResultsStore
store = ResultsStore(sys.argv[1])
for i in range(int(sys.argv[3])):
    store.add_run(board_sized_run(f"{sys.argv[2]}-{i}", i))
"""


def board_sized_run(run_id: str, i: int):
    """A run with the figures of a 28-step run of the 84-subgraph partition."""
    run = make_run(run_id, 25.0 + (i % 7) / 10, minute=i, steps=28)
    subgraphs = tuple(SubgraphTime(str(3 * b + k), b, br, 0.3) for b in range(28)
                      for k, br in enumerate(("self_attn", "cross_attn", "ffn")))
    return replace(run, subgraphs=subgraphs)


def _writers(url: str, runs: int) -> tuple[float, int]:
    start = time.perf_counter()
    children = [subprocess.Popen([sys.executable, "-c", _WRITER, url, name, str(runs)], cwd=ROOT)
                for name in ("a", "b")]
    assert [c.wait() for c in children] == [0, 0]
    wall = time.perf_counter() - start
    with ResultsStore(url) as store:
        return wall, len(store.runs())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args(argv)
    bin_dir = find_pg_bin()
    if bin_dir is None:
        sys.exit("no PostgreSQL (initdb) here: install Debian's postgresql")
    cluster = PostgresCluster(bin_dir).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            urls = {"sqlite": f"sqlite:///{tmp}/results.sqlite", "postgresql": cluster.database()}
            stores = {name: ResultsStore(url) for name, url in urls.items()}
            writes: dict[str, list[float]] = {name: [] for name in urls}
            for i in range(args.runs):
                for name, store in stores.items():
                    start = time.perf_counter()
                    store.add_run(board_sized_run(f"r{i}", i))
                    writes[name].append(time.perf_counter() - start)
            print(f"{'database':<11} {'write ms (median)':>18} {'write ms (p95)':>15} "
                  f"{'read all s':>11} {'2 writers s':>12} {'stored':>7}")
            for name, store in stores.items():
                start = time.perf_counter()
                store.runs()
                read = time.perf_counter() - start
                store.close()
                fresh = f"sqlite:///{tmp}/two.sqlite" if name == "sqlite" else cluster.database()
                wall, stored = _writers(fresh, args.runs)
                w = sorted(writes[name])
                print(f"{name:<11} {1000 * statistics.median(w):>18.2f} {1000 * w[int(0.95 * len(w))]:>15.2f} "
                      f"{read:>11.3f} {wall:>12.2f} {stored:>4}/{2 * args.runs}")
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
