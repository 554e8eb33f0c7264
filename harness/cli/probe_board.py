"""`harness probe-board`: measure what the planner assumes about a board (harness.memory.board_probe)
and write the measured data file `harness plan --measured` reads.

On the board: `--backend rknnlite --partition DIR` (the converted branch partition) plus
`--fused-partition` for the block and blocks:K figures and `--one-stream-partition` for
stream-per-core. Elsewhere the partitions are exported on first use; on board-sim the probe must give
back the figures the data file configures (a round trip), and it runs at --time-scale 0.05 unless told,
so that this machine's timer jitter is small beside the scaled stages.
"""
from __future__ import annotations

from pathlib import Path

from ..core.errors import ConfigError
from .options import add_options, board_sim_options, check_precision, checked, positive_int, ranged, resolve_backend

__all__ = ["add_command"]

MiB = 2 ** 20
PROBE_TIME_SCALE = 0.05
CORE_BACKENDS = ("rknnlite", "board-sim")


def add_command(sub) -> None:
    p = sub.add_parser("probe-board", help="measure the planner's assumptions on a board (overlap, "
                                           "stream-per-core, lifecycle against size, memory per context)")
    add_options(p, "backend", "model_dir", "partition", "precision", "board_profile_data", "time_scale",
                "telemetry_root")
    p.add_argument("--fused-partition", type=Path, action="append", default=[],
                   help="a block or blocks:K partition of the same model (repeatable; default off the "
                        "board: block and blocks:4, exported on first use)")
    p.add_argument("--one-stream-partition", type=Path,
                   help="a partition exported with --streams 1 (default off the board: block 0, exported)")
    p.add_argument("--window", type=checked(ranged(float, 1.0, 3600.0, "board seconds")), default=40.0,
                   help="board seconds each overlap loop runs (default: %(default)s)")
    p.add_argument("--repeats", type=positive_int, default=5,
                   help="least repeats of each figure (default: %(default)s)")
    p.add_argument("--tolerance", type=checked(ranged(float, 0.001, 1.0, "a share")), default=0.05,
                   help="repeat each figure until its 95 %% interval is within this share of it (default: "
                        "%(default)s)")
    p.add_argument("--budget", type=checked(ranged(float, 0.0, 3600.0, "seconds")), default=20.0,
                   help="wall seconds each figure may repeat for past --repeats (default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path("out/probe-board/probe-board.toml"),
                   help="the measured data file to write (default: %(default)s)")
    p.set_defaults(func=_cmd_probe_board)


def _cmd_probe_board(args) -> int:
    import tomli_w

    from ..core.atomic import atomic_write_bytes
    from ..memory.board_probe import ProbeSetup, probe_board
    from ..model.bundle import load_bundle
    from ..results.telemetry import detect_rk3588
    args.backend = resolve_backend(args.backend, detect_rk3588(args.telemetry_root))
    check_precision(args.backend, args.precision)
    bundle = load_bundle(args.model_dir)
    setup = _setup(args, ProbeSetup)
    subjects = _subjects(args, bundle)
    one = _one_stream(args, bundle)
    data = probe_board(setup, subjects, one, _weight_of(setup))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(args.out, tomli_w.dumps(_annotated(data, args)).encode())
    for line in _summary(data):
        print(line)
    print(f"wrote {args.out} (harness plan --measured {args.out})")
    return 0


def _setup(args, ProbeSetup):
    from ..backends import backend_options
    if args.backend == "board-sim":
        if args.time_scale is None:
            args.time_scale = PROBE_TIME_SCALE
        args.core_mask = "auto"            # each probe context sets its own
        options = board_sim_options(args).without("core_mask")
        return ProbeSetup(options, options.get("time_scale"), options.get("memory_scale"), args.window,
                          args.repeats, True, args.telemetry_root, args.budget, args.tolerance)
    options = backend_options(args.backend, vars(args), None).without("core_mask")
    return ProbeSetup(options, 1.0, 1.0, args.window, args.repeats,
                      args.backend in CORE_BACKENDS, args.telemetry_root, args.budget, args.tolerance)


def _partition(args, bundle, granularity: str) -> Path:
    from ..runtime.partitions import exported_partition
    if args.backend == "rknnlite":
        raise ConfigError(f"--backend rknnlite needs the converted partitions: --partition (branch), "
                          f"--fused-partition ({granularity})")
    return exported_partition(bundle, args.precision, granularity=granularity)


def _subjects(args, bundle) -> dict:
    """The first subgraph of each branch kind, then of each fused partition."""
    from ..memory.board_probe import Subject
    from ..runtime.run import open_partition
    branch = open_partition(bundle, args.partition or _partition(args, bundle, "branch"))
    out = {}
    for kind in ("self_attn", "cross_attn", "ffn"):
        entry = next(e for e in branch.subgraphs if e.branch == kind)
        out[kind] = Subject(kind, branch.path_of(entry), entry)
    fused = args.fused_partition or [_partition(args, bundle, g) for g in ("block", "blocks:4")]
    for path in fused:
        manifest = open_partition(bundle, path)
        if manifest.granularity == "branch":
            raise ConfigError(f"--fused-partition {path}: a branch partition (export it with --granularity block)")
        entry = manifest.subgraphs[0]
        out[str(manifest.granularity)] = Subject(str(manifest.granularity), manifest.path_of(entry), entry)
    return out


def _one_stream(args, bundle):
    """Block 0's FFN exported for one CFG stream (stream-per-core), or the partition given."""
    from ..memory.board_probe import Subject
    from ..partition.manifest import default_partition_dir, load_manifest, manifest_path
    from ..runtime.partitions import export_with_progress
    path = args.one_stream_partition
    if path is None:
        if args.backend == "rknnlite":
            return None
        path = Path(f"{default_partition_dir(bundle.cfg, bundle.digest, args.precision, blocks=[0])}-1-stream")
        if not manifest_path(path).exists():
            from ..partition.onnx_export import ExportSettings
            export_with_progress(bundle.weights_source, bundle.cfg, path,
                                 ExportSettings(args.precision, streams=1, blocks=[0]), quiet=True)
    manifest = load_manifest(path)
    entry = next((e for e in manifest.subgraphs if e.branch == "ffn"), None)
    if entry is None or manifest.export.get("streams") != 1:
        raise ConfigError(f"--one-stream-partition {path}: needs an FFN subgraph exported with --streams 1")
    return Subject("ffn", manifest.path_of(entry), entry)


def _weight_of(setup):
    """The weight MiB of a subject: board-sim's simulated context, or the file's size (a .rknn)."""
    from ..backends.base import create_context
    from ..backends.board_sim import BoardSimContext

    def weight(subject) -> float:
        if setup.options.backend == "board-sim":
            ctx = create_context(setup.options, subject.entry.label)
            assert isinstance(ctx, BoardSimContext)
            return ctx.board_weight_mib
        return subject.path.stat().st_size / MiB
    return weight


def _annotated(data: dict, args) -> dict:
    probe = dict(data["probe"], model=str(args.model_dir or "embedded"))
    if args.backend == "board-sim":
        probe["profile_data"] = str(args.board_profile_data or "boards/data/rock5c-anima.toml")
    return {**data, "probe": probe}


def _summary(data: dict) -> list[str]:
    lines = []
    if "overlap" in data:
        o = data["overlap"]
        lines.append(f"overlap: the two loops kept {o['rates_kept']:.2f} of their alone-rates (2 = side by side): "
                     + ("a lifecycle HOLDS the core, prefetch cannot hide it" if o["lifecycle_holds_core"]
                        else "a lifecycle runs beside inference"))
    if "streams" in data:
        s = data["streams"]
        lines.append(f"streams: one stream per core on two cores {s['stream_per_core_speedup']:.2f}x one core; "
                     f"cores 0_1_2 {s['multi_core_speedup']:.2f}x core 0")
    fixed, per_mib = data["lifecycle"]["fit"]
    lines.append(f"lifecycle: {fixed:.3f} s per context + {1000 * per_mib:.2f} ms per weight MiB "
                 f"(over {len(data['lifecycle']['contexts'])} contexts)")
    m = data["memory"]
    lines.append(f"memory per context: host {m['host_mib']:.1f} MiB, "
                 + (f"device {m['device_mib']:.1f} MiB" if "device_mib" in m else m["device"]))
    if "not_measured" in data["probe"]:
        lines.append(f"not measured: {data['probe']['not_measured']}")
    from ..memory.board_probe import noise_lines
    return lines + noise_lines(data)
