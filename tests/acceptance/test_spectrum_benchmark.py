"""Benchmark: the Spectrum 28-step denoise against full steps of the same case, in one session.

The board profile's [spectrum_28] says what Spectrum buys there: 13 lifecycle passes instead of 28.
Here the Spectrum run goes through the partition on the backend under test, timed by the benchmark,
and the wall-time ratio (full / Spectrum denoise) is printed and stored in the benchmark's extra_info.
The full side is a flow-euler run of the same case on the same partition, backend and guard, with no
probe in it: in a whole session the benchmark gate's run of that case (test_benchmark.py), otherwise
one rendered here (gates.runner.GateRunner.unprobed_run). Its mean step time x 28 is the full 28-step
denoise: a flow-euler step is the same pass over the subgraphs at every step, and the Spectrum run's
computed steps are that pass too (the line prints both). Marked slow: run it by hand with
`bin/test tests/acceptance/test_spectrum_benchmark.py`. The Spectrum 28-step image against the full
28-step image is gated in tests/unit/test_spectrum_quality.py.
"""
import pytest

from harness.gates.runner import benchmark_info, derived_case
from harness.pytest_plugin.state import state_of
from harness.sampling.spectrum import DEFAULT_PRESET, PRESETS

pytestmark = [pytest.mark.npu, pytest.mark.benchmark, pytest.mark.slow]

STEPS = 28


def test_spectrum_wall_time_ratio(benchmark, golden_cases, gate_runner, npu_guard, request):
    base = next(c for c in golden_cases if c.sampler == "flow-euler")
    spectrum_case = derived_case(base, f"spectrum{STEPS}", steps=STEPS, sampler="spectrum",
                                 spectrum=PRESETS[DEFAULT_PRESET].as_dict())
    gate_runner.prepare()
    full = gate_runner.unprobed_run(base, npu_guard)
    if full.error is not None:
        pytest.fail(f"{base.name}: no full-step run to time: {full.error}", pytrace=False)
    results = []
    benchmark.pedantic(lambda: results.append(gate_runner.run(spectrum_case, npu_guard, keep=False)),
                       rounds=1, iterations=1, warmup_rounds=0)
    spectrum = results[-1]
    gate_runner.keep(spectrum, spectrum_case.name)

    full_step_s = benchmark_info(full.result.report)["mean_step_s"]
    full_s = full_step_s * STEPS
    ratio = full_s / spectrum.report["denoise_seconds"]
    info = benchmark_info(spectrum.report)
    line = (f"Spectrum {DEFAULT_PRESET} vs full, {STEPS} steps, case {base.name}: wall time "
            f"{full_s:.2f} s ({full_step_s:.3f} s a full step, {base.steps}-step run) / "
            f"{spectrum.report['denoise_seconds']:.2f} s = {ratio:.2f}x; {info['computed_steps']} computed x "
            f"{info['computed_step_s']:.3f} s + {info['forecast_steps']} forecast x {info['forecast_step_s']:.4f} s; "
            f"invocations {full.result.report['invocations']} in {base.steps} full steps, "
            f"{spectrum.report['invocations']} in {STEPS} Spectrum steps")
    print(line)
    benchmark.extra_info.update(info, full_step_s=full_step_s, full_denoise_s=full_s, wall_time_ratio=ratio)
    state_of(request.config).spectrum_lines.append(line)
    assert spectrum.report["steps"] == {"total": STEPS, "computed": 13, "forecast": 15}
    assert spectrum.report["invocations"] == 13 * gate_runner.subgraphs
