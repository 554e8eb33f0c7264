"""`harness probe-memory` on the simulated board: real scaled memory per context, stops at the gate,
releases everything, writes its table, plot and verdict."""
import csv
import json

from harness.backends import live_contexts
from harness.cli.main import main
from harness.model.bundle import load_bundle
from harness.partition.onnx_export import export_partition
from tests.helpers import make_random_model_dir


def test_probe_on_the_simulated_board_stops_at_the_gate(tmp_path, capsys):
    model = load_bundle(make_random_model_dir(tmp_path / "model", seed=8))
    export_partition(model.weights, model.cfg, tmp_path / "p", dtype="float32")
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
