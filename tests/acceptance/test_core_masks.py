"""Gate: each branch kind's outputs under every NPU core mask agree with core 0's, within the FP16
gate's per-subgraph bar; the inference time per mask is recorded (harness/gates/core_masks.py).

On the board the session's rknnlite runs it; off the board a backend that honours no core mask
(onnxruntime, rknn-sim) hands it to board-sim on the model's ONNX export, whose times follow the
masks and whose outputs are onnxruntime's."""
import json

import pytest

from harness.gates.core_masks import core_mask_consistency, failures, mask_backend

pytestmark = pytest.mark.npu


def test_every_core_mask_gives_core_0s_outputs(suite, gate_runner, artifacts, record_property):
    options, manifest = mask_backend(suite.backend_options, gate_runner.partition, gate_runner.bundle,
                                     suite.cache_dir)
    backend = options.backend
    rows = core_mask_consistency(options, manifest)
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "core-masks.json").write_text(json.dumps({"backend": backend, "rows": [r.as_dict() for r in rows]},
                                                          indent=1))
    record_property("core_masks_backend", backend)
    for r in rows:
        record_property(f"{r.branch} {r.mask} run_seconds", round(r.run_seconds, 6))
    assert {r.mask for r in rows} == {"0", "1", "2", "0_1", "0_1_2"}
    bad = failures(rows)
    if bad:
        pytest.fail(f"{backend}: " + "; ".join(bad), pytrace=False)
