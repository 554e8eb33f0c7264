"""Benchmark: the whole embedded partition (84 subgraphs + decoder) converted by rknn-toolkit2, by hand.

    .venv/bin/python tools/bench_convert.py [--toolkit 2.5.0] [--rounds 1] [--precision float16]

Prints, per round, the wall time of `harness convert` (toolkit start-up included), the summed
per-subgraph build seconds, the start-up and bookkeeping rest, and the ratio to the 60 s goal of
issue 7. Timings depend on what else the machine runs: report the load average with them.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.model.bundle import load_bundle
from harness.model.config import EMBEDDED_DIR
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.toolkit.convert import ConvertSettings, convert_partition

GOAL_SECONDS = 60.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toolkit", default=None, help="toolkit version (default: versions.toml)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--precision", default="float16", choices=("float16",))
    args = parser.parse_args()
    bundle = load_bundle(EMBEDDED_DIR)
    with tempfile.TemporaryDirectory(prefix="bench-convert-") as tmp:
        source = Path(tmp) / "fp32"
        export_partition(bundle.weights, bundle.cfg, source, ExportSettings(precision="float32"))
        for k in range(args.rounds):
            load = os.getloadavg()[0]
            started = time.perf_counter()
            result = convert_partition(source, Path(tmp) / f"round{k}",
                                       ConvertSettings(version=args.toolkit, quiet=True))
            wall = time.perf_counter() - started
            builds = sum(result.build_seconds.values())
            print(f"round {k + 1}: {len(result.build_seconds)} subgraphs, wall {wall:.1f} s "
                  f"(builds {builds:.1f} s, start-up and bookkeeping {wall - builds:.1f} s), "
                  f"{wall / GOAL_SECONDS:.2f} x the {GOAL_SECONDS:.0f} s goal, load average {load:.1f} "
                  f"on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
