"""The soak gate's parts: the per-cycle readings of the process tree (real memory, descriptors and
threads; DMA-BUF and RKNPU figures from a board-shaped tree), the growth fit and its judgement, and the
leak fault's real leaks."""
import math
import mmap
import os
import re
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

from harness.backends.base import BackendOptions
from harness.backends.faults import parse_fault
from harness.core.errors import ConfigError
from harness.gates.leak import Watch, memory_rule, warm_max
from harness.gates.soak import (
    MIN_CYCLES,
    TREE,
    SoakRun,
    cycles_per_image,
    fit_growth,
    judge,
    run_soak,
    watch_rules,
)
from harness.memory.resources import ResourceSampler
from harness.model.config import REPO_ROOT

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
BOARD_TREE = REPO_ROOT / "tests/data/sysfs-rk3588"


# ------------------------------------------------------------------ readings

def test_the_sampler_sees_real_memory_descriptors_and_threads_appear():
    sampler = ResourceSampler("/")
    before = sampler.read()
    # fresh anonymous pages, every one written: resident and private (bytes from malloc could reuse
    # memory an earlier test freed into the allocator, and then nothing would move)
    held = mmap.mmap(-1, 64 * MiB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    held[::mmap.PAGESIZE] = b"\x5a" * (64 * MiB // mmap.PAGESIZE)
    fd = os.open(os.devnull, os.O_RDONLY)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        after = sampler.read()
    finally:
        stop.set()
        thread.join()
        os.close(fd)
    assert after["fds"] - before["fds"] == 1
    assert after["threads"] - before["threads"] == 1
    # PSS and USS also move with our share of the shared libraries (~1.5 MiB when other processes map
    # them, measured beside a busy test run): 64 MiB held leaves that 4 MiB of room
    for memory in ("uss", "rss", "pss"):
        assert 60 * MiB <= after[memory] - before[memory] <= 72 * MiB, (memory, after[memory] - before[memory])
    held.close()


def test_the_sampler_counts_a_child_process():
    sampler = ResourceSampler("/", relist_after=0.0)
    before = sampler.read()
    code = "import sys; b = b'x' * (24 << 20); sys.stdout.write('up\\n'); sys.stdout.flush(); sys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "up\n"
        after = sampler.read()
    finally:
        child.stdin.close()
        child.wait()
    # host memory (PSS less file-backed pages): the child's 24 MiB are anonymous. USS is not the claim:
    # once the child maps the interpreter's libraries, those pages leave the parent's USS (shared now)
    assert after["host"] - before["host"] >= 24 * MiB, (before, after)
    assert after["fds"] > before["fds"] and after["threads"] > before["threads"]


def _board_tree(tmp_path):
    """A tree shaped like a board's: this process's fdinfo with one DMA-BUF (8 KiB, exported by
    rknpu) and one plain file, debugfs dma_buf and rknpu/mm."""
    fdinfo = tmp_path / "proc" / str(os.getpid()) / "fdinfo"
    fdinfo.mkdir(parents=True)
    (fdinfo / "3").write_text("pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nsize:\t8192\ncount:\t3\n"
                              "exp_name:\trknpu\n")
    (fdinfo / "4").write_text("pos:\t0\nflags:\t0100000\nmnt_id:\t24\nino:\t4242\n")
    debug = tmp_path / "sys/kernel/debug"
    (debug / "dma_buf").mkdir(parents=True)
    (debug / "dma_buf/bufinfo").write_text(
        "\nDma-buf Objects:\nsize    \tflags   \tmode    \tcount   \texp_name\tino     \tname\n"
        "00008192\t00000002\t00080007\t00000003\trknpu\t00001057\t<none>\n"
        "00004096\t00000002\t00080007\t00000001\tsystem\t00001058\t<none>\n\nTotal 2 objects, 12288 bytes\n")
    (debug / "rknpu").mkdir()
    (debug / "rknpu/mm").write_text('SRAM bitmap: "*" - used, "." - free (1bit = 4KB)\n[000] [****............]\n'
                                    "SRAM total size: 978944, used: 16384, free: 962560\n")
    # the RKNPU render node open twice by one DRM client (counted once), its buffers in DRM fdinfo keys
    drm = "pos:\t0\nflags:\t02100002\ndrm-driver:\trknpu\ndrm-client-id:\t7\ndrm-total-memory:\t12288 KiB\n" \
          "drm-resident-memory:\t12288 KiB\n"
    (fdinfo / "5").write_text(drm)
    (fdinfo / "6").write_text(drm)
    (fdinfo / "7").write_text("drm-driver:\tpanthor\ndrm-client-id:\t9\ndrm-memory-vram:\t2 MiB\n")
    shutil.copytree(BOARD_TREE / "proc", tmp_path / "proc", dirs_exist_ok=True)
    (debug / "rknpu/load").write_text("NPU load:  Core0: 35%, Core1:  0%, Core2:  0%,\n")
    return tmp_path


def test_dma_buf_and_npu_sram_are_read_from_the_board_tree(tmp_path):
    sampler = ResourceSampler(_board_tree(tmp_path))
    assert sampler.not_measured == {}
    reading = sampler.read()
    assert reading["dmabuf"] == 8192 and reading["dmabuf_system"] == 12288 and reading["npu_sram"] == 16384
    assert reading["drm"] == 12288 * KiB + 2 * MiB and reading["cma"] == (65536 - 57344) * KiB
    assert sampler.last[os.getpid()]["drm"] == reading["drm"]
    assert sampler.npu_load() == "NPU load: Core0: 35%, Core1: 0%, Core2: 0%,"


def test_unreadable_figures_are_named_as_not_measured_never_read_as_zero():
    sampler = ResourceSampler(BOARD_TREE)        # no fdinfo, no debugfs dma_buf nor rknpu/mm in it
    assert set(sampler.not_measured) == {"dmabuf", "drm", "dmabuf_system", "npu_sram"}
    assert "sys/kernel/debug/dma_buf/bufinfo" in sampler.not_measured["dmabuf_system"]
    assert "rknpu/mm" in sampler.not_measured["npu_sram"]
    assert set(sampler.read()) == {"pss", "rss", "uss", "host", "fds", "threads", "cma"}
    assert "CmaFree" in ResourceSampler("/").not_measured.get("cma", "CmaFree")      # this VM has no CMA


def test_a_file_that_does_not_read_is_named_with_why(tmp_path):
    tree = _board_tree(tmp_path)
    bufinfo = tree / "sys/kernel/debug/dma_buf/bufinfo"
    bufinfo.unlink()
    bufinfo.mkdir()                                 # unreadable as a file, also to root
    assert ResourceSampler(tree).not_measured["dmabuf_system"] == f"{bufinfo}: Is a directory"


# ------------------------------------------------------------------ the leak test and the judgement

PLANNED = 1092


def _run(columns: dict, planned: int = PLANNED, memory_rate: int = 16 * KiB) -> SoakRun:
    """A run of the given tree series fed to the leak test cycle by cycle, as run_soak feeds it (stopping
    where the test finds a leak)."""
    names = tuple(columns)
    n = len(next(iter(columns.values())))
    samples = np.zeros((n, 1, len(names)), dtype=np.int64)
    samples[:, 0] = np.column_stack([np.asarray(columns[k], dtype=np.int64) for k in names])
    watch = Watch(samples.reshape(n, -1), watch_rules(names, 1, memory_rate), planned)
    done = n
    for t in range(n):
        if len(watch.update(t)):
            done = t + 1
            break
    return SoakRun("test", ["s"], done, 1.0, names, samples, {}, planned=planned, watch=watch)


def _judge(columns, rate=16 * KiB, available=5 * GiB, floor=int(1.5 * GiB), nofile=1024):
    run = _run(columns, memory_rate=rate)
    return {g.resource: g for g in judge(run, rate, floor, available, {"fds": nofile, "threads": 4096}, PLANNED)}


def _noisy(rng, n, base=200 * MiB):
    """A clean process's memory: readings spread by 256 KiB, and an arena chunk of 1 MiB now and then."""
    return base + rng.normal(0, 96 * KiB, n) + MiB * (rng.random(n) < 0.002).cumsum()


def _leak(rate, start, n=PLANNED):
    return rate * np.clip(np.arange(n) - start + 1, 0, None)


@pytest.mark.parametrize("start", [0, 200, 900])
@pytest.mark.parametrize("rate", [64 * KiB, 16 * KiB])
def test_a_memory_leak_is_found_within_its_bound_of_its_start(rate, start):
    """Found no earlier than it starts and no later than the bound (leak.py): h / (r - k) cycles after its
    start or the warm-up's end, plus the readings' spread (here up to ~1.25 MiB) / (r - k)."""
    rng = np.random.default_rng(start + rate)
    growth = _judge({"host": _noisy(rng, PLANNED) + _leak(rate, start)})["host"]
    rule = memory_rule(16 * KiB)
    bound = max(start, warm_max(PLANNED)) + rule.delay(rate) + math.ceil(1.25 * MiB / (rate - rule.reference))
    if bound > PLANNED:       # past one image's cycles (16 KiB from 900, docs/gates.md): if found, never early
        assert not growth.failed or start < growth.found_at, growth.line(PLANNED)
        return
    assert growth.failed and start < growth.found_at <= bound, growth.line(PLANNED)
    assert start - 10 <= growth.first_cycle <= max(start, warm_max(PLANNED)) + 80, growth.line(PLANNED)


@pytest.mark.parametrize("before", [0, 4 * KiB])
@pytest.mark.parametrize("step_at", [150, 170])
def test_an_allocator_step_before_a_leak_does_not_take_its_start(step_at, before):
    """An arena chunk of C (512 KiB) the allocator keeps from cycle 150 or 170, and a slow growth under k
    before the leak, then 64 KiB per cycle from 200: the leak starts at 200, not at the step (measured
    against k, the step stayed in the CUSUM for 64 cycles and the start was the step's)."""
    rng = np.random.default_rng(step_at + before)
    cycles = np.arange(PLANNED)
    host = _noisy(rng, PLANNED) + 512 * KiB * (cycles >= step_at) + before * np.minimum(cycles, 200)
    growth = _judge({"host": host + _leak(64 * KiB, 200)})["host"]
    assert growth.failed and 200 - 10 <= growth.first_cycle <= 200 + 80, growth.line(PLANNED)


def test_the_bounds_the_docs_state():
    memory = memory_rule(16 * KiB)
    assert (memory.delay(64 * KiB), memory.delay(16 * KiB), memory.delay(8 * KiB)) == (46, 320, math.inf)
    # a deterministic leak from cycle 300 (after the warm-up): found exactly that many cycles after
    for rate in (64 * KiB, 16 * KiB):
        growth = _judge({"host": 100 * MiB + _leak(rate, 300)})["host"]
        assert growth.found_at == 300 + memory.delay(rate), growth.line(PLANNED)


@pytest.mark.parametrize("start, per, kind", [(200, 50, "fds"), (900, 50, "fds"), (200, 20, "threads"),
                                              (900, 20, "threads")])
def test_a_count_leak_is_found_at_its_fourth(start, per, kind):
    counts = 10 + np.clip(np.arange(PLANNED) - start, 0, None) // per
    growth = _judge({kind: counts})[kind]
    if start + 4 * per + 1 > PLANNED:           # its 4th comes after one image's cycles
        assert not growth.failed, growth.line(PLANNED)
        return
    assert growth.failed and growth.found_at == start + 4 * per + 1, growth.line(PLANNED)
    assert growth.first_cycle == start + per + 1, growth.line(PLANNED)      # its first step, not its last


def test_an_allocator_that_grows_then_settles_passes():
    rng = np.random.default_rng(1)
    n = PLANNED
    settle = 100 * MiB * (1 - np.exp(-np.arange(n) / 40))           # grows fast for ~150 cycles, then settles
    chunks = np.where(np.arange(n) > 800, 2 * MiB, 0)               # one late arena chunk
    threads = 4 + np.minimum(np.arange(n) // 10, 8) + 4 * (np.arange(n) > 500)   # a pool that fills, one more
    growth = _judge({"host": _noisy(rng, n) + settle + chunks, "threads": threads})
    assert not growth["host"].failed and not growth["threads"].failed, [g.line(n) for g in growth.values()]
    assert growth["host"].first_cycle > 32          # the warm-up was found in the data, not assumed


def test_a_clean_plateau_passes_however_long_the_run():
    rng = np.random.default_rng(5)
    growth = _judge({"rss": _noisy(rng, 20_000), "fds": np.full(20_000, 12)})
    assert not any(g.failed for g in growth.values())


def test_a_64_kib_per_cycle_leak_fails_with_its_rate_and_images_left():
    rng = np.random.default_rng(2)
    growth = _judge({"host": _noisy(rng, 300) + 64 * KiB * np.arange(300)}, available=5 * GiB)["host"]
    assert growth.failed and 56 * KiB < growth.per_cycle < 72 * KiB, growth.line(PLANNED)
    assert growth.images_left == pytest.approx((5 * GiB - 1.5 * GiB) / (growth.per_cycle * PLANNED))
    assert "limit 16.0 KiB" in growth.line(PLANNED)
    assert "the memory floor (1.5 GiB, 3.5 GiB above it now)" in growth.line(PLANNED)


def test_the_thread_limit_is_named_once():
    growth = _judge({"threads": 4 + np.arange(PLANNED) // 5})["threads"]
    assert growth.failed and "the thread limit (4,096, " in growth.line(PLANNED), growth.line(PLANNED)
    assert "the thread limit (the thread limit" not in growth.line(PLANNED)


def test_pss_and_uss_are_shown_but_not_judged():
    leak = 100 * MiB + 64 * KiB * np.arange(400)          # e.g. other processes unmapping shared libraries
    growth = _judge({"pss": leak, "uss": leak})
    assert not any(g.failed for g in growth.values())
    assert all(g.limit is None and "not judged" in g.line(PLANNED) for g in growth.values())


def test_the_fit_thins_a_long_run_and_keeps_its_slope():
    values = 7 * np.arange(50_000)
    slope, low, high = fit_growth(values, 25_000)
    assert slope == pytest.approx(7) and low == pytest.approx(7) and high == pytest.approx(7)


# ------------------------------------------------------------------ the leak fault

def test_leak_fault_options_and_bad_values():
    assert parse_fault("leak=mem:64KiB,leak=fd:0.1") == {"leak_bytes": 64 * KiB, "leak_fds": 0.1, "leak_from": 1,
                                                          "leak_in": "any"}
    assert parse_fault("leak-worker=mem:64KiB@100,leak-worker=thread:0.05@100") == {
        "leak_bytes": 64 * KiB, "leak_threads": 0.05, "leak_from": 100, "leak_in": "worker"}
    for bad in ("leak=mem:0", "leak=mem:2GiB", "leak=mem:lots", "leak=fd:0", "leak=fd:nan", "leak=fd:101",
                "leak=cpu:1", "leak=mem:1KiB@0", "leak=mem:1KiB@x", "leak-worker=thread:11"):
        with pytest.raises(ConfigError, match=rf"--fault '{re.escape(bad)}': expected leak=mem:SIZE \(up to 1GiB\), "
                                              r"leak=fd:PER_RELEASE \(up to 100\) or leak=thread"):
            parse_fault(bad)
    with pytest.raises(ConfigError, match="every leak of one --fault starts at the same release"):
        parse_fault("leak=mem:1KiB@5,leak=fd:1")


LEAK_CHILD = """
import psutil
from harness.backends.base import BackendOptions
from harness.backends.faults import FaultInjectionContext
me = psutil.Process()
leaky = BackendOptions("faults", {"leak_bytes": 256 * 1024, "leak_fds": 0.1})
before_fds, before_uss = me.num_fds(), me.memory_full_info().uss
for i in range(40):
    ctx = FaultInjectionContext("subgraph 0 (block 0 self_attn)", leaky)
    ctx.release()
print(me.num_fds() - before_fds, me.memory_full_info().uss - before_uss)
"""


def test_the_leak_fault_leaks_real_memory_and_descriptors_on_release():
    # In a child process: what it leaks is gone with it.
    done = subprocess.run([sys.executable, "-c", LEAK_CHILD], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    fds, uss = map(int, done.stdout.split())
    assert fds == 4                                     # 40 releases x 0.1
    assert 40 * 256 * KiB <= uss <= 40 * 256 * KiB + 4 * MiB


# ------------------------------------------------------------------ the cycling

def test_each_branch_kind_is_cycled_and_each_cycle_read(embedded_fp32):
    bundle, partition = embedded_fp32
    from harness.partition.manifest import load_manifest
    manifest = load_manifest(partition)
    assert cycles_per_image(manifest) == len(manifest.subgraphs) * 13

    class Counting(ResourceSampler):
        reads = 0

        def read(self):
            Counting.reads += 1
            return super().read()

    run = run_soak(BackendOptions("onnxruntime"), manifest, MIN_CYCLES, Counting("/"))
    assert run.cycles == MIN_CYCLES == Counting.reads and run.tripped is None
    assert [s.split("(")[1] for s in run.subgraphs] == ["block 0 self_attn)", "block 0 cross_attn)", "block 0 ffn)"]
    assert (run.series("fds") == run.series("fds")[0]).all(), "a clean cycle leaves no descriptor open"
    with pytest.raises(ConfigError, match=f"--soak-cycles 10: the gate needs at least {MIN_CYCLES} cycles"):
        run_soak(BackendOptions("onnxruntime"), manifest, 10, ResourceSampler("/"))


# ------------------------------------------------------------------ the field reports

def test_one_image_fails_every_rate_the_field_reports_give():
    """boards/data/lifecycle-field-reports.toml: each reported leak per cycle (memory, descriptors), starting
    at the first cycle, is failed within the warm-up's longest and the test's delay for that rate (at the
    default limits), and the default length (one board image) outlasts every reported number of cycles to
    failure."""
    from harness.backends.board_profile import load_board_profile
    from harness.cli.options import OPTIONS
    from harness.core.schema import read_toml
    from harness.core.sizes import parse_size
    reports = read_toml(REPO_ROOT / "boards/data/lifecycle-field-reports.toml", "field reports")["report"]
    assert len(reports) >= 4
    rate = parse_size(OPTIONS["soak_memory_rate"].default)
    board_image = load_board_profile().get("spectrum_28.lifecycle_invocations", int)
    rng = np.random.default_rng(3)
    for report in reports:
        owner_repo, number = report["thread"].split("#")
        assert report["source"] == f"https://github.com/{owner_repo}/issues/{number}"
        for key in ("leak_per_cycle_bytes", "leak_per_run_bytes"):
            if key in report:
                host = _noisy(rng, board_image) + _leak(report[key], 0, board_image)
                growth = _judge({"host": host}, rate=rate)["host"]
                bound = warm_max(board_image) + memory_rule(rate).delay(report[key]) + 40
                assert growth.failed and growth.found_at <= bound, (report["thread"], growth.line(board_image))
        if "fds_per_cycle" in report:
            fds = 11 + np.floor(report["fds_per_cycle"] * np.arange(board_image))
            assert _judge({"fds": fds})["fds"].failed, report["thread"]
        if "cycles_to_failure" in report:
            assert board_image > report["cycles_to_failure"], report["thread"]


# ------------------------------------------------------------------ the driver's own memory

@pytest.mark.slow          # a few hundred board-sim cycles: 26 s at load average 15
def test_a_board_sim_driver_leak_no_rss_shows_is_found_by_the_soak(tmp_path):
    """board-sim's driver keeps 64 KiB of CMA on every release from the 150th (harness/backends/
    driver_leak.py) in a copy of the board tree: no process grows, the tree's CMA in use does, and the
    soak finds it there, stopping early."""
    from harness.model.bundle import load_bundle
    from harness.partition.manifest import load_manifest
    from harness.partition.onnx_export import ExportSettings, export_partition
    from tests.helpers import make_random_model_dir
    model = load_bundle(make_random_model_dir(tmp_path / "model", seed=4))
    export_partition(model.weights, model.cfg, tmp_path / "p", ExportSettings(precision="float32", blocks=[0]))
    tree = tmp_path / "board"
    shutil.copytree(BOARD_TREE, tree)
    options = {"time_scale": 0.0002, "driver_leak": "64KiB@150", "telemetry_root": str(tree)}
    run = run_soak(BackendOptions("board-sim", options), load_manifest(tmp_path / "p"), 400, ResourceSampler(tree))
    growth = {(g.process, g.resource): g for g in judge(run, 16 * KiB, int(1.5 * GiB), 5 * GiB, {}, PLANNED)}
    cma = growth[(TREE, "cma")]
    # found within the rule's delay of the leak's start, or of the warm-up's end where the run's own
    # memory settled later (a loaded CI machine: cycle ~200, found at 241)
    bound = max(150, warm_max(PLANNED)) + memory_rule(16 * KiB).delay(64 * KiB) + 2
    assert cma.failed and 150 < cma.found_at <= bound, cma.line(PLANNED)
    assert cma.per_cycle == pytest.approx(64 * KiB, rel=0.01) and run.cycles == cma.found_at < 400
    assert not [g.line(PLANNED) for g in growth.values() if g.failed and g.resource != "cma"]
