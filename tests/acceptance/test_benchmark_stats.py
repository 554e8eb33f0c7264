"""pytest-benchmark speaks the suite's figure: two benchmark gate sessions (three sampler steps on the
embedded model, the simulated board) write their --benchmark-json, and `pytest-benchmark compare` on
the two files compares the denoise step: its rounds are the steps, its mean the run's mean step time,
not one round's whole duration (stddev 0)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.model.config import REPO_ROOT

# ~10 s per gate session here; timed only in that nothing here reads time against another session
pytestmark = [pytest.mark.slow, pytest.mark.results]

STEPS = 3


def session(pytester, tmp_path, name: str) -> dict:
    out = tmp_path / f"{name}.json"
    result = pytester.runpytest(
        "-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={REPO_ROOT}", "-p", "no:cacheprovider",
        str(REPO_ROOT / "tests/acceptance/test_benchmark.py"), f"--bench-steps={STEPS}", "--cases=seven",
        f"--artifacts={tmp_path / name}", f"--results=sqlite:///{tmp_path / 'results.sqlite'}",
        f"--cache-dir={tmp_path / 'cache'}", f"--benchmark-json={out}")
    assert result.ret == 0, result.outlines[-20:]
    return json.loads(out.read_text())


def test_pytest_benchmark_compare_compares_the_step_time(pytester, tmp_path):
    saved = [session(pytester, tmp_path, name) for name in ("first", "second")]
    for data in saved:
        (bench,) = data["benchmarks"]
        stats, info = bench["stats"], bench["extra_info"]
        assert stats["rounds"] == STEPS * len(info["round_s"]) and stats["stddev"] > 0, stats
        assert stats["mean"] == pytest.approx(info["mean_step_s"], rel=1e-6), (stats, info["mean_step_s"])
        assert stats["total"] < sum(info["round_s"]), "a round holds its steps and more"
    files = [str(tmp_path / f"{name}.json") for name in ("first", "second")]
    # the table goes to stderr (pytest-benchmark's logger), its rows one a file
    done = subprocess.run([str(Path(sys.executable).parent / "pytest-benchmark"), "compare", "--columns=mean,rounds",
                           "--sort=name", *files], capture_output=True, text=True, check=True)
    shown = done.stdout + done.stderr
    rows = [line for line in shown.splitlines() if "test_denoise_time" in line]
    assert len(rows) == 2, shown
    unit = re.search(r"\(time in (\w+)\)", shown).group(1)
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    for row in rows:
        mean, rounds = re.search(r"test_denoise_time \(\S+\)\s+([\d.,]+) .*?(\d+)\s*$", row).groups()
        assert int(rounds) == STEPS, row
        assert any(float(mean.replace(",", "")) == pytest.approx(d["benchmarks"][0]["stats"]["mean"] * scale, rel=1e-3)
                   for d in saved), (row, unit)
