"""`python -m harness <command>`: generate, export, inspect, convert, compare-toolkits, trend, compare,
accept-golden.

Expected failures (HarnessError) print one line naming the culprit and exit non-zero without a
traceback; anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..model.config import EMBEDDED_DIR
from ..core.errors import ConfigError, HarnessError, RunStopped

__all__ = ["main", "build_parser"]


def _ranged(kind, lo, hi, what: str):
    """An argparse type: parse with `kind` and keep within [lo, hi], with the option's own wording."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(
                f"must be positive, got {value}" if lo == 1 and hi == float("inf")
                else f"must be within {lo}..{hi}, got {value}")
        return value
    return parse


BACKEND_CHOICES = ("reference", "onnxruntime", "rknnlite", "board-sim", "faults")


def _checked(parse):
    """An argparse type from a harness parser that raises ConfigError."""
    def convert(text: str):
        try:
            return parse(text)
        except HarnessError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return convert


def _size(text: str) -> str:
    from ..memory.guard import parse_size
    parse_size(text)
    return text


def _core_mask(text: str) -> str:
    from ..backends.rknnlite import parse_core_mask
    return parse_core_mask(text)


def _lifecycle(text: str) -> str:
    from ..lifecycle import parse_lifecycle
    return str(parse_lifecycle(text))


def add_board_sim_options(parser) -> None:
    """--board-profile-data / --time-scale: the simulated board's own options."""
    parser.add_argument("--board-profile-data", type=Path,
                        help="board-sim: profile data file (default: boards/data/rock5c-anima.toml)")
    parser.add_argument("--time-scale", type=_ranged(float, 1e-9, 1.0, "a number"),
                        help="board-sim: seconds here per board second (default: the data file's)")


def board_sim_options(args) -> dict:
    from ..backends.board_sim import normalize_options
    raw = {"core_mask": args.core_mask}
    if args.board_profile_data is not None:
        raw["profile_data"] = str(args.board_profile_data)
    if args.time_scale is not None:
        raw["time_scale"] = args.time_scale
    return normalize_options(raw)


_positive_int = _ranged(int, 1, float("inf"), "a whole number")
_cfg_scale = _ranged(float, 0.0, 30.0, "a number")
_seed = _ranged(int, 0, 2 ** 63 - 1, "a whole number")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness",
                                     description="Anima DiT NPU acceptance harness")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    gen = sub.add_parser("generate", help="render a prompt to a PNG (default: the embedded model)")
    gen.add_argument("--model-dir", type=Path, default=EMBEDDED_DIR,
                     help="model directory with model.toml (default: models/embedded)")
    gen.add_argument("--prompt", help="text prompt (default: the model's default prompt)")
    gen.add_argument("--text-emb", "--context", dest="text_emb", type=Path, metavar="COND.npy",
                     help="text embedding [context_tokens, context_dim] instead of --prompt (a model "
                          "without a prompt encoder here, e.g. Anima's Qwen3 + adapter output)")
    gen.add_argument("--uncond-text-emb", "--uncond-context", dest="uncond_text_emb", type=Path,
                     metavar="UNCOND.npy", help="text embedding of the empty prompt, for CFG != 1")
    gen.add_argument("--seed", type=_seed, help="initial-noise seed (default: the model's)")
    gen.add_argument("--steps", type=_positive_int, help="sampler steps (default: the model's)")
    gen.add_argument("--cfg", type=_cfg_scale, dest="cfg_scale", help="CFG scale (default: the model's)")
    gen.add_argument("--backend", default="reference", choices=BACKEND_CHOICES,
                     help="reference (monolithic FP32 numpy), onnxruntime (84 subgraphs on the host "
                          "CPU), rknnlite (the board's NPU) or faults (onnxruntime with --fault); "
                          "default: %(default)s")
    gen.add_argument("--fault", help="with --backend faults: nan@SUBGRAPH, shape@SUBGRAPH, slow=SECONDS")
    gen.add_argument("--min-free", default="64MiB", type=_checked(_size),
                     help="refuse to start with less free space beside --out (default: %(default)s)")
    gen.add_argument("--partition", type=Path,
                     help="partition directory with manifest.json (default for onnxruntime: "
                          "out/partitions/<model>-<dtype>, exported on first use)")
    gen.add_argument("--dtype", choices=("float32", "float16"), default="float32",
                     help="subgraph precision when the partition is exported on first use")
    gen.add_argument("--core-mask", default="auto", type=_checked(_core_mask),
                     help="rknnlite / board-sim NPU core mask: auto, 0, 1, 2, 0_1, 0_1_2, all")
    add_board_sim_options(gen)
    gen.add_argument("--lifecycle", default="on-demand", type=_checked(_lifecycle),
                     help="context strategy: on-demand, resident, lru:K, pinned:K, pinned:@I,J,A-B, "
                          "prefetch:K (default: %(default)s)")
    gen.add_argument("--images", type=_positive_int, default=1,
                     help="images generated together (seeds seed, seed+1, ...); every loaded context "
                          "serves all their streams (default: %(default)s)")
    gen.add_argument("--mem-floor", default="1.5GiB", type=_checked(_size),
                     help="abort when MemAvailable falls below (default: %(default)s)")
    gen.add_argument("--swap-limit", default="16MiB", type=_checked(_size),
                     help="abort when swap grows more than (default: %(default)s)")
    _add_sampler_options(gen)
    gen.add_argument("--out", type=Path, default=Path("out/generate.png"), help="PNG path (default: %(default)s)")
    gen.add_argument("--quiet", action="store_true", help="no progress bar or tables")
    gen.set_defaults(func=_cmd_generate)

    from .partition import add_commands
    from .accept import add_command as add_accept
    from .compare import add_command as add_compare
    from .plan import add_command as add_plan
    from .probe_memory import add_command as add_probe
    from .trend import add_command as add_trend
    from ..results.commands import add_command as add_results
    from .capture import add_command as add_capture
    from .accuracy import add_command as add_accuracy
    from .toolkit import add_commands as add_toolkit_commands
    from ..results.ab import add_command as add_bench_ab
    add_commands(sub)
    add_toolkit_commands(sub)
    add_trend(sub)
    add_results(sub)
    add_compare(sub)
    add_accept(sub)
    add_probe(sub)
    add_plan(sub)
    add_capture(sub)
    add_accuracy(sub)
    add_bench_ab(sub)
    return parser


def _add_sampler_options(gen) -> None:
    from ..sampling.spectrum import DEFAULT_PRESET, PRESETS, SAMPLERS
    gen.add_argument("--sampler", choices=SAMPLERS, default="flow-euler",
                     help="flow-euler (every step runs the 84 subgraphs) or spectrum (some steps forecast the "
                          "last hidden state and run only the final layer); default: %(default)s")
    group = gen.add_argument_group("Spectrum (with --sampler spectrum; the preset fills what is not given)")
    group.add_argument("--spectrum-preset", choices=list(PRESETS), default=None,
                       help=f"parameter preset (default: {DEFAULT_PRESET}, 13 computed of 28 steps)")
    number = _ranged(float, float("-inf"), float("inf"), "a number")
    whole = _ranged(int, -2 ** 31, 2 ** 31, "a whole number")
    for name, kind, text in (("warmup", whole, "first steps that always compute"),
                             ("window", number, "a step computes every floor(window) steps"),
                             ("flex", number, "window growth per computed step"),
                             ("degree", whole, "Chebyshev degree M"),
                             ("ridge", number, "ridge lambda of the Chebyshev fit"),
                             ("blend", number, "weight w of the Chebyshev forecast against the Taylor step (1: Chebyshev only)"),
                             ("tail", whole, "last steps that always compute")):
        group.add_argument(f"--spectrum-{name}", type=kind, default=None, help=text)


def _spectrum_params(args):
    """The Spectrum parameters from the command line, or None; options without the sampler are an error."""
    from ..sampling.spectrum import params_from
    names = ("warmup", "window", "flex", "degree", "ridge", "blend", "tail")
    given = {n: getattr(args, f"spectrum_{n}") for n in names if getattr(args, f"spectrum_{n}") is not None}
    if args.spectrum_preset is not None:
        given["preset"] = args.spectrum_preset
    if args.sampler != "spectrum":
        if given:
            raise ConfigError(f"--spectrum-{next(iter(given))} needs --sampler spectrum")
        return None
    return params_from(given, "command line")


def _cmd_generate(args) -> int:
    from ..model.bundle import load_bundle
    from ..sampling.reference_run import sample_settings

    _preflight(args)
    if args.text_emb is not None and args.prompt is not None:
        raise ConfigError("--prompt and --text-emb both given: the text embedding replaces the prompt")
    if args.uncond_text_emb is not None and args.text_emb is None:
        raise ConfigError("--uncond-text-emb goes with --text-emb (the cond stream's text embedding)")
    bundle = load_bundle(args.model_dir)
    if not args.quiet:
        print(bundle.checkpoint.summary_line(), file=sys.stderr)
    s = sample_settings(bundle, args.steps, args.cfg_scale, None, args.seed, args.sampler,
                        _spectrum_params(args))
    if args.backend == "reference" and (args.images != 1 or args.lifecycle != "on-demand"):
        raise ConfigError("--images and --lifecycle need a partitioned backend (onnxruntime, "
                          "rknnlite, board-sim), not the monolithic reference")
    text_embs = None
    if args.text_emb is not None:
        from ..sampling.reference_run import text_emb_streams
        text_embs = text_emb_streams(bundle, args.text_emb, args.uncond_text_emb, s["cfg_scale"])
        prompt = f"<text embedding {args.text_emb.name}>"
    else:
        prompt = args.prompt if args.prompt is not None else bundle.cfg.prompt.get("default", "")
        bundle.text_emb(prompt)      # no prompt encoder: say so before any export or run
    # The run starts here and owns its outputs: nothing of a previous run may sit beside its report.
    for old in (args.out, args.out.with_suffix(".json"), args.out.with_suffix(".latent.npy")):
        old.unlink(missing_ok=True)
    try:
        if args.backend == "reference":
            latent, image = _generate_reference(bundle, prompt, s, args.quiet, text_embs)
        else:
            latent, image = _generate_partitioned(bundle, prompt, s, args, text_embs)
    except (HarnessError, RunStopped) as exc:
        # Stopped before the pipeline wrote its report (exporting the partition, arming the guard).
        if args.backend == "reference" or args.out.with_suffix(".json").exists():
            raise
        raise type(exc)(f"{exc} (report: {_refused_report(args, exc)})") from None
    if image is None:
        from ..core.atomic import atomic_save_npy
        latent_path = args.out.with_suffix(".latent.npy")
        latent_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_save_npy(latent_path, latent)
        print(f"{latent_path}  (no decoder: the final latent {list(latent.shape)}) seed={s['seed']} "
              f"steps={s['steps']} cfg={s['cfg_scale']} backend={args.backend}")
        return 0
    from ..core.imageio import save_png
    if image.ndim == 4:         # --images N: out.png, out-1.png, ...
        for k, one in enumerate(image):
            save_png(one, args.out if k == 0 else args.out.with_name(f"{args.out.stem}-{k}.png"))
    else:
        save_png(image, args.out)
    print(f"{args.out}  prompt='{prompt}' seed={s['seed']} steps={s['steps']} cfg={s['cfg_scale']} "
          f"backend={args.backend} sampler={s['sampler']}")
    if s["sampler"] == "spectrum":
        from ..sampling.spectrum import SpectrumParams, schedule, schedule_text
        plan = schedule(s["steps"], SpectrumParams(**s["spectrum"]))
        print(f"Spectrum schedule, {sum(plan)} computed of {len(plan)} steps (C computed, F forecast): "
              f"{schedule_text(plan)}")
    return 0


def _preflight(args) -> None:
    """Everything that can be refused before the run spends time or touches a file."""
    from ..core.atomic import sweep_temporaries
    from ..backends.faults import parse_fault
    from ..memory.guard import parse_size
    from ..core.outputs import check_free_space
    if args.out.suffix.lower() != ".png":
        raise ConfigError(f"--out {args.out}: the image is written as PNG; use a .png path")
    _check_writable_dir(args.out)
    check_free_space(args.out.parent, parse_size(args.min_free), "--out")
    if args.fault is not None and args.backend != "faults":
        raise ConfigError(f"--fault {args.fault}: only --backend faults reads it, this run uses {args.backend}")
    parse_fault(args.fault)
    sweep_temporaries(args.out.parent)      # leftovers of a writer killed with SIGKILL


def _generate_reference(bundle, prompt, s, quiet, text_embs):
    import numpy as np
    from ..sampling.reference_run import sample_reference
    from ..report.terminal import progress_bar
    with progress_bar(s["steps"], "denoising (reference)", disable=quiet) as advance:
        latents = sample_reference(bundle, [prompt], [s["seed"]], s["steps"], s["cfg_scale"],
                                   s["shift"], on_step=lambda i: advance(), settings=s, text_embs=text_embs)
    has_decoder = bundle.cfg.decoder.get("onnx") or bundle.cfg.latent_channels == 1 and bundle.cfg.decoder
    if not has_decoder:
        return latents[0], None
    from ..runtime.pipeline import check_image_finite
    image = bundle.decode(latents[0])
    check_image_finite(np.asarray(image), f"model {bundle.cfg.name} (reference forward and decoder)")
    return latents[0], image


def _generate_partitioned(bundle, prompt, s, args, text_embs):
    from ..memory.guard import MemoryGuard, read_system_memory
    from ..report.terminal import print_run_tables, progress_bar
    from ..runtime.run import run_partitioned
    partition = args.partition or _default_partition(bundle, args)
    options = ({"core_mask": args.core_mask} if args.backend == "rknnlite"
               else board_sim_options(args) if args.backend == "board-sim" else {})
    if args.backend == "faults":
        from ..backends.faults import FaultInjectionContext
        options = FaultInjectionContext.parse_options({"fault": args.fault}, bundle.cfg)
    report_path = args.out.with_suffix(".json")
    guard = MemoryGuard(args.mem_floor, args.swap_limit, interval=0.25, max_staleness=0.1,
                        check_reader=read_system_memory)
    with guard, progress_bar(s["steps"], f"denoising ({args.backend})", disable=args.quiet) as advance:
        try:
            result = run_partitioned(bundle, partition, args.backend, prompt, s, options, guard=guard,
                                     report_path=report_path, on_step=lambda i: advance(),
                                     text_embs=text_embs, lifecycle=args.lifecycle, images=args.images)
        except (HarnessError, RunStopped) as exc:
            raise type(exc)(f"{exc} (partial report: {report_path})") from None
    if not args.quiet:
        print_run_tables(result.report)
        print(f"report: {report_path}")
    return result.latent[0], (result.images if args.images > 1 else result.image)


def _refused_report(args, exc) -> Path:
    """The report of a run stopped or failed before the pipeline wrote its own."""
    from ..core.atomic import atomic_write_json
    from ..core.signals import stop_status
    path = args.out.with_suffix(".json")
    status = "failed" if isinstance(exc, HarnessError) else stop_status(exc)
    atomic_write_json(path, {"status": status, "error": str(exc), "error_kind": type(exc).__name__,
                             "backend": args.backend, "model_dir": str(args.model_dir)})
    return path


def _check_writable_dir(out: Path) -> None:
    """Fail before the run, not after it, when the image cannot be written."""
    parent = out.parent if str(out.parent) else Path(".")
    existing = next((p for p in [parent, *parent.parents] if p.exists()), Path("."))
    if not existing.is_dir() or not os.access(existing, os.W_OK):
        raise ConfigError(f"--out {out}: cannot create files under {existing}")
    for path in (out, out.with_suffix(".json")):
        if path.is_dir():
            raise ConfigError(f"--out {out}: {path} is a folder, so the run's output cannot be written")


def _default_partition(bundle, args) -> Path:
    """The export command's default directory for these weights: exported on first use, so new
    weights never run against subgraphs exported from old ones."""
    from ..partition.manifest import default_partition_dir, manifest_path
    partition = default_partition_dir(bundle.cfg, bundle.digest, args.dtype)
    if args.backend == "rknnlite":
        raise ConfigError("--backend rknnlite needs --partition DIR with the converted .rknn subgraphs")
    if not manifest_path(partition).exists():
        from ..runtime.partitions import export_with_progress
        print(f"exporting the partition to {partition} ({args.dtype}, first use)", file=sys.stderr)
        export_with_progress(bundle.weights_source, bundle.cfg, partition, quiet=args.quiet, dtype=args.dtype)
    return partition


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from ..core.signals import StopSignals
    try:
        with StopSignals(f"harness {args.command}"):
            return args.func(args)
    except RunStopped as exc:       # SIGINT/SIGTERM: the partial report is written and says so
        print(f"error: {exc.status}: {exc}", file=sys.stderr)
        return exc.exit_code
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:          # a file the user named cannot be read or written
        print(f"error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
