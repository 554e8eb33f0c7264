"""`probe-board` measures what the planner assumes, and `plan --measured` plans with it.

On board-sim the probe must give back the figures the data file configures (within 5 %), also when
they are not the defaults: a board whose multi-core mask runs 1.6x as fast, and a board whose
lifecycle holds the NPU core, which the probe must notice and which must change the plan's choice.
The simulated board runs at time scale 0.1 here, so this machine's timer jitter stays small beside
its stages; the probe prints and writes board seconds.
"""
from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time
import tomllib
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from harness.backends.board_profile import DEFAULT_BOARD_DATA, fits, load_board_profile
from harness.memory.assumptions import board_assumptions
from harness.memory.board_probe import host_bytes
from harness.memory.plan_space import plan_space
from harness.memory.planner import inputs_from_profile, prefetch_wait
from harness.model.config import REPO_ROOT

PROBE = ["--backend", "board-sim", "--time-scale", "0.1", "--repeats", "8", "--window", "20"]


def _profile(tmp_path: Path, **sim) -> Path:
    """The ROCK 5C data file with some [sim] figures changed."""
    text = DEFAULT_BOARD_DATA.read_text()
    for key, value in sim.items():
        old = next(line for line in text.splitlines() if line.startswith(f"{key} = "))
        text = text.replace(old, f"{key} = {str(value).lower()}")
    path = tmp_path / "board.toml"
    path.write_text(text)
    return path


def _harness(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)


def _probe(tmp_path: Path, profile: Path) -> dict:
    out = tmp_path / "probe.toml"
    proc = _harness("probe-board", *PROBE, "--board-profile-data", profile, "--out", out)
    assert proc.returncode == 0, proc.stderr
    return tomllib.loads(out.read_text())


def _choice(profile: Path, measured: Path | None = None) -> tuple[str, str]:
    proc = _harness("plan", "--profile", profile, *(["--measured", measured] if measured else []))
    assert proc.returncode == 0, proc.stderr
    return " ".join(proc.stdout.split()), next(line for line in proc.stdout.splitlines() if line.startswith("choice:"))


@pytest.mark.slow
@pytest.mark.timed         # the probe's figures are timings and memory: not beside the other worker
def test_the_probe_gives_back_the_simulated_boards_own_figures(tmp_path):
    path = _profile(tmp_path, multi_core_speedup=1.6)
    board = load_board_profile(path)
    data = _probe(tmp_path, path)
    fixed, per_mib = fits(board).lifecycle
    measured = {"stream-per-core speedup": (data["streams"]["stream_per_core_speedup"], board.sim("streams_measured")),
                "multi-core speedup": (data["streams"]["multi_core_speedup"], 1.6),
                "lifecycle per context": (data["lifecycle"]["fit"][0], fixed),
                "lifecycle per weight MiB": (data["lifecycle"]["fit"][1], per_mib),
                "memory per context": (data["memory"]["host_mib"], board.sim("context_mib"))}
    off = {name: got / want - 1 for name, (got, want) in measured.items()}
    assert all(abs(v) <= 0.05 for v in off.values()), "; ".join(f"{k} {v:+.1%}" for k, v in off.items())
    assert data["overlap"]["lifecycle_holds_core"] is False and data["overlap"]["rates_kept"] > 1.8
    assert "not measured" in data["memory"]["device"]       # board-sim exposes no device memory


_MAP_AND_WAIT = """import mmap, pathlib, sys, time
with open(sys.argv[1], "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
    sum(m[::4096])
    pathlib.Path(sys.argv[2]).write_text(str(__import__("os").getpid()))
    time.sleep(60)
"""


def _pss_of(path) -> int:
    """This process's PSS of one mapped file: what the other process's mapping halves. The whole process's
    PSS also moves with what a busy neighbour maps of our libraries (it moved -5 MiB, not -16, beside one)."""
    return sum(m.pss for m in psutil.Process().memory_maps(grouped=True) if m.path == str(path))


def test_host_memory_stays_put_when_another_process_maps_the_same_file(disk_path):
    """Beside a busy test run, other processes map the libraries the probe has mapped, and the
    probe's share of those pages (its PSS) drops: the memory figure must not move with them."""
    shared, ready = disk_path / "shared.bin", disk_path / "ready"    # a file on a disk, as a library is
    shared.write_bytes(os.urandom(32 * 2**20))
    with open(shared, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        sum(m[::4096])
        pss, held = _pss_of(shared), host_bytes()
        # not our descendant (the shell that starts it exits), as a neighbouring test's process is not
        subprocess.run(["sh", "-c", f'"{sys.executable}" -c \'{_MAP_AND_WAIT}\' {shared} {ready} &'], check=True)
        deadline = time.monotonic() + 30
        while not ready.exists() or not ready.read_text():
            assert time.monotonic() < deadline, "the other process never mapped the file"
            time.sleep(0.05)
        try:
            pss_moved, held_moved = _pss_of(shared) - pss, host_bytes() - held
        finally:
            os.kill(int(ready.read_text()), 9)
    assert pss_moved < -12 * 2**20, pss_moved / 2**20            # the shared half left the file's PSS...
    assert abs(held_moved) < 2**20, held_moved / 2**20            # ...and the probe's figure stayed


@pytest.mark.slow
@pytest.mark.timed         # the probe's figures are timings and memory: not beside the other worker
def test_a_lifecycle_that_holds_the_core_is_found_and_changes_the_plan(tmp_path):
    path = _profile(tmp_path, lifecycle_holds_core=True)
    data = _probe(tmp_path, path)
    assert data["overlap"]["lifecycle_holds_core"] is True and data["overlap"]["rates_kept"] < 1.2
    text, assumed_choice = _choice(DEFAULT_BOARD_DATA)
    text, measured_choice = _choice(DEFAULT_BOARD_DATA, tmp_path / "probe.toml")
    assert ("holds the NPU core another context runs on (prefetch cannot hide it): "
            "measured (probe.toml: board-sim") in text
    assert measured_choice != assumed_choice, measured_choice


def test_plan_says_each_assumption_is_assumed_without_a_measurement():
    proc = _harness("plan")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    for figure in ("load/init/release does not hold the NPU core", "two contexts on two cores",
                   "one context on cores 0_1_2", "lifecycle per context", "memory per context"):
        assert f"{figure}" in text and text.split(figure, 1)[1].split(" - ")[0].count("assumed (") == 1, figure


def test_prefetch_hides_nothing_but_host_time_when_a_lifecycle_holds_the_core():
    inp = inputs_from_profile()
    beside, held = prefetch_wait(inp, 2), prefetch_wait(replace(inp, holds_core=True), 2)
    host_hidden = inp.lifecycle_total - held
    assert beside < 0.01 * inp.lifecycle_total          # the write-up's case: prefetch:2 hides almost all
    assert 0 < host_hidden <= inp.host_per_invocation * inp.subgraphs * inp.passes


def test_assumptions_read_a_measured_file_and_refuse_another(tmp_path):
    profile = load_board_profile()
    bad = tmp_path / "other.toml"
    bad.write_text('format = "something-else/1"\n')
    with pytest.raises(Exception, match="not a probe-board file"):
        board_assumptions(profile, bad)
    proc = _harness("plan", "--measured", tmp_path / "missing.toml")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"error: --measured {tmp_path / 'missing.toml'}: no such file"]
    assert plan_space(profile)["choice"]["core_mask"] == "stream-per-core"
