"""The layer-table parser and the CPU-fallback gate on real captured rknn-toolkit2 build logs."""
from pathlib import Path

import pytest

from harness.core.errors import ToolkitError
from harness.toolkit.layers import check_no_cpu_ops, cpu_fallbacks, parse_layer_table, register_overflow

LOGS = Path(__file__).resolve().parents[1] / "data" / "toolkit"


def _log(name: str) -> str:
    return (LOGS / name).read_text()


def test_constant_first_gelu_leaves_erf_on_the_cpu():
    layers = parse_layer_table(_log("2.5.0-ffn-erf-on-cpu.log"))
    assert [layer.id for layer in layers] == list(range(13))
    assert (layers[0].op_type, layers[0].target) == ("InputOperator", "CPU")
    assert (layers[-1].op_type, layers[-1].target) == ("OutputOperator", "CPU")
    assert cpu_fallbacks(layers) == [{"id": 6, "op": "Erf", "name": "gelu/erf", "target": "CPU",
                                      "input": "(2,256,1,64)"}]


def test_constant_second_gelu_fuses_on_the_npu():
    layers = parse_layer_table(_log("2.5.0-ffn-all-npu.log"))
    assert "ConvExGelu" in [layer.op_type for layer in layers]
    assert cpu_fallbacks(layers) == []


def test_row_without_full_name_and_decoder_reshape_on_cpu():
    layers = parse_layer_table(_log("2.5.0-decoder-reshape-on-cpu.log"))
    assert layers[1].op_type == "Conv" and layers[1].full_name == "" and layers[1].target == "NPU"
    assert cpu_fallbacks(layers) == [{"id": 9, "op": "Reshape", "name": "image-rs", "target": "CPU",
                                      "input": "(64,64,1,3),(3)"}]


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


@pytest.mark.parametrize("name, line", [
    # 2.5.0 names the product and its limit; the gate ties them to the op whose input has those dims
    ("2.5.0-transpose-height-width-limit.log",
     "CPU fallback: subgraph 0 (block 0 self_attn): op Transpose 'y' runs on the CPU: input (1,8,16,513): "
     "the toolkit's height 16 x width 513 = 8208, over its limit 8192"),
    # "channel is too large" names no size: the op's largest dimension and the bisected limit
    ("2.3.2-matmul-channel-limit.log",
     "CPU fallback: subgraph 0 (block 0 self_attn): op Transpose 'y_mm_tp' runs on the CPU: dimension 16384 "
     "of (1,16384,1,64) over the toolkit's channel limit 8192 ('channel is too large ... fallback to cpu')"),
])
def test_the_cpu_fallback_gate_names_the_size_limit_that_moved_the_op(name, line):
    text = _log(name)
    ops = cpu_fallbacks(parse_layer_table(text), text)
    with pytest.raises(ToolkitError) as err:
        check_no_cpu_ops({"subgraph 0 (block 0 self_attn)": ops})
    assert str(err.value) == line
    assert register_overflow(parse_layer_table(text), text) is None


def test_register_fields_past_their_limit_are_named_with_the_ops_over_it():
    text = _log("2.5.0-softmax-register-limit.log")
    layers = parse_layer_table(text)
    found = register_overflow(layers, text)
    assert found == ("36 register field(s) written past their limit 0x1fff (8191), largest 0x3fe0 (16352); "
                     "op(s) with a dimension over 8191: Conv (1,4,64,16384),(4,4,1,1), exSoftmax13 'y' (1,4,64,16384)")
    assert register_overflow(parse_layer_table(_log("2.5.0-ffn-all-npu.log")), _log("2.5.0-ffn-all-npu.log")) is None
