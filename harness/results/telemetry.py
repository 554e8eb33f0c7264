"""Board identity, runtime versions, clocks and thermals, read from sysfs/procfs under a configurable root.

Every reader takes `root` (default "/") so tests run against tests/data/sysfs-rk3588, a tree shaped like
a ROCK 5C's. Missing or unreadable files (an x86 CI machine, debugfs without root) read as None or as
absent entries, never as errors: telemetry describes a run, it must not be the thing that breaks it.

Paths used (Rockchip BSP kernel with the RKNPU driver; mainline names differ and simply read as absent):
    proc/device-tree/{compatible,model,serial-number}   NUL-terminated device-tree strings
    proc/version                                        kernel release
    sys/kernel/debug/rknpu/version, proc/rknpu/version  "RKNPU driver: v0.9.8" (debugfs / procfs of the driver)
    sys/class/devfreq/fdab0000.npu/{cur_freq,governor}  NPU clock (Hz); fdab0000 is the RK3588 NPU's address
    sys/class/devfreq/dmc/{cur_freq,governor}           DDR clock (Hz)
    sys/devices/system/cpu/cpufreq/policy*/scaling_{cur_freq,governor}   CPU clusters (kHz)
    sys/class/thermal/thermal_zone*/{type,temp,trip_point_*_temp,trip_point_*_type}   millidegrees C
    usr/lib/librknnrt.so                                board runtime; its bytes carry "librknnrt version: x.y.z"
                                                        ($LIBRKNNRT_PATH first when root is "/", as the runtime)

A TelemetryWindow samples clocks and temperatures around a measurement and, like MLPerf marking a run
INVALID, declares the window invalid when any clock or governor moved or any zone reached a throttling trip.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import re
import threading
import time
from pathlib import Path

from ..core.errors import ConfigError

__all__ = ["detect_rk3588", "board_identity", "board_id", "serial_hash", "read_clocks", "read_thermals",
           "TelemetryWindow", "THROTTLING_TRIPS"]

RK3588_COMPATIBLE_PREFIX = "rockchip,rk3588"      # rk3588, rk3588s, rk3588j ...
# Evidence used only when the device tree is absent (e.g. a container without /proc/device-tree).
RK3588_NPU_NODES = ("sys/class/devfreq/fdab0000.npu", "sys/bus/platform/devices/fdab0000.npu",
                    "sys/kernel/debug/rknpu/version", "proc/rknpu/version")
RUNTIME_LIBS = ("usr/lib/librknnrt.so", "usr/lib64/librknnrt.so",
                "usr/lib/aarch64-linux-gnu/librknnrt.so", "usr/local/lib/librknnrt.so")
NPU_DRIVER_VERSION_FILES = ("sys/kernel/debug/rknpu/version", "proc/rknpu/version",
                            "proc/debug/rknpu/version")
DEVFREQ = {"npu": "sys/class/devfreq/fdab0000.npu", "ddr": "sys/class/devfreq/dmc"}
CPUFREQ = "sys/devices/system/cpu/cpufreq"
THERMAL = "sys/class/thermal"
# Trip types at which the kernel starts throttling (passive), or is about to shut down. "active" trips
# only switch a fan on and do not slow the SoC.
THROTTLING_TRIPS = ("passive", "hot", "critical")

# The token after the marker, whatever it is (2.3.2, 2.5.0b0, v2.5.0-dirty, nothing): harness/gates/versions.py
# reads it exactly. A library or driver file that is there but names no version reads as "" (unreadable),
# not None (absent).
_RUNTIME_VERSION = re.compile(rb"librknnrt version:[ \t]*([^\s\x00(]*)")
_DRIVER_VERSION = re.compile(r"RKNPU driver:[ \t]*(\S*)")


# ------------------------------------------------------------------ tolerant readers

def _text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip("\x00\n\t ")
    except OSError:
        return None


def _int(path: Path) -> int | None:
    text = _text(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _natural(path: Path):
    # thermal_zone10 after thermal_zone9, policy6 after policy4
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path.name)]


def _compatible(root: Path) -> list[str]:
    text = _text(root / "proc/device-tree/compatible")
    return [c for c in (text or "").split("\x00") if c]


# ------------------------------------------------------------------ identity

def detect_rk3588(root: str | Path = "/") -> bool:
    """True when `root` is an RK3588(S) board: by device tree, else by its NPU nodes or runtime library."""
    root = Path(root)
    compatible = _compatible(root)
    if compatible:
        # The device tree is authoritative: librknnrt and the RKNPU driver also exist on RK3566/RK3576.
        return any(c.startswith(RK3588_COMPATIBLE_PREFIX) for c in compatible)
    return any((root / p).exists() for p in RK3588_NPU_NODES + RUNTIME_LIBS)


def board_identity(root: str | Path = "/") -> dict:
    """Board, SoC, kernel, NPU driver and runtime versions; the Python-side fields describe this process."""
    root = Path(root)
    compatible = _compatible(root)
    return {
        "model": _text(root / "proc/device-tree/model") or None,
        "compatible": compatible,
        "soc": next((c for c in compatible if c.startswith("rockchip,rk")), None),
        "serial": _text(root / "proc/device-tree/serial-number") or None,
        "kernel": _kernel_release(root),
        "npu_driver": _npu_driver_version(root),
        "runtime_lib": _runtime_lib_version(root),
        "toolkit_lite": _dist_version("rknn-toolkit-lite2"),
        "onnxruntime": _dist_version("onnxruntime"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "hostname": platform.node() or None,
    }


def board_id(identity: dict) -> str:
    """Short stable id to key benchmark baselines by board: model slug plus a hash of the serial.

    The serial is hashed so baseline files and reports never publish it. A machine without a device-tree
    model (a CI host) is keyed by architecture and hostname instead.
    """
    model = identity.get("model")
    name = model or f"host {identity.get('machine') or 'unknown'}"
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"
    distinguisher = identity.get("serial") or (None if model else identity.get("hostname"))
    if distinguisher:
        slug += "-" + hashlib.sha256(distinguisher.encode()).hexdigest()[:8]
    return slug


def serial_hash(identity: dict) -> str | None:
    """The hash of the board's device-tree serial (16 hex digits; board_id holds its first 8), None
    without one: what the results store keys a board by, whatever its model string says."""
    serial = identity.get("serial")
    return hashlib.sha256(serial.encode()).hexdigest()[:16] if serial else None


def _kernel_release(root: Path) -> str | None:
    text = _text(root / "proc/version")
    if text:
        match = re.search(r"Linux version (\S+)", text)
        return match.group(1) if match else text
    return platform.release() if root == Path("/") else None


def _npu_driver_version(root: Path) -> str | None:
    found = None
    for rel in NPU_DRIVER_VERSION_FILES:
        text = _text(root / rel)
        if text:
            match = _DRIVER_VERSION.search(text)
            token = match.group(1) if match else text
            # "v0.9.8" is the driver's tag form of 0.9.8; anything else is kept as written
            return token[1:] if re.match(r"v\d", token) else token
        found = "" if text == "" else found
    return found


def _runtime_lib_version(root: Path) -> str | None:
    # The runtime opens $LIBRKNNRT_PATH before its default path: read the library it will use.
    override = os.environ.get("LIBRKNNRT_PATH") if root == Path("/") else None
    found = None
    for path in ([Path(override)] if override else []) + [root / rel for rel in RUNTIME_LIBS]:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        # a format string ("librknnrt version: %s") may come before the version itself
        tokens = _RUNTIME_VERSION.findall(data)
        if tokens:
            return next((t for t in tokens if re.search(rb"\d", t)), tokens[0]).decode(errors="replace")
        found = ""
    return found


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


# ------------------------------------------------------------------ clocks and thermals

def read_clocks(root: str | Path = "/") -> dict[str, dict]:
    """{"cpu policy0": {"freq_hz", "governor"}, ..., "npu": {...}, "ddr": {...}}; absent sources are left out."""
    root = Path(root)
    clocks = {}
    for policy in sorted((root / CPUFREQ).glob("policy*"), key=_natural):
        khz = _int(policy / "scaling_cur_freq")
        reading = {"freq_hz": khz * 1000 if khz is not None else None,
                   "governor": _text(policy / "scaling_governor")}
        if any(v is not None for v in reading.values()):
            clocks[f"cpu {policy.name}"] = reading
    for name, rel in DEVFREQ.items():
        reading = {"freq_hz": _int(root / rel / "cur_freq"), "governor": _text(root / rel / "governor")}
        if any(v is not None for v in reading.values()):
            clocks[name] = reading
    return clocks


def read_thermals(root: str | Path = "/") -> dict[str, dict]:
    """{"thermal_zone0": {"type": "soc-thermal", "temp_c": 41.0, "trips": [{"type", "temp_c"}, ...]}, ...}"""
    root = Path(root)
    zones = {}
    for zone in sorted((root / THERMAL).glob("thermal_zone*"), key=_natural):
        temp = _int(zone / "temp")
        trips = []
        for trip in sorted(zone.glob("trip_point_*_temp"), key=_natural):
            trip_temp = _int(trip)
            kind = _text(trip.with_name(trip.name.replace("_temp", "_type")))
            if trip_temp is not None:
                trips.append({"type": kind, "temp_c": trip_temp / 1000})
        zones[zone.name] = {"type": _text(zone / "type"),
                            "temp_c": temp / 1000 if temp is not None else None, "trips": trips}
    return zones


# ------------------------------------------------------------------ measurement window

class TelemetryWindow:
    """Samples clocks and thermals at entry, every `interval` seconds in a background thread, and at exit.

        with TelemetryWindow(root="/") as window:
            run_benchmark()
        verdict = window.verdict()   # {"valid", "reasons", "samples", "duration_s"}
    """

    def __init__(self, root: str | Path = "/", interval: float = 0.5):
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
            raise ConfigError(f"telemetry option 'interval' must be a positive number of seconds, got {interval!r}")
        self.root = Path(root)
        self.interval = float(interval)
        self.samples: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._error: BaseException | None = None

    def sample(self) -> dict:
        reading = {"t": round(time.monotonic() - self._t0, 4),
                   "clocks": read_clocks(self.root), "thermals": read_thermals(self.root)}
        with self._lock:
            self.samples.append(reading)
        return reading

    def __enter__(self) -> TelemetryWindow:
        self._t0 = time.monotonic()
        self.sample()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="telemetry-window", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
        if self._error is not None and exc_type is None:
            raise self._error

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except BaseException as error:  # surfaced in __exit__: a dead sampler must not pass as "valid"
                self._error = error
                return

    def verdict(self) -> dict:
        with self._lock:
            samples = list(self.samples)
        reasons = _clock_changes(samples) + _trips_reached(samples)
        duration = samples[-1]["t"] - samples[0]["t"] if samples else 0.0
        return {"valid": not reasons, "reasons": reasons, "samples": samples, "duration_s": duration}


def _clock_changes(samples: list[dict]) -> list[str]:
    reasons = []
    names = sorted({name for s in samples for name in s["clocks"]}, key=lambda n: _natural(Path(n)))
    for name in names:
        for field, label in (("freq_hz", "frequency"), ("governor", "governor")):
            first = samples[0]["clocks"].get(name, {}).get(field)
            for s in samples[1:]:
                value = s["clocks"].get(name, {}).get(field)
                if value != first:
                    reasons.append(f"clock {name} {label} changed during the window: "
                                   f"{_show(field, first)} -> {_show(field, value)} at +{s['t']:.2f} s")
                    break
    return reasons


def _show(field: str, value) -> str:
    if field == "freq_hz" and value is not None:
        return f"{value / 1e6:g} MHz"
    return str(value)


def _trips_reached(samples: list[dict]) -> list[str]:
    reasons = []
    zones = sorted({z for s in samples for z in s["thermals"]}, key=lambda n: _natural(Path(n)))
    for zone in zones:
        readings = [s["thermals"][zone] for s in samples if zone in s["thermals"]]
        temps = [r["temp_c"] for r in readings if r["temp_c"] is not None]
        if not temps:
            continue
        peak = max(temps)
        # Trips with a non-positive temperature are disabled placeholders on some device trees.
        reached = [t for t in readings[0]["trips"]
                   if t["type"] in THROTTLING_TRIPS and t["temp_c"] > 0 and peak >= t["temp_c"]]
        if reached:
            trip = max(reached, key=lambda t: t["temp_c"])
            reasons.append(f"{zone} ({readings[0]['type']}) reached its {trip['type']} trip point "
                           f"{trip['temp_c']:g} C (peak {peak:g} C)")
    return reasons
