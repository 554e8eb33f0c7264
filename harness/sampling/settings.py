"""One generation's sample settings, typed: steps, CFG scale, shift, seed, sampler and (for Spectrum)
its parameters; `as_dict()` is the shape the run report stores."""
from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["SampleSettings"]


@dataclass(frozen=True)
class SampleSettings:
    steps: int
    cfg_scale: float
    shift: float
    seed: int
    sampler: str = "flow-euler"
    spectrum: dict | None = None        # SpectrumParams.as_dict(), with sampler "spectrum" only

    def as_dict(self) -> dict:
        """The settings as the run report stores them (no `spectrum` key for another sampler)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "spectrum" or self.spectrum is not None}
