"""The suite's pytest plugin: options, board-profile settings, report header, benchmark hooks and the
fixtures the gates use. conftest.py loads it; the gate modules stay thin.

Every option can also come from a board profile (`--board-profile boards/NAME.toml`, table [suite]),
so a runner's settings live in the repository. Precedence: command line > board profile > default.
"""
from __future__ import annotations

import argparse
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .config import EMBEDDED_DIR, REPO_ROOT, load_model_dir
from .errors import ConfigError, HarnessError

__all__ = ["SuiteSettings", "resolve_settings", "OPTIONS"]

# option name -> (default, help). Defaults are the host CI's; a board profile overrides them.
OPTIONS = {
    "backend": ("auto", "auto (rknnlite on an RK3588, onnxruntime elsewhere), onnxruntime, rknnlite, faults"),
    "model_dir": (str(EMBEDDED_DIR), "model directory (model.toml + weights); default: the embedded model"),
    "partition": (None, "partition directory (manifest.json); default: exported from the weights and cached"),
    "precision": ("float16", "precision of an exported partition: float16 (the board's) or float32"),
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
    "history": (".benchmarks/history.jsonl", "benchmark run history (JSONL) for `python -m harness trend`"),
    "fault": (None, "fault injection for proving gates fail: nan@SUBGRAPH, slow=SECONDS (backend faults)"),
    "cache_dir": (".cache", "where exported partitions are cached"),
}
_FLAGS = {"require_npu", "update_goldens", "force_goldens"}
_INTS = {"bench_rounds", "bench_steps"}
_PATHS = {"model_dir", "partition", "golden_dir", "artifacts", "telemetry_root", "history", "cache_dir"}


@dataclass
class SuiteSettings:
    backend: str
    backend_requested: str
    on_board: bool
    model_dir: Path
    partition: Path | None
    precision: str
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
    history: Path
    fault: str | None
    cache_dir: Path
    board_profile: Path | None = None
    backend_options: dict = field(default_factory=dict)
    npu_problem: str | None = None      # why --require-npu cannot be met here (None: it can)


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
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"--board-profile {path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--board-profile {path}: not valid TOML ({exc})") from None
    suite = data.get("suite", {})
    unknown = sorted(set(suite) - set(OPTIONS))
    if unknown:
        raise ConfigError(f"--board-profile {path}: unknown [suite] option '{unknown[0]}' "
                          f"(known: {', '.join(OPTIONS)})")
    return suite


def _typed(name: str, value, source: str):
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
    if name in _PATHS:
        path = Path(value).expanduser()
        return path if path.is_absolute() else (Path.cwd() / path)
    return str(value)


def resolve_settings(cli: dict, profile_path: str | None) -> SuiteSettings:
    """Merge command line, board profile and defaults, and decide the backend."""
    from .memory import parse_size
    from .telemetry import detect_rk3588
    profile_file = Path(profile_path) if profile_path else None
    profile = _profile_values(profile_file)
    values = {}
    for name, (default, _) in OPTIONS.items():
        if cli.get(name) is not None:
            values[name] = _typed(name, cli[name], "command line")
        elif name in profile:
            values[name] = _typed(name, profile[name], f"{profile_file} [suite]")
        else:
            values[name] = _typed(name, default, "default")
    on_board = detect_rk3588(values["telemetry_root"])
    requested = values["backend"]
    backend = ("rknnlite" if on_board else "onnxruntime") if requested == "auto" else requested
    if backend not in ("onnxruntime", "rknnlite", "faults"):
        raise ConfigError(f"--backend {requested}: unknown (choose auto, onnxruntime, rknnlite, faults)")
    if values["precision"] not in ("float16", "float32"):
        raise ConfigError(f"--precision {values['precision']}: choose float16 or float32")
    from .partition.onnx_export import FAKE_QUANT
    if values["fake_quant"] not in (None, *FAKE_QUANT):
        raise ConfigError(f"--fake-quant {values['fake_quant']}: choose {', '.join(FAKE_QUANT)}")
    cfg = load_model_dir(values["model_dir"])
    golden_dir = values["golden_dir"] or REPO_ROOT / "golden" / cfg.name
    budget = values["pss_budget"] or cfg.raw_gates.get("pss_budget")
    options = {}
    from .backends.rknnlite import parse_core_mask
    core_mask = parse_core_mask(values["core_mask"])
    if backend == "rknnlite":
        options["core_mask"] = core_mask
    if values["fault"] and backend != "faults":
        raise ConfigError(f"--fault {values['fault']}: faults are injected only with --backend faults")
    if backend == "faults":
        from .backends.faults import parse_fault
        options.update(parse_fault(values["fault"]))
        if options.get("nan_subgraph", 0) >= cfg.subgraphs:
            raise ConfigError(f"--fault nan@{options['nan_subgraph']}: {cfg.name} has subgraphs 0..{cfg.subgraphs - 1}")
    cases = _case_names(values["cases"], golden_dir)
    settings = SuiteSettings(
        backend=backend, backend_requested=requested, on_board=on_board,
        model_dir=values["model_dir"], partition=values["partition"], precision=values["precision"],
        fake_quant=values["fake_quant"],
        golden_dir=golden_dir,
        cases=cases,
        require_npu=values["require_npu"], mem_floor=parse_size(values["mem_floor"]),
        swap_limit=parse_size(values["swap_limit"]),
        pss_budget=parse_size(budget) if budget else None,
        update_goldens=values["update_goldens"], force_goldens=values["force_goldens"],
        artifacts=values["artifacts"], telemetry_root=values["telemetry_root"],
        core_mask=values["core_mask"], bench_rounds=values["bench_rounds"],
        bench_steps=values["bench_steps"], history=values["history"], fault=values["fault"],
        cache_dir=values["cache_dir"], board_profile=profile_file, backend_options=options)
    settings.npu_problem = _npu_problem(settings)
    return settings


def _case_names(spec: str | None, golden_dir: Path) -> list[str] | None:
    """--cases a,b: every name must be a case in golden_dir/cases.toml."""
    if spec is None:
        return None
    from .golden import load_cases
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
    from .backends.rknnlite import load_runtime
    try:
        load_runtime()
    except HarnessError as exc:
        return str(exc)
    return None


# ------------------------------------------------------------------ hooks

def pytest_configure(config):
    cli = {name: config.getoption(name) for name in OPTIONS}
    try:
        settings = resolve_settings(cli, config.getoption("board_profile"))
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    config._anima_settings = settings
    _key_benchmarks_by_board(config, settings)


def _key_benchmarks_by_board(config, settings) -> None:
    # pytest-benchmark files baselines under a machine id that is the same for every board of a kind
    # (OS-Python-bits): give each board its own storage so --benchmark-compare compares like with like.
    from .telemetry import board_id, board_identity
    identity = board_identity(settings.telemetry_root)
    config._anima_identity = identity
    config._anima_board = board_id(identity)
    if hasattr(config.option, "benchmark_storage") and config.option.benchmark_storage in (None, "file://./.benchmarks"):
        config.option.benchmark_storage = f"file://{REPO_ROOT / '.benchmarks' / config._anima_board}"


def pytest_sessionstart(session):
    _atomic_baselines(session.config)


def _atomic_baselines(config) -> None:
    # pytest-benchmark writes a saved run (the next baseline) with a plain open/write: a runner
    # killed mid-save would leave a torn baseline that breaks every later --benchmark-compare.
    # Route its file storage through the atomic writer instead (same name, same content).
    storage = getattr(getattr(config, "_benchmarksession", None), "storage", None)
    if storage is None or not hasattr(storage, "get") or not hasattr(storage, "_next_num"):
        return
    from pytest_benchmark.utils import safe_dumps

    from .atomic import atomic_write_bytes

    def save(output_json, save):
        path = storage.get(f"{storage._next_num}_{save}.json")
        atomic_write_bytes(path, safe_dumps(output_json, ensure_ascii=True, indent=4).encode())
        storage.logger.info(f"Saved benchmark data in: {path}")

    storage.save = save


def pytest_report_header(config):
    s = config._anima_settings
    i = config._anima_identity
    lines = [
        f"anima: backend {s.backend} (asked: {s.backend_requested}), board {config._anima_board} "
        f"({i.get('model') or 'no board model'}), on RK3588: {s.on_board}",
        f"anima: kernel {i.get('kernel')}, NPU driver {i.get('npu_driver')}, librknnrt {i.get('runtime_lib')}, "
        f"rknn-toolkit-lite2 {i.get('toolkit_lite')}, onnxruntime {i.get('onnxruntime')}",
        f"anima: model {s.model_dir}, goldens {s.golden_dir}",
        f"anima: partition {_runner(config).describe_partition()}",
        f"anima: memory guard floor {s.mem_floor / 2**30:.2f} GiB, swap limit {s.swap_limit / 2**20:.0f} MiB"
        + (f", require-npu ({'met' if not s.npu_problem else 'NOT met: ' + s.npu_problem})" if s.require_npu else ""),
    ]
    if s.board_profile:
        lines.append(f"anima: board profile {s.board_profile}")
    return lines


def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info["board_id"] = config._anima_board
    machine_info["board"] = config._anima_identity
    machine_info["backend"] = config._anima_settings.backend


def pytest_benchmark_compare_machine_info(config, benchmarksession, machine_info, compared_benchmark):
    saved = compared_benchmark.get("machine_info", {}).get("board_id")
    if saved and saved != machine_info.get("board_id"):
        benchmarksession.logger.warning(
            f"comparing against a baseline from board {saved}, this is {machine_info.get('board_id')}")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for name, info in getattr(config, "_anima_splits", []):
        sp = info["step_split_s"]
        terminalreporter.write_sep("-", f"step split: {name}")
        terminalreporter.write_line(
            f"mean step {sp['step']:.4f} s = lifecycle {sp['lifecycle']:.4f} s ({100 * sp['lifecycle'] / sp['step']:.1f} %)"
            f" + host math {sp['host']:.4f} s ({100 * sp['host'] / sp['step']:.1f} %)"
            f" + rest {sp['rest']:.4f} s ({100 * sp['rest'] / sp['step']:.1f} %)")
        life = info["lifecycle_s_per_step"]
        terminalreporter.write_line("  lifecycle per step: " + ", ".join(f"{k} {v:.4f} s" for k, v in life.items()))
        terminalreporter.write_line("  host math per step: " + ", ".join(
            f"{k[5:]} {v:.4f} s" for k, v in sp.items() if k.startswith("host_")))
        terminalreporter.write_line("  core per branch per step: " + ", ".join(
            f"{k} {v:.4f} s" for k, v in info["core_s_per_step"].items()))
    quality = getattr(config, "_anima_quality", [])
    if quality:
        terminalreporter.write_sep("-", "quality gate: measured, threshold, margin")
        for line in quality:
            terminalreporter.write_line(line)
    invalid = getattr(config, "_anima_invalid", [])
    for name, reasons in invalid:
        terminalreporter.write_line(f"INVALID benchmark {name}: " + "; ".join(reasons), red=True)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    # --require-npu off the board: the npu test itself fails (not skipped, not run on a fallback).
    # Checked at call time so that it counts as a failed test; the gate fixtures are lazy, so
    # nothing ran on the CPU before this.
    suite = pyfuncitem.config._anima_settings
    if suite.require_npu and suite.npu_problem and pyfuncitem.get_closest_marker("npu"):
        pytest.fail(f"--require-npu: {suite.npu_problem}. npu gates never fall back to a CPU backend.",
                    pytrace=False)


def pytest_generate_tests(metafunc):
    # Golden cases are data (golden/<model>/cases.toml): one gate test per case.
    if "golden_case" in metafunc.fixturenames:
        cases = _selected_cases(metafunc.config._anima_settings)
        metafunc.parametrize("golden_case", cases, ids=[c.name for c in cases])


def _selected_cases(suite):
    from .golden import load_cases
    try:
        cases = load_cases(suite.golden_dir / "cases.toml")
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    return [c for c in cases if suite.cases is None or c.name in suite.cases]


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope="session")
def suite(request) -> SuiteSettings:
    return request.config._anima_settings


def _runner(config):
    # One GateRunner per session, shared by the report header and the gate fixtures.
    if not hasattr(config, "_anima_runner"):
        from .gates import GateRunner
        config._anima_runner = GateRunner(config._anima_settings)
    return config._anima_runner


@pytest.fixture(scope="session")
def gate_runner(request):
    return _runner(request.config)


@pytest.fixture(scope="session")
def golden_cases(suite):
    return _selected_cases(suite)


@pytest.fixture
def artifacts(suite, request) -> Path:
    """This test's artifact folder; created by the first file written into it, so passing tests
    leave no empty folders behind."""
    return suite.artifacts / request.node.name.replace("/", "_").replace("[", "-").rstrip("]")


@pytest.fixture(autouse=True)
def npu_guard(request, suite):
    """Around every npu test: the NPU requirement, then an armed memory guard.

    The guard samples MemAvailable, swap and PSS; the pipeline checks it between subgraph
    invocations, so a trip stops the run there, releases every context and fails the test with the
    numbers. Its samples are written to the test's artifacts whatever happened.
    """
    if request.node.get_closest_marker("npu") is None:
        yield None
        return
    from .memory import MemoryGuard, read_system_memory
    # The sampler (PSS included) every 0.25 s; the pipeline's checks between invocations read only
    # MemAvailable and swap, at most every 0.1 s: the guard must not cost the step it watches.
    guard = MemoryGuard(suite.mem_floor, suite.swap_limit, interval=0.25, max_staleness=0.1,
                        check_reader=read_system_memory)
    with guard:
        yield guard
    out = suite.artifacts / "memory" / f"{request.node.name}.json"
    guard.write_samples(out)
    if guard.tripped:
        pytest.fail(f"memory guard tripped: {guard.trip_reason} (samples: {out})", pytrace=False)
