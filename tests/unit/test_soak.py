"""The soak gate's parts: the per-cycle readings of the process tree (real memory, descriptors and
threads; DMA-BUF and RKNPU figures from a board-shaped tree), the growth fit and its judgement, and the
leak fault's real leaks."""
import mmap
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from harness.backends.faults import parse_fault
from harness.core.errors import ConfigError
from harness.gates.soak import MIN_CYCLES, SoakRun, cycles_per_image, fit_growth, judge, run_soak
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
    assert after["uss"] - before["uss"] >= 24 * MiB
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
    return tmp_path


def test_dma_buf_and_npu_sram_are_read_from_the_board_tree(tmp_path):
    sampler = ResourceSampler(_board_tree(tmp_path))
    assert sampler.not_measured == {}
    reading = sampler.read()
    assert reading["dmabuf"] == 8192 and reading["dmabuf_system"] == 12288 and reading["npu_sram"] == 16384


def test_unreadable_figures_are_named_as_not_measured_never_read_as_zero():
    sampler = ResourceSampler(BOARD_TREE)        # no fdinfo, no debugfs dma_buf nor rknpu/mm in it
    assert set(sampler.not_measured) == {"dmabuf", "dmabuf_system", "npu_sram"}
    assert "sys/kernel/debug/dma_buf/bufinfo" in sampler.not_measured["dmabuf_system"]
    assert "rknpu/mm" in sampler.not_measured["npu_sram"]
    assert set(sampler.read()) == {"pss", "rss", "uss", "fds", "threads"}


def test_a_file_that_does_not_read_is_named_with_why(tmp_path):
    tree = _board_tree(tmp_path)
    bufinfo = tree / "sys/kernel/debug/dma_buf/bufinfo"
    bufinfo.unlink()
    bufinfo.mkdir()                                 # unreadable as a file, also to root
    assert ResourceSampler(tree).not_measured["dmabuf_system"] == f"{bufinfo}: Is a directory"


# ------------------------------------------------------------------ the fit and the judgement

def _run(columns: dict) -> SoakRun:
    names = tuple(columns)
    samples = np.column_stack([np.asarray(columns[n], dtype=np.int64) for n in names])
    return SoakRun("test", ["s"], len(samples), 1.0, names, samples, {})


def _judge(columns, rate=16 * KiB, available=5 * GiB, floor=int(1.5 * GiB), nofile=1024):
    return {g.resource: g for g in judge(_run(columns), rate, floor, available, {"fds": nofile, "threads": 4096}, 1092)}


def test_an_allocator_that_grows_then_settles_passes():
    rng = np.random.default_rng(1)
    n = 1092
    settle = 100 * MiB * (1 - np.exp(-np.arange(n) / 60))          # grows fast, settles well before half-way
    chunks = np.where(np.arange(n) > 800, 2 * MiB, 0)               # one late arena chunk
    uss = 200 * MiB + settle + chunks + rng.normal(0, 256 * KiB, n)
    growth = _judge({"uss": uss})["uss"]
    assert not growth.failed, growth.line(1092)


def test_a_64_kib_per_cycle_leak_fails_with_its_rate_and_images_left():
    rng = np.random.default_rng(2)
    n = 300
    uss = 200 * MiB + 64 * KiB * np.arange(n) + rng.normal(0, 512 * KiB, n)
    growth = _judge({"uss": uss}, available=5 * GiB)["uss"]
    assert growth.failed and 60 * KiB < growth.low <= growth.per_cycle <= growth.high < 68 * KiB
    expected_images = (5 * GiB - 1.5 * GiB) / (growth.per_cycle * 1092)
    assert growth.images_left == pytest.approx(expected_images)
    assert "limit 16.0 KiB" in growth.line(1092)
    assert "the memory floor (1.5 GiB, 3.5 GiB above it now)" in growth.line(1092)


def test_a_descriptor_every_10_cycles_fails_and_one_late_descriptor_does_not():
    n = 200
    cycles = np.arange(n)
    verdicts = _judge({"fds": 11 + cycles // 10, "threads": 4 + (cycles > 170)})
    fds, threads = verdicts["fds"], verdicts["threads"]
    assert fds.failed and fds.per_cycle == pytest.approx(0.1, abs=0.005)
    assert fds.images_left == pytest.approx((1024 - (11 + (n - 1) // 10)) / (fds.per_cycle * 1092))
    assert "the descriptor limit (RLIMIT_NOFILE 1,024" in fds.line(1092)
    assert not threads.failed, threads.line(1092)


def test_pss_is_shown_but_not_judged():
    n = 200
    pss = 100 * MiB + 64 * KiB * np.arange(n)         # e.g. other processes unmapping shared libraries
    growth = _judge({"pss": pss})["pss"]
    assert not growth.failed and growth.limit is None and "not judged" in growth.line(1092)


def test_the_fit_thins_a_long_run_and_keeps_its_slope():
    values = 7 * np.arange(50_000)
    slope, low, high = fit_growth(values, 25_000)
    assert slope == pytest.approx(7) and low == pytest.approx(7) and high == pytest.approx(7)


# ------------------------------------------------------------------ the leak fault

def test_leak_fault_options_and_bad_values():
    assert parse_fault("leak=mem:64KiB,leak=fd:0.1") == {"leak_bytes": 64 * KiB, "leak_fds": 0.1}
    for bad in ("leak=mem:0", "leak=mem:2GiB", "leak=mem:lots", "leak=fd:0", "leak=fd:nan", "leak=fd:101",
                "leak=cpu:1"):
        with pytest.raises(ConfigError, match=rf"--fault '{bad}': expected leak=mem:SIZE \(up to 1GiB\) or "
                                              r"leak=fd:PER_RELEASE \(up to 100\)"):
            parse_fault(bad)


LEAK_CHILD = """
import psutil
from harness.backends.faults import FaultInjectionContext
me = psutil.Process()
before_fds, before_uss = me.num_fds(), me.memory_full_info().uss
for i in range(40):
    ctx = FaultInjectionContext("subgraph 0 (block 0 self_attn)", leak_bytes=256 * 1024, leak_fds=0.1)
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

    run = run_soak("onnxruntime", manifest, {}, MIN_CYCLES, Counting("/"))
    assert run.cycles == MIN_CYCLES == Counting.reads and run.tripped is None
    assert [s.split("(")[1] for s in run.subgraphs] == ["block 0 self_attn)", "block 0 cross_attn)", "block 0 ffn)"]
    assert (run.series("fds") == run.series("fds")[0]).all(), "a clean cycle leaves no descriptor open"
    with pytest.raises(ConfigError, match=f"--soak-cycles 10: the gate needs at least {MIN_CYCLES} cycles"):
        run_soak("onnxruntime", manifest, {}, 10, ResourceSampler("/"))


# ------------------------------------------------------------------ the field reports

def test_the_gate_in_its_shortest_run_fails_every_rate_the_field_reports_give():
    """boards/data/lifecycle-field-reports.toml: each reported leak per cycle (memory, descriptors) is
    failed within MIN_CYCLES cycles at the default limits, and the default length (one board image)
    outlasts every reported number of cycles to failure."""
    from harness.backends.board_profile import load_board_profile
    from harness.cli.options import OPTIONS
    from harness.core.schema import read_toml
    from harness.core.sizes import parse_size
    reports = read_toml(REPO_ROOT / "boards/data/lifecycle-field-reports.toml", "field reports")["report"]
    assert len(reports) >= 4
    rate = parse_size(OPTIONS["soak_memory_rate"].default)
    board_image = load_board_profile().get("spectrum_28.lifecycle_invocations", int)
    cycles = np.arange(MIN_CYCLES)
    rng = np.random.default_rng(3)
    for report in reports:
        owner_repo, number = report["thread"].split("#")
        assert report["source"] == f"https://github.com/{owner_repo}/issues/{number}"
        for key in ("leak_per_cycle_bytes", "leak_per_run_bytes"):
            if key in report:
                uss = 100 * MiB + report[key] * cycles + rng.normal(0, 256 * KiB, MIN_CYCLES)
                assert _judge({"uss": uss}, rate=rate)["uss"].failed, report["thread"]
        if "fds_per_cycle" in report:
            fds = 11 + np.floor(report["fds_per_cycle"] * cycles)
            assert _judge({"fds": fds})["fds"].failed, report["thread"]
        if "cycles_to_failure" in report:
            assert board_image > report["cycles_to_failure"], report["thread"]
