"""The simulated board: onnxruntime computes every output (so the numbers stay true) while each
stage takes the board's time and each live context holds the board's memory, both scaled.

From a board profile data file (boards/data/rock5c-anima.toml: measured figures + a [sim] table of
assumptions), a context of branch b
    load     takes  lifecycle_per_model[b] x load share of the pass   x time_scale, and allocates
             and touches context_mib x memory_scale of real memory (PSS and MemAvailable move);
    init     takes  the same with the init share (and builds the real onnxruntime session);
    run      takes  core_per_step[b] / blocks x rows / 2 x time_scale, holding an NPU core:
             contexts on different cores run concurrently, on the same core they queue; a mask of
             several cores holds them all and runs [sim] multi_core_speedup times as fast;
    release  takes  the release share, and frees the memory;
with [sim] lifecycle_holds_core the three lifecycle stages hold the context's core as run does;
and before every invocation the pipeline pauses for the board's host CPU time (0.123 s per branch
body the subgraph holds, derived from the measured step, x time_scale; `between_invocations`; [plan]
host_model, the planner's too), so a simulated step is the board's.
This machine's own host work since the last simulated stage (the pipeline's AdaLN, casts, loop) is
measured and taken off that pause: it is part of the host time, not extra to it.
A stage never takes less than the real work under it. Cores are file locks under `lock_dir`, so
contexts in different processes (prefetch workers) share the three cores like on the board.

This machine's own session creation (5-20 ms per subgraph here, under load more than a scaled
board init_runtime) would otherwise set the pace, so with `reuse_sessions` (default on) each
process builds one onnxruntime session per subgraph file and reuses it: the profile's init time,
not this machine's, is what the stage takes. Those cached sessions are a fixed cost of the process,
paid once; what moves with the live contexts is the scaled board memory each one holds.

Context options (`normalize_options` checks and completes them; the suite's --board-profile-data,
--time-scale and --core-mask become them in `BoardSimContext.parse_options`):
    profile_data  path of the data file (default boards/data/rock5c-anima.toml)
    time_scale    seconds here per board second (default: the file's [sim] time_scale)
    memory_scale  bytes here per board byte (default: the file's [sim] memory_scale)
    core_mask     auto, 0, 1, 2, 0_1, 0_1_2 (as rknnlite); default auto
    lock_dir      directory of the per-core lock files (default: a fresh one per parsing process)
    reuse_sessions  build each subgraph's onnxruntime session once per process (default true)
    slowdown      per-branch factor on every stage's board time: 'x1.03' (every branch) or
                  'ffn=x1.03,self_attn=x1.02'; a candidate made slower on purpose (default none)
    driver_leak   SIZE@RELEASE: a driver that keeps SIZE of CMA on every release from this process's
                  RELEASEth, written into `telemetry_root`'s copied proc/meminfo (harness/backends/driver_leak.py):
                  a leak no process's RSS shows (default none)
    drift         seed of the board's run-to-run drift (harness/backends/board_drift.py, from
                  boards/data/board-drift.toml): every stage's time follows its branch's drift level
                  at that moment, so runs far apart differ as the board's runs do (default: no drift)
"""
from __future__ import annotations

import atexit
import contextlib
import math
import mmap
import re
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError
from ..core.locks import acquire, release
from ..partition.granularity import BRANCHES_PER_BLOCK
from ..partition.manifest import FUSED_BRANCH
from .base import BackendOptions
from .board_drift import Drift, load_drift_model
from .board_profile import BRANCH_ORDER, fits, load_board_profile
from .driver_leak import DriverLeak, parse_driver_leak
from .onnxruntime import OnnxRuntimeContext
from .rknnlite import parse_core_mask

__all__ = ["BoardSimContext", "normalize_options"]

CORES_OF_MASK = {"auto": (), "0": (0,), "1": (1,), "2": (2,), "0_1": (0, 1), "0_1_2": (0, 1, 2)}
_BRANCH = re.compile(r"\((?:block \d+ )?([a-z_]+)\)")
_FUSED = re.compile(r"\(blocks? (\d+)(?:-(\d+))?\)")


def _scale(options: dict, key: str, default: float) -> float:
    value = options.get(key, default)
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= 1):
        raise ConfigError(f"board-sim option '{key}' is {options.get(key)!r}: expected a number in (0, 1]")
    return value


def _fresh_lock_dir() -> str:
    path = tempfile.mkdtemp(prefix="board-sim-npu-")
    atexit.register(shutil.rmtree, path, True)
    return path


def normalize_options(options: dict, lock_dir: bool = True) -> dict:
    """Checked, complete options (idempotent: the parent completes them, workers get the result).
    lock_dir=False only checks: no lock directory is made for a run that may not use this backend."""
    known = {"profile_data", "time_scale", "memory_scale", "core_mask", "lock_dir", "threads", "reuse_sessions",
             "slowdown", "drift", "driver_leak", "telemetry_root"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(f"board-sim: unknown option '{unknown[0]}' (known: {', '.join(sorted(known))})")
    profile = load_board_profile(options.get("profile_data"))
    cores = profile.sim("npu_cores", int)
    mask = parse_core_mask(options.get("core_mask", "auto"))
    if any(c >= cores for c in CORES_OF_MASK[mask]):
        raise ConfigError(f"board-sim option 'core_mask' {mask}: {profile.path} has {cores} NPU cores")
    return {**options, "profile_data": str(profile.path), "core_mask": mask,
            "time_scale": _scale(options, "time_scale", profile.sim("time_scale")),
            "memory_scale": _scale(options, "memory_scale", profile.sim("memory_scale")),
            **({"lock_dir": str(options.get("lock_dir") or _fresh_lock_dir())}
               if lock_dir or options.get("lock_dir") else {}),
            "reuse_sessions": _flag(options, "reuse_sessions", True),
            "slowdown": parse_slowdown(options.get("slowdown")), "drift": _seed(options.get("drift")),
            **({"driver_leak": options["driver_leak"] if isinstance(options["driver_leak"], dict) else
                parse_driver_leak(options["driver_leak"], options.get("telemetry_root"))}
               if options.get("driver_leak") is not None else {})}


def parse_slowdown(spec) -> dict[str, float]:
    """'x1.03' -> every branch 1.03; 'ffn=x1.03,self_attn=x1.02' -> those; a dict passes checked."""
    if isinstance(spec, dict):
        items = list(spec.items())
    else:
        parts = [p.strip() for p in str(spec or "").split(",") if p.strip()]
        items = [(p.partition("=")[0], p.partition("=")[2]) if "=" in p else ("*", p) for p in parts]
    out: dict[str, float] = {}
    for branch, text in items:
        try:
            factor = float(str(text).removeprefix("x"))
        except ValueError:
            factor = math.nan
        if branch not in (*BRANCH_ORDER, "*") or not 0.1 <= factor <= 100:
            raise ConfigError(f"board-sim option 'slowdown' {spec!r}: expected xFACTOR or BRANCH=xFACTOR "
                              f"(branches {', '.join(BRANCH_ORDER)}; factor 0.1-100)")
        out.update({b: factor for b in BRANCH_ORDER} if branch == "*" else {branch: factor})
    return out


def _seed(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"board-sim option 'drift' is {value!r}: expected a seed (a whole number >= 0)")
    return value


_DRIFTS: dict[int, Drift] = {}      # per process and seed: one board, whatever runs on it


def _drift(seed: int | None) -> Drift | None:
    if seed is None:
        return None
    if seed not in _DRIFTS:
        _DRIFTS[seed] = Drift(load_drift_model(), seed)
    return _DRIFTS[seed]


def _flag(options: dict, key: str, default: bool) -> bool:
    value = options.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"board-sim option '{key}' is {value!r}: expected true or false")
    return value


# (model path, size, mtime, threads) -> (session, input names), per process
_SESSIONS: dict[tuple, tuple] = {}


class BoardSimContext(OnnxRuntimeContext):
    backend_name = "board-sim"
    exclusive_options = ("board_profile_data", "time_scale")

    @classmethod
    def parse_options(cls, values: dict, cfg) -> dict:
        raw = {"core_mask": values.get("core_mask") or "auto"}
        if values.get("board_profile_data") is not None:
            raw["profile_data"] = str(values["board_profile_data"])
        if values.get("time_scale") is not None:
            raw["time_scale"] = values["time_scale"]
        return normalize_options(raw, lock_dir=False)

    @classmethod
    def run_options(cls, options: BackendOptions) -> BackendOptions:
        return replace(options, settings=normalize_options(dict(options.settings)))

    @classmethod
    def between_invocations(cls, options: BackendOptions) -> list:
        """The board's host CPU time before each invocation ([sim] simulate_host), scaled: the
        board's step is inference + lifecycle + this, so strategy ratios come out in its terms.
        A run asks for these once, as it starts: its clock starts there with no debt, so a run never
        pays off the run before it (a resident run's 85 final releases left 0.87 s of lifecycle debt
        that made the next on-demand run's steps 17 % shorter than the board's)."""
        _CLOCK.reset()
        opts = normalize_options(dict(options.settings))
        profile = load_board_profile(opts["profile_data"])
        if not profile.sim("simulate_host", bool):
            return []
        scale = opts["time_scale"]
        # per subgraph: a fused one holds several branch bodies and their host share ([plan] host_model)
        return [lambda entry: _CLOCK.host_pause(profile.host_before(_bodies(entry)) * scale)]

    def __init__(self, label: str, options: BackendOptions | None = None):
        given = options or BackendOptions(self.backend_name)
        opts = normalize_options(dict(given.settings))
        super().__init__(label, replace(given, settings={k: v for k, v in opts.items() if k == "threads"}))
        self.options = replace(given, settings=opts)
        profile = load_board_profile(opts["profile_data"])
        match = _BRANCH.search(label)
        self.branch = match.group(1) if match else "decoder"
        scale = opts["time_scale"]
        fused = _FUSED.search(label)
        stages, core, context_mib = (_fused_figures(profile, fused) if fused else
                                     (profile.stage_seconds(self.branch), profile.core_per_invocation(self.branch),
                                      profile.sim("context_mib")))
        self._fused = fused
        self.cores = CORES_OF_MASK[opts["core_mask"]]
        self.stage_s = {s: v * scale for s, v in stages.items()}
        # [sim] multi_core_speedup: a mask of several cores runs one call that much faster
        speedup = profile.sim("multi_core_speedup") if len(self.cores) > 1 else 1.0
        self.run_s_per_row = core * scale / profile.sim("streams_measured", int) / speedup
        self.context_bytes = int(context_mib * 2**20 * opts["memory_scale"])
        self.npu_cores = profile.sim("npu_cores", int)
        self.lock_dir = Path(opts["lock_dir"])
        self.slowdown = opts["slowdown"].get(self.branch, 1.0)
        self.drift = _drift(opts["drift"])
        # [sim] lifecycle_holds_core: load, init and release occupy the context's core as
        # inference does, so another context's lifecycle cannot overlap an inference on that core
        self.lifecycle_holds_core = profile.sim("lifecycle_holds_core", bool)
        self._memory: mmap.mmap | None = None
        self.last_queue_s = 0.0

    def load(self, path: Path) -> None:
        with self._lifecycle_core():
            start = time.perf_counter()
            super().load(path)
            self._memory = _hold(self.context_bytes)
            _pad(start, self.stage_s["load"] * self._factor())

    def init(self) -> None:
        with self._lifecycle_core():
            self._init()

    def _init(self) -> None:
        start = time.perf_counter()
        if not self.options.get("reuse_sessions") or self._path is None:
            super().init()
        else:
            st = self._path.stat()
            key = (str(self._path), st.st_size, st.st_mtime_ns, self.threads)
            if key not in _SESSIONS:
                super().init()
                _SESSIONS[key] = (self._session, self._input_names)
                # The process's one build of this session is not a board stage: the board's init
                # follows it, and its seconds are no debt for later stages to pay off (they would
                # shorten the steady steps' lifecycle, more the larger the subgraphs).
                start = time.perf_counter()
            self._session, self._input_names = _SESSIONS[key]
        _pad(start, self.stage_s["init"] * self._factor())

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        rows = int(inputs[0].shape[0]) if inputs and np.ndim(inputs[0]) else 1
        queued = time.perf_counter()
        fds = self._take_cores()
        try:
            start = time.perf_counter()
            self.last_queue_s = start - queued
            outputs = super().run(inputs)
            _pad(start, self.run_s_per_row * rows * self._factor(), "path")
        finally:
            for fd in fds:
                release(fd)
        return outputs

    def release(self) -> None:
        with self._lifecycle_core():
            start = time.perf_counter()
            try:
                super().release()
                _free(self._memory)
                DriverLeak.released(self.options.get("driver_leak"))
                _pad(start, self.stage_s["release"] * self._factor())
            finally:
                self._memory = None

    def _factor(self) -> float:
        """This stage's slowdown and, with drift, the branch's drift level now (in board time)."""
        if self.drift is None:
            return self.slowdown
        return self.slowdown * self.drift.factor(self.branch, time.perf_counter() / self.options.get("time_scale"))

    @property
    def board_weight_mib(self) -> float:
        return _weight_mib(load_board_profile(self.options.get("profile_data")), self.branch, self._fused)

    # -- the NPU cores ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _lifecycle_core(self):
        """Hold this context's core(s) for a lifecycle stage when the profile says the board does."""
        fds = self._take_cores() if self.lifecycle_holds_core else []
        try:
            yield
        finally:
            for fd in fds:
                release(fd)

    def _lock(self, core: int, blocking: bool) -> int | None:
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        return acquire(self.lock_dir / f"core{core}.lock", blocking)

    def _wait_for(self, core: int) -> int:
        fd = self._lock(core, blocking=True)
        assert fd is not None           # a blocking acquire waits; only a non-blocking one gives up
        return fd

    def _take_cores(self) -> list[int]:
        if self.cores:                       # a fixed mask: wait for each of its cores, in order
            return [self._wait_for(c) for c in self.cores]
        for core in range(self.npu_cores):   # auto: the first idle core, else queue on core 0
            fd = self._lock(core, blocking=False)
            if fd is not None:
                return [fd]
        return [self._wait_for(0)]


def _bodies(entry) -> int:
    """Branch bodies one subgraph holds: 3 per block of a fused subgraph, else 1 (a branch, the decoder)."""
    return BRANCHES_PER_BLOCK * len(entry.blocks) if entry.branch == FUSED_BRANCH else 1


def _weight_mib(profile, branch: str, fused) -> float:
    """The weight MiB the simulated board's context stands for ([plan] context_weights_mib per
    branch, summed over a fused subgraph's blocks; the decoder's as its file): what `probe-board`
    fits lifecycle seconds against, as it uses the .rknn file's size on a board."""
    weights = fits(profile).weights_mib
    if fused:
        first, last = int(fused.group(1)), int(fused.group(2) or fused.group(1))
        return sum(weights.values()) * (last - first + 1)
    return weights.get(branch, 0.0)


def _fused_figures(profile, match) -> tuple[dict, float, float]:
    """A fused context of K blocks: lifecycle and memory from the profile's [plan] models (a fixed
    part per context + a part per weight MiB, fitted to the branch figures; ASSUMPTIONS), inference
    the sum of its branches'."""
    first = int(match.group(1))
    count = int(match.group(2) or first) - first + 1
    f = fits(profile)
    weight = sum(f.weights_mib.values()) * count
    life = f.lifecycle_of(weight)
    mean = sum(f.weights_mib.values()) / len(f.weights_mib)
    stages = {s: life * share for s, share in profile.stage_shares().items()}
    core = sum(profile.core_per_invocation(b) for b in f.weights_mib) * count
    return stages, core, profile.sim("context_mib") * f.pss_of(weight) / f.pss_of(mean)


_HUGE_PAGE = 2 << 20    # a transparent huge page (x86-64, and arm64 with 4 KiB pages)


def _hold(size: int) -> mmap.mmap | None:
    """Fresh anonymous pages, every one written, so PSS, MemAvailable and the memory guard see the
    context. mmap, not a numpy array: malloc may hand back pages an earlier context already
    touched, and then nothing would move. The touched `size` bytes start at a huge-page boundary
    inside a mapping one huge page larger (the rest is never touched: address space, not memory)
    and are offered to the kernel as transparent huge pages: a page fault costs 1-4 us in a VM, and
    one 2.2 MiB context of 4 KiB pages took 1.8 ms to touch where the scaled board gives its whole
    load 0.8 ms (a huge page: a fifth of that)."""
    if size <= 0:
        return None
    block = mmap.mmap(-1, size + _HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = np.frombuffer(block, dtype=np.uint8)
    start = -view.ctypes.data % _HUGE_PAGE
    if hasattr(mmap, "MADV_HUGEPAGE"):      # Linux; elsewhere, or with THP off, 4 KiB pages as before
        block.madvise(mmap.MADV_HUGEPAGE, start, size)
    view[start:start + size:mmap.PAGESIZE] = 1
    return block


def _free(block: mmap.mmap | None) -> None:
    if block is not None:
        block.close()


class Clock:
    """Keeps simulated stages on the board's time despite late wake-ups.

    A sleep of a millisecond can end several milliseconds late on a loaded machine; over the 336
    stages of a step that would add seconds the board never spends. Each overshoot is carried as a
    debt and taken off the next pauses of the same kind (never below the real work), so the sums
    stay the board's. Two kinds: "path" (inference and the host pause, what a pipeline waits for)
    and "lifecycle" (load, init, release); in a prefetch worker the debt of a background load must
    not shorten an inference the pipeline waits for, which would flatter prefetch.
    """

    def __init__(self):
        self.debt = {"path": 0.0, "lifecycle": 0.0}
        self.last_end: float | None = None      # when this process's last simulated stage ended
        self.host_real = 0.0                    # this machine's host seconds counted as the board's
        self.asked = 0.0                        # scaled board seconds of every stage and pause asked for
        self.host_board = 0.0                   # the board's host seconds asked for

    def reset(self) -> None:
        """A new run: no debt, and no stage before its first host pause (the last run's end is no
        host work of this run's)."""
        self.debt = {"path": 0.0, "lifecycle": 0.0}
        self.last_end = None

    def host_pause(self, target: float) -> None:
        """The board's host time before an invocation, less this machine's own host work since the
        last simulated stage ended (the pipeline's AdaLN, casts and loop, which stand in for part
        of the board's): at a small time scale that work is a large share of the scaled pause and
        would otherwise come on top of it. At most the pause is taken off, and no debt is made."""
        now = time.perf_counter()
        start = now if self.last_end is None else max(self.last_end, now - target)
        self.host_real += now - start
        self.host_board += target
        self.pad(start, target, "path")

    def pad(self, start: float, target: float, kind: str = "lifecycle") -> None:
        """Sleep until `target` seconds after `start`, less this kind's debt (a stage never takes
        less than its real work)."""
        self.asked += target
        left = target - (time.perf_counter() - start) - self.debt[kind]
        if left > 0:
            time.sleep(left)
        self.last_end = time.perf_counter()
        self.debt[kind] = max(0.0, self.debt[kind] + (self.last_end - start) - target)


_CLOCK = Clock()       # per process: the stages of one process run one after another


def _pad(start: float, target: float, kind: str = "lifecycle") -> None:
    _CLOCK.pad(start, target, kind)
