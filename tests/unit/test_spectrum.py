"""Spectrum: the schedule rule, the Chebyshev ridge forecaster against closed forms and an
independent FP64 fit (numpy.polynomial), and one clear line per bad parameter."""
from dataclasses import replace

import numpy as np
import pytest
from numpy.polynomial import chebyshev

from harness.core.errors import ConfigError, NumericsError
from harness.sampling.spectrum import (
    PRESETS,
    Forecaster,
    SpectrumVelocity,
    chebyshev_basis,
    check_params,
    params_from,
    schedule,
    schedule_text,
    step_tau,
)

PRESET = PRESETS["13-of-28"]
EPS32 = float(np.finfo(np.float32).eps)


def test_preset_computes_13_of_28_as_the_board_profile_counts():
    plan = schedule(28, PRESET)
    print(f"13-of-28 schedule: {schedule_text(plan)}")
    assert sum(plan) == 13 and len(plan) - sum(plan) == 15      # board profile [spectrum_28]
    assert plan[:5] == [True] * 5                               # warmup
    # window 2 -> every 2nd step while floor(window) is 2, then every 3rd, then every 4th
    assert schedule_text(plan) == "CCCCC" + "FC" * 4 + "FFC" * 4 + "FFF"


def test_window_one_computes_every_step():
    for steps in (1, 7, 28):
        assert all(schedule(steps, replace(PRESET, window=1.0, flex=0.0)))
        assert all(schedule(steps, replace(PRESET, window=1.9, flex=0.0, warmup=0)))


def test_tail_steps_always_compute_and_warmup_covers_short_runs():
    plan = schedule(28, replace(PRESET, tail=3))
    assert plan[-3:] == [True, True, True] and plan[:25] == schedule(28, PRESET)[:25]
    assert sum(plan) == 16
    assert all(schedule(4, PRESET))                             # 4 steps < warmup 5


def test_tau_spans_minus_one_to_one_linearly():
    taus = [step_tau(i, 28) for i in range(28)]
    assert taus[0] == -1.0 and taus[-1] == 1.0
    np.testing.assert_allclose(np.diff(taus), 2 / 27)


def test_basis_is_chebyshev_of_the_first_kind():
    tau = np.linspace(-1, 1, 11)
    np.testing.assert_allclose(chebyshev_basis(tau, 6), chebyshev.chebvander(tau, 6), atol=4 * EPS32)
    assert chebyshev_basis(tau, 4).dtype == np.float32


def _trajectory(coef, step, steps=28):
    tau = step_tau(step, steps)
    return sum(c * tau ** m for m, c in enumerate(coef))


@pytest.mark.parametrize("degree", [0, 1, 2, 4])
def test_polynomial_trajectory_is_forecast_exactly_in_fp32(degree):
    # A hidden state that is a polynomial of degree <= M in the step is reproduced at every forecast
    # step of the preset schedule (no ridge, pure Chebyshev), to FP32 rounding: each forecast is a
    # weighted sum of the stored FP32 features, so its rounding error is bounded by a few eps times
    # sum_j |a_j| |H_j|.
    rng = np.random.default_rng(degree)
    coef = rng.standard_normal((degree + 1, 512))
    params = replace(PRESET, ridge=0.0)
    f = Forecaster(28, params)
    forecasts = 0
    for step, computed in enumerate(schedule(28, params)):
        if computed:
            f.add(step, _trajectory(coef, step).astype(np.float32).reshape(8, 64))
            continue
        got = f.predict(step)
        a = f.weights(step)
        bound = 8 * EPS32 * sum(abs(w) * np.abs(h).max() for w, h in zip(a, f.features))
        assert got.shape == (8, 64) and got.dtype == np.float32
        assert np.abs(got.reshape(-1) - _trajectory(coef, step)).max() <= bound, step
        forecasts += 1
    assert forecasts == 15


def test_ridge_forecast_matches_an_independent_fp64_fit():
    # The preset's lambda 0.1 on a non-polynomial trajectory, against the formula evaluated with
    # numpy.polynomial in FP64 with tau = linspace(-1, 1, steps): a wrong basis, a wrong tau mapping
    # or a wrong ridge term moves the forecast far beyond FP32 rounding.
    steps, rng = 28, np.random.default_rng(7)
    phase = rng.uniform(0, 2 * np.pi, 300)
    trajectory = [np.sin(3.0 * s / steps + phase) + 0.1 * s for s in range(steps)]
    plan = schedule(steps, PRESET)
    f = Forecaster(steps, PRESET)
    tau = np.linspace(-1, 1, steps)
    for step, computed in enumerate(plan):
        if computed:
            f.add(step, trajectory[step].astype(np.float32))
            continue
        seen = [s for s in range(step) if plan[s]]
        x = chebyshev.chebvander(tau[seen], 4)
        coef = np.linalg.solve(x.T @ x + 0.1 * np.eye(5), x.T @ np.stack([trajectory[s] for s in seen]))
        want = chebyshev.chebvander(tau[step:step + 1], 4) @ coef
        np.testing.assert_allclose(f.predict(step), want[0], rtol=0, atol=2e-5 * np.abs(want).max())


def test_taylor_blend_extrapolates_a_line_exactly():
    # w = 0: pure first-order Taylor from the last two computed steps, exact on a linear trajectory
    # whatever the gap (k = (i - i_last) / (i_last - i_prev)).
    params = replace(PRESET, blend=0.0, degree=0)
    f = Forecaster(28, params)
    base, slope = np.float32(3.0), np.arange(4, dtype=np.float32)
    f.add(2, base + 2 * slope)
    f.add(5, base + 5 * slope)
    np.testing.assert_allclose(f.predict(11), base + 11 * slope, rtol=1e-6)


@pytest.mark.parametrize("change,fragment", [
    (dict(degree=5), "--spectrum-degree 5: a degree-5 Chebyshev fit needs 6 computed steps before the first "
                     "forecast (step 5), the schedule computes only 5 (warmup 5)"),
    (dict(window=0.0), "--spectrum-window 0: the window must be at least 1"),
    (dict(ridge=-0.1), "--spectrum-ridge -0.1: the ridge lambda must be 0 or more"),
    (dict(tail=29), "--spectrum-tail 29: more always-computed tail steps than the run's 28 steps"),
    (dict(blend=1.5), "--spectrum-blend 1.5: the Chebyshev/Taylor blend weight must be within 0..1"),
    (dict(flex=-1.0), "--spectrum-flex -1: the window growth must be 0 or more"),
    (dict(blend=0.5, degree=0, warmup=1), "the Taylor blend needs 2 computed steps"),
])
def test_bad_parameters_are_one_clear_line(change, fragment):
    with pytest.raises(ConfigError) as info:
        check_params(replace(PRESET, **change), 28)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_preset_and_window_one_are_valid():
    check_params(PRESET, 28)
    check_params(replace(PRESET, window=1.0, flex=0.0, degree=12), 28)     # nothing forecast: any degree


def test_params_from_a_table_names_the_file_at_fault():
    assert params_from({"warmup": 3, "degree": 2}, "x") == replace(PRESET, warmup=3, degree=2)
    assert params_from(None, "x") == PRESET
    with pytest.raises(ConfigError, match=r"cases.toml: unknown Spectrum parameter\(s\) \['lamda'\]"):
        params_from({"lamda": 0.1}, "cases.toml")
    with pytest.raises(ConfigError, match="unknown Spectrum preset 'fast'"):
        params_from({"preset": "fast"}, "cases.toml")
    with pytest.raises(ConfigError, match="Spectrum warmup must be a whole number, got 2.5"):
        params_from({"warmup": 2.5}, "cases.toml")


class _Line:
    """A model whose last hidden state moves on a line in the step: hidden = a + b * step."""

    def __init__(self, a, b):
        self.a, self.b, self.blocks_ran = a, b, []

    def hidden_state(self, latent, sigma, step):
        self.blocks_ran.append(step)
        return {"cond": self.a + self.b * step, "uncond": self.a - self.b * step}

    def final_velocity(self, hidden, sigma, step, latent_hw):
        return {s: h[None, None] for s, h in hidden.items()}


def test_velocity_runs_blocks_only_on_computed_steps_and_forecasts_each_stream():
    model = _Line(np.float32(1.0), np.ones((4, 4), np.float32))
    v = SpectrumVelocity(model, 28, replace(PRESET, ridge=0.0))
    for step in range(28):
        out = v(np.zeros((1, 1, 4, 4), np.float32), 0.5, step)
        np.testing.assert_allclose(out["cond"][0, 0], 1.0 + step, rtol=1e-5)
        np.testing.assert_allclose(out["uncond"][0, 0], 1.0 - step, rtol=1e-5, atol=1e-5)
    summary = v.summary()
    assert model.blocks_ran == summary["computed_steps"] and len(summary["computed_steps"]) == 13
    assert summary["forecasts_checked"] == 15 * 2


def test_a_forecast_that_overflows_stops_the_run_naming_step_and_stream():
    # Finite features (up to 3e38 at step 6) whose extrapolation to step 7 overflows FP32: the
    # numerics check catches the forecast itself, where no subgraph output was bad.
    big = np.float32(3e38)
    model = _Line(np.float32(0.0), np.full((2, 2), big / 6, np.float32))
    v = SpectrumVelocity(model, 28, replace(PRESET, ridge=0.0, degree=1))
    with pytest.raises(NumericsError, match=r"NaN/Inf at step 7 in the Spectrum forecast of the last hidden "
                                            r"state, stream cond: 4 of 4 values"):
        for step in range(28):
            v(np.zeros((1, 1, 2, 2), np.float32), 0.5, step)
