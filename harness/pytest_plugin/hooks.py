"""The suite's pytest hooks: settings at configure time, the report header, one gate test per golden
case, the --require-npu check at call time and the step-split summary at the end."""
from __future__ import annotations

import sys

import pytest

from ..core.errors import HarnessError
from .fixtures import runner_of, selected_cases
from .options import OPTIONS, RENAMED, resolve_settings
from .session import start_run
from .state import STATE, SessionState, is_worker, settings_of, state_of
from .workers import choose


def configure(config):
    from ..results.telemetry import board_id, board_identity
    cli = {name: config.getoption(name) for name in (*OPTIONS, *RENAMED)}
    try:
        settings = resolve_settings(cli, config.getoption("board_profile"))
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    if not is_worker(config):       # once, from the controller: a worker was given the same arguments
        for line in settings.renamed:
            print(line, file=sys.stderr)
    config.stash[STATE] = state = SessionState(settings)
    choose(config, settings)        # -n: distributed, or serial when the session must be
    try:
        start_run(config, settings)
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    _check_thresholds(settings)
    identity = board_identity(settings.telemetry_root)
    state.identity, state.board = identity, board_id(identity)


def check_marker_expression(config):
    """A `-m` that cannot select what was meant is refused here in one line, before xdist's workers start
    (each refused it in its collection, and the controller then ended in 35 lines of INTERNALERROR)."""
    text = config.option.markexpr
    if not text:
        return
    from _pytest.mark.expression import Expression

    from ..cli.usage import closest
    try:
        expression = Expression.compile(text)
    except SyntaxError as exc:
        raise pytest.UsageError(f"-m {text!r}: not a marker expression (column {exc.offset}: {exc.msg}); "
                                f"e.g. -m \"not slow and not toolkit\"") from None
    known = {line.split(":")[0].split("(")[0].strip() for line in config.getini("markers")}
    for name in sorted(expression.idents() - known):
        raise pytest.UsageError(f"-m {text!r}: no marker '{name}'{closest(name, known)}; "
                                f"bin/test --markers lists them")


def _check_thresholds(settings) -> None:
    """Every case the quality gate will judge has its bars: else one line naming the command that derives
    them, once, here (each gate module's collection raised it again, six tracebacks of 175 lines)."""
    import math

    from ..gates.cases import THRESHOLDS_COMMAND
    from ..model.config import EMBEDDED_DIR
    if settings.update_goldens or not (settings.golden_dir / "cases.toml").exists():
        return
    bare = [c for c in selected_cases(settings, thresholds=False) if math.isnan(c.ssim_min) or math.isnan(c.psnr_min)]
    if not bare:
        return
    where = ([f"--model-dir={settings.model_dir}"] if settings.model_dir != EMBEDDED_DIR else []) \
        + ([f"--golden-dir={settings.golden_dir}"] if settings.golden_dir_given else [])
    commands = [" ".join([THRESHOLDS_COMMAND, *where, *([f"--sampler {s}"] if s != "flow-euler" else [])])
                for s in sorted({c.sampler for c in bare})]
    raise pytest.UsageError(f"{settings.golden_dir / 'cases.toml'}: no ssim_min / psnr_min for case(s) "
                            f"{', '.join(c.name for c in bare)}: derive them from the model's own runs with "
                            f"{' and '.join(commands)}")


def collection_modifyitems(config, items):
    """Tests with nothing to look at here are deselected, said in one line, rather than skipped: checks
    of the board itself (marker `board`: its NPU device node, its runtime's versions) off an RK3588
    unless --require-npu asks for the board (then they run and fail naming what is missing), the toolkit's
    conversions (marker `toolkit`) on one, which installs no rknn-toolkit2 environment, and the
    interleaved A/B session (marker `ab`) without --ab-a."""
    s = settings_of(config)
    if not (s.on_board or s.require_npu):
        _deselect(config, items, "board", "board-only check(s) deselected: not an RK3588 "
                                          "(--require-npu runs them, and they fail off the board)")
    if s.on_board:
        _deselect(config, items, "toolkit", "toolkit test(s) deselected: an RK3588 (rknn-toolkit2 converts on "
                                            "the PC: docs/board.md)")
    if s.ab_a is None:
        _deselect(config, items, "ab", "A/B session(s) deselected: no --ab-a partition (side A) to run against")


def _deselect(config, items: list, marker: str, why: str) -> None:
    chosen = [i for i in items if i.get_closest_marker(marker)]
    if not chosen:
        return
    items[:] = [i for i in items if not i.get_closest_marker(marker)]
    config.hook.pytest_deselected(items=chosen)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"anima: {len(chosen)} {why}")


def report_header(config):
    if is_worker(config):
        return []       # the controller's header is the session's (and reading the partition costs a worker)
    s = settings_of(config)
    i = state_of(config).identity
    lines = [
        f"anima: backend {s.backend} (asked: {s.backend_requested}), board {state_of(config).board} "
        f"({i.get('model') or 'no board model'}), on RK3588: {s.on_board}",
        f"anima: kernel {i.get('kernel')}, NPU driver {i.get('npu_driver')}, librknnrt {i.get('runtime_lib')}, "
        f"rknn-toolkit-lite2 {i.get('toolkit_lite')}, onnxruntime {i.get('onnxruntime')}",
        f"anima: model {s.model_dir}, goldens {s.golden_dir}",
        f"anima: partition {runner_of(config).describe_partition()}",
        f"anima: memory guard floor {s.mem_floor / 2**30:.2f} GiB, swap limit {s.swap_limit / 2**20:.0f} MiB"
        + (f", require-npu ({'met' if not s.npu_problem else 'NOT met: ' + s.npu_problem})" if s.require_npu else ""),
    ]
    from ..results.store import describe_url
    lines.append(f"anima: results store {describe_url(s.results)}")
    if s.board_profile:
        lines.append(f"anima: board profile {s.board_profile}")
    return lines


def pyfunc_call(pyfuncitem):
    # --require-npu off the board: the npu test itself fails (not skipped, not run on a fallback).
    # Checked at call time so that it counts as a failed test; the gate fixtures are lazy, so
    # nothing ran on the CPU before this.
    suite = settings_of(pyfuncitem.config)
    if suite.require_npu and suite.npu_problem and pyfuncitem.get_closest_marker("npu"):
        pytest.fail(f"--require-npu: {suite.npu_problem}. npu gates never fall back to a CPU backend.",
                    pytrace=False)


def generate_tests(metafunc):
    # Golden cases are data (golden/<model>/cases.toml): one gate test per case.
    if "golden_case" in metafunc.fixturenames:
        cases = selected_cases(settings_of(metafunc.config))
        metafunc.parametrize("golden_case", _fast_tier_split(cases, metafunc.module), ids=[c.name for c in cases])


def _fast_tier_split(cases: list, module) -> list:
    """A gate module may say FAST_TIER_CASES = N: of each sampler's cases, those after the first N are
    also `slow`, so the fast tier judges N of each sampler's path (flow-euler, Spectrum with its
    forecast steps) and the full suite and `-m npu` judge every case."""
    keep = getattr(module, "FAST_TIER_CASES", None)
    if keep is None:
        return cases
    seen: dict[str, int] = {}
    split = []
    for case in cases:
        seen[case.sampler] = seen.get(case.sampler, 0) + 1
        split.append(case if seen[case.sampler] <= keep else pytest.param(case, marks=pytest.mark.slow))
    return split


def terminal_summary(terminalreporter, exitstatus, config):
    state = state_of(config)
    for name, info in state.step_splits:
        _write_step_split(terminalreporter, name, info)
    quality = state.quality_lines
    if quality:
        terminalreporter.write_sep("-", "quality gate: measured, threshold, margin")
        for line in quality:
            terminalreporter.write_line(line)
    for line in state.spectrum_lines:         # tests/acceptance/test_spectrum_benchmark.py
        terminalreporter.write_sep("-", "Spectrum vs full")
        terminalreporter.write_line(line)
    for name, reasons in state.invalid_runs:
        terminalreporter.write_line(f"INVALID benchmark {name}: " + "; ".join(reasons), red=True)


def _write_step_split(tr, name: str, info: dict) -> None:
    sp = info["step_split_s"]
    tr.write_sep("-", f"step split: {name}")
    tr.write_line(
        f"mean computed step {sp['step']:.4f} s = lifecycle {sp['lifecycle']:.4f} s "
        f"({100 * sp['lifecycle'] / sp['step']:.1f} %)"
        f" + host math {sp['host']:.4f} s ({100 * sp['host'] / sp['step']:.1f} %)"
        f" + rest {sp['rest']:.4f} s ({100 * sp['rest'] / sp['step']:.1f} %)")
    life = info["lifecycle_s_per_step"]
    tr.write_line("  lifecycle per step: " + ", ".join(f"{k} {v:.4f} s" for k, v in life.items()))
    tr.write_line("  host math per step: " + ", ".join(
        f"{k[5:]} {v:.4f} s" for k, v in sp.items() if k.startswith("host_")))
    tr.write_line("  core per branch per step: " + ", ".join(
        f"{k} {v:.4f} s" for k, v in info["core_s_per_step"].items()))
    if info.get("forecast_steps"):
        tr.write_line(f"  per image: {info['computed_steps']} computed steps x {info['computed_step_s']:.4f} s + "
                      f"{info['forecast_steps']} forecast steps x {info['forecast_step_s']:.4f} s = "
                      f"{info['image_s']:.3f} s")
