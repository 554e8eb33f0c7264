"""The core-mask gate's comparison: a mask whose outputs differ by FP16 rounding passes, one that
computes something else fails, with the mask and branch named; board-sim's masks take its times."""
import numpy as np

from harness.backends.base import BackendOptions
from harness.backends.board_sim import normalize_options
from harness.gates.core_masks import MaskRow, compare_outputs, core_mask_consistency, failures
from harness.partition.manifest import load_manifest
from tests.load import Watch


def test_float16_rounding_passes_and_another_computation_fails():
    rng = np.random.default_rng(3)
    ref = [rng.standard_normal((2, 64, 64)).astype(np.float32)]
    rounded = [r.astype(np.float16).astype(np.float32) for r in ref]
    half_wrong = [r.copy() for r in ref]
    half_wrong[0][1] = rng.standard_normal((64, 64))        # one stream from another computation
    rows = [MaskRow("ffn", "0_1", *compare_outputs(rounded, ref), 1.0, 1.0),
            MaskRow("ffn", "0_1_2", *compare_outputs(half_wrong, ref), 1.0, 1.0),
            MaskRow("ffn", "2", *compare_outputs([np.full_like(ref[0], np.nan)], ref), 1.0, 1.0)]
    lines = failures(rows)
    assert len(lines) == 2 and lines[0].startswith("ffn under core mask 0_1_2: cosine 0.4")
    assert lines[1].startswith("ffn under core mask 2: cosine nan")


def test_board_sim_times_follow_the_masks(embedded_fp32):
    with Watch("board-sim's FFN run under each core mask") as watch:
        rows = core_mask_consistency(BackendOptions("board-sim", normalize_options({"time_scale": 0.05})),
                                     load_manifest(embedded_fp32[1]), masks=("0", "1", "0_1_2"))
    assert {r.branch for r in rows} == {"self_attn", "cross_attn", "ffn"}
    # onnxruntime's outputs under every mask
    assert all(r.cosine > 1 - 1e-12 and r.max_rel_err == 0 for r in rows)
    ffn = {r.mask: r for r in rows if r.branch == "ffn"}
    # [sim] multi_core_speedup 1.0: every mask takes the board's one-core time, 44.76 s / 28 x 0.05
    board = 44.76 / 28 * 0.05
    assert all(r.run_seconds > 0.8 * board for r in ffn.values()), ffn       # a pad never ends early
    watch.at_most(max(r.run_seconds for r in ffn.values()), 1.2 * board)
