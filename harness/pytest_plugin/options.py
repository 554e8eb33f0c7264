"""The suite's options and how they become one SuiteSettings.

Every option can also come from a board profile (`--board-profile boards/NAME.toml`, table [suite]),
so a runner's settings live in the repository. Precedence: command line > board profile > default.
Backend-specific options (core mask, fault) are parsed by the backend that owns them.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from ..model.config import EMBEDDED_DIR, load_model_dir
from ..core.errors import ConfigError, HarnessError
from ..core.schema import read_toml

__all__ = ["SuiteSettings", "resolve_settings", "OPTIONS", "typed_value", "pytest_addoption"]

# option name -> (default, help). Defaults are the host CI's; a board profile overrides them.
OPTIONS = {
    "backend": ("auto", "auto (rknnlite on an RK3588, onnxruntime elsewhere), onnxruntime, rknnlite, faults, "
                        "board-sim (the board's timings and memory, simulated), "
                        "rknn-sim (rknn-toolkit2's PC simulator on the converted partition)"),
    "model_dir": (str(EMBEDDED_DIR), "model directory (model.toml + weights); default: the embedded model"),
    "partition": (None, "partition directory (manifest.json); default: exported from the weights and cached"),
    "precision": ("float16", "precision of an exported partition: float16 (the board's) or float32; "
                             "with rknn-sim: float16 or w8a8-ffn (the conversion's)"),
    "calibration": (None, "rknn-sim w8a8-ffn: calibration directory (default: captured on first use)"),
    "fake_quant": (None, "export the partition with simulated INT8 (ffn-w8a8): a what-if the quality gate judges"),
    "golden_dir": (None, "golden images and cases.toml; default: golden/<model name>"),
    "cases": (None, "comma-separated golden case names to run (default: all)"),
    "require_npu": (False, "fail every npu test unless this is an RK3588 with the RKNNLite runtime"),
    "mem_floor": ("1.5GiB", "memory guard: abort when MemAvailable falls below this"),
    "swap_limit": ("16MiB", "memory guard: abort when swap grows more than this"),
    "pss_budget": (None, "peak added PSS allowed for a whole on-demand run (default: the model's [gates])"),
    "update_goldens": (False, "regenerate goldens and their metadata instead of comparing"),
    "force_goldens": (False, "allow --update-goldens from a non-reference precision (e.g. int8)"),
    "artifacts": ("artifacts", "folder for images, diffs, reports, memory samples"),
    "telemetry_root": ("/", "root of the sysfs/procfs tree read for clocks, thermals and identity"),
    "core_mask": ("auto", "rknnlite NPU core mask: auto, 0, 1, 2, 0_1, 0_1_2"),
    "bench_rounds": (1, "pedantic rounds per benchmark (a step takes minutes on the board)"),
    "bench_steps": (None, "sampler steps per benchmark round (default: the golden case's)"),
    "bench_sampler": (None, "sampler of the benchmark rounds: flow-euler or spectrum (13-of-28 preset; default: the case's)"),
    # The interleaved A/B session (harness/results/ab.py): the suite's partition is the candidate.
    "ab_baseline": (None, "benchmark: also run an interleaved A/B session against this baseline partition; "
                          "--fault then applies to the candidate only; a regression fails with its verdict"),
    "ab_rounds": (6, "judged rounds (pairs) of the --ab-baseline session"),
    "ab_threshold": ("2%", "smallest paired shift that fails the --ab-baseline session"),
    "results": ("sqlite:///.benchmarks/results.sqlite", "results store every benchmark run is written to and "
                "judged against: a database URL in SQLAlchemy's form (sqlite:///relative.sqlite, "
                "sqlite:////absolute.sqlite, postgresql://user@host/db for a fleet)"),
    "fault": (None, "fault injection for proving gates fail: nan@SUBGRAPH, shape@SUBGRAPH, slow=SECONDS, "
                    "slow=xFACTOR (backend faults)"),
    "cache_dir": (".cache", "where exported partitions are cached"),
    # Baselines with rules (harness/pytest_plugin/baselines.py): saved only when asked, from valid passing runs.
    "save_baseline": (False, "save this run's benchmark timings as the baselines (CI: main branch only); "
                             "never from an INVALID run, only when the whole session passed"),
    "accept_upgrade": (False, "after an upgrade comparison (new NPU stack or manifest) that passed, make this run "
                              "the board's baseline for the new stack; only when the whole session passed"),
    "baseline_threshold": ("10%", "with too few earlier runs for a learned threshold, a benchmark fails when a "
                                  "figure is this much over the reference run's"),
    "npu_timeout": (None, "seconds before an npu test is stopped (pytest-timeout): a hung NPU call fails its "
                          "test instead of the job"),
    "lifecycle": ("on-demand", "context strategy: on-demand, resident, lru:K, pinned:K, pinned:@I,J,A-B, prefetch:K"),
    "images": (1, "images generated together per run: every loaded context serves all their streams"),
    "board_profile_data": (None, "board-sim: profile data file (default boards/data/rock5c-anima.toml)"),
    "time_scale": (None, "board-sim: seconds here per board second (default: the data file's)"),
    "min_free": ("64MiB", "refuse to start when the artifacts or history filesystem has less free space"),
    "suite_run": (False, "bin/test's run: JUnit XML and benchmark JSON into --artifacts; no test collected fails"),
}
_FLAGS = {"require_npu", "update_goldens", "force_goldens", "suite_run", "save_baseline", "accept_upgrade"}
_INTS = {"bench_rounds", "bench_steps", "images", "npu_timeout", "ab_rounds"}
_SIZES = {"mem_floor", "swap_limit", "pss_budget", "min_free"}
_PATHS = {"model_dir", "partition", "golden_dir", "artifacts", "telemetry_root", "cache_dir",
          "board_profile_data", "calibration", "ab_baseline"}


@dataclass
class SuiteSettings:
    backend: str
    backend_requested: str
    on_board: bool
    model_dir: Path
    partition: Path | None
    precision: str
    calibration: Path | None
    fake_quant: str | None
    golden_dir: Path
    cases: list[str] | None
    require_npu: bool
    mem_floor: int
    swap_limit: int
    pss_budget: int | None
    update_goldens: bool
    force_goldens: bool
    artifacts: Path
    telemetry_root: Path
    core_mask: str
    bench_rounds: int
    bench_steps: int | None
    results: str                        # results store URL, a relative SQLite path made absolute
    fault: str | None
    cache_dir: Path
    board_profile: Path | None = None
    golden_dir_given: bool = False     # named on the command line or in the profile
    min_free: int = 64 << 20
    suite_run: bool = False
    backend_options: dict = field(default_factory=dict)
    npu_problem: str | None = None      # why --require-npu cannot be met here (None: it can)
    save_baseline: bool = False
    baseline_threshold: float = 10.0    # percent
    accept_upgrade: bool = False
    npu_timeout: int | None = None
    bench_sampler: str | None = None
    lifecycle: str = "on-demand"        # the context strategy (harness.lifecycle.spec)
    images: int = 1                     # images generated together (stream batching)
    ab_baseline: Path | None = None     # the baseline partition of the interleaved A/B session
    ab_rounds: int = 6
    ab_threshold: float = 2.0           # percent


def pytest_addoption(parser):
    group = parser.getgroup("anima", "Anima NPU acceptance suite")
    group.addoption("--board-profile", default=None, help="TOML with a [suite] table of these options")
    for name, (_, text) in OPTIONS.items():
        flag = "--" + name.replace("_", "-")
        if name in _FLAGS:      # --x / --no-x: the command line can turn off a profile's flag
            group.addoption(flag, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            group.addoption(flag, default=None, help=text)


def _profile_values(path: Path | None) -> dict:
    if path is None:
        return {}
    data = read_toml(path, "board profile (--board-profile)")
    suite = data.get("suite", {})
    unknown = sorted(set(suite) - set(OPTIONS))
    if unknown:
        raise ConfigError(f"--board-profile {path}: unknown [suite] option '{unknown[0]}' "
                          f"(known: {', '.join(OPTIONS)})")
    return suite


def typed_value(name: str, value, source: str):
    if value is None:
        return None
    try:
        if name in _FLAGS:
            if isinstance(value, str):
                return value.lower() in ("1", "true", "yes")
            return bool(value)
        if name in _INTS:
            number = int(value)
            if number < 1:
                raise ValueError
            return number
    except (TypeError, ValueError):
        raise ConfigError(f"{source}: {name.replace('_', '-')} expects a positive whole number, got {value!r}") from None
    if name in _SIZES:
        from ..memory.guard import parse_size
        try:
            parse_size(value)       # checked here, where the option and its source are known
        except ConfigError as exc:
            raise ConfigError(f"{source}: --{name.replace('_', '-')}: {exc}") from None
        return value
    if name == "results":
        from ..results.store import absolute_url
        return absolute_url(str(value), Path.cwd())
    if name in _PATHS:
        path = Path(value).expanduser()
        return path if path.is_absolute() else (Path.cwd() / path)
    return str(value)


def resolve_settings(cli: dict, profile_path: str | None) -> SuiteSettings:
    """Merge command line, board profile and defaults, and decide the backend."""
    from ..backends import BACKENDS, backend_options
    from ..results.judge import parse_threshold
    from ..memory.guard import parse_size
    from ..results.telemetry import detect_rk3588
    profile_file = Path(profile_path) if profile_path else None
    profile = _profile_values(profile_file)
    values = {}
    for name, (default, _) in OPTIONS.items():
        if cli.get(name) is not None:
            values[name] = typed_value(name, cli[name], "command line")
        elif name in profile:
            values[name] = typed_value(name, profile[name], f"{profile_file} [suite]")
        else:
            values[name] = typed_value(name, default, "default")
    on_board = detect_rk3588(values["telemetry_root"])
    requested = values["backend"]
    backend = ("rknnlite" if on_board else "onnxruntime") if requested == "auto" else requested
    if backend not in BACKENDS:
        raise ConfigError(f"--backend {requested}: unknown (choose auto, {', '.join(BACKENDS)})")
    from ..lifecycle import parse_lifecycle
    lifecycle = str(parse_lifecycle(values["lifecycle"]))
    precisions = ("float16", "w8a8-ffn") if backend == "rknn-sim" else ("float16", "float32")
    if values["precision"] not in precisions:
        raise ConfigError(f"--precision {values['precision']}: choose {' or '.join(precisions)}"
                          + (" (what the toolkit builds)" if backend == "rknn-sim" else ""))
    from ..partition.bodies import FAKE_QUANT
    if values["fake_quant"] not in (None, *FAKE_QUANT):
        raise ConfigError(f"--fake-quant {values['fake_quant']}: choose {', '.join(FAKE_QUANT)}")
    cfg = load_model_dir(values["model_dir"])
    from ..gates.cases import golden_dir_for
    golden_dir = values["golden_dir"] or golden_dir_for(cfg.name)
    budget = values["pss_budget"] or cfg.raw_gates.get("pss_budget")
    options = backend_options(backend, values, cfg)
    from ..sampling.spectrum import SAMPLERS
    if values["bench_sampler"] not in (None, *SAMPLERS):
        raise ConfigError(f"--bench-sampler {values['bench_sampler']}: choose {', '.join(SAMPLERS)}")
    cases = _case_names(values["cases"], golden_dir)
    settings = SuiteSettings(
        backend=backend, backend_requested=requested, on_board=on_board,
        model_dir=values["model_dir"], partition=values["partition"], precision=values["precision"],
        calibration=values["calibration"], fake_quant=values["fake_quant"],
        golden_dir=golden_dir,
        cases=cases,
        require_npu=values["require_npu"], mem_floor=parse_size(values["mem_floor"]),
        swap_limit=parse_size(values["swap_limit"]),
        pss_budget=parse_size(budget) if budget else None,
        update_goldens=values["update_goldens"], force_goldens=values["force_goldens"],
        artifacts=values["artifacts"], telemetry_root=values["telemetry_root"],
        core_mask=values["core_mask"], bench_rounds=values["bench_rounds"],
        bench_steps=values["bench_steps"], results=values["results"], fault=values["fault"],
        cache_dir=values["cache_dir"], board_profile=profile_file, backend_options=options,
        save_baseline=values["save_baseline"], accept_upgrade=values["accept_upgrade"],
        baseline_threshold=parse_threshold(values["baseline_threshold"]), npu_timeout=values["npu_timeout"],
        bench_sampler=values["bench_sampler"], lifecycle=lifecycle, images=values["images"],
        min_free=parse_size(values["min_free"]), suite_run=values["suite_run"],
        golden_dir_given=values["golden_dir"] is not None, ab_baseline=values["ab_baseline"],
        ab_rounds=values["ab_rounds"], ab_threshold=parse_threshold(values["ab_threshold"], "--ab-threshold"))
    settings.npu_problem = _npu_problem(settings)
    return settings


def _case_names(spec: str | None, golden_dir: Path) -> list[str] | None:
    """--cases a,b: every name must be a case in golden_dir/cases.toml."""
    if spec is None:
        return None
    from ..gates.cases import load_cases
    names = [c.strip() for c in spec.split(",") if c.strip()]
    if not names:
        raise ConfigError(f"--cases {spec!r}: name at least one golden case")
    known = {c.name for c in load_cases(golden_dir / "cases.toml")}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"--cases: no golden case '{unknown[0]}' in {golden_dir / 'cases.toml'} "
                          f"(cases: {', '.join(sorted(known))})")
    return names


def _npu_problem(s: SuiteSettings) -> str | None:
    """Why the NPU requirement is not met here, or None when it is."""
    if not s.on_board:
        return (f"not an RK3588 board (no rockchip,rk3588 device tree, NPU device or librknnrt under "
                f"{s.telemetry_root})")
    if s.backend != "rknnlite":
        return f"backend is {s.backend}, not rknnlite"
    from ..backends.rknnlite import load_runtime
    try:
        load_runtime()
    except HarnessError as exc:
        return str(exc)
    return None
