"""Session options against what a subgraph costs: load+init and run per option set, side by side.

For each partition given, one subgraph per branch (block 0) is built and run under every option set
(graph optimisation level x intra-op threads), the sets interleaved round by round so a change of
machine load hits them alike. Prints, per subgraph and set, the median load+init seconds, run
seconds and their sum: the embedded model (sessions cost more to build than to run) and a
full-width partition (the run dominates) in one table, which is what the onnxruntime backend's
choice (harness/backends/onnxruntime.py, `session_options`) is read from.

    .venv/bin/python tools/bench_session_options.py out/partitions/embedded-float16-* \
        .cache/full-size-2-blocks/partition-float16
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.partition.manifest import load_manifest  # noqa: E402

__all__ = ["OPTION_SETS", "time_subgraph"]

LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL")
OPTION_SETS = [(level, threads, True) for level in LEVELS for threads in sorted({1, os.cpu_count() or 1})]


def _parse_set(text: str) -> tuple[str, int, bool]:
    """LEVEL:THREADS[:noprepack] -> (level, threads, pre-packing on)."""
    level, threads, *flag = text.split(":")
    return level, int(threads), flag != ["noprepack"]


def _options(level: str, threads: int, prepack: bool = True):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not prepack:
        opts.add_session_config_entry("session.disable_prepacking", "1")
    opts.log_severity_level = 3
    return opts


def _feed(entry) -> dict:
    rng = np.random.default_rng(0)
    return {s.name: rng.standard_normal(s.shape, dtype=np.float32).astype(s.dtype) for s in entry.inputs}


def time_subgraph(path: Path, feed: dict, level: str, threads: int,
                  prepack: bool = True) -> tuple[float, float, np.ndarray]:
    """(load+init seconds, run seconds, output) of one fresh session, as one invocation costs."""
    import onnxruntime as ort
    start = time.perf_counter()
    session = ort.InferenceSession(path.read_bytes(), _options(level, threads, prepack),
                                   providers=["CPUExecutionProvider"])
    built = time.perf_counter()
    out = session.run(None, feed)[0]
    return built - start, time.perf_counter() - built, out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("partitions", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sets", help="option sets LEVEL:THREADS[:noprepack],... "
                                       "(default: every level x 1 and all cores)")
    args = parser.parse_args(argv)
    sets = ([_parse_set(item) for item in args.sets.split(",")] if args.sets else OPTION_SETS)
    cases = []
    for directory in args.partitions:
        manifest = load_manifest(directory)
        for entry in manifest.subgraphs:
            if entry.block == 0:
                cases.append((f"{manifest.model.get('name', directory.name)} {entry.branch}",
                              manifest.directory / entry.file, _feed(entry)))
    times: dict = {}
    outputs: dict = {}
    for _ in range(args.rounds):
        for name, path, feed in cases:
            for option_set in sets:
                init, run, out = time_subgraph(path, feed, *option_set)
                times.setdefault((name, option_set), []).append((init, run))
                outputs.setdefault(name, {})[option_set] = out
    print(f"load {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores, {args.rounds} rounds (medians)")
    print("| subgraph | optimisation | threads | pre-packing | load+init s | run s | sum s | max abs diff vs the "
          "first set |")
    print("|---|---|---|---|---|---|---|---|")
    for (name, option_set), rows in times.items():
        level, threads, prepack = option_set
        init = statistics.median(r[0] for r in rows)
        run = statistics.median(r[1] for r in rows)
        ref = outputs[name][sets[0]].astype(np.float32)
        diff = float(np.max(np.abs(outputs[name][option_set].astype(np.float32) - ref)))
        print(f"| {name} | {level} | {threads} | {'on' if prepack else 'off'} | {init:.4f} | {run:.4f} | "
              f"{init + run:.4f} | {diff:.3g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
