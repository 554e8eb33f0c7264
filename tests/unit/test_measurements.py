"""docs/measurements.md is what tools/measurements.py makes of docs/data/measurements.json, and a run
recorded with it (a real bin/test run's session.json, a bench_lifecycle-shaped JSON) shows on the page."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "measurements.py"
DATA = ROOT / "docs" / "data" / "measurements.json"
PAGE = ROOT / "docs" / "measurements.md"


def measurements(*args, data: Path = DATA, page: Path = PAGE) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(TOOL), "--data", str(data), "--page", str(page), *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=120)


def test_the_committed_page_is_the_committed_figures_rendered():
    done = measurements("render", "--check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_figure_changed_in_the_data_is_a_page_that_differs(tmp_path):
    data = json.loads(DATA.read_text())
    data["tiers"]["rows"][1]["wall_s"] = 99.9
    (tmp_path / "m.json").write_text(json.dumps(data))
    done = measurements("render", "--check", data=tmp_path / "m.json")
    assert done.returncode == 1 and "differs" in done.stdout
    measurements("render", data=tmp_path / "m.json", page=tmp_path / "m.md")
    assert "**99.9 s** wall" in (tmp_path / "m.md").read_text()


def test_a_bench_lifecycle_run_becomes_the_lifecycle_table(tmp_path):
    data, page = tmp_path / "m.json", tmp_path / "m.md"
    data.write_text(DATA.read_text())
    strategies = {"on-demand": (2.8, 1, 0.0), "resident": (2.0, 85, 0.0), "prefetch:2": (2.1, 2, 0.9)}
    bench = {"steps": 3, "rounds": 1, "time_scale": 0.05, "precision": "float16",
             "board_sim": {"identical_latents": True, "strategies": {
                 name: {"step_s": s, "peak_live": live, "overlap": overlap, "init_s_per_step": 0.1, "hidden_s": 0.2}
                 for name, (s, live, overlap) in strategies.items()}}}
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    done = measurements("lifecycle", "--from", tmp_path / "bench.json", "--conditions", "here, today", data=data,
                        page=page)
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert "| on-demand | 1.400 (the board's 1.391) | 1 | 0 % |" in text
    assert "| prefetch:2 | 1.050 | 2 | 90 % |" in text and "prefetch:3" not in text and "here, today:" in text


@pytest.mark.slow       # a bin/test run of its own (~5 s)
def test_a_bin_test_run_becomes_a_tier_row(tmp_path):
    artifacts = tmp_path / "artifacts"
    run = subprocess.run([str(ROOT / "bin" / "test"), "tests/unit/test_words.py", "-q", "-p", "no:cacheprovider",
                          f"--artifacts={artifacts}", f"--results=sqlite:///{tmp_path / 'r.sqlite'}"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    data, page = tmp_path / "m.json", tmp_path / "m.md"
    data.write_text(DATA.read_text())
    done = measurements("tier", "--artifacts", artifacts, "--name", "fast (both cores)", "--wall", "7.5",
                        "--cpu", "6.5", "--load", "under load", data=data, page=page)
    assert done.returncode == 0, done.stderr
    session = json.loads((artifacts / "session.json").read_text())
    [row] = [line for line in page.read_text().splitlines() if line.startswith("| fast (both cores) |")]
    assert row.startswith(f"| fast (both cores) | `bin/test tests/unit/test_words.py -q -p no:cacheprovider` | "
                          f"{session['tests']['passed']} passed | **7.5 s** wall, {session['seconds']} s of pytest, "
                          "6.5 s CPU (under load, "), row
    assert len(json.loads(data.read_text())["tiers"]["rows"]) == 3       # the row replaced, not added


@pytest.mark.slow       # a small tools/bench_site.py run of its own (~10 s)
def test_a_bench_site_log_becomes_a_row_of_the_results_site_table(tmp_path):
    log = tmp_path / "site.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(2):          # two runs appended to one log, as a timed sitting leaves it
        run = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_site.py"), "--boards", "2", "--cases", "1",
                              "--runs", "12", "--store", f"sqlite:///{tmp_path / 'r.sqlite'}"],
                             capture_output=True, text=True, env=env, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        log.write_text(log.read_text() + run.stdout if log.exists() else run.stdout)
    data, page = tmp_path / "m.json", tmp_path / "m.md"
    data.write_text(DATA.read_text())
    args = ["site", "--log", log, "--revision", "abc1234", "--label", "after", "--wall", "9.5", "--cpu", "8.25",
            "--peak", "250", "--load", "load 1-2", "--sitting", "here, today", "--note", "It held."]
    assert measurements(*args, data=data, page=page).returncode == 0
    assert measurements(*args[:-2], "--note", "It held again.", data=data, page=page).returncode == 0
    rows = json.loads(data.read_text())["site"]["rows"]
    mine = [r for r in rows if r["revision"] == "abc1234"]
    assert len(mine) == 1 and mine[0]["n"] == 2 and mine[0]["runs"] == 24, mine      # replaced, not added
    [line] = [line for line in page.read_text().splitlines() if line.startswith("| abc1234 (after) |")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1:4] == ["**9.5 s**", "8.25 s", "250.0 MiB"] and cells[-1] == "load 1-2", cells
    files, mb = re.findall(r"(\d+) files, ([\d.]+) MB", log.read_text())[-1]      # what the run printed
    assert cells[-3:-1] == [files, f"{mb} MB"], cells
    assert "here, today" in page.read_text() and "It held again." in page.read_text()
    broken = measurements("site", "--log", tmp_path / "m.md", "--revision", "x", "--label", "y", data=data, page=page)
    assert broken.returncode != 0 and broken.stderr.strip().startswith(f"error: --log {tmp_path / 'm.md'}: no line")
