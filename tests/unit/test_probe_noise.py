"""A probe that knows its noise (harness/memory/repeats.py, probe-board, plan --measured): each figure is
repeated until its 95 % interval is within the tolerance or its time budget ends; the figures outside say
the repeats they would need; the planner marks each input measured with its interval or assumed, and gives
its choice's seconds per image at both ends of the measured inputs' intervals."""
from __future__ import annotations

import subprocess
import sys
import tomllib

import numpy as np
import pytest

from harness.backends.board_profile import load_board_profile
from harness.memory.assumptions import board_assumptions
from harness.memory.repeats import converge
from harness.model.config import REPO_ROOT


def _samples(spread: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    return lambda: (2.0 + rng.normal(0, spread), 1.0)


def test_a_quiet_figure_stops_at_the_least_repeats_within_tolerance():
    found = converge(_samples(0.001), ("noisy", "flat"), least=5, budget_s=10)
    assert found["noisy"].repeats == 5 and found["noisy"].within and found["flat"].within
    assert found["noisy"].low < 2.0 < found["noisy"].high


def test_a_noisy_figure_repeats_to_its_budget_and_says_what_it_would_need():
    found = converge(_samples(0.5), ("noisy", "flat"), least=5, budget_s=0.0)
    noisy = found["noisy"]
    assert not noisy.within and noisy.repeats == 5 and noisy.needs > 5
    assert "NOT within 5 % (it would need about" in noisy.text()
    # sd 0.5 about 2.0 asks for about (1.96 x 0.5 / 0.1)^2 = 96 repeats; five samples estimate it roughly
    assert 20 < noisy.needs < 2000


def test_a_noisy_figure_comes_within_when_the_budget_allows():
    found = converge(_samples(0.2), ("noisy", "flat"), least=3, budget_s=30)["noisy"]
    assert found.within and found.repeats > 3


def _measured(tmp_path):
    """A probe-board file as board-sim leaves it: no device memory, intervals for every figure."""
    text = (REPO_ROOT / "tests/data/probe-board-board-sim.toml").read_text()
    path = tmp_path / "probe.toml"
    path.write_text(text)
    return path


def test_the_planner_says_measured_with_the_interval_and_memory_per_context_is_measured(tmp_path):
    assumed = board_assumptions(load_board_profile(), _measured(tmp_path))
    lines = assumed.lines()
    memory = next(line for line in lines if line.startswith("memory per context"))
    assert memory.startswith("memory per context host 138.3 MiB (device not measured): measured ("), memory
    assert "138.3 [95 % 138.2, 138.4] over 3 repeats, within 5 %" in memory
    speedup = next(line for line in lines if line.startswith("two contexts on two cores"))
    assert "NOT within 5 % (it would need about 168 repeats)" in speedup
    assert all(": measured (" in line for line in lines)


@pytest.mark.slow
@pytest.mark.timed          # a CPU burner beside it: not beside the other worker too
def test_probe_board_beside_a_cpu_burner_is_within_tolerance_or_names_the_noisy_figure(tmp_path):
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        out = tmp_path / "probe.toml"
        done = subprocess.run([sys.executable, "-m", "harness", "probe-board", "--backend", "board-sim",
                               "--budget", "5", "--out", str(out)], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=900)
    finally:
        burner.kill()
        burner.wait()
    assert done.returncode == 0, done.stderr
    data = tomllib.loads(out.read_text())
    intervals = data["intervals"]
    assert {"streams.stream_per_core_speedup", "streams.multi_core_speedup", "memory.host_mib",
            "overlap.rates_kept"} <= set(intervals)
    for name, i in intervals.items():
        named = [line for line in done.stdout.splitlines() if name + " " in line]
        assert named, (name, done.stdout)
        if i["within"]:
            assert named[0].startswith("within tolerance:") and i["high"] - i["low"] <= 0.1 * i["value"] + 1e-12
        else:
            assert any(line.startswith(f"NOT within tolerance: {name} ") and f"about {i['needs']} repeats" in line
                       for line in named), (name, done.stdout)
    plan = subprocess.run([sys.executable, "-m", "harness", "plan", "--measured", str(out)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert plan.returncode == 0 and "the choice from the measured inputs' 95 % intervals: " in \
        " ".join(plan.stdout.split()), plan.stdout
