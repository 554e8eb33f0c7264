"""The lifecycle soak gate: each branch kind's subgraph cycled through load, init, run and release many
times under the session's lifecycle, every process of the run's tree read after every cycle
(harness/memory/resources.py), each resource of each process (and of the whole tree) watched for a leak
as the cycles run (harness/gates/leak.py), and a leak failed as soon as it is clear, naming the process
that grew, the cycle it started at and the cycle it was found at, with the images it leaves before the
memory floor or the descriptor limit.

Why: the board runs 84 subgraphs x 13 computed Spectrum steps = 1,092 lifecycle cycles per image
(boards/data/rock5c-anima.toml [spectrum_28]), and the field reports in
boards/data/lifecycle-field-reports.toml name runtimes that lose memory or descriptors on every cycle.
The memory guard sees such a leak only once it has crossed the floor; this gate sees its rate.

Judged: RSS (of each process: the tree's sum counts a shared page once per process), host memory (PSS
less its file-backed part), DMA-BUF and the driver's memory (DRM fdinfo, debugfs dma_buf, CMA, RKNPU
SRAM) against --soak-memory-rate per cycle; descriptors and threads against one per 100 cycles. The
tree's totals are judged with a threshold sqrt(processes) times a process's: they sum every process's
noise. Shown, not judged: PSS and USS, which move when other processes map or unmap the
libraries this one maps (USS falls when a page only we mapped becomes shared: RSS can rise while USS
falls, with nothing leaking). A lifecycle whose rknn_init starts failing after N contexts is the
board's measured context ceiling (a finding with N and the memory then), not a pytest error.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..backends.base import BackendOptions, create_context, run_options
from ..core.errors import BackendError, ConfigError, MemoryGuardTripped
from ..lifecycle.records import LifecycleRecorder
from ..memory.resources import COUNT_RESOURCES, MEMORY_RESOURCES, RESOURCES, SYSTEM_RESOURCES
from ..sampling.spectrum import DEFAULT_PRESET, PRESETS, schedule
from .leak import COUNT_RULE, Rule, Watch, memory_rule

__all__ = ["Growth", "SoakRun", "SoakVerdict", "branch_kinds", "cycles_per_image", "run_soak", "fit_growth",
           "soak_verdict", "Ceiling", "watch_rules", "MIN_CYCLES", "NOT_JUDGED", "IMAGE_STEPS", "TREE"]

IMAGE_STEPS = 28            # the board's Spectrum image: 28 steps, 13 computed (boards/data/rock5c-anima.toml)
MIN_CYCLES = 100            # fewer leave the warm-up and the test too few cycles (harness/gates/leak.py)
MAX_FIT_POINTS = 500        # Theil-Sen is quadratic in points: a longer run is thinned evenly (the fit is
                            # shown; the leak test (harness/gates/leak.py) decides, on every reading)
MAX_PROCESSES = 8           # processes read on their own; any more count in the tree's total only
TREE = "the process tree"
NOT_JUDGED = {"pss": "not judged: PSS moves when other processes map the libraries it shares",
              "tree rss": "not judged for the tree: it counts a shared page once per process (judged per process)",
              "uss": "not judged: USS falls when another process maps a library page only this one mapped"}
INIT_STAGE = "init failed"  # how a backend names a failed init (BackendError text)
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
class Ceiling:
    """An init the runtime refused after `contexts` inits it made: the board's measured context ceiling."""
    contexts: int
    error: str
    memory: dict            # the tree's reading at the last cycle before it (resource -> value)

    def line(self) -> str:
        held = ", ".join(f"{RESOURCES[r]} {_size(v)}" for r, v in self.memory.items() if r in ("host", "rss"))
        return (f"context ceiling: rknn_init failed after {self.contexts:,} contexts ({held or 'no reading'}): "
                f"{self.error}")


@dataclass
class SoakRun:
    """What the cycling measured: samples[cycle, process, resource], process 0 the tree's total."""
    backend: str
    subgraphs: list[str]
    cycles: int                         # cycles completed
    seconds: float
    resources: tuple[str, ...]
    samples: np.ndarray                 # [cycles, 1 + processes, resources], int64 (bytes or counts)
    not_measured: dict[str, str]
    tripped: str | None = None          # the memory guard's reason, if it stopped the cycling
    processes: list[str] = field(default_factory=lambda: [TREE])
    planned: int = 0
    lifecycle: str = "on-demand"
    watch: Watch | None = None
    ceiling: Ceiling | None = None
    npu_load: str | None = None

    def series(self, resource: str, process: int = 0) -> np.ndarray:
        return self.samples[:self.cycles, process, self.resources.index(resource)]


class _Cycler:
    """One cycle's load, init, run and release under the lifecycle: in this process (on-demand, and any
    lifecycle that keeps contexts, which a soak must not) or through prefetch:K's workers."""

    def __init__(self, options: BackendOptions, manifest, kinds: list, lifecycle: str):
        self.manifest, self.options = manifest, options
        self.strategy = None
        self.name = "on-demand"
        if lifecycle.startswith("prefetch:"):
            from ..lifecycle.prefetch import Prefetch
            self.strategy = Prefetch(run_options(options), _Forget(), manifest.path_of, kinds,
                                     int(lifecycle.split(":")[1]), entries=kinds)
            self.name = lifecycle

    def cycle(self, entry, path, inputs) -> None:
        if self.strategy is not None:
            w = self.strategy.acquire(entry, 0)
            self.strategy.run(w, entry, 0, inputs)
            self.strategy.finish(entry, 0)
            return
        ctx = create_context(self.options, entry.label)
        try:
            ctx.load(path)
            ctx.init()
            ctx.run(inputs)
        finally:
            ctx.release()

    def close(self) -> None:
        if self.strategy is not None:
            self.strategy.close()


class _Forget(LifecycleRecorder):
    """A recorder that keeps nothing: the gate's bookkeeping must not grow per cycle, or it would
    measure itself."""

    def add(self, step: int, entry, stage: str, seconds: float) -> None:
        return None

    def _append(self, key: tuple, seconds: float) -> None:
        return None


def watch_rules(resources: tuple[str, ...], slots: int, memory_rate: int) -> list[Rule | None]:
    memory = memory_rule(memory_rate)
    rules: list[Rule | None] = []
    for slot in range(slots):
        for name in resources:
            # RSS of the tree counts each shared page once per process that maps it: judged per process
            judged = name not in NOT_JUDGED and (slot == 0 or name not in SYSTEM_RESOURCES) \
                and not (slot == 0 and name == "rss")
            rules.append(None if not judged else COUNT_RULE if name in COUNT_RESOURCES else memory)
    return rules


class _Slots:
    """Which column block of the samples each process of the tree reads into (0: the tree's total)."""

    def __init__(self, sampler, watch: Watch, width: int):
        self.sampler, self.watch, self.width = sampler, watch, width
        self.of: dict[int, int] = {}
        self.names = [TREE]

    def fill(self, row: np.ndarray, reading: dict, names: tuple[str, ...]) -> None:
        row[0] = [reading[n] for n in names]
        for pid, own in self.sampler.last.items():
            slot = self.of.get(pid)
            if slot is None and len(self.names) <= MAX_PROCESSES:
                slot = self.of[pid] = len(self.names)
                self.names.append(self.sampler.name_of(pid))
                # the tree's total sums one more process's noise: its threshold grows as sqrt(processes)
                self.watch.widen(np.arange(self.width), float(np.sqrt(len(self.names) - 1)))
            if slot is not None:
                row[slot] = [own.get(n, 0) for n in names]


def run_soak(options: BackendOptions, manifest, cycles: int, sampler, guard=None, on_cycle=None,
             lifecycle: str = "on-demand", memory_rate: int = 16 * KiB) -> SoakRun:
    """Cycle the branch kinds' subgraphs in turn `cycles` times under `lifecycle`, reading `sampler` after
    each cycle and watching every series; a clear leak ends the cycling, as does the memory
    guard tripping or an init the runtime refuses after earlier ones passed (the context ceiling), each
    recorded, not raised. Any other backend error is raised."""
    if cycles < MIN_CYCLES:
        raise ConfigError(f"--soak-cycles {cycles}: the gate needs at least {MIN_CYCLES} cycles "
                          f"(a warm-up and the leak test after it)")
    kinds = branch_kinds(manifest)
    # Inputs and paths made once, and the samples in one preallocated array: the gate's own
    # bookkeeping must not grow per cycle, or it would measure itself.
    work = [(e, manifest.path_of(e), [np.zeros(s.shape, dtype=s.dtype) for s in e.inputs]) for e in kinds]
    names = sampler.measured
    samples = np.zeros((cycles, 1 + MAX_PROCESSES, len(names)), dtype=np.int64)
    watch = Watch(samples.reshape(cycles, -1), watch_rules(names, 1 + MAX_PROCESSES, memory_rate), cycles)
    slots = _Slots(sampler, watch, len(names))
    done, tripped, ceiling = 0, None, None
    cycler = _Cycler(options, manifest, kinds, lifecycle)
    start = time.perf_counter()
    try:
        for done in range(cycles):
            if guard is not None:
                guard.check()
            entry, path, inputs = work[done % len(work)]
            cycler.cycle(entry, path, inputs)
            slots.fill(samples[done], sampler.read(), names)
            if len(watch.update(done)):
                done += 1
                break
            if on_cycle is not None:
                on_cycle(done + 1)
        else:
            done = cycles
    except MemoryGuardTripped as exc:
        tripped = str(exc)
    except BackendError as exc:
        if INIT_STAGE not in str(exc) or done == 0:
            raise
        memory = dict(zip(names, samples[done - 1, 0].tolist()))
        ceiling = Ceiling(done, str(exc), memory)
    finally:
        cycler.close()
    return SoakRun(options.backend, [e.label for e in kinds], done, time.perf_counter() - start, names, samples,
                   dict(sampler.not_measured), tripped, slots.names, cycles, cycler.name, watch, ceiling,
                   sampler.npu_load())


def fit_growth(values, first: int = 0, last: int | None = None) -> tuple[float, float, float]:
    """(growth per cycle, 90 % interval low, high) of `values[first:last]`: the Theil-Sen slope
    (scipy.stats.theilslopes), over at most MAX_FIT_POINTS evenly thinned readings."""
    from scipy.stats import theilslopes
    y = np.asarray(values, dtype=float)[first:last]
    if len(y) < 2 or y.min() == y.max():
        return 0.0, 0.0, 0.0
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
    first_cycle: int            # 1-based, the first judged cycle (the warm-up's end, or the leak's start)
    last_cycle: int
    gained: float               # fitted growth over those cycles
    limit: float | None         # per cycle; None: not judged
    failed: bool
    process: str = TREE
    found_at: int | None = None     # 1-based cycle the test found the leak at
    headroom: str = ""          # what the growth runs into, e.g. "the memory floor (1.5 GiB, 19.2 GiB above it now)"
    images_left: float | None = None
    note: str = ""

    def line(self, per_image: int) -> str:
        memory = self.resource in MEMORY_RESOURCES
        show = _size if memory else (lambda v: f"{v:.3f}")
        limit = (self.note if self.limit is None else
                 f"limit {_size(self.limit)}" if memory else f"limit {self.limit:g}")
        where = "" if self.process == TREE else f"{self.process}: "
        span = (f"from cycle {self.first_cycle}, found at cycle {self.found_at}" if self.found_at is not None
                else f"over cycles {self.first_cycle}-{self.last_cycle}")
        text = (f"{where}{RESOURCES[self.resource]}: {'+' if self.per_cycle >= 0 else ''}{show(self.per_cycle)} "
                f"per cycle [90 % {show(self.low)}, {show(self.high)}] {span} ({limit})")
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


def _growth(run: SoakRun, slot: int, name: str, memory_rate: int) -> Growth:
    """One series' growth: from its change point to where it was found, else over its judged cycles."""
    column = slot * len(run.resources) + run.resources.index(name)
    found_at = int(run.watch.found_at[column]) if run.watch is not None else -1
    if run.watch is not None and found_at >= 0:
        first, last = int(run.watch.since[column]), found_at + 1
    else:
        warm = int(run.watch.warm_end[column]) if run.watch is not None else -1
        first, last = min(warm if warm >= 0 else run.cycles // 2, max(run.cycles - 2, 0)), run.cycles
    slope, low, high = fit_growth(run.series(name, slot), first, last)
    key = "tree rss" if (slot, name) == (0, "rss") else name
    judged = key not in NOT_JUDGED
    limit = None if not judged else COUNT_RULE.limit if name in COUNT_RESOURCES else float(memory_rate)
    return Growth(name, slope, low, high, first + 1, last, slope * (last - first), limit, found_at >= 0,
                  run.processes[slot], found_at + 1 if found_at >= 0 else None,
                  note="" if judged else NOT_JUDGED[key])


def judge(run: SoakRun, memory_rate: int, floor_bytes: int, mem_available: int, limits: dict,
          per_image: int) -> list[Growth]:
    """The tree's growth of every measured resource, and each process's series the test found leaking
    (named), with the images left before the memory floor or the process limit."""
    verdicts = [_growth(run, 0, name, memory_rate) for name in run.resources]
    w = run.watch
    if w is not None:
        width = len(run.resources)
        for column in np.flatnonzero(w.found_at >= 0):
            slot, index = divmod(int(column), width)
            if slot:
                verdicts.append(_growth(run, slot, run.resources[index], memory_rate))
    for growth in verdicts:
        if growth.per_cycle > 0:
            slot = run.processes.index(growth.process)
            _headroom(growth, run.series(growth.resource, slot)[-1], floor_bytes, mem_available, limits, per_image)
    return verdicts


def _headroom(growth: Growth, value: int, floor_bytes: int, mem_available: int, limits: dict,
              per_image: int) -> None:
    per_image_growth = growth.per_cycle * per_image
    if growth.resource in COUNT_RESOURCES:
        limit = limits.get(growth.resource)
        if limit is None:
            return
        left = max(0, limit - int(value))
        which = "the descriptor limit (RLIMIT_NOFILE " if growth.resource == "fds" else "the thread limit ("
        growth.headroom = f"{which}{limit:,}, {left:,} left)"
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
        """Each leak found, by the process that grew; the tree's own only where no single process did
        (a leak spread over several)."""
        named = {g.resource for g in self.growth if g.failed and g.process != TREE}
        return [g for g in self.growth if g.failed and (g.process != TREE or g.resource not in named)]

    def lines(self) -> list[str]:
        r = self.run
        read = ", ".join(r.processes[1:]) or "none"
        head = (f"{r.backend}, {r.lifecycle}: {r.cycles:,} of {r.planned:,} lifecycle cycles of "
                f"{', '.join(r.subgraphs)} in {r.seconds:.1f} s ({1e3 * r.seconds / max(r.cycles, 1):.1f} ms a "
                f"cycle, readings included); {len(r.processes) - 1} process(es) read on their own: {read}")
        lines = [head] + [g.line(self.per_image) for g in self.growth]
        lines += [f"{RESOURCES[name]}: not measured ({why})" for name, why in r.not_measured.items()]
        if r.npu_load:
            lines.append(f"{r.npu_load} (rknpu/load at the end)")
        if r.ceiling is not None:
            lines.append(r.ceiling.line())
        if self.failures and r.cycles < r.planned:
            lines.append(f"stopped at cycle {r.cycles:,} of {r.planned:,}: a clear leak")
        if r.tripped:
            lines.append(f"stopped after {r.cycles:,} cycles: {r.tripped}")
        return lines

    def as_dict(self) -> dict:
        r = self.run
        return {"backend": r.backend, "lifecycle": r.lifecycle, "subgraphs": r.subgraphs, "cycles": r.cycles,
                "planned": r.planned, "seconds": r.seconds, "processes": r.processes,
                "cycles_per_image": self.per_image, "memory_rate_bytes": self.memory_rate,
                "floor_bytes": self.floor_bytes, "mem_available_bytes": self.mem_available,
                "limits": self.limits, "tripped": r.tripped, "not_measured": r.not_measured,
                "ceiling": vars(r.ceiling) if r.ceiling else None, "npu_load": r.npu_load,
                "growth": [vars(g) for g in self.growth],
                "samples": {p: {name: r.series(name, k).tolist() for name in r.resources}
                            for k, p in enumerate(r.processes)}}


def soak_verdict(run: SoakRun, memory_rate: int, floor_bytes: int, per_image: int) -> SoakVerdict:
    """Judge a run against the limits of this machine now (MemAvailable, RLIMIT_NOFILE, threads)."""
    import psutil

    from ..memory.resources import resource_limits
    limits = resource_limits()
    available = int(psutil.virtual_memory().available)
    growth = judge(run, memory_rate, floor_bytes, available, limits, per_image) if run.cycles >= 2 else []
    return SoakVerdict(run, growth, per_image, available, floor_bytes, memory_rate, limits)
