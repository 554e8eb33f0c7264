"""CLI subcommands `export` and `inspect`; registered by harness.cli.main through add_command()."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core.errors import ConfigError, HarnessError
from ..model.config import EMBEDDED_DIR, load_model_dir, load_profile
from ..partition.manifest import FAKE_QUANT, default_partition_dir
from ..runtime.partitions import export_with_progress
from .options import add_options, check_precision

__all__ = ["add_command", "parse_blocks", "default_partition_dir"]


def parse_blocks(text: str, blocks: int) -> list[int]:
    """"0", "0-3" or "0,2,5-7" -> sorted block indices, each within 0..blocks-1."""
    chosen: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(v) for v in part.split("-", 1))
            else:
                lo = hi = int(part)
        except ValueError:
            raise ConfigError(f"--blocks '{text}': expected N, N-M or a comma list of them") from None
        if lo > hi or lo < 0 or hi >= blocks:
            raise ConfigError(f"--blocks '{text}': '{part}' is outside 0..{blocks - 1}")
        chosen.update(range(lo, hi + 1))
    return sorted(chosen)


def _opset(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None


def _streams(text: str) -> int:
    value = _opset(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def add_command(subparsers) -> None:
    exp = subparsers.add_parser("export", help="export the subgraphs to ONNX with a manifest")
    exp.add_argument("--model-dir", type=Path, default=EMBEDDED_DIR,
                     help="model directory with model.toml and its weights (default: models/embedded)")
    exp.add_argument("--profile", help="profile name or .toml (e.g. anima-2b) instead of --model-dir")
    exp.add_argument("--weights", type=Path, help="safetensors checkpoint for --profile")
    exp.add_argument("--out", type=Path,
                     help="partition directory (default: out/partitions/<model>-<precision>-<weights digest>)")
    add_options(exp, "precision", precision="float32")
    exp.add_argument("--fake-quant", choices=FAKE_QUANT, default=None,
                     help="simulate INT8 in the graph (w8a8-ffn: FFN weights and activations)")
    exp.add_argument("--streams", type=_streams, default=2, help="CFG streams per run (default: 2)")
    exp.add_argument("--opset", type=_opset, default=17, help="ONNX opset, at most 19 (default: 17)")
    exp.add_argument("--blocks", help="blocks to export: N, N-M or a comma list (default: all)")
    add_options(exp, "granularity")
    exp.add_argument("--quiet", action="store_true", help="no progress bar")
    exp.set_defaults(func=cmd_export)

    ins = subparsers.add_parser("inspect", help="summarise a partition and verify every checksum")
    ins.add_argument("dir", type=Path, help="partition directory (holds manifest.json)")
    ins.set_defaults(func=cmd_inspect)

    ck = subparsers.add_parser("inspect-checkpoint",
                               help="what a DiT checkpoint holds: dtypes, parameters per group, host or NPU")
    ck.add_argument("path", type=Path, help="safetensors checkpoint, or a model folder (model.toml + weights)")
    ck.add_argument("--profile", help="profile name or .toml the checkpoint must match (default: the model.toml "
                                      "beside it, else the profile of models/profiles/ its tensors match)")
    ck.set_defaults(func=cmd_inspect_checkpoint)


def _load_model(args):
    """(cfg, the checkpoint opened for streamed reads, its path): nothing is read yet."""
    from ..model.checkpoint import Checkpoint
    if args.profile:
        if args.weights is None:
            raise ConfigError("--profile needs --weights FILE (the checkpoint to export)")
        cfg = load_profile(args.profile)
        return cfg, Checkpoint(args.weights, cfg), args.weights
    if args.weights is not None:
        raise ConfigError("--weights goes with --profile; a --model-dir names its own weights file")
    cfg = load_model_dir(args.model_dir)
    if "weights" not in cfg.files:
        raise ConfigError(f"{cfg.source}: missing 'weights' (file name of the weights)")
    path = args.model_dir / cfg.files["weights"]
    return cfg, Checkpoint(path, cfg), path


def cmd_export(args) -> int:
    from ..partition.graph import check_opset
    check_opset(args.opset)          # before reading gigabytes of weights
    check_precision("onnxruntime", args.precision)
    cfg, checkpoint, source = _load_model(args)
    print(checkpoint.summary_line(), file=sys.stderr)
    blocks = parse_blocks(args.blocks, cfg.blocks) if args.blocks else None
    out = args.out or default_partition_dir(cfg, checkpoint.digest(), args.precision, args.fake_quant, blocks,
                                            args.granularity)
    from ..partition.onnx_export import ExportSettings
    settings = ExportSettings(args.precision, args.streams, args.opset, blocks, args.fake_quant, args.granularity,
                              weights_source=str(source))
    manifest = export_with_progress(checkpoint, cfg, out, settings, quiet=args.quiet)
    size = sum(e.bytes for e in manifest.entries())
    print(f"{manifest.file}  {len(manifest.subgraphs)} subgraphs"
          f"{' + decoder' if manifest.decoder else ''}, {size / 1e6:.1f} MB, {args.precision}, "
          f"{args.streams} streams, opset {args.opset}, granularity {manifest.granularity}")
    return 0


def render_inspection(report: dict, console=None) -> None:
    """The inspection as rich tables: settings, per-branch counts/sizes, failures, verdict."""
    from rich.table import Table

    from ..report.terminal import console as make_console
    console = console or make_console(stderr=False)
    head = Table(title=f"partition {report['directory']}", show_header=False)
    for key in ("model", "format", "granularity", "dtype", "streams", "opset", "latent_size", "tokens",
                "text_emb_tokens", "subgraphs", "total_bytes", "weights_sha256", "fp32_islands",
                "toolkit", "target", "precision", "build_seconds", "cpu_ops"):
        if key in report:
            head.add_row(key, str(report[key]))
    console.print(head)
    if report["branches"]:
        table = Table(title="subgraphs by branch")
        for col in ("branch", "count", "MB", "checksums ok"):
            table.add_column(col, justify="left" if col == "branch" else "right")
        for branch, row in report["branches"].items():
            table.add_row(branch, str(row["count"]), f"{row['bytes'] / 1e6:.2f}",
                          f"{row['verified']}/{row['count']}")
        console.print(table)
    if report.get("unlisted_files"):
        console.print(f"note: {len(report['unlisted_files'])} subgraph file(s) not in the manifest: "
                      f"{', '.join(report['unlisted_files'][:5])}")
    for reason in report["reasons"]:
        console.print(f"[red]FAIL[/red] {reason}", highlight=False)
    style = "green" if report["verdict"] == "ok" else "red"
    console.print(f"verdict: [{style}]{report['verdict']}[/{style}]")


def cmd_inspect(args) -> int:
    from ..partition.inspection import inspect_partition
    report = inspect_partition(args.dir)
    render_inspection(report)
    return 0 if report["verdict"] == "ok" else 1


def _checkpoint_of(path: Path, profile: str | None):
    """(file, Checkpoint): a model folder's weights under its model.toml; a file under --profile, else the
    model.toml beside it, else the first profile of models/profiles/ its header matches."""
    from ..model.checkpoint import Checkpoint
    from ..model.config import PROFILES_DIR
    if path.is_dir():
        cfg = load_model_dir(path)
        if "weights" not in cfg.files:
            raise ConfigError(f"{path / 'model.toml'}: names no weights file")
        return path / cfg.files["weights"], Checkpoint(path / cfg.files["weights"], cfg)
    if profile is not None:
        return path, Checkpoint(path, load_profile(profile))
    if (path.parent / "model.toml").is_file():
        return path, Checkpoint(path, load_model_dir(path.parent))
    tried = []
    for candidate in sorted(PROFILES_DIR.glob("*.toml")):
        try:
            return path, Checkpoint(path, load_profile(candidate))
        except HarnessError as exc:
            tried.append(f"{candidate.stem}: {str(exc).removeprefix(f'{path}: ')}")
    if len({reason.split(": ", 1)[1] for reason in tried}) == 1:     # not a checkpoint at all: said once
        raise ConfigError(f"{path}: {tried[0].split(': ', 1)[1]}")
    raise ConfigError(f"{path}: matches no profile ({'; '.join(tried)}); name its model.toml with --profile")


def cmd_inspect_checkpoint(args) -> int:
    """Header only: nothing but the JSON header is read, so a 4 GB file answers at once."""
    from rich.table import Table

    from ..report.terminal import console as make_console
    path, checkpoint = _checkpoint_of(args.path, args.profile)
    cfg = checkpoint.cfg
    console = make_console(stderr=False)
    table = Table(title=f"{path} (profile {cfg.name})")
    for col in ("group", "needed by", "tensors", "parameters", "MB", "dtype"):
        table.add_column(col, justify="left" if col in ("group", "needed by", "dtype") else "right")
    totals: dict[str, list[int]] = {}
    for row in checkpoint.groups():
        table.add_row(row["group"], row["role"], str(row["tensors"]), f"{row['params']:,}",
                      f"{row['bytes'] / 1e6:.1f}", ",".join(row["dtypes"]))
        total = totals.setdefault(row["role"], [0, 0])
        total[0] += row["params"]
        total[1] += row["bytes"]
    console.print(table)
    for role, (params, size) in totals.items():
        console.print(f"{role}: {params:,} parameters, {size / 2**20:.1f} MiB stored"
                      + (f", {params * 4 / 2**20:.1f} MiB as float32 on the host" if role == "host" else ""),
                      highlight=False)
    # one line, however long its path: rich would break it at the console's width, mid-path or mid-word,
    # for whoever greps the output (a path under a deep temporary folder broke 'key prefix' in two)
    console.print(checkpoint.summary_line(), highlight=False, soft_wrap=True)
    return 0
