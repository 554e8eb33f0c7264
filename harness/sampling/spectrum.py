"""Spectrum step skipping (Han et al., CVPR 2026; docs/architecture.md section 5).

Of a run's steps only some run the blocks ("computed"); on the others ("forecast") no subgraph runs:
the hidden state after the last block is forecast per CFG stream from the computed steps so far, and
only the final layer runs on it with the step's own timestep embedding.

- Schedule: the first `warmup` steps and the last `tail` steps compute; in between a step computes
  when (forecasts in a row + 1) % floor(window) == 0, and each computed step after the warmup grows
  the window by `flex`. The preset "13-of-28" (warmup 5, window 2, flex 0.25) computes 13 of 28.
- Forecaster: step i maps to tau = 2 i / (steps - 1) - 1 in [-1, 1]; Chebyshev basis T0..TM; ridge
  fit C = (X^T X + lambda I)^-1 X^T H over every computed step, solved by Cholesky in FP32; the
  forecast x(tau*)^T C is optionally blended with a first-order Taylor step:
  h = (1 - w) (h_last + k (h_last - h_prev)) + w h_cheb, k = (i - i_last) / (i_last - i_prev).

The sampler sees a plain `velocity(x, sigma, step)` callable: `SpectrumVelocity` wraps any model
that can return its last hidden state per stream and run its final layer on a given one (the
partitioned pipeline and the monolithic reference both can), so both are sampled by the same code.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Protocol

import numpy as np

from ..core.errors import ConfigError, NumericsError

__all__ = ["SpectrumParams", "PRESETS", "DEFAULT_PRESET", "SAMPLERS", "check_params", "schedule",
           "schedule_text", "step_tau", "chebyshev_basis", "Forecaster", "SpectrumVelocity", "params_from",
           "sampler_velocity"]

SAMPLERS = ("flow-euler", "spectrum")


@dataclass(frozen=True)
class SpectrumParams:
    warmup: int = 5         # first steps that always compute
    window: float = 2.0     # a step computes every floor(window) steps ...
    flex: float = 0.25      # ... and the window grows by flex per computed step
    degree: int = 4         # Chebyshev degree M
    ridge: float = 0.1      # ridge lambda
    blend: float = 1.0      # w: weight of the Chebyshev forecast (1 - w goes to the Taylor step)
    tail: int = 0           # last steps that always compute

    def as_dict(self) -> dict:
        return asdict(self)


# docs/architecture.md section 5: warmup 5, window 2, flex 0.25 computes 13 of 28 (the board profile's
# [spectrum_28]: 13 computed, 15 forecast); M = 4 and lambda = 0.1 as measured there.
PRESETS = {"13-of-28": SpectrumParams(warmup=5, window=2.0, flex=0.25, degree=4, ridge=0.1, blend=1.0, tail=0)}
DEFAULT_PRESET = "13-of-28"
_FIELDS = {f.name: f.type for f in fields(SpectrumParams)}


def params_from(table: dict | None, where: str) -> SpectrumParams:
    """A preset (key `preset`, default 13-of-28) with any of its fields overridden; `where` names
    the file or option in errors."""
    table = dict(table or {})
    name = table.pop("preset", DEFAULT_PRESET)
    if name not in PRESETS:
        raise ConfigError(f"{where}: unknown Spectrum preset {name!r} (presets: {', '.join(PRESETS)})")
    unknown = sorted(set(table) - set(_FIELDS))
    if unknown:
        raise ConfigError(f"{where}: unknown Spectrum parameter(s) {unknown}; allowed: preset, {', '.join(_FIELDS)}")
    values: dict[str, Any] = {}
    for key, value in table.items():
        whole = _FIELDS[key] == "int"
        ok = isinstance(value, int) if whole else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok or (not whole and not math.isfinite(value)):
            raise ConfigError(f"{where}: Spectrum {key} must be {'a whole number' if whole else 'a number'}, "
                              f"got {value!r}")
        values[key] = value if whole else float(value)
    return replace(PRESETS[name], **values)


def check_params(p: SpectrumParams, steps: int, name: Callable[[str], str] = lambda f: f"--spectrum-{f}") -> None:
    """One ConfigError line per bad parameter, naming it as `name(field)` spells it."""
    if p.window < 1:
        raise ConfigError(f"{name('window')} {p.window:g}: the window must be at least 1 (a step computes "
                          f"every floor(window) steps; floor {math.floor(p.window)} never computes)")
    if p.warmup < 0 or p.tail < 0 or p.degree < 0:
        bad = next(f for f in ("warmup", "tail", "degree") if getattr(p, f) < 0)
        raise ConfigError(f"{name(bad)} {getattr(p, bad)}: must be 0 or more")
    if p.tail > steps:
        raise ConfigError(f"{name('tail')} {p.tail}: more always-computed tail steps than the run's "
                          f"{steps} steps")
    if p.flex < 0:
        raise ConfigError(f"{name('flex')} {p.flex:g}: the window growth must be 0 or more")
    if p.ridge < 0:
        raise ConfigError(f"{name('ridge')} {p.ridge:g}: the ridge lambda must be 0 or more (a negative "
                          "lambda can make X^T X + lambda I indefinite, and Cholesky fails mid-run)")
    if not 0.0 <= p.blend <= 1.0:
        raise ConfigError(f"{name('blend')} {p.blend:g}: the Chebyshev/Taylor blend weight must be within 0..1")
    plan = schedule(steps, p)
    if all(plan):
        return
    first = plan.index(False)
    points = sum(plan[:first])
    need = max(p.degree + 1, 2 if p.blend < 1.0 else 1)
    if points < need:
        why = (f"a degree-{p.degree} Chebyshev fit needs {p.degree + 1}" if need == p.degree + 1
               else "the Taylor blend needs 2")
        raise ConfigError(f"{name('degree')} {p.degree}: {why} computed steps before the first forecast "
                          f"(step {first}), the schedule computes only {points} (warmup {p.warmup})")


def schedule(steps: int, p: SpectrumParams) -> list[bool]:
    """Per step: True when the step runs the blocks, False when it is forecast."""
    plan, window, forecasts = [], p.window, 0
    for i in range(steps):
        fixed = i < p.warmup or i >= steps - p.tail
        computed = fixed or (forecasts + 1) % math.floor(window) == 0
        if computed:
            # The window grows with computed steps after the warmup only: that is the rule that
            # gives the section-5 example its 13 of 28.
            window += p.flex if i >= p.warmup else 0.0
            forecasts = 0
        else:
            forecasts += 1
        plan.append(computed)
    return plan


def schedule_text(plan: list[bool]) -> str:
    """'CCCCCFCFC...': one letter per step, C computed, F forecast."""
    return "".join("C" if c else "F" for c in plan)


def step_tau(step: int, steps: int) -> float:
    """Step index 0 .. steps-1 -> tau in [-1, 1] (the Chebyshev basis is well conditioned there)."""
    return 0.0 if steps <= 1 else 2.0 * step / (steps - 1) - 1.0


def chebyshev_basis(tau: np.ndarray, degree: int) -> np.ndarray:
    """[len(tau), degree+1] FP32: T0 = 1, T1 = tau, Tm = 2 tau T(m-1) - T(m-2)."""
    tau = np.asarray(tau, dtype=np.float32).reshape(-1)
    basis = np.empty((tau.size, degree + 1), dtype=np.float32)
    basis[:, 0] = 1.0
    if degree >= 1:
        basis[:, 1] = tau
    for m in range(2, degree + 1):
        basis[:, m] = 2.0 * tau * basis[:, m - 1] - basis[:, m - 2]
    return basis


class Forecaster:
    """The hidden state of one stream, fitted over its computed steps and forecast at another.

    Features are kept flattened in FP32, one row per computed step. The fit is applied as one
    weight per stored step: x*^T (X^T X + lambda I)^-1 X^T H = a^T H with a = X (X^T X + lambda I)^-1 x*
    (the matrix is symmetric), so only the (M+1)x(M+1) system is solved and the features are read
    once, never copied into a coefficient matrix of their own size.
    """

    def __init__(self, steps: int, params: SpectrumParams):
        self.steps = steps
        self.p = params
        self.seen: list[int] = []
        self.features: list[np.ndarray] = []
        self.shape: tuple[int, ...] | None = None

    def add(self, step: int, feature: np.ndarray) -> None:
        self.shape = feature.shape
        self.seen.append(step)
        self.features.append(np.array(feature, dtype=np.float32, copy=True).reshape(-1))

    def weights(self, step: int) -> np.ndarray:
        """a [n]: the forecast at `step` is sum_j a_j H_j (Chebyshev ridge fit, Cholesky, FP32)."""
        taus = np.array([step_tau(s, self.steps) for s in self.seen])
        x = chebyshev_basis(taus, self.p.degree).astype(np.float64)                # [n, M+1]
        target = chebyshev_basis(np.array([step_tau(step, self.steps)]), self.p.degree)[0].astype(np.float64)
        # The normal equations square the basis's condition number: over the 13-of-28 warmup
        # (tau within [-1, -0.70]) the degree-4 X^T X is singular in FP32 at lambda 0 (Cholesky
        # fails, measured). This (M+1)x(M+1) system is solved in FP64, which costs nothing; the
        # features and the forecast stay FP32.
        gram = x.T @ x + self.p.ridge * np.eye(self.p.degree + 1)
        import scipy.linalg  # here: a run of another sampler never needs it, and scipy costs ~0.4 s
        try:
            factor = scipy.linalg.cho_factor(gram, lower=True, check_finite=True)
        except (np.linalg.LinAlgError, ValueError) as exc:
            raise NumericsError(f"Spectrum forecast at step {step}: the Chebyshev ridge system over steps "
                                f"{self.seen} is not positive definite ({exc}); raise the ridge lambda "
                                "or lower the degree") from None
        return (x @ scipy.linalg.cho_solve(factor, target)).astype(np.float32)

    def predict(self, step: int) -> np.ndarray:
        """The forecast feature at `step`, in the shape it was added with."""
        a = self.weights(step)
        h = np.zeros_like(self.features[0])
        # An overflow here is no warning: the caller checks the forecast and names step and stream.
        with np.errstate(over="ignore", invalid="ignore"):
            for weight, feature in zip(a, self.features):
                h += weight * feature
            if self.p.blend < 1.0:
                last, prev = self.features[-1], self.features[-2]
                k = np.float32((step - self.seen[-1]) / (self.seen[-1] - self.seen[-2]))
                h *= np.float32(self.p.blend)
                h += np.float32(1.0 - self.p.blend) * (last + k * (last - prev))
        return h.reshape(self.shape)


class HiddenStateModel(Protocol):
    """What Spectrum needs of a model: its last hidden state per stream, and the final layer on a
    given one with the step's timestep embedding."""

    def hidden_state(self, latent: np.ndarray, sigma: float, step: int) -> dict[str, np.ndarray]: ...

    def final_velocity(self, hidden: dict[str, np.ndarray], sigma: float, step: int,
                       latent_hw: tuple[int, int]) -> dict[str, np.ndarray]: ...


def _check_forecast(h: np.ndarray, step: int, stream: str) -> None:
    # A forecast is an extrapolation: it can blow up where no subgraph did, so it is checked like
    # every subgraph output before the final layer sees it.
    if np.isfinite(np.sum(h, dtype=np.float64)):
        return
    bad = int(h.size - np.count_nonzero(np.isfinite(h)))
    if bad:
        raise NumericsError(f"NaN/Inf at step {step} in the Spectrum forecast of the last hidden state, "
                            f"stream {stream}: {bad} of {h.size} values")


class SpectrumVelocity:
    """`velocity(x, sigma, step)` that runs the blocks on computed steps and forecasts the rest.

    `timed(step, category)` (optional) times the forecast as host math ("forecast").
    """

    def __init__(self, model: HiddenStateModel, steps: int, params: SpectrumParams,
                 timed: Callable | None = None):
        check_params(params, steps)
        self.model = model
        self.steps = steps
        self.params = params
        self.plan = schedule(steps, params)
        self.timed = timed or (lambda step, category: contextlib.nullcontext())
        self.forecasters: dict[str, Forecaster] = {}
        self.checked: list[tuple[int, str]] = []       # (step, stream) of every forecast checked

    def __call__(self, latent: np.ndarray, sigma: float, step: int) -> dict[str, np.ndarray]:
        if self.plan[step]:
            hidden = self.model.hidden_state(latent, sigma, step)
            with self.timed(step, "forecast"):          # keeping the features is forecaster work
                for stream, h in hidden.items():
                    self.forecasters.setdefault(stream, Forecaster(self.steps, self.params)).add(step, h)
        else:
            hidden = {}
            for stream, forecaster in self.forecasters.items():
                with self.timed(step, "forecast"):
                    hidden[stream] = forecaster.predict(step)
                _check_forecast(hidden[stream], step, stream)
                self.checked.append((step, stream))
        return self.model.final_velocity(hidden, sigma, step, latent.shape[-2:])

    def summary(self) -> dict:
        """For the run report: the parameters and the schedule."""
        return {"name": "spectrum", "params": self.params.as_dict(), "schedule": schedule_text(self.plan),
                "computed_steps": [i for i, c in enumerate(self.plan) if c],
                "forecast_steps": [i for i, c in enumerate(self.plan) if not c],
                "forecasts_checked": len(self.checked)}


def sampler_velocity(model, settings, timed: Callable | None = None):
    """(velocity callable, report summary) for the run settings' sampler (a SampleSettings)."""
    if settings.sampler == "spectrum":
        velocity = SpectrumVelocity(model, settings.steps, SpectrumParams(**settings.spectrum), timed)
        return velocity, velocity.summary
    steps = settings.steps
    return model.velocity, lambda: {"name": "flow-euler", "schedule": "C" * steps,
                                    "computed_steps": list(range(steps)), "forecast_steps": []}
