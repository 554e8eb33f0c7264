"""Precision files (what `harness search-precision` writes and `convert --precision FILE` rebuilds
from), the board step-time prediction from boards/data/int8-ffn-saving.toml, and one linear of an
FFN kept FP16 inside an INT8 build by the real toolkit."""
from __future__ import annotations

import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from harness.core.errors import ConfigError
from harness.gates.precision_search import (
    Candidate,
    Outcome,
    board_saving,
    precision_text,
    predicted_step,
    rank_ffns,
    top_candidate,
    write_search,
)
from harness.model.config import REPO_ROOT
from harness.toolkit.precisions import quantization_for, recipe


def _write(tmp_path, text: str):
    path = tmp_path / "candidate.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("body, message", [
    ('format = "anima-precision/1"\nint8_subgraph = [2]\n', "unknown key 'int8_subgraph'"),
    ('format = "anima-precision/1"\nint8_subgraphs = [2]\nquantized_method = "tensor"\n',
     "quantized_method 'tensor' \\(choose channel, layer\\)"),
    ('format = "anima-precision/1"\nint8_subgraphs = [2]\nfloat_linears = { "5" = ["layer1"] }\n',
     "float_linears '5'"),
    ('int8_subgraphs = [2]\n', "not a precision file"),
    ('format = "anima-precision/1"\nint8_subgraphs = [2\n', "not valid TOML"),
])
def test_bad_precision_file_is_named(tmp_path, body, message):
    path = _write(tmp_path, body)
    with pytest.raises(ConfigError, match=f"--precision {re.escape(str(path))}: {message}"):
        recipe(str(path))


def test_convert_cli_refuses_a_bad_precision_file_in_one_line(tmp_path):
    path = _write(tmp_path, 'format = "anima-precision/1"\nint8_subgraphs = "all"\n')
    proc = subprocess.run([sys.executable, "-m", "harness", "convert", str(tmp_path), "--out", str(tmp_path / "o"),
                           "--precision", str(path)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode != 0
    assert "int8_subgraphs must be a list of subgraph numbers" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


def test_written_precision_file_selects_subgraphs_and_linears(embedded_fp32, tmp_path):
    from harness.partition.manifest import load_manifest
    from harness.runtime.capture import CaptureRecipe, capture_calibration
    from harness.sampling.reference_run import sample_settings
    bundle, partition = embedded_fp32
    capture_calibration(bundle, partition, tmp_path / "cal", "digit four", sample_settings(bundle, 2),
                        CaptureRecipe(["ffn"], [0, 1], ["cond"], blocks=[0, 1]))
    candidate = Candidate("c", [2, 5], {5: "layer1"}, "kl_divergence", "layer")
    path = tmp_path / "c.toml"
    path.write_text(precision_text(candidate, tmp_path / "cal"))
    entries = {e.index: e for e in load_manifest(partition).subgraphs}
    q2, q5 = (quantization_for(entries[i], str(path), None) for i in (2, 5))
    assert quantization_for(entries[8], str(path), None) is None          # block 2's FFN: not listed
    assert quantization_for(entries[3], str(path), None) is None          # block 1 self_attn
    assert q2["hybrid_float"] == ["gelu", "output"] and q5["hybrid_float"] == ["gelu", "output", "layer1"]
    assert q5["quantized_algorithm"] == "kl_divergence" and q5["quantized_method"] == "layer"
    assert q5["dataset"].endswith("05_block01_ffn.txt")                    # the file's calibration


def test_predicted_step_reproduces_the_write_up_and_orders_candidates():
    saving = board_saving()
    ffns = list(range(2, 84, 3))
    assert predicted_step(Candidate("all", ffns), saving, 28) == pytest.approx(saving["w8a8_step_s"], abs=0.01)
    assert predicted_step(Candidate("none", []), saving, 28) == saving["float16_step_s"]
    half = predicted_step(Candidate("h", ffns[:1], {ffns[0]: "layer1"}), saving, 28)
    assert half == pytest.approx(saving["float16_step_s"] - 0.5 * saving["saving_per_ffn_s"])
    cosines = {i: 1.0 - (i % 7) * 1e-4 for i in ffns}
    ranked = rank_ffns(cosines)
    assert cosines[ranked[0]] == min(cosines.values())
    best = Candidate("all", ffns, algorithm="kl_divergence", method="layer")
    top = top_candidate(ranked, 7, best, half=2)
    assert set(top.int8) == set(ranked[-9:]) and set(top.half) == set(ranked[-9:-7])    # least bad first
    assert (top.algorithm, top.method) == ("kl_divergence", "layer") and not top_candidate(ranked, 0, best).int8
    assert set(top_candidate(ranked, 7, best, half=1, keep="layer2").half.values()) == {"layer2"}


def test_the_docs_table_is_what_the_search_wrote(tmp_path):
    """search.md and `--table-from search.json` give one row per candidate, in the search's order, with
    the figures search.json holds: docs/precision.md's table is pasted from them, never typed."""
    saving, ffns = board_saving(), list(range(2, 84, 3))
    spec = _write(tmp_path, 'format = "anima-precision/1"\nint8_subgraphs = []\n')
    outcomes = [Outcome(Candidate("all", ffns, algorithm="kl_divergence"), 98.15, 0.998763, 49.1, -1.1e-3, -8.9,
                        0.999284, ffn_cosines={2: 0.999284}),
                Outcome(Candidate("none", []), 120.40, 0.999975, 65.45, 6.0e-5, 7.45, 1.0, True,
                        precision_file=str(spec)),
                Outcome(Candidate("broken", ffns[:1]), 119.61, error="toolkit crashed")]
    case = SimpleNamespace(name="seven", ssim_min=0.999908, psnr_min=58.1)
    write_search(tmp_path, outcomes, saving, tmp_path / "calibration", case)
    printed = subprocess.run([sys.executable, "-m", "harness", "search-precision", "--table-from",
                              str(tmp_path / "search.json")], capture_output=True, text=True, cwd=REPO_ROOT)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == (tmp_path / "search.md").read_text()
    rows = [line.split(" | ") for line in printed.stdout.splitlines()[2:]]
    assert [r[0].lstrip("| ") for r in rows] == ["all", "none", "broken"]
    assert rows[0][3:10] == ["kl_divergence/channel", "0.998763", "-1.10e-03", "49.10", "-8.90", "0.999284", "FAIL"]
    assert rows[1][9] == "pass" and rows[2][9] == "error" and rows[1][10].startswith("120.40 s")
    assert (tmp_path / "chosen.toml").read_text() == spec.read_text()


def test_table_from_a_file_that_is_not_a_search_is_one_line(tmp_path):
    bad = tmp_path / "search.json"
    bad.write_text('{"candidates": [{"name": 1}]}')
    proc = subprocess.run([sys.executable, "-m", "harness", "search-precision", "--table-from", str(bad)],
                          capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {bad}: not a search-precision search.json")
    assert "Traceback" not in proc.stderr


@pytest.mark.toolkit
@pytest.mark.slow
def test_one_linear_of_an_ffn_stays_float16(embedded_fp32, tmp_path, toolkit_version):
    from harness.partition.onnx_export import ExportSettings, export_partition
    from harness.runtime.capture import CaptureRecipe, capture_calibration
    from harness.sampling.reference_run import sample_settings
    from harness.toolkit.convert import ConvertSettings, convert_partition
    from harness.toolkit.layers import parse_layer_table
    bundle, partition = embedded_fp32
    capture_calibration(bundle, partition, tmp_path / "cal", "digit four", sample_settings(bundle, 2),
                        CaptureRecipe(["ffn"], [0, 1], ["cond", "uncond"], blocks=[0]))
    export_partition(bundle.weights, bundle.cfg, tmp_path / "fp32", ExportSettings(precision="float32", blocks=[0]))
    spec = tmp_path / "half.toml"
    spec.write_text(precision_text(Candidate("half", [2], {2: "layer1"}, "normal", "layer"), tmp_path / "cal"))
    result = convert_partition(tmp_path / "fp32", tmp_path / "conv",
                               ConvertSettings(version=toolkit_version, precision=str(spec), quiet=True))
    log = (tmp_path / "conv" / "build.log").read_text()
    body = log[log.index("02_block00_ffn.onnx ->"):log.index("decoder.onnx ->")]
    # The FP16 first linear fuses with the GELU after it (ConvExGelu); the second stays an INT8 Conv.
    linears = [layer for layer in parse_layer_table(body, "ffn")
               if layer.op_type.startswith("Conv") or "MatMul" in layer.op_type]
    assert [(layer.op_type, layer.data_type) for layer in linears] == [("ConvExGelu", "FLOAT16"), ("Conv", "INT8")], \
        [(layer.op_type, layer.data_type) for layer in linears]
    record = result.manifest.conversion["precision_recipe"]
    assert record["quantized_method"] == "layer" and record["int8_subgraphs"] == [2]
