"""Benchmark: the Spectrum 28-step image against the full 28-step image, side by side in one run.

The board profile's [spectrum_28] says what Spectrum buys there: 13 lifecycle passes instead of 28.
Here both runs go through the partition on the backend under test, one after the other, and the
wall-time ratio (full / Spectrum denoise) is printed and stored in the benchmark's extra_info with
the SSIM between the two images. The benchmark times the Spectrum run; the full run is timed by its
own step records. Marked slow (41 lifecycle passes, ~25 s on the quiet development machine): run it
by hand with `bin/test tests/acceptance/test_spectrum_benchmark.py`.
"""
import pytest

from harness.gates.quality import compare, compare_latents
from harness.gates.runner import benchmark_info, derived_case
from harness.pytest_plugin.state import SPECTRUM_LINES, append_to
from harness.sampling.spectrum import DEFAULT_PRESET, PRESETS

pytestmark = [pytest.mark.npu, pytest.mark.benchmark, pytest.mark.slow]

STEPS = 28


def test_spectrum_wall_time_ratio(benchmark, golden_cases, gate_runner, npu_guard, request):
    base = next(c for c in golden_cases if c.sampler == "flow-euler")
    full_case = derived_case(base, f"full{STEPS}", steps=STEPS)
    spectrum_case = derived_case(base, f"spectrum{STEPS}", steps=STEPS, sampler="spectrum",
                                 spectrum=PRESETS[DEFAULT_PRESET].as_dict())
    gate_runner.prepare()
    full = gate_runner.run(full_case, npu_guard)
    results = []
    benchmark.pedantic(lambda: results.append(gate_runner.run(spectrum_case, npu_guard, keep=False)),
                       rounds=1, iterations=1, warmup_rounds=0)
    spectrum = results[-1]
    gate_runner.keep(spectrum, spectrum_case.name)

    ratio = full.report["denoise_seconds"] / spectrum.report["denoise_seconds"]
    # A partition without a decoder (the Anima path) ends at the latent: compare those instead.
    q = (compare(spectrum.image, full.image) if full.image is not None
         else compare_latents(spectrum.latent, full.latent))
    info = benchmark_info(spectrum.report)
    line = (f"Spectrum {DEFAULT_PRESET} vs full, {STEPS} steps, case {base.name}: wall time "
            f"{full.report['denoise_seconds']:.2f} s / {spectrum.report['denoise_seconds']:.2f} s = {ratio:.2f}x; "
            f"{info['computed_steps']} computed x {info['computed_step_s']:.3f} s + {info['forecast_steps']} "
            f"forecast x {info['forecast_step_s']:.4f} s; invocations {full.report['invocations']} -> "
            f"{spectrum.report['invocations']}; {q.kind} SSIM {q.ssim:.4f}, PSNR {q.psnr:.1f} dB")
    print(line)
    benchmark.extra_info.update(info, full_denoise_s=full.report["denoise_seconds"], wall_time_ratio=ratio,
                                ssim_vs_full=q.ssim, psnr_vs_full=q.psnr)
    append_to(request.config, SPECTRUM_LINES, line)
    assert spectrum.report["steps"] == {"total": STEPS, "computed": 13, "forecast": 15}
    assert spectrum.report["invocations"] == 13 * gate_runner.subgraphs
