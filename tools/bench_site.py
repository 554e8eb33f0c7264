"""Results site timings, run by hand: a lab's store of 10 boards x 4 cases x 250 runs (10,000 runs, each
with the figures of a 28-step run of the 84-subgraph partition), then `results site` on it.

    .venv/bin/python tools/bench_site.py [--boards 10] [--cases 4] [--runs 250] [--store sqlite:///...]

Prints the seconds to read and judge the store (collect), to write the site (plots and pages), the
site's size and file count, and the load average before and after: timings on a shared machine are
noisy. A --store that has runs already is used as it is (the writing takes minutes).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.results.records import SubgraphTime  # noqa: E402
from harness.results.store import ResultsStore  # noqa: E402
from harness.site.collect import collect  # noqa: E402
from harness.site.pages import write_site  # noqa: E402
from tests.results_data import VERSIONS_NEW, VERSIONS_OLD, make_run  # noqa: E402

__all__ = ["lab_runs", "main"]

_SUBGRAPHS = [(b, br) for b in range(28) for br in ("self_attn", "cross_attn", "ffn")]


def lab_runs(boards: int, cases: int, runs: int, seed: int = 0):
    """The runs in time order: every board runs every case once a round; the stack changes at 80 % of
    the rounds on every board, and board 0's first case is 8 % slower from 90 % on."""
    rng = np.random.default_rng(seed)
    for i in range(runs):
        for b in range(boards):
            for c in range(cases):
                slow = 1.08 if (b, c) == (0, 0) and i >= 0.9 * runs else 1.0
                step = 25.0 * (1 + 0.1 * c) * slow * float(np.exp(rng.normal(0, 0.01)))
                run = make_run(f"b{b:02d}-c{c}-{i:03d}", step, board=f"rock-5c-{b:04x}", case=f"case{c}", steps=28,
                               versions=VERSIONS_NEW if i >= 0.8 * runs else VERSIONS_OLD,
                               minute=(i * boards + b) * cases + c)
                yield replace(run, git_revision=f"{i // 10:04x}" + "0" * 36,
                              subgraphs=tuple(SubgraphTime(f"{3 * blk + k}", blk, br, step / 84)
                                              for k, (blk, br) in enumerate(_SUBGRAPHS)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boards", type=int, default=10)
    parser.add_argument("--cases", type=int, default=4)
    parser.add_argument("--runs", type=int, default=250)
    parser.add_argument("--store", help="results store URL (default: a new SQLite file in a temporary folder)")
    parser.add_argument("--out", type=Path, help="site folder (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        url = args.store or f"sqlite:///{tmp}/results.sqlite"
        out = args.out or Path(tmp) / "site"
        print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
        with ResultsStore(url) as store:
            if not store.runs(latest=1):
                start = time.perf_counter()
                for run in lab_runs(args.boards, args.cases, args.runs):
                    store.add_run(run)
                print(f"store written: {time.perf_counter() - start:.1f} s")
            start = time.perf_counter()
            site = collect(store)
            collected = time.perf_counter() - start
        start = time.perf_counter()
        pages = write_site(site, out)
        written = time.perf_counter() - start
        files = [p for p in out.rglob("*") if p.is_file()]
        size = sum(p.stat().st_size for p in files)
        print(f"{site.runs} runs, {len(site.series)} series: collect {collected:.1f} s, write {written:.1f} s; "
              f"{len(pages)} pages, {len(files)} files, {size / 1e6:.1f} MB")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
