"""Lifecycle benchmarks, run by hand: strategies side by side in one run, printed as ratios.

    .venv/bin/python tools/bench_lifecycle.py [--steps 3] [--rounds 2] [--time-scale 0.05] [--only SECTION]

1. on-demand, resident, prefetch:2 (and prefetch:3) on the simulated board (board-sim, the board
   profile's stage and inference times at --time-scale): steady-state step time (median of the
   steps after the first) and its ratio to resident, peak live contexts, measured overlap.
2. the same on onnxruntime with the embedded model: how much of the InferenceSession creation
   time prefetch takes off the step on this machine's cores.
3. stream batching: lifecycle seconds (load + init + release) per image with 1 and 4 images.
Runs alternate strategy by strategy within each round, so a load spike from other users of the
machine hits every strategy alike. Nothing here is asserted: timings on a shared machine are noisy.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.backends.base import BackendOptions  # noqa: E402
from harness.backends.board_sim import normalize_options  # noqa: E402
from harness.core.atomic import atomic_write_json  # noqa: E402
from harness.model.bundle import load_bundle  # noqa: E402
from harness.partition.manifest import default_partition_dir, manifest_path  # noqa: E402
from harness.partition.onnx_export import ExportSettings, export_partition  # noqa: E402
from harness.runtime.run import RunRequest, run_partitioned  # noqa: E402
from harness.sampling.reference_run import sample_settings  # noqa: E402

LIFECYCLE = ("load", "init", "release")


def partition(bundle, precision: str) -> Path:
    out = ROOT / default_partition_dir(bundle.cfg, bundle.digest, precision)
    if not manifest_path(out).exists():
        export_partition(bundle.weights, bundle.cfg, out, ExportSettings(precision=precision))
    return out


def measure(bundle, part, backend, options, spec, steps, images=1) -> dict:
    s = sample_settings(bundle, steps=steps)
    r = run_partitioned(
        RunRequest(bundle, part, backend, bundle.cfg.prompt["default"], s,
                   backend_options=BackendOptions(backend, options), lifecycle=spec, images=images, verify=False))
    rep = r.report
    body = [x for x in rep["lifecycle_records"] if x["branch"] != "decoder" and x["step"] < steps]
    return {"step_s": statistics.median(rep["step_seconds"][1:] or rep["step_seconds"]),
            "counters": rep["lifecycle_counters"],
            "lifecycle_s": sum(x["seconds"] for x in body if x["stage"] in LIFECYCLE),
            "init_s": sum(x["seconds"] for x in body if x["stage"] == "init"),
            "images": images, "steps": steps, "latent": r.latent}


def side_by_side(bundle, part, backend, options, specs, steps, rounds) -> dict:
    runs = {spec: [] for spec in specs}
    for _ in range(rounds):
        for spec in specs:
            runs[spec].append(measure(bundle, part, backend, options, spec, steps))
            print(f"  {backend} {spec}: step {runs[spec][-1]['step_s']:.4f} s", flush=True)
    first = runs[specs[0]][0]["latent"]
    same = all((m["latent"] == first).all() for ms in runs.values() for m in ms)
    out = {}
    for spec, ms in runs.items():
        c = ms[-1]["counters"]
        out[spec] = {"step_s": statistics.median(m["step_s"] for m in ms),
                     "init_s_per_step": statistics.median(m["init_s"] for m in ms) / steps,
                     "peak_live": c["peak_live"], "overlap": statistics.median(m["counters"]["overlap"] for m in ms),
                     "hidden_s": statistics.median(m["counters"]["hidden_s"] for m in ms)}
    return {"strategies": out, "identical_latents": same}


def print_side_by_side(title: str, res: dict) -> None:
    s = res["strategies"]
    base = s["resident"]["step_s"]
    print(f"\n{title} (latents identical bit for bit: {res['identical_latents']})")
    print(f"  {'strategy':<12} {'step s':>9} {'/resident':>10} {'/on-demand':>11} {'peak live':>10} {'overlap':>8}")
    for spec, m in s.items():
        print(f"  {spec:<12} {m['step_s']:>9.4f} {m['step_s'] / base:>10.3f} "
              f"{m['step_s'] / s['on-demand']['step_s']:>11.3f} {m['peak_live']:>10d} {100 * m['overlap']:>7.1f}%")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--time-scale", type=float, default=0.05,
                   help="board-sim seconds per board second (default %(default)s: at 1/200 a stage is "
                        "under a millisecond and scheduling delays on a loaded machine set the pace)")
    p.add_argument("--precision", default="float16", choices=("float16", "float32"))
    p.add_argument("--out", type=Path, default=ROOT / "out" / "bench-lifecycle.json")
    p.add_argument("--only", choices=("board-sim", "onnxruntime", "batching"), action="append",
                   help="run only these sections (default: all)")
    args = p.parse_args()
    bundle = load_bundle(ROOT / "models" / "embedded")
    part = partition(bundle, args.precision)
    sim = normalize_options({"time_scale": args.time_scale})
    result = {"steps": args.steps, "rounds": args.rounds, "time_scale": args.time_scale, "precision": args.precision}

    only = set(args.only or ("board-sim", "onnxruntime", "batching"))
    if "board-sim" in only:
        print("board-sim: on-demand, resident, prefetch:2, prefetch:3")
        result["board_sim"] = side_by_side(bundle, part, "board-sim", sim, ["on-demand", "resident", "prefetch:2",
                                                                            "prefetch:3"], args.steps, args.rounds)
        report_board_sim(result["board_sim"])
    if "onnxruntime" in only:
        print("onnxruntime: on-demand, resident, prefetch:2")
        result["onnxruntime"] = side_by_side(bundle, part, "onnxruntime", {},
                                             ["on-demand", "resident", "prefetch:2"], args.steps, args.rounds)
        report_onnxruntime(result["onnxruntime"])
    if "batching" in only:
        print("stream batching (on-demand): 1 and 4 images")
        result["stream_batching"] = batching(bundle, part, sim, args.rounds)
    atomic_write_json(args.out, result)
    print(f"\nwrote {args.out}")
    return 0


def batching(bundle, part, sim, rounds) -> dict:
    out = {}
    for backend, options in (("board-sim", sim), ("onnxruntime", {})):
        per_image = {}
        for images in (1, 4):
            ms = [measure(bundle, part, backend, options, "on-demand", 2, images) for _ in range(rounds)]
            per_image[images] = statistics.median(m["lifecycle_s"] / images for m in ms)
        out[backend] = {"lifecycle_s_per_image": per_image, "ratio_4_to_1": per_image[4] / per_image[1]}
        print(f"  {backend:<12} lifecycle s per image: 1 image {per_image[1]:.4f} s, 4 images "
              f"{per_image[4]:.4f} s: ratio {out[backend]['ratio_4_to_1']:.3f} (goal <= 0.3)")
    return out


def report_board_sim(res: dict) -> None:
    print_side_by_side("simulated board (board-sim)", res)
    bs = res["strategies"]
    print(f"  on-demand/resident {bs['on-demand']['step_s'] / bs['resident']['step_s']:.3f} (board: 120.40 / "
          f"(120.40 - 33.84) = 1.391); prefetch:2/resident {bs['prefetch:2']['step_s'] / bs['resident']['step_s']:.3f} "
          f"with {bs['prefetch:2']['peak_live'] - 1} extra live context(s); prefetch:3/resident "
          f"{bs['prefetch:3']['step_s'] / bs['resident']['step_s']:.3f} with {bs['prefetch:3']['peak_live'] - 1}")
    for m in res["strategies"].values():
        m.pop("latent", None)


def report_onnxruntime(res: dict) -> None:
    print_side_by_side("onnxruntime, embedded model", res)
    o = res["strategies"]
    init = o["on-demand"]["init_s_per_step"]
    saved = o["on-demand"]["step_s"] - o["prefetch:2"]["step_s"]
    print(f"  session creation (init) {init:.4f} s per step on demand; prefetch:2 takes {saved:.4f} s off the step "
          f"= {100 * saved / init:.0f} % of it; overlap {100 * o['prefetch:2']['overlap']:.0f} % of its lifecycle "
          "seconds")


if __name__ == "__main__":
    sys.exit(main())
