"""`harness generate`: one prompt through the partitioned run (by default the gates' backend, `auto`,
and precision, float16), written as a PNG beside its run report; `--backend reference` is the
monolithic FP32 numpy forward."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ..core.errors import ConfigError, HarnessError, RunStopped
from .options import BACKEND_CHOICES, OPTIONS, add_options, check_precision, default_partition, ranged, resolve_backend


def add_command(sub) -> None:
    gen = sub.add_parser("generate", help="render a prompt to a PNG (default: the embedded model)")
    add_options(gen, "model_dir")
    gen.add_argument("--prompt", help="text prompt (default: the model's default prompt)")
    gen.add_argument("--text-emb", dest="text_emb", type=Path, metavar="COND.npy",
                     help="text embedding [text_emb_tokens, text_emb_dim] instead of --prompt (a model "
                          "without a prompt encoder here, e.g. Anima's Qwen3 + adapter output)")
    gen.add_argument("--uncond-text-emb", dest="uncond_text_emb", type=Path,
                     metavar="UNCOND.npy", help="text embedding of the empty prompt, for CFG != 1")
    add_options(gen, "seed", "steps", "cfg_scale", "backend", "precision", "partition", "lifecycle", "images",
                "core_mask", "board_profile_data", "time_scale", "fault", "calibration", "cache_dir",
                "mem_floor", "swap_limit", "min_free", choices={"backend": (*BACKEND_CHOICES, "reference")})
    _add_sampler_options(gen)
    gen.add_argument("--out", type=Path, default=Path("out/generate.png"), help="PNG path (default: %(default)s)")
    gen.add_argument("--quiet", action="store_true", help="no progress bar or tables")
    gen.set_defaults(func=_cmd_generate)


def _add_sampler_options(gen) -> None:
    from ..sampling.spectrum import DEFAULT_PRESET, PRESETS, SAMPLERS
    gen.add_argument("--sampler", choices=SAMPLERS, default="flow-euler",
                     help="flow-euler (every step runs the 84 subgraphs) or spectrum (some steps forecast the "
                          "last hidden state and run only the final layer); default: %(default)s")
    group = gen.add_argument_group("Spectrum (with --sampler spectrum; the preset fills what is not given)")
    group.add_argument("--spectrum-preset", choices=list(PRESETS), default=None,
                       help=f"parameter preset (default: {DEFAULT_PRESET}, 13 computed of 28 steps)")
    number = ranged(float, float("-inf"), float("inf"), "a number")
    whole = ranged(int, -2 ** 31, 2 ** 31, "a whole number")
    for name, kind, text in (("warmup", whole, "first steps that always compute"),
                             ("window", number, "a step computes every floor(window) steps"),
                             ("flex", number, "window growth per computed step"),
                             ("degree", whole, "Chebyshev degree M"),
                             ("ridge", number, "ridge lambda of the Chebyshev fit"),
                             ("blend", number,
                              "weight w of the Chebyshev forecast against the Taylor step (1: Chebyshev only)"),
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
    spectrum = _spectrum_params(args)
    bundle = load_bundle(args.model_dir)
    if not args.quiet and bundle.checkpoint is not None:
        print(bundle.checkpoint.summary_line(), file=sys.stderr)
    s = sample_settings(bundle, args.steps, args.cfg_scale, None, args.seed, args.sampler, spectrum)
    prompt, text_embs = _prompt(bundle, args, s.cfg_scale)
    # The run starts here and owns its outputs: nothing of a previous run may sit beside its report.
    for old in (args.out, args.out.with_suffix(".json"), args.out.with_suffix(".latent.npy")):
        old.unlink(missing_ok=True)
    latent, image = _generate(bundle, prompt, s, args, text_embs)
    if image is None:
        _save_latent(args, s, latent)
    else:
        _save_images(args, s, prompt, image)
    return 0


def _prompt(bundle, args, cfg_scale: float) -> tuple[str, dict | None]:
    """(the prompt as the run reports it, the text embeddings that replace it or None)."""
    if args.text_emb is not None:
        from ..sampling.reference_run import text_emb_streams
        text_embs = text_emb_streams(bundle, args.text_emb, args.uncond_text_emb, cfg_scale)
        return f"<text embedding {args.text_emb.name}>", text_embs
    prompt = args.prompt if args.prompt is not None else bundle.cfg.prompt.get("default", "")
    bundle.text_emb(prompt)      # no prompt encoder: say so before any export or run
    return prompt, None


def _generate(bundle, prompt, s, args, text_embs):
    """(final latent, image or images or None) on the reference forward or the partition."""
    try:
        if args.backend == "reference":
            return _generate_reference(bundle, prompt, s, args.quiet, text_embs)
        return _generate_partitioned(bundle, prompt, s, args, text_embs)
    except (HarnessError, RunStopped) as exc:
        # Stopped before the pipeline wrote its report (exporting the partition, arming the guard).
        if args.backend == "reference" or args.out.with_suffix(".json").exists():
            raise
        raise type(exc)(f"{exc} (report: {_refused_report(args, exc)})") from None


def _save_latent(args, s, latent) -> None:
    from ..core.atomic import atomic_save_npy
    latent_path = args.out.with_suffix(".latent.npy")
    latent_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_save_npy(latent_path, latent)
    print(f"{latent_path}  (no decoder: the final latent {list(latent.shape)}) seed={s.seed} "
          f"steps={s.steps} cfg={s.cfg_scale} backend={args.backend}")


def _save_images(args, s, prompt: str, image) -> None:
    from ..core.imageio import save_png
    if image.ndim == 4:         # --images N: out.png, out-1.png, ...
        for k, one in enumerate(image):
            save_png(one, args.out if k == 0 else args.out.with_name(f"{args.out.stem}-{k}.png"))
    else:
        save_png(image, args.out)
    print(f"{args.out}  prompt='{prompt}' seed={s.seed} steps={s.steps} cfg={s.cfg_scale} "
          f"backend={args.backend} sampler={s.sampler}")
    if s.sampler == "spectrum":
        from ..sampling.spectrum import SpectrumParams, schedule, schedule_text
        assert s.spectrum is not None       # sample_settings gives the spectrum sampler its parameters
        plan = schedule(s.steps, SpectrumParams(**s.spectrum))
        print(f"Spectrum schedule, {sum(plan)} computed of {len(plan)} steps (C computed, F forecast): "
              f"{schedule_text(plan)}")


def _preflight(args) -> None:
    """Everything that can be refused before the run spends time or touches a file."""
    if args.backend == "auto":          # as the gates decide it (their --telemetry-root's default)
        from ..results.telemetry import detect_rk3588
        args.backend = resolve_backend("auto", detect_rk3588(Path(OPTIONS["telemetry_root"].default)))
    if args.backend != "reference":
        check_precision(args.backend, args.precision)
    _check_inputs(args)
    from ..backends.faults import parse_fault
    from ..core.atomic import sweep_temporaries
    from ..core.outputs import check_free_space
    from ..memory.guard import parse_size
    if args.out.suffix.lower() != ".png":
        raise ConfigError(f"--out {args.out}: the image is written as PNG; use a .png path")
    _check_writable_dir(args.out)
    check_free_space(args.out.parent, parse_size(args.min_free), "--out")
    if args.fault is not None and args.backend != "faults":
        raise ConfigError(f"--fault {args.fault}: only --backend faults reads it, this run uses {args.backend}")
    parse_fault(args.fault)
    sweep_temporaries(args.out.parent)      # leftovers of a writer killed with SIGKILL


def _check_inputs(args) -> None:
    """Options that exclude or need each other."""
    if args.text_emb is not None and args.prompt is not None:
        raise ConfigError("--prompt and --text-emb both given: the text embedding replaces the prompt")
    if args.uncond_text_emb is not None and args.text_emb is None:
        raise ConfigError("--uncond-text-emb goes with --text-emb (the cond stream's text embedding)")
    if args.backend == "reference" and (args.images != 1 or args.lifecycle != "on-demand"):
        raise ConfigError("--images and --lifecycle need a partitioned backend (onnxruntime, "
                          "rknnlite, board-sim), not the monolithic reference")


def _generate_reference(bundle, prompt, s, quiet, text_embs):
    import numpy as np

    from ..report.terminal import progress_bar
    from ..sampling.reference_run import sample_reference
    with progress_bar(s.steps, "denoising (reference)", disable=quiet) as advance:
        latents = sample_reference(bundle, [prompt], [s.seed], s, on_step=lambda i: advance(), text_embs=text_embs)
    has_decoder = bundle.cfg.decoder.get("onnx") or bundle.cfg.latent_channels == 1 and bundle.cfg.decoder
    if not has_decoder:
        return latents[0], None
    from ..runtime.pipeline import check_image_finite
    image = bundle.decode(latents[0])
    check_image_finite(np.asarray(image), f"model {bundle.cfg.name} (reference forward and decoder)")
    return latents[0], image


def _generate_partitioned(bundle, prompt, s, args, text_embs):
    from ..backends import backend_options
    from ..memory.guard import MemoryGuard, read_system_memory
    from ..report.terminal import print_run_tables, progress_bar
    from ..runtime.run import RunRequest, run_partitioned
    options = backend_options(args.backend, vars(args), bundle.cfg)
    partition = args.partition or _default_partition(bundle, args)
    report_path = args.out.with_suffix(".json")
    guard = MemoryGuard(args.mem_floor, args.swap_limit, interval=0.25, max_staleness=0.1,
                        check_reader=read_system_memory)
    with guard, progress_bar(s.steps, f"denoising ({args.backend})", disable=args.quiet) as advance:
        try:
            result = run_partitioned(
                RunRequest(bundle, partition, args.backend, prompt, s, backend_options=options,
                           text_embs=text_embs, lifecycle=args.lifecycle, images=args.images),
                guard=guard, report_path=report_path, on_step=lambda i: advance())
        except (HarnessError, RunStopped) as exc:
            raise type(exc)(f"{exc} (partial report: {report_path})") from None
    if not args.quiet:
        print_run_tables(result.report)
        print(f"report: {report_path}")
    assert result.latent is not None        # run_partitioned returned: the denoising finished
    return result.latent[0], (result.images if args.images > 1 else result.image)


def _default_partition(bundle, args) -> Path:
    """On the board, the embedded model's converted partition shipped in the repository (made by the
    toolkit on a PC: none on a fresh board); elsewhere the partition exported (or converted) on first use."""
    if args.backend == "rknnlite":
        from ..runtime.shipped import shipped_partition
        return shipped_partition(bundle, args.cache_dir, args.precision)
    return default_partition(bundle, args.backend, args.precision, args.quiet, args.calibration, args.cache_dir)


def _refused_report(args, exc) -> Path:
    """The report of a run stopped or failed before the pipeline wrote its own."""
    from ..core.atomic import atomic_write_json
    from ..core.signals import stop_status
    path = args.out.with_suffix(".json")
    status = "failed" if isinstance(exc, HarnessError) else stop_status(exc)
    from ..core.run_report import check_run_report
    report = {"status": status, "error": str(exc), "error_kind": type(exc).__name__,
              "backend": args.backend, "model_dir": str(args.model_dir)}
    atomic_write_json(path, check_run_report(report, f"run report {path}", error=ValueError))
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
