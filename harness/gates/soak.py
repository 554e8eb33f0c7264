"""The lifecycle soak gate: each branch kind's subgraph cycled through load, init, run and release many
times, the process tree's resources read after every cycle (harness/memory/resources.py), each
resource's growth per cycle fitted with a confidence bound, and a resource that grows faster than its
limit failed with the number of images it leaves before the memory floor or the descriptor limit.

Why: the board runs 84 subgraphs x 13 computed Spectrum steps = 1,092 lifecycle cycles per image
(boards/data/rock5c-anima.toml [spectrum_28]), and the field reports in
boards/data/lifecycle-field-reports.toml name runtimes that lose memory or descriptors on every cycle.
The memory guard sees such a leak only once it has crossed the floor; this gate sees its rate.

The fit: the first half of the cycles is not judged (onnxruntime's and Python's allocators grow there
and settle), and the growth per cycle over the second half is the Theil-Sen slope with its 90 %
interval (scipy.stats.theilslopes), whose lower end is a one-sided 95 % bound: a step, a one-off
allocation or an outlier moves it little. The interval takes the readings as independent; memory
readings are not (an allocator grows in chunks), so it is narrower than the truth: the memory limit
is set far above what a clean runtime grows here (docs/gates.md), and it is the limit that decides.
A resource fails when the lower bound is over its limit: memory over --soak-memory-rate bytes per
cycle; descriptors and threads over zero, with at least two more over the judged cycles (a
descriptor opened once, late, is not a leak). PSS is fitted and shown but not judged: it moves when
other processes map or unmap the libraries it shares (USS, the private part, is judged instead).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..backends.base import create_context
from ..core.errors import ConfigError, MemoryGuardTripped
from ..memory.resources import COUNT_RESOURCES, MEMORY_RESOURCES, RESOURCES
from ..sampling.spectrum import DEFAULT_PRESET, PRESETS, schedule

__all__ = ["Growth", "SoakRun", "SoakVerdict", "branch_kinds", "cycles_per_image", "run_soak", "fit_growth", "judge",
           "soak_verdict",
           "MIN_CYCLES", "NOT_JUDGED", "IMAGE_STEPS"]

IMAGE_STEPS = 28            # the board's Spectrum image: 28 steps, 13 computed (boards/data/rock5c-anima.toml)
MIN_CYCLES = 40             # fewer leave too few judged cycles for a bound
MAX_FIT_POINTS = 2000       # Theil-Sen is quadratic in points: a longer run is thinned evenly
MIN_COUNT_GROWTH = 2        # descriptors or threads gained over the judged cycles before a bound counts
NOT_JUDGED = {"pss": "not judged: PSS moves when other processes map the libraries it shares"}
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def branch_kinds(manifest) -> list:
    """The first subgraph of each branch kind (self_attn, cross_attn, ffn; `block` for a fused
    partition), in manifest order; the decoder is not one of the image's 1,092 cycles."""
    kinds: dict[str, object] = {}
    for entry in manifest.subgraphs:
        kinds.setdefault(entry.branch, entry)
    return list(kinds.values())


def cycles_per_image(manifest) -> int:
    """Lifecycle cycles of one board image on this partition: its subgraphs x the computed steps of
    the 28-step Spectrum preset (84 x 13 = 1,092 for the branch partition)."""
    computed = sum(schedule(IMAGE_STEPS, PRESETS[DEFAULT_PRESET]))
    return len(manifest.subgraphs) * computed


@dataclass
class SoakRun:
    """What the cycling measured: one row of `samples` per cycle, one column per measured resource."""
    backend: str
    subgraphs: list[str]
    cycles: int                         # cycles completed
    seconds: float
    resources: tuple[str, ...]
    samples: np.ndarray                 # [cycles, resources], int64 (bytes or counts)
    not_measured: dict[str, str]
    tripped: str | None = None          # the memory guard's reason, if it stopped the cycling
    processes: int = 1                  # the most processes of the tree one reading summed

    def series(self, resource: str) -> np.ndarray:
        return self.samples[:self.cycles, self.resources.index(resource)]


def _lifecycle(backend: str, entry, path, inputs, options: dict) -> None:
    ctx = create_context(backend, entry.label, **options)
    try:
        ctx.load(path)
        ctx.init()
        ctx.run(inputs)
    finally:
        ctx.release()


def run_soak(backend: str, manifest, options: dict, cycles: int, sampler, guard=None,
             on_cycle=None) -> SoakRun:
    """Cycle the branch kinds' subgraphs in turn `cycles` times, reading `sampler` after each cycle.
    A memory guard trip ends the cycling early (recorded, not raised); a backend error is raised."""
    if cycles < MIN_CYCLES:
        raise ConfigError(f"--soak-cycles {cycles}: the gate needs at least {MIN_CYCLES} cycles "
                          f"(it judges the second half)")
    kinds = branch_kinds(manifest)
    # Inputs and paths made once, and the samples in one preallocated array: the gate's own
    # bookkeeping must not grow per cycle, or it would measure itself.
    work = [(e, manifest.path_of(e), [np.zeros(s.shape, dtype=s.dtype) for s in e.inputs]) for e in kinds]
    names = sampler.measured
    samples = np.zeros((cycles, len(names)), dtype=np.int64)
    done, tripped = 0, None
    start = time.perf_counter()
    try:
        for done in range(cycles):
            if guard is not None:
                guard.check()
            entry, path, inputs = work[done % len(work)]
            _lifecycle(backend, entry, path, inputs, options)
            reading = sampler.read()
            samples[done] = [reading[n] for n in names]
            if on_cycle is not None:
                on_cycle(done + 1)
        done = cycles
    except MemoryGuardTripped as exc:
        tripped = str(exc)
    return SoakRun(backend, [e.label for e in kinds], done, time.perf_counter() - start, names, samples,
                   dict(sampler.not_measured), tripped, sampler.processes)


def fit_growth(values, first: int = 0) -> tuple[float, float, float]:
    """(growth per cycle, 90 % interval low, high) of `values` from index `first` on: the Theil-Sen
    slope (scipy.stats.theilslopes), over at most MAX_FIT_POINTS evenly thinned readings."""
    from scipy.stats import theilslopes
    y = np.asarray(values, dtype=float)[first:]
    x = np.arange(first, first + len(y), dtype=float)
    step = max(1, -(-len(y) // MAX_FIT_POINTS))
    slope, _, low, high = theilslopes(y[::step], x[::step], alpha=0.90)
    return float(slope), float(low), float(high)


@dataclass
class Growth:
    resource: str
    per_cycle: float
    low: float
    high: float
    first_cycle: int            # 1-based, the first judged cycle
    last_cycle: int
    gained: float               # fitted growth over the judged cycles
    limit: float | None         # per cycle; None: not judged
    failed: bool
    headroom: str = ""          # what the growth runs into, e.g. "the memory floor (1.5 GiB, 19.2 GiB above it now)"
    images_left: float | None = None
    note: str = ""

    def line(self, per_image: int) -> str:
        memory = self.resource in MEMORY_RESOURCES
        show = _size if memory else (lambda v: f"{v:.3f}")
        limit = (self.note if self.limit is None else
                 f"limit {_size(self.limit)}" if memory else "limit: any steady growth")
        text = (f"{RESOURCES[self.resource]}: {'+' if self.per_cycle >= 0 else ''}{show(self.per_cycle)} per cycle "
                f"[90 % {show(self.low)}, {show(self.high)}] over cycles {self.first_cycle}-{self.last_cycle} "
                f"({limit})")
        if self.images_left is not None:
            text += f": {self.headroom} in {_images(self.images_left)} images of {per_image:,} cycles at that rate"
        return text


def _size(n: float) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _images(n: float) -> str:
    return f"{n:.1f}" if n < 10 else f"{n:,.0f}"


def judge(run: SoakRun, memory_rate: int, floor_bytes: int, mem_available: int, limits: dict,
          per_image: int) -> list[Growth]:
    """Each measured resource's growth over the second half of the cycles, judged against its limit,
    with the images left before the memory floor (memory) or the process limit (descriptors, threads)."""
    first = run.cycles // 2
    verdicts = []
    for name in run.resources:
        values = run.series(name)
        slope, low, high = fit_growth(values, first)
        gained = slope * (run.cycles - first)
        if name in NOT_JUDGED:
            limit, failed, note = None, False, NOT_JUDGED[name]
        elif name in COUNT_RESOURCES:
            limit, note = 0.0, ""
            failed = low > 0 and gained >= MIN_COUNT_GROWTH
        else:
            limit, note = float(memory_rate), ""
            failed = low > memory_rate
        growth = Growth(name, slope, low, high, first + 1, run.cycles, gained, limit, failed, note=note)
        if slope > 0:
            _headroom(growth, values[-1], floor_bytes, mem_available, limits, per_image)
        verdicts.append(growth)
    return verdicts


def _headroom(growth: Growth, value: int, floor_bytes: int, mem_available: int, limits: dict,
              per_image: int) -> None:
    per_image_growth = growth.per_cycle * per_image
    if growth.resource in COUNT_RESOURCES:
        limit = limits.get(growth.resource)
        if limit is None:
            return
        which = "RLIMIT_NOFILE" if growth.resource == "fds" else "the thread limit"
        left = max(0, limit - int(value))
        kind = "descriptor" if growth.resource == "fds" else "thread"
        growth.headroom = f"the {kind} limit ({which} {limit:,}, {left:,} left)"
    else:
        left = max(0, mem_available - floor_bytes)
        growth.headroom = f"the memory floor ({_size(floor_bytes)}, {_size(left)} above it now)"
    growth.images_left = left / per_image_growth


@dataclass
class SoakVerdict:
    run: SoakRun
    growth: list[Growth]
    per_image: int
    mem_available: int
    floor_bytes: int
    memory_rate: int
    limits: dict = field(default_factory=dict)

    @property
    def failures(self) -> list[Growth]:
        return [g for g in self.growth if g.failed]

    def lines(self) -> list[str]:
        r = self.run
        head = (f"{r.backend}: {r.cycles:,} lifecycle cycles of {', '.join(r.subgraphs)} in {r.seconds:.1f} s "
                f"({1e3 * r.seconds / max(r.cycles, 1):.1f} ms a cycle, readings included; {r.processes} "
                f"process{'es' if r.processes > 1 else ''} read)")
        lines = [head] + [g.line(self.per_image) for g in self.growth]
        lines += [f"{RESOURCES[name]}: not measured ({why})" for name, why in r.not_measured.items()]
        if r.tripped:
            lines.append(f"stopped after {r.cycles:,} cycles: {r.tripped}")
        return lines

    def as_dict(self) -> dict:
        r = self.run
        return {"backend": r.backend, "subgraphs": r.subgraphs, "cycles": r.cycles, "seconds": r.seconds,
                "processes": r.processes,
                "cycles_per_image": self.per_image, "memory_rate_bytes": self.memory_rate,
                "floor_bytes": self.floor_bytes, "mem_available_bytes": self.mem_available,
                "limits": self.limits, "tripped": r.tripped, "not_measured": r.not_measured,
                "growth": [vars(g) for g in self.growth],
                "samples": {name: r.series(name).tolist() for name in r.resources}}


def soak_verdict(run: SoakRun, memory_rate: int, floor_bytes: int, per_image: int) -> SoakVerdict:
    """Judge a run against the limits of this machine now (MemAvailable, RLIMIT_NOFILE, threads)."""
    import psutil

    from ..memory.resources import resource_limits
    limits = resource_limits()
    available = int(psutil.virtual_memory().available)
    growth = judge(run, memory_rate, floor_bytes, available, limits, per_image) if run.cycles >= MIN_CYCLES else []
    return SoakVerdict(run, growth, per_image, available, floor_bytes, memory_rate, limits)
