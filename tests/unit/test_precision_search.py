"""Precision files (what `harness search-precision` writes and `convert --precision FILE` rebuilds
from), the board step-time prediction from boards/data/int8-ffn-saving.toml, and one linear of an
FFN kept FP16 inside an INT8 build by the real toolkit."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from harness.model.config import REPO_ROOT
from harness.core.errors import ConfigError
from harness.toolkit.precisions import quantization_for, recipe
from harness.gates.precision_search import (Candidate, board_saving, precision_text, predicted_step, rank_ffns,
                                    top_candidate)


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
    from harness.runtime.capture import capture_calibration
    from harness.partition.manifest import load_manifest
    from harness.sampling.reference_run import sample_settings
    bundle, partition = embedded_fp32
    capture_calibration(bundle, partition, tmp_path / "cal", "digit four", sample_settings(bundle, 2),
                        ["ffn"], [0, 1], ["cond"], blocks=[0, 1])
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


@pytest.mark.toolkit
@pytest.mark.slow
def test_one_linear_of_an_ffn_stays_float16(embedded_fp32, tmp_path, toolkit_version):
    from harness.runtime.capture import capture_calibration
    from harness.partition.onnx_export import export_partition
    from harness.sampling.reference_run import sample_settings
    from harness.toolkit.convert import convert_partition
    from harness.toolkit.layers import parse_layer_table
    bundle, partition = embedded_fp32
    capture_calibration(bundle, partition, tmp_path / "cal", "digit four", sample_settings(bundle, 2),
                        ["ffn"], [0, 1], ["cond", "uncond"], blocks=[0])
    export_partition(bundle.weights, bundle.cfg, tmp_path / "fp32", dtype="float32", blocks=[0])
    spec = tmp_path / "half.toml"
    spec.write_text(precision_text(Candidate("half", [2], {2: "layer1"}, "normal", "layer"), tmp_path / "cal"))
    result = convert_partition(tmp_path / "fp32", tmp_path / "conv", version=toolkit_version,
                               precision=str(spec), quiet=True)
    log = (tmp_path / "conv" / "build.log").read_text()
    body = log[log.index("02_block00_ffn.onnx ->"):log.index("decoder.onnx ->")]
    # The FP16 first linear fuses with the GELU after it (ConvExGelu); the second stays an INT8 Conv.
    linears = [layer for layer in parse_layer_table(body, "ffn")
               if layer.op_type.startswith("Conv") or "MatMul" in layer.op_type]
    assert [(layer.op_type, layer.data_type) for layer in linears] == [("ConvExGelu", "FLOAT16"), ("Conv", "INT8")], \
        [(layer.op_type, layer.data_type) for layer in linears]
    record = result.manifest.conversion["precision_recipe"]
    assert record["quantized_method"] == "layer" and record["int8_subgraphs"] == [2]
