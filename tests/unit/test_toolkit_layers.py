"""The layer-table parser and the CPU-fallback gate on real captured rknn-toolkit2 build logs."""
from pathlib import Path

import pytest

from harness.core.errors import ToolkitError
from harness.toolkit.layers import check_no_cpu_ops, cpu_fallbacks, parse_layer_table

LOGS = Path(__file__).resolve().parents[1] / "data" / "toolkit"


def _log(name: str) -> str:
    return (LOGS / name).read_text()


def test_constant_first_gelu_leaves_erf_on_the_cpu():
    layers = parse_layer_table(_log("2.5.0-ffn-erf-on-cpu.log"))
    assert [l.id for l in layers] == list(range(13))
    assert (layers[0].op_type, layers[0].target) == ("InputOperator", "CPU")
    assert (layers[-1].op_type, layers[-1].target) == ("OutputOperator", "CPU")
    assert cpu_fallbacks(layers) == [{"id": 6, "op": "Erf", "name": "gelu/erf", "target": "CPU"}]


def test_constant_second_gelu_fuses_on_the_npu():
    layers = parse_layer_table(_log("2.5.0-ffn-all-npu.log"))
    assert "ConvExGelu" in [l.op_type for l in layers]
    assert cpu_fallbacks(layers) == []


def test_row_without_full_name_and_decoder_reshape_on_cpu():
    layers = parse_layer_table(_log("2.5.0-decoder-reshape-on-cpu.log"))
    assert layers[1].op_type == "Conv" and layers[1].full_name == "" and layers[1].target == "NPU"
    assert cpu_fallbacks(layers) == [{"id": 9, "op": "Reshape", "name": "image-rs", "target": "CPU"}]


def test_gate_names_subgraph_and_op():
    ops = cpu_fallbacks(parse_layer_table(_log("2.5.0-ffn-erf-on-cpu.log")))
    check_no_cpu_ops({"subgraph 0 (block 0 self_attn)": []})
    with pytest.raises(ToolkitError, match=r"subgraph 2 \(block 0 ffn\): op Erf 'gelu/erf' runs on the CPU"):
        check_no_cpu_ops({"subgraph 0 (block 0 self_attn)": [], "subgraph 2 (block 0 ffn)": ops})


def test_log_without_table_names_where():
    text = _log("2.5.0-ffn-all-npu.log")
    cut = text[:text.index("Network Layer Information Table")]
    with pytest.raises(ToolkitError, match="02_block00_ffn.rknn: the build log has no"):
        parse_layer_table(cut, where="02_block00_ffn.rknn")


def test_last_table_wins():
    # A log holding two tables (e.g. two builds into one log) describes the last build.
    text = _log("2.5.0-ffn-erf-on-cpu.log") + _log("2.5.0-ffn-all-npu.log")
    assert cpu_fallbacks(parse_layer_table(text)) == []
