"""`harness probe-memory` on the simulated board: real scaled memory per context, stops at the gate,
releases everything, writes its table, plot and verdict."""
import csv
import json

from harness.backends import live_contexts
from harness.cli.main import main
from harness.model.bundle import load_bundle
from harness.partition.onnx_export import ExportSettings, export_partition
from tests.helpers import make_random_model_dir


def test_probe_on_the_simulated_board_stops_at_the_gate(tmp_path, capsys):
    model = load_bundle(make_random_model_dir(tmp_path / "model", seed=8))
    export_partition(model.weights, model.cfg, tmp_path / "p", ExportSettings(precision="float32"))
    out = tmp_path / "probe"
    code = main(["probe-memory", "--backend", "board-sim", "--model-dir", str(model.model_dir),
                 "--partition", str(tmp_path / "p"), "--time-scale", "0.0005", "--out", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert code == 0
    result = json.loads((out / "probe.json").read_text())
    rows = result["rows"]
    # The gate: the board passed at 16 contexts (2,144.4 MiB added), scaled by 1/64 here.
    assert result["tripped"] and "over the budget" in result["tripped"]
    assert 8 <= len(rows) < 84
    assert result["live_after"] == 0 and live_contexts() == 0
    assert [r["contexts"] for r in rows] == list(range(1, len(rows) + 1))
    assert rows[-1]["pss_added_mib"] > 2144.4 / 64
    with open(out / "probe.csv") as fh:
        assert len(list(csv.DictReader(fh))) == len(rows)
    assert (out / "probe.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    verdict = result["verdict"]
    # ~138 MiB per context in board terms (plus this runtime's own per-session cost): 84 do not fit.
    assert 125 < verdict["growth_mib_per_context"] * 64 < 200
    assert not verdict["fits"] and verdict["need_gib"] > 7.75
    assert "verdict: full residency of 84 contexts needs" in printed and "fails the memory gate" in printed


def test_a_context_ceiling_is_the_probes_finding_and_the_plan_keeps_under_it(tmp_path, capsys):
    """An rknn_init that fails after 5 live contexts (the faults backend's init-fails-after=5, in a fresh
    process: the count is the process's) is the board's ceiling: the probe reports 5 and the memory
    then, and `harness plan --residency` marks every strategy holding more than 5 live as not fitting."""
    import subprocess
    import sys

    from harness.model.config import REPO_ROOT
    model = load_bundle(make_random_model_dir(tmp_path / "model", seed=9))
    export_partition(model.weights, model.cfg, tmp_path / "p", ExportSettings(precision="float32"))
    out = tmp_path / "probe"
    done = subprocess.run([sys.executable, "-m", "harness", "probe-memory", "--backend", "faults",
                           "--fault", "init-fails-after=6", "--model-dir", str(model.model_dir), "--partition",
                           str(tmp_path / "p"), "--out", str(out), "--quiet"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "probe.json").read_text())
    # the warm-up context is the first init: five are held when the sixth init fails
    assert result["ceiling"]["contexts"] == 5 and len(result["rows"]) == 5, result
    assert "init-fails-after=6" in result["ceiling"]["error"] and result["live_after"] == 0
    assert "context ceiling: rknn_init failed after 5 contexts (PSS added " in done.stdout
    assert "fails: the runtime holds at most 5 contexts" in done.stdout
    plan_json = tmp_path / "plan.json"
    assert main(["plan", "--residency", str(out / "probe.json"), "--json", str(plan_json)]) == 0
    capsys.readouterr()
    plan = json.loads(plan_json.read_text())
    over = [c for c in plan["choices"] if c["live"] > 5]
    assert over and not any(c["fits"] for c in over)
    assert all("over the measured context ceiling (5 live contexts)" in c["note"] for c in over)
    assert plan["best"]["live"] <= 5
    assert all(c["live"] <= 5 for r in plan["space"]["rows"] for c in r["choices"] if c["fits"])
