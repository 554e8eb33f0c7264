"""The options, declared once: the pytest plugin's `--name` and every command's `--name` come from
OPTIONS (the pytest-benchmark pattern), with one parser per kind of value (seed, steps, sizes,
precision, backend, core mask, lifecycle), so every command accepts and refuses the same text with
the same words and the same defaults as the gates."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError, HarnessError
from ..model.config import EMBEDDED_DIR
from ..results.verdict.power import DETECT_PCT

__all__ = ["ranged", "checked", "size", "core_mask", "granularity", "lifecycle", "positive_int", "cfg_scale",
           "seed", "BACKEND_CHOICES", "board_sim_options", "default_partition", "OPTIONS", "SUITE_OPTIONS",
           "PRECISIONS", "RENAMED", "add_options", "check_precision", "resolve_backend", "flag_of", "Option",
           "renamed_line", "old_spelling"]


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
                else f"must be {lo} or more, got {value}" if hi == float("inf")
                else f"must be within {lo}..{hi}, got {value}")
        return value
    return parse


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


def granularity(text: str) -> str:
    from ..partition.granularity import parse_granularity
    return str(parse_granularity(text))


def lifecycle(text: str) -> str:
    from ..lifecycle import parse_lifecycle
    return str(parse_lifecycle(text))


def board_sim_options(args):
    """The board-sim BackendOptions of a command's arguments, completed (lock directory included)."""
    from ..backends.base import BackendOptions
    from ..backends.board_sim import normalize_options
    raw = {"core_mask": args.core_mask}
    if args.board_profile_data is not None:
        raw["profile_data"] = str(args.board_profile_data)
    if args.time_scale is not None:
        raw["time_scale"] = args.time_scale
    return BackendOptions("board-sim", normalize_options(raw))


positive_int = ranged(int, 1, float("inf"), "a whole number")
cfg_scale = ranged(float, 0.0, 30.0, "a number")
seed = ranged(int, 0, 2 ** 63 - 1, "a whole number")


def default_partition(bundle, backend: str, dtype: str, quiet: bool, calibration: Path | None = None,
                      cache_dir: Path = Path(".cache")) -> Path:
    """The partition of a run that names none: the export of these weights, made on first use
    (for rknn-sim, converted on first use under the suite's cache, as the gates do)."""
    from ..runtime.partitions import exported_partition
    if backend == "rknnlite":
        raise ConfigError("--backend rknnlite needs --partition DIR with the converted .rknn subgraphs")
    if backend == "rknn-sim":
        from ..runtime.converted import cached_conversion
        return cached_conversion(bundle, cache_dir, dtype, calibration)
    return exported_partition(bundle, dtype, quiet=quiet)


# ------------------------------------------------------------------ the declaration

def _backends() -> tuple[str, ...]:
    from ..backends.base import BACKENDS
    return tuple(BACKENDS)


BACKEND_CHOICES = ("auto", *_backends())
PRECISIONS = ("float16", "float32", "w8a8-ffn")


def _detect(text: str) -> str:
    from ..results.verdict.power import parse_detect
    parse_detect(text)
    return text


def _time_scale(text):
    return ranged(float, 1e-9, 1.0, "a number")(text)


@dataclass(frozen=True)
class Option:
    """One option of the suite and the commands. `kind` says how a value from the command line or a
    board profile's [suite] table is typed (text, flag, count, size, path); `parse` is the commands'
    argparse type; `suite=False` keeps it off pytest (a per-command option such as --seed);
    `renamed_from` is the name it had, still taken on the command line and in a board profile with one
    line saying the new one (users' CI scripts and profiles carry it)."""
    default: Any
    help: str
    kind: str = "text"
    parse: Callable | None = None
    suite: bool = True
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] | None = None
    renamed_from: str | None = None


OPTIONS: dict[str, Option] = {
    "backend": Option("auto", "auto (rknnlite on an RK3588, onnxruntime elsewhere), onnxruntime, rknnlite, faults, "
                              "board-sim (the board's timings and memory, simulated), "
                              "rknn-sim (rknn-toolkit2's PC simulator on the converted partition)",
                      choices=BACKEND_CHOICES),
    "model_dir": Option(str(EMBEDDED_DIR), "model directory (model.toml + weights); default: the embedded model",
                        kind="path"),
    "partition": Option(None, "partition directory (manifest.json); default: exported from the weights and cached",
                        kind="path"),
    "precision": Option("float16", "precision of an exported partition: float16 (the board's) or float32; "
                                   "with rknn-sim: float16 or w8a8-ffn (the conversion's)",
                        choices=PRECISIONS),
    "calibration": Option(None, "rknn-sim w8a8-ffn: calibration directory (default: captured on first use)",
                          kind="path"),
    "granularity": Option("branch", "subgraph size: branch (3 per block, the board's 84), block (one per block, "
                                    "AdaLN modulation, AdaLN gate and residual add inside) "
                                    "or blocks:K (K consecutive blocks)",
                          parse=checked(granularity)),
    "fake_quant": Option(None, "export the partition with simulated INT8 (w8a8-ffn): a what-if the quality gate "
                               "judges"),
    "golden_dir": Option(None, "golden images and cases.toml; default: golden/<model name>", kind="path"),
    "cases": Option(None, "comma-separated golden case names to run (default: all)"),
    "require_npu": Option(False, "fail every npu test unless this is an RK3588 with the RKNNLite runtime",
                          kind="flag"),
    "mem_floor": Option("1.5GiB", "memory guard: abort when MemAvailable falls below this", kind="size"),
    "swap_limit": Option("16MiB", "memory guard: abort when swap grows more than this", kind="size"),
    "pss_budget": Option(None, "peak added PSS allowed for a whole on-demand run (default: the model's [gates])",
                         kind="size"),
    "update_goldens": Option(False, "regenerate goldens and their metadata instead of comparing", kind="flag"),
    "force_goldens": Option(False, "allow --update-goldens from a non-reference precision (e.g. int8)", kind="flag"),
    "artifacts": Option("artifacts", "folder for images, diffs, reports, memory samples", kind="path"),
    # ANIMA_TELEMETRY_ROOT: a board-shaped tree standing for / (an emulated board, bin/_bootstrap.sh's tests)
    "telemetry_root": Option(os.environ.get("ANIMA_TELEMETRY_ROOT") or "/",
                             "root of the sysfs/procfs tree read for clocks, thermals and identity, and where an "
                             "RK3588 is told (`auto`; default: $ANIMA_TELEMETRY_ROOT, else /)", kind="path"),
    "core_mask": Option("auto", "rknnlite NPU core mask: auto, 0, 1, 2, 0_1, 0_1_2",
                        parse=checked(core_mask)),
    "bench_rounds": Option(1, "pedantic rounds per benchmark (a step takes minutes on the board)", kind="count"),
    "bench_steps": Option(None, "sampler steps per benchmark round (default: the golden case's)", kind="count"),
    "bench_sampler": Option(None, "sampler of the benchmark rounds: flow-euler or spectrum (13-of-28 preset; "
                                  "default: the case's)"),
    # The interleaved A/B session (harness/results/ab.py): the suite's partition is its side B.
    "ab_a": Option(None, "benchmark: also run an interleaved A/B session with this partition as side A and the "
                         "suite's as side B; --fault then applies to B only; a regression of B fails with its verdict",
                   kind="path", renamed_from="ab_baseline"),
    "ab_rounds": Option(6, "judged rounds (pairs) of the --ab-a session", kind="count"),
    "ab_threshold": Option("2%", "smallest paired shift that fails the --ab-a session"),
    "ab_confidence": Option("99%", "confidence of the --ab-a session over all its figures: a B unchanged from A "
                                   "fails 1 - this of the time"),
    "results": Option("sqlite:///.benchmarks/results.sqlite", "results store every benchmark run is written to and "
                      "judged against: a database URL in SQLAlchemy's form (sqlite:///relative.sqlite, "
                      "sqlite:////absolute.sqlite, postgresql://user@host/db for a fleet)"),
    "results_spool": Option(".benchmarks/spool.sqlite", "SQLite file that keeps a benchmark run the results store "
                            "could not take (a server gone); `bin/harness results push` sends it later", kind="path"),
    "fault": Option(None, "fault injection for proving gates fail: nan@SUBGRAPH, shape@SUBGRAPH, slow=SECONDS, "
                          "slow=xFACTOR, leak=mem:SIZE, leak=fd:PER_RELEASE, hang@SUBGRAPH, "
                          "init-fails-after=INITS (backend faults)"),
    "cache_dir": Option(".cache", "where exported partitions are cached", kind="path"),
    # Baselines with rules (harness/pytest_plugin/baselines.py): saved only when asked, from valid passing runs.
    "save_baseline": Option(False, "save this run's benchmark timings as the baselines (CI: main branch only); "
                                   "never from an INVALID run, only when the whole session passed", kind="flag"),
    "accept_upgrade": Option(False, "after an upgrade comparison (new NPU stack or manifest) that passed, make this "
                                    "run the board's baseline for the new stack; only when the whole session passed",
                             kind="flag"),
    # The fixed rule's (harness/results/verdict/judging.py): it stands in for a learned threshold while a
    # history is short, against whatever reference the verdict chose; not a property of the accepted reference.
    "fixed_threshold": Option("10%", "the fixed rule: with too few earlier runs for a learned threshold, a benchmark "
                                     "fails when a figure is this much over the reference run's",
                              renamed_from="baseline_threshold"),
    "detect": Option(f"{DETECT_PCT:g}%", "the slowdown every benchmark verdict must be able to find (its minimum "
                                         "detectable effect, at 95 percent power) to say PASS; past it the verdict is "
                                         "INCONCLUSIVE (the default: what the board write-up's run-to-run noise lets "
                                         "30 runs find, docs/verdict.md)",
                     parse=checked(_detect)),
    "inconclusive": Option("auto", "what an INCONCLUSIVE benchmark verdict does: fail (exit 1, its line says what "
                                   "would decide it) or warn (pass with a warning); auto: fail on an RK3588 (or a "
                                   "board-shaped --telemetry-root), with --require-npu or a --board-profile, and in "
                                   "results check, results boards and bench-ab; warn in a PC's rehearsal of the gates, "
                                   "whose step times decide nothing about a board", choices=("auto", "fail", "warn")),
    "npu_timeout": Option(None, "seconds before an npu test is stopped (pytest-timeout): a hung NPU call fails "
                                "its test instead of the job", kind="count"),
    "lifecycle": Option("on-demand", "context strategy: on-demand, resident, lru:K, pinned:K, pinned:@I,J,A-B, "
                                     "prefetch:K", parse=checked(lifecycle)),
    # The lifecycle soak gate (harness/gates/soak.py, marker soak).
    "soak_cycles": Option(None, "soak gate: load/init/run/release cycles over the branch kinds' subgraphs (default: "
                                "one image's, subgraphs x 13 computed Spectrum steps: 1,092 on the board)",
                                kind="count"),
    "soak_memory_rate": Option("16KiB", "soak gate: memory growth per cycle that fails it (descriptors and threads "
                                        "fail at one per 100 cycles)", kind="size"),
    "images": Option(1, "images generated together per run: every loaded context serves all their streams",
                     kind="count"),
    "board_profile_data": Option(None, "board-sim: profile data file (default boards/data/rock5c-anima.toml)",
                                 kind="path"),
    "time_scale": Option(None, "board-sim: seconds here per board second (default: the data file's)",
                         parse=_time_scale),
    "min_free": Option("64MiB", "refuse to start when the output's filesystem has less free space", kind="size"),
    "tier": Option(None, "a board profile's [tier.NAME] table (e.g. pr, nightly): its options replace [suite]'s"),
    "case_limit": Option(None, "run only the first N golden cases (a board profile's shorter tier sets it)",
                         kind="count"),
    "suite_run": Option(False, "bin/test's run: JUnit XML and benchmark JSON into --artifacts; no test collected "
                               "fails", kind="flag"),
    # The commands' own: one generation's settings (the gates take them from the golden cases).
    "seed": Option(None, "initial-noise seed (default: the model's)", parse=seed, suite=False),
    "steps": Option(None, "sampler steps (default: the model's)", kind="count", suite=False),
    "cfg_scale": Option(None, "CFG scale (default: the model's)", parse=cfg_scale, suite=False, aliases=("--cfg",)),
}
SUITE_OPTIONS = {name: option for name, option in OPTIONS.items() if option.suite}
# old name -> the option's name now
RENAMED = {option.renamed_from: name for name, option in OPTIONS.items() if option.renamed_from}

_ARGPARSE_TYPES = {"count": positive_int, "size": checked(size), "path": Path}


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def renamed_line(old: str, new: str) -> str:
    """The one line an old spelling gets: it still works, and says the new one."""
    return f"{old} is deprecated and will go: it is {new} now"


def old_spelling(new: str) -> type[argparse.Action]:
    """An argparse action for an option's old flag: the value stored as the new one's, one line on stderr."""
    class Renamed(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            print(renamed_line(str(option_string), new), file=sys.stderr)
            setattr(namespace, self.dest, values)
    return Renamed


def add_options(parser, *names: str, choices: dict | None = None, **defaults) -> None:
    """Add declared options to a command's parser; `defaults` overrides a default for this command,
    `choices` the values one command accepts besides the shared ones (generate's `reference`)."""
    for name in names:
        option = OPTIONS[name]
        default = defaults.get(name, option.default)
        text = option.help.replace("%", "%%")
        if default not in (None, False) and "default" not in option.help:
            text += " (default: %(default)s)"
        flags = [flag_of(name)] if name != "cfg_scale" else ["--cfg"]
        flags += [a for a in option.aliases if a not in flags]
        if option.kind == "flag":
            parser.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction, default=default,
                                help=text)
            continue
        kind = option.parse or _ARGPARSE_TYPES.get(option.kind)
        allowed = (choices or {}).get(name, option.choices)
        if option.kind == "path" and isinstance(default, str):
            default = Path(default)
        parser.add_argument(*flags, dest=name, type=kind, choices=allowed, default=default, help=text)


def check_precision(backend: str, precision: str) -> None:
    """The precisions a backend runs: the toolkit builds float16 or w8a8-ffn, the exporter float16 or float32."""
    precisions = ("float16", "w8a8-ffn") if backend == "rknn-sim" else ("float16", "float32")
    if precision not in precisions:
        raise ConfigError(f"--precision {precision}: choose {' or '.join(precisions)}"
                          + (" (what the toolkit builds)" if backend == "rknn-sim" else ""))


def resolve_backend(requested: str, on_board: bool) -> str:
    """`auto` is rknnlite on an RK3588 and onnxruntime elsewhere, for the gates and the commands alike."""
    backend = ("rknnlite" if on_board else "onnxruntime") if requested == "auto" else requested
    if backend not in _backends():
        raise ConfigError(f"--backend {requested}: unknown (choose auto, {', '.join(_backends())})")
    return backend
