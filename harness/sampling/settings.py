"""One generation's sample settings, typed: steps, CFG scale, shift, seed, sampler and (for Spectrum)
its parameters. A SampleSettings is also a read-only mapping (`s["steps"]`, `dict(s)`), the shape the
run report stores and older callers read."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

__all__ = ["SampleSettings"]


@dataclass(frozen=True, eq=False)      # eq from Mapping: equal to the dict of the same settings
class SampleSettings(Mapping):
    steps: int
    cfg_scale: float
    shift: float
    seed: int
    sampler: str = "flow-euler"
    spectrum: dict | None = None        # SpectrumParams.as_dict(), with sampler "spectrum" only

    def _keys(self) -> list[str]:
        return [f.name for f in fields(self) if f.name != "spectrum" or self.spectrum is not None]

    def __getitem__(self, key: str):
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def with_steps(self, steps: int) -> "SampleSettings":
        return replace(self, steps=int(steps))
