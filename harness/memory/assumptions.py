"""What the planner assumes about a board beyond its measured case, each figure with its source.

The board profile data file (boards/data/rock5c-anima.toml) names these as ASSUMPTIONS in its [sim]
and [plan] tables; `harness probe-board` measures them on a board and writes a measured data file
(`probe-board.toml`). `board_assumptions` gives the planner one value per figure: the measured one
where a measured file is given, the profile's otherwise, and says which, where and when.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..backends.board_profile import fits
from ..core.errors import ConfigError
from .repeats import Interval

__all__ = ["Figure", "Assumptions", "board_assumptions", "read_measured", "MEASURED_FORMAT"]

MEASURED_FORMAT = "anima-board-probe/1"


@dataclass(frozen=True)
class Figure:
    value: Any           # a bool, a factor or a pair of floats, by figure (see Assumptions)
    source: str          # "[sim] lifecycle_holds_core" or "probe-board.toml"
    measured: bool
    interval: Interval | None = None     # the probe's, for a measured figure (the widest of several)

    def describe(self, what: str) -> str:
        if not self.measured:
            return f"{what}: assumed ({self.source})"
        return f"{what}: measured ({self.source}" + (f"; {self.interval.text()})" if self.interval else ")")

    def relative(self) -> float:
        """The interval's half-width as a share of its value (0 without one)."""
        i = self.interval
        return (i.high - i.low) / 2 / abs(i.value) if i is not None and i.value else 0.0


@dataclass(frozen=True)
class Assumptions:
    lifecycle_holds_core: Figure        # bool: a context's load/init/release occupies its NPU core
    stream_per_core_speedup: Figure     # one stream per core on two cores against both on one
    multi_core_speedup: Figure          # one context on 0_1_2 against one core
    lifecycle: Figure                   # (seconds per context, seconds per weight MiB)
    memory_split: Figure                # (host MiB, device MiB) per context, or None: one number

    def lines(self) -> list[str]:
        fixed, per_mib = self.lifecycle.value
        split = self.memory_split.value
        return [
            self.lifecycle_holds_core.describe(
                "a context's load/init/release " + ("holds" if self.lifecycle_holds_core.value else "does not hold")
                + " the NPU core another context runs on (prefetch " + ("cannot" if self.lifecycle_holds_core.value
                                                                        else "can") + " hide it)"),
            self.stream_per_core_speedup.describe(
                f"two contexts on two cores, one CFG stream each: {self.stream_per_core_speedup.value:.2f}x one core"),
            self.multi_core_speedup.describe(
                f"one context on cores 0_1_2: {self.multi_core_speedup.value:.2f}x one core"),
            self.lifecycle.describe(f"lifecycle per context {fixed:.3f} s + {1000 * per_mib:.2f} ms per weight MiB"),
            self.memory_split.describe("memory per context " + (
                "one number (no host/device split)" if not split else f"host {split[0]:.1f} MiB"
                + (f" + device {split[1]:.1f} MiB" if split[1] is not None else " (device not measured)"))),
        ]

    def at(self, end: str) -> Assumptions:
        """The figures at the end of their intervals that makes an image `end` ("slow" or "fast"):
        speedups at their low (slow) or high end, the lifecycle at its high (slow) or low end."""
        sign = 1.0 if end == "slow" else -1.0

        def speed(f: Figure) -> Figure:
            return replace(f, value=f.value * (1 - sign * f.relative()))
        fixed, per_mib = self.lifecycle.value
        grow = 1 + sign * self.lifecycle.relative()
        return replace(self, stream_per_core_speedup=speed(self.stream_per_core_speedup),
                       multi_core_speedup=speed(self.multi_core_speedup),
                       lifecycle=replace(self.lifecycle, value=(fixed * grow, per_mib * grow)))


def read_measured(path: str | Path) -> dict:
    """A measured data file written by probe-board, checked to be one."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"--measured {path}: no such file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--measured {path}: not valid TOML ({exc})") from None
    if data.get("format") != MEASURED_FORMAT:
        raise ConfigError(f"--measured {path}: not a probe-board file (format {data.get('format')!r}, "
                          f"expected {MEASURED_FORMAT!r})")
    return data


# figure (table, key) -> the probe's intervals it rests on (the widest is the figure's)
_INTERVALS = {("overlap", "lifecycle_holds_core"): ("overlap.rates_kept",),
              ("streams", "stream_per_core_speedup"): ("streams.stream_per_core_speedup",),
              ("streams", "multi_core_speedup"): ("streams.multi_core_speedup",),
              ("lifecycle", "fit"): ("lifecycle.",),
              ("memory", "host_device_mib"): ("memory.host_mib",), ("memory", "host_mib"): ("memory.host_mib",)}


def _interval(data: dict, table: str, key: str) -> Interval | None:
    found = [Interval(**i) for name, i in data.get("intervals", {}).items()
             if any(name.startswith(p) for p in _INTERVALS.get((table, key), ()))]
    if not found:
        return None
    widest = max(found, key=lambda i: (not i.within, (i.high - i.low) / max(abs(i.value), 1e-12)))
    return replace(widest, within=all(i.within for i in found))


def _from_file(data: dict, path: Path, table: str, key: str):
    """(value, source, interval) of one measured figure, or None when the probe could not measure it."""
    section = data.get(table, {})
    if key not in section:
        return None
    probe = data.get("probe", {})
    where = f"{path.name}: {probe.get('backend', '?')} on {probe.get('host', '?')}, {probe.get('date', '?')}"
    return section[key], where, _interval(data, table, key)


def board_assumptions(profile, measured_path: str | Path | None = None) -> Assumptions:
    data = read_measured(measured_path) if measured_path else {}
    path = Path(measured_path) if measured_path else Path()

    def pick(table, key, assumed_value, assumed_source):
        found = _from_file(data, path, table, key) if data else None
        if found is None:
            return Figure(assumed_value, assumed_source, False)
        return Figure(found[0], found[1], True, found[2])

    f = fits(profile)
    streams = profile.sim("streams_measured", int)
    lifecycle = pick("lifecycle", "fit", None, "")
    if lifecycle.measured:
        lifecycle = replace(lifecycle, value=(float(lifecycle.value[0]), float(lifecycle.value[1])))
    else:
        lifecycle = Figure(f.lifecycle, "[plan] lifecycle_model, fitted to [lifecycle_per_model]", False)
    split = pick("memory", "host_device_mib", None, "[sim] context_mib")
    if not split.measured:          # the host part measured, the device's not exposed (board-sim, a VM)
        host = pick("memory", "host_mib", None, "[sim] context_mib")
        split = replace(host, value=(float(host.value), None)) if host.measured else split
    return Assumptions(
        lifecycle_holds_core=pick("overlap", "lifecycle_holds_core", profile.sim("lifecycle_holds_core", bool),
                                  "[sim] lifecycle_holds_core"),
        stream_per_core_speedup=pick("streams", "stream_per_core_speedup", float(streams),
                                     "[sim] streams_measured: a call's time linear in its stream rows"),
        multi_core_speedup=pick("streams", "multi_core_speedup", profile.sim("multi_core_speedup"),
                                "[sim] multi_core_speedup"),
        lifecycle=lifecycle,
        memory_split=split if not split.measured else replace(split, value=tuple(split.value)),
    )
