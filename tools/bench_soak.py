"""The soak gate's power and false alarms, measured: every soak a fresh process, as a pytest session is.

    clean:  N soaks on a backend with nothing wrong (default onnxruntime, one image's 1,092 cycles):
            how many fail (false alarms) and what each resource grew per cycle (median, largest).
    power:  for each leak (64 KiB of memory per cycle, one descriptor per 10 cycles) on the faults
            backend, soaks of growing length until the gate names the leaked resource: the cycles
            and seconds of cycling it took, `--repeats` times.
The load average is printed before and after: the figures are worth what the machine's load was.

    .venv/bin/python tools/bench_soak.py clean --runs 20
    .venv/bin/python tools/bench_soak.py power --repeats 3
    .venv/bin/python tools/bench_soak.py one --backend rknn-sim --precision float16   # one soak, its lines
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LEAKS = {"memory": ("leak=mem:64KiB", "uss"), "descriptors": ("leak=fd:0.1", "fds")}
LENGTHS = (40, 80, 160, 320, 640, 1280, 2560)


def _partition(backend: str, precision: str, cache: Path):
    from harness.model.bundle import load_bundle
    from harness.model.config import EMBEDDED_DIR
    from harness.runtime.run import open_partition
    bundle = load_bundle(EMBEDDED_DIR)
    if backend == "rknn-sim":
        from harness.runtime.converted import cached_conversion
        path = cached_conversion(bundle, cache, precision, None)
    else:
        from harness.runtime.partitions import exported_partition
        path = exported_partition(bundle, precision, root=cache / "partitions")
    return bundle, open_partition(bundle, path)


def one(args) -> dict:
    """One soak in this process; its verdict as a dict (and its lines on stderr)."""
    from harness.backends.base import backend_options, run_options
    from harness.core.sizes import parse_size
    from harness.gates.soak import cycles_per_image, run_soak, soak_verdict
    from harness.memory.resources import ResourceSampler
    bundle, manifest = _partition(args.backend, args.precision, Path(args.cache_dir))
    options = run_options(backend_options(args.backend, {"fault": args.fault}, bundle.cfg))
    per_image = cycles_per_image(manifest)
    rate = parse_size(args.memory_rate)
    run = run_soak(options, manifest, args.cycles or per_image, ResourceSampler("/"),
                   lifecycle=args.lifecycle, memory_rate=rate)
    verdict = soak_verdict(run, rate, parse_size("1.5GiB"), per_image)
    print("\n".join(verdict.lines()), file=sys.stderr)
    return {"cycles": run.cycles, "seconds": run.seconds, "failed": [g.resource for g in verdict.failures],
            "found": [f"{g.process}: {g.resource} from cycle {g.first_cycle}, found at cycle {g.found_at}"
                      for g in verdict.failures],
            "peak_of_threshold": {f"{run.processes[c // len(run.resources)]}: {run.resources[c % len(run.resources)]}":
                                  round(float(run.watch.peak[c] / run.watch.h[c]), 3)
                                  for c in range(len(run.watch.h)) if run.watch.judged[c] and run.watch.peak[c] > 0},
            "per_cycle": {g.resource: g.per_cycle for g in verdict.growth if g.process == verdict.run.processes[0]}}


def _soak(backend: str, cycles: int | None, fault: str | None = None, precision: str = "float16") -> dict:
    argv = [sys.executable, __file__, "one", "--json", "--backend", backend, "--precision", precision]
    argv += ["--cycles", str(cycles)] if cycles else []
    argv += ["--fault", fault] if fault else []
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout.splitlines()[-1])


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} CPUs"


def clean(args) -> None:
    print(f"clean soaks on {args.backend}, {_load()}", flush=True)
    results = []
    for i in range(args.runs):
        r = _soak(args.backend, args.cycles)
        results.append(r)
        print(f"run {i + 1}: {r['cycles']} cycles in {r['seconds']:.1f} s, failed {r['failed'] or 'nothing'}; "
              + ", ".join(f"{k} {v:+.1f}" for k, v in r["per_cycle"].items()), f"({_load()})", flush=True)
    alarms = sum(bool(r["failed"]) for r in results)
    print(f"false alarms: {alarms} of {len(results)}")
    for name in results[0]["per_cycle"]:
        values = [r["per_cycle"][name] for r in results]
        print(f"  {name}: per cycle median {statistics.median(values):+.1f}, largest {max(values):+.1f}")
    print(f"seconds per soak: median {statistics.median(r['seconds'] for r in results):.1f}; {_load()}")


def power(args) -> None:
    print(f"leaks on the faults backend, {_load()}", flush=True)
    for label, (fault, resource) in LEAKS.items():
        for repeat in range(args.repeats):
            for cycles in LENGTHS:
                r = _soak("faults", cycles, fault)
                if resource in r["failed"]:
                    others = sorted(set(r["failed"]) - {resource, "rss"})
                    print(f"{label} ({fault}), repeat {repeat + 1}: found at {cycles} cycles after "
                          f"{r['seconds']:.1f} s of cycling ({resource} {r['per_cycle'][resource]:+.1f} per cycle); "
                          f"other resources failed: {others or 'none'} ({_load()})", flush=True)
                    break
            else:
                print(f"{label} ({fault}), repeat {repeat + 1}: NOT found within {LENGTHS[-1]} cycles", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("clean", "power", "one"))
    parser.add_argument("--backend", default="onnxruntime")
    parser.add_argument("--precision", default="float16")
    parser.add_argument("--fault", default=None)
    parser.add_argument("--lifecycle", default="on-demand", help="one: on-demand or prefetch:K")
    parser.add_argument("--cycles", type=int, default=None, help="default: one image's")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory-rate", default="16KiB")
    parser.add_argument("--cache-dir", default=str(ROOT / ".cache"))
    parser.add_argument("--json", action="store_true", help="one: print the verdict as JSON")
    args = parser.parse_args()
    start = time.monotonic()
    if args.what == "one":
        result = one(args)
        print(json.dumps(result) if args.json else result)
        return
    (clean if args.what == "clean" else power)(args)
    print(f"({time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
    main()
