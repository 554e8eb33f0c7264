"""Full-size benchmark of the board's path with random anima-2b weights (run by hand, not in CI).

Phases, each in its own process so each peak is its own:
  1. checkpoint  tools/make_checkpoint.py: random BF16 anima-2b, `net.` prefix, `llm_adapter.*` group
  2. export      `harness export` of every subgraph, FP16 (or --precision float32), streamed one block's
                 tensors at a time (--reuse-partition keeps an exported one);
                 wall time and peak RSS (the child's ru_maxrss from wait4)
  3. step        one 512x512 denoise step (1,024 tokens, CFG 4: two streams) on the on-demand path
                 through onnxruntime: per-branch core time, lifecycle per stage, host-side PSS
Then prints the figures beside the board's (boards/data/rock5c-anima.toml,
copied into BOARD below) as ratios here/board, and the step against its FLOP bound: the machine's GEMM
rate is measured in the same run, just before and just after the step ([2048 x 2048] x [2048 x 8192]:
numpy FP32, onnxruntime MatMul FP32 and FP16, every core) and sampled about 20 times during it
(`RateProbe`), the step's FLOPs are counted from the profile (harness.model.flops), and the bound is
FLOPs / the median rate during the step. The last line is `step/FLOP-bound ratio: X`, the step's
wall time (host math included, the rate samples and the per-invocation PSS readings taken out) over
that bound. --blocks N runs the profile at full width with N blocks. Host-side PSS is read between invocations, when no
context is loaded: the host's weights and buffers (on the board the NPU text_embs sit outside it);
the process peak with one onnxruntime context loaded is printed too. Both leave the rate probe's own
process out.

    nice -n 10 .venv/bin/python tools/bench_full_size.py --work .cache/full-size
    .venv/bin/python tools/bench_full_size.py --blocks 2     # full width, 2 blocks: minutes, not hours
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["gemm_rates", "RateProbe", "phase_step", "main", "GEMM_SHAPE"]

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# boards/data/rock5c-anima.toml: [denoise_20_steps.float16], [lifecycle_pass], seconds.
BOARD = {
    "step": 120.40,
    "core": {"ffn": 44.76, "self_attn": 24.00, "cross_attn": 7.45},
    "lifecycle": {"load": 13.96, "init": 12.90, "release": 4.84, "stage_sum": 31.71},
}
GiB = 2 ** 30
GEMM_SHAPE = (2048, 2048, 8192)     # [M x K] x [K x N]: an FFN layer's shape at full width


def _best_seconds(fn, repeats: int = 3) -> float:
    fn()                                # warm-up: thread pools, page faults
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _ort_matmul(dtype, spinning: bool = True):
    """A one-MatMul session at GEMM_SHAPE in `dtype` with every core and onnxruntime's defaults."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper
    m, k, n = GEMM_SHAPE
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "gemm",
                              [helper.make_tensor_value_info("a", elem, [m, k]),
                               helper.make_tensor_value_info("b", elem, [k, n])],
                              [helper.make_tensor_value_info("y", elem, [m, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count() or 1
    if not spinning:            # a probe between invocations must not spin beside the subgraph's run
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {"a": rng.standard_normal((m, k), dtype=np.float32).astype(dtype),
            "b": rng.standard_normal((k, n), dtype=np.float32).astype(dtype)}
    return lambda: session.run(None, feed)


def gemm_rates() -> dict[str, float]:
    """GFLOP/s of one [2048 x 2048] x [2048 x 8192] GEMM: numpy FP32, onnxruntime MatMul FP32 and FP16."""
    import numpy as np
    m, k, n = GEMM_SHAPE
    flops = 2 * m * k * n
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    return {"numpy_fp32": flops / _best_seconds(lambda: a @ b) / 1e9,
            "ort_fp32": flops / _best_seconds(_ort_matmul(np.float32)) / 1e9,
            "ort_float16": flops / _best_seconds(_ort_matmul(np.float16)) / 1e9}


def _probe_worker(conn) -> None:
    run = _ort_matmul(__import__("numpy").float32, spinning=False)
    run()
    m, k, n = GEMM_SHAPE
    while conn.recv():
        start = time.perf_counter()
        run()
        conn.send(2 * m * k * n / (time.perf_counter() - start) / 1e9)


class RateProbe:
    """The GEMM rate sampled during the step, between invocations, in a process of its own (so its
    buffers stay out of the step's PSS): under a load that changes by the minute, the bound is then
    taken from the rate the machine gave while the step ran, not only before and after it."""

    def __init__(self):
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_probe_worker, args=(child,), daemon=True)
        self.proc.start()
        self.rates: list[float] = []
        self.seconds = 0.0

    def sample(self) -> None:
        start = time.perf_counter()
        self.conn.send(True)
        self.rates.append(self.conn.recv())
        self.seconds += time.perf_counter() - start

    def close(self) -> None:
        self.conn.send(False)
        self.proc.join(timeout=30)


def _profile_with_blocks(work: Path, profile: str, blocks: int) -> str:
    """A copy of the profile with `blocks` blocks (full width otherwise), as a .toml path."""
    import re

    from harness.model.config import load_profile
    text = Path(load_profile(profile).source).read_text()
    text, found = re.subn(r"(?m)^blocks\s*=\s*\d+", f"blocks = {blocks}", text)
    if not found:
        raise SystemExit(f"{profile}: no 'blocks = N' line in [network] to replace")
    out = work / f"{Path(profile).stem}-{blocks}-blocks.toml"
    out.write_text(text)
    return str(out)


def _child(cmd: list[str], log: Path) -> tuple[float, int, int]:
    """Run a child; (wall seconds, its peak RSS in bytes, exit code)."""
    start = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - start, usage.ru_maxrss * 1024, proc.returncode


def _model_dir(work: Path, checkpoint: Path, profile: str) -> Path:
    """The profile as a model directory naming the random checkpoint (no prompt encoder)."""
    from harness.model.config import load_profile
    model = work / "model"
    model.mkdir(parents=True, exist_ok=True)
    text = Path(load_profile(profile).source).read_text()
    (model / "model.toml").write_text(f'weights = "{checkpoint.resolve()}"\n' + text)
    return model


def phase_step(work: Path, partition: Path, out: Path, lifecycle: str = "on-demand") -> None:
    """In this process: load host tensors, run one step, write the figures as JSON."""
    import numpy as np

    from harness.memory.guard import MemoryGuard, read_memory, read_system_memory
    from harness.model.bundle import load_bundle
    from harness.runtime.run import RunRequest, run_partitioned
    from harness.sampling.settings import SampleSettings

    bundle = load_bundle(work / "model")
    loaded = read_memory().pss
    digest_start = time.perf_counter()
    _ = bundle.digest                   # streamed over the checkpoint; not part of the step
    digest_s = time.perf_counter() - digest_start
    rng = np.random.default_rng(0)
    cfg = bundle.cfg
    text_embs = {s: rng.standard_normal((1, cfg.text_emb_tokens, cfg.text_emb_dim), dtype=np.float32)
                for s in ("cond", "uncond")}
    between: list[int] = []
    progress = out.with_suffix(".progress.jsonl")
    progress.write_text("")
    started = time.perf_counter()

    probe = RateProbe()
    every = max(1, cfg.subgraphs // 20)     # about 20 samples per step (every invocation at 2 blocks)

    class HostPss:
        """A guard-shaped hook: PSS before each invocation, when no context is loaded; each reading
        also goes to a progress file, so an interrupted run keeps its figures. Then, every `every`
        invocations, one GEMM-rate sample (its seconds are taken out of the step below)."""
        seconds = 0.0          # this hook's own reading and writing, taken out of the step like the probe

        def check(self):
            start = time.perf_counter()
            # This process only: the rate probe is a process of its own (a descendant), and its
            # GEMM buffers (about 0.2 GiB) are the instrument's, not the host path's.
            reading = read_memory()
            between.append(reading.pss - reading.pss_workers)
            with open(progress, "a") as fh:
                fh.write(json.dumps({"t": time.perf_counter() - started, "invocation": len(between),
                                     "pss": between[-1]}) + "\n")
            HostPss.seconds += time.perf_counter() - start
            if (len(between) - 1) % every == 0:
                probe.sample()

    settings = SampleSettings(steps=1, cfg_scale=4.0, shift=3.0, seed=20260812)
    report_path = out.with_suffix(".report.json")
    complete = True
    # The guard as the suite and `generate` run it: PSS sampled every 0.25 s, the checks between
    # invocations reading MemAvailable and swap only (a PSS walk per check is the bench's own,
    # in HostPss, and taken out of the step).
    guard = MemoryGuard(GiB, 2 ** 40, interval=0.25, max_staleness=0.1, check_reader=read_system_memory)
    with guard:
        hook = HostPss()
        guard_check = guard.check

        class Both:
            def check(self):
                guard_check()
                hook.check()

            def __getattr__(self, name):
                return getattr(guard, name)

        try:
            result = run_partitioned(
                RunRequest(bundle, partition, "onnxruntime", "", settings, verify=False, text_embs=text_embs,
                           lifecycle=lifecycle),
                guard=Both(), report_path=report_path)
            report, latent_ok = result.report, bool(np.isfinite(result.latent).all())
        except KeyboardInterrupt:       # stopped by hand: keep what the partial report measured
            complete, latent_ok = False, None
            report = json.loads(report_path.read_text())
        finally:
            probe.close()
    figures = {
        "complete": complete,
        "blocks": cfg.blocks,
        "host_resident_bytes": bundle.weights.resident_bytes,
        "host_streamed_bytes": sum(4 * bundle.checkpoint.file.tensors[bundle.checkpoint.prefix + k].params
                                   for k in bundle.weights.streamed),
        "pss_after_load_bytes": loaded,
        "host_pss_peak_between_invocations_bytes": max(between),
        # The guard's samples (every 0.25 s) of this process alone, the rate probe left out.
        "process_pss_peak_bytes": max(r.pss - r.pss_workers for r in guard.samples),
        "digest_seconds": digest_s,
        "weights_digest": report.get("weights_digest"),
        "streams": len(text_embs),
        "step_seconds": report["tables"]["step_split"]["step"] if complete else None,
        "step_split": report["tables"]["step_split"] if complete else None,
        "backend_options": report.get("backend_options"),
        "rates_during_step": probe.rates,
        "probe_seconds": probe.seconds,
        "pss_hook_seconds": HostPss.seconds,
        "per_branch": _per_branch(report["lifecycle_records"]),
        "invocations": sum(1 for r in report["lifecycle_records"] if r["stage"] == "run"),
        "wall_seconds": time.perf_counter() - started,
        "latent_finite": latent_ok,
    }
    out.write_text(json.dumps(figures, indent=1))


def _per_branch(records: list[dict]) -> dict:
    """{branch: {stage: mean seconds per invocation, "n": invocations}} over the records present."""
    out: dict = {}
    for r in records:
        if r["branch"] == "decoder":
            continue
        row = out.setdefault(r["branch"], {"n": 0})
        row[r["stage"]] = row.get(r["stage"], 0.0) + r["seconds"]
        row["n"] += r["stage"] == "run"
    return {b: {**{k: v / max(row["n"], 1) for k, v in row.items() if k != "n"}, "n": row["n"]}
            for b, row in out.items()}


def _ratio_table(figures: dict, export: dict) -> str:
    """Here beside the board. Per-step figures are per-invocation means x the profile's blocks (measured over
    every invocation of the step, or over those done when the run was stopped: `complete`)."""
    pb, blocks = figures["per_branch"], figures["blocks"]
    rows = ["| what | here | board | here / board |", "|---|---|---|---|"]
    if export:
        rows.append(f"| export, {3 * blocks} subgraphs | {export['seconds']:.0f} s | - | - |")
        rows.append(f"| export peak RSS | {export['peak_rss'] / GiB:.2f} GiB | - | - |")
    rows.append(f"| host tensors resident (FP32) | {figures['host_resident_bytes'] / GiB:.3f} GiB | - | - |")
    rows.append(f"| AdaLN layers read per step (FP32) | {figures['host_streamed_bytes'] / GiB:.2f} GiB | - | - |")
    rows.append(f"| host-side peak PSS (between invocations) | "
                f"{figures['host_pss_peak_between_invocations_bytes'] / GiB:.2f} GiB | goal <= 1.0 GiB | - |")
    rows.append(f"| process peak PSS (one onnxruntime context loaded) | "
                f"{figures['process_pss_peak_bytes'] / GiB:.2f} GiB | - | - |")
    names = {"ffn": "ffn", "self_attn": "self_attn", "cross_attn": "cross_attn"}
    for branch, board in BOARD["core"].items():
        row = pb.get(names[branch])
        if row:
            here = row.get("run", 0.0) * blocks
            rows.append(f"| core {branch} per step (n={row['n']}) | {here:.1f} s | {board:.2f} s "
                        f"| {here / board:.2f} |")
    for stage, board in BOARD["lifecycle"].items():
        keys = ("load", "init", "release") if stage == "stage_sum" else (stage,)
        here = sum(row.get(k, 0.0) for row in pb.values() for k in keys) * blocks
        label = {"load": "load (load_rknn)", "init": "init (init_runtime)"}.get(stage, stage)
        rows.append(f"| lifecycle {label} per step | {here:.1f} s | {board:.2f} s | {here / board:.2f} |")
    step = sum(v for row in pb.values() for k, v in row.items() if k != "n") * blocks
    rows.append(f"| step (subgraph stages only) | {step:.1f} s | {BOARD['step']:.1f} s | {step / BOARD['step']:.2f} |")
    return "\n".join(rows)


def _bound_lines(figures: dict, rates: list[dict], profile: str) -> list[str]:
    """The step against its FLOP bound; the ratio line last. The step is its wall time (host math
    included) less the GEMM-rate samples and PSS readings taken during it; the bound is FLOPs over
    the median rate sampled during the step, and, for comparison, over the best rate before or after it."""
    import statistics

    from harness.model.config import load_profile
    from harness.model.flops import step_flops
    flops = step_flops(load_profile(profile), figures["streams"])
    lines = [f"GEMM rate {when}: " + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in r.items())
             for when, r in zip(("before the step", "after the step"), rates)]
    during = figures.get("rates_during_step") or []
    if during:
        lines.append(f"GEMM rate during the step (ort_fp32, {len(during)} samples between invocations): "
                     f"median {statistics.median(during):.0f}, range {min(during):.0f}-{max(during):.0f} GFLOP/s")
    lines.append(f"step FLOPs ({figures['blocks']} blocks, {figures['streams']} streams): {flops / 1e9:.1f} GFLOP")
    best = max(v for r in rates for v in r.values())
    rate = statistics.median(during) if during else best
    bound = flops / (rate * 1e9)
    lines.append(f"FLOP bound at {rate:.0f} GFLOP/s ({'median during the step' if during else 'best rate'}): "
                 f"{bound:.2f} s; at the best rate before/after ({best:.0f} GFLOP/s): {flops / best / 1e9:.2f} s")
    if figures.get("step_seconds") is None:
        lines.append("step/FLOP-bound ratio: n/a (the step did not complete)")
        return lines
    split = figures["step_split"]
    instrument = figures.get("probe_seconds", 0.0) + figures.get("pss_hook_seconds", 0.0)
    step = figures["step_seconds"] - instrument
    rest = split["rest"] - instrument
    lines.append(f"step: {step:.2f} s wall without the rate samples and PSS readings (lifecycle "
                 f"{split['lifecycle']:.2f} s, host math {split['host']:.2f} s, rest {rest:.2f} s); "
                 f"load {os.getloadavg()[0]:.1f}")
    lines.append(f"step/FLOP-bound ratio at the best rate before/after: {step / (flops / best / 1e9):.2f}")
    lines.append(f"step/FLOP-bound ratio: {step / bound:.2f}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="work directory (default: .cache/full-size[-N-blocks])")
    parser.add_argument("--profile", default="anima-2b", help="profile (default: %(default)s; others for a smoke run)")
    parser.add_argument("--blocks", type=int, help="the profile at full width with N blocks (ratio in minutes)")
    parser.add_argument("--precision", choices=("float16", "float32"), default="float16",
                        help="subgraph precision (default: %(default)s, what the board runs and the goldens need)")
    parser.add_argument("--reuse-partition", action="store_true",
                        help="keep an already exported partition (its export is then not timed)")
    parser.add_argument("--lifecycle", default="on-demand",
                        help="context strategy (default: %(default)s, the board's; e.g. prefetch:2)")
    parser.add_argument("--phase", choices=("all", "step", "table"), default="all",
                        help="all; step: only the step (partition exported); table: print from the saved figures")
    args = parser.parse_args(argv)
    if args.blocks is not None and args.blocks < 1:
        parser.error(f"--blocks must be at least 1, got {args.blocks}")
    suffix = f"-{args.blocks}-blocks" if args.blocks else ""
    work = (args.work or ROOT / ".cache" / f"full-size{suffix}").resolve()
    work.mkdir(parents=True, exist_ok=True)
    if args.blocks:
        args.profile = _profile_with_blocks(work, args.profile, args.blocks)
    checkpoint = work / f"{Path(args.profile).stem}-random-bf16.safetensors"
    partition = work / ("partition-float16" if args.precision == "float16" else "partition-fp32")
    if args.phase == "step":
        phase_step(work, partition, work / f"step-{args.precision}.json", args.lifecycle)
        return 0
    if args.phase == "table":
        summary = work / f"summary-{args.precision}.json"
        export = json.loads(summary.read_text())["export"] if summary.exists() else {}
        figures = json.loads((work / f"step-{args.precision}.json").read_text())
        print(_ratio_table(figures, export))
        rates = json.loads(summary.read_text()).get("gemm_rates") if summary.exists() else None
        if rates:
            print("\n".join(_bound_lines(figures, rates, args.profile)))
        return 0
    py = sys.executable
    if not checkpoint.exists():
        secs, rss, rc = _child([py, "tools/make_checkpoint.py", "--profile", args.profile, "--out", str(checkpoint),
                                "--prefix", "net.", "--llm-adapter"], work / "checkpoint.log")
        print(f"checkpoint: {secs:.0f} s, peak RSS {rss / GiB:.2f} GiB, rc {rc}", flush=True)
        if rc:
            return rc
    if args.reuse_partition and (partition / "manifest.json").exists():
        export = {}
        print(f"export: reusing {partition}", flush=True)
    else:
        secs, rss, rc = _child([py, "-m", "harness", "export", "--profile", args.profile, "--weights", str(checkpoint),
                                "--precision", args.precision, "--out", str(partition), "--quiet"], work / "export.log")
        export = {"seconds": secs, "peak_rss": rss}
        print(f"export: {secs:.0f} s, peak RSS {rss / GiB:.2f} GiB, rc {rc}", flush=True)
        if rc:
            return rc
    _model_dir(work, checkpoint, args.profile)
    rates = [gemm_rates()]
    secs, rss, rc = _child([py, "tools/bench_full_size.py", "--work", str(work), "--phase", "step",
                            "--precision", args.precision, "--lifecycle", args.lifecycle],
                           work / "step.log")
    print(f"step phase: {secs:.0f} s wall (load, digest, one step), peak RSS {rss / GiB:.2f} GiB, rc {rc}",
          flush=True)
    if rc:
        return rc
    rates.append(gemm_rates())
    figures = json.loads((work / f"step-{args.precision}.json").read_text())
    (work / f"summary-{args.precision}.json").write_text(json.dumps({"export": export, "step": figures,
                                                                     "gemm_rates": rates},
                                                  indent=1))
    print(_ratio_table(figures, export))
    print(f"digest of the checkpoint: {figures['digest_seconds']:.1f} s ({figures.get('weights_digest')}); "
          f"latent finite: {figures['latent_finite']}")
    print("\n".join(_bound_lines(figures, rates, args.profile)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
