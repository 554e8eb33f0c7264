"""The types and shared options of the commands: one parser per kind of value (seed, steps, sizes,
core mask, lifecycle), so every command accepts and refuses the same text with the same words."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core.errors import ConfigError, HarnessError

__all__ = ["ranged", "checked", "size", "core_mask", "lifecycle", "positive_int", "cfg_scale", "seed",
           "BACKEND_CHOICES", "add_board_sim_options", "board_sim_options", "default_partition"]


def ranged(kind, lo, hi, what: str):
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


def checked(parse):
    """An argparse type from a harness parser that raises ConfigError."""
    def convert(text: str):
        try:
            return parse(text)
        except HarnessError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return convert


def size(text: str) -> str:
    from ..memory.guard import parse_size
    parse_size(text)
    return text


def core_mask(text: str) -> str:
    from ..backends.rknnlite import parse_core_mask
    return parse_core_mask(text)


def lifecycle(text: str) -> str:
    from ..lifecycle import parse_lifecycle
    return str(parse_lifecycle(text))


def add_board_sim_options(parser) -> None:
    """--board-profile-data / --time-scale: the simulated board's own options."""
    parser.add_argument("--board-profile-data", type=Path,
                        help="board-sim: profile data file (default: boards/data/rock5c-anima.toml)")
    parser.add_argument("--time-scale", type=ranged(float, 1e-9, 1.0, "a number"),
                        help="board-sim: seconds here per board second (default: the data file's)")


def board_sim_options(args) -> dict:
    from ..backends.board_sim import normalize_options
    raw = {"core_mask": args.core_mask}
    if args.board_profile_data is not None:
        raw["profile_data"] = str(args.board_profile_data)
    if args.time_scale is not None:
        raw["time_scale"] = args.time_scale
    return normalize_options(raw)


positive_int = ranged(int, 1, float("inf"), "a whole number")
cfg_scale = ranged(float, 0.0, 30.0, "a number")
seed = ranged(int, 0, 2 ** 63 - 1, "a whole number")


def default_partition(bundle, backend: str, dtype: str, quiet: bool) -> Path:
    """The partition of a run that names none: the export of these weights, made on first use."""
    from ..runtime.partitions import exported_partition
    if backend == "rknnlite":
        raise ConfigError("--backend rknnlite needs --partition DIR with the converted .rknn subgraphs")
    return exported_partition(bundle, dtype, quiet=quiet)
