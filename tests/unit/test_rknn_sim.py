"""The rknn-sim backend: converted subgraphs rebuilt and run by rknn-toolkit2's PC simulator in one
long-lived worker, checked against the .rknn files they stand for."""
import json
import shutil

import numpy as np
import pytest

from harness.backends import create_context, live_contexts
from harness.backends.base import BackendOptions
from harness.core.errors import BackendError
from harness.gates.accuracy import cosine
from harness.partition.manifest import load_manifest

pytestmark = pytest.mark.toolkit


@pytest.fixture(scope="module")
def converted(toolkit_version, embedded_fp32, tmp_path_factory):
    """Blocks 0-1 and the decoder of the embedded model, FP32 export -> FP16 .rknn."""
    from harness.partition.onnx_export import ExportSettings, export_partition
    from harness.toolkit.convert import ConvertSettings, convert_partition
    bundle, _ = embedded_fp32
    root = tmp_path_factory.mktemp("sim")
    export_partition(bundle.weights, bundle.cfg, root / "fp32", ExportSettings(precision="float32", blocks=[0, 1]))
    convert_partition(root / "fp32", root / "float16",
                      ConvertSettings(version=toolkit_version, allow_cpu_ops=True, quiet=True))
    return root


def _inputs(entry, seed=0):
    rng = np.random.default_rng(seed + entry.index)
    return [rng.standard_normal(spec.shape).astype(np.float32) for spec in entry.inputs]


def _run(entry, manifest, inputs):
    ctx = create_context(BackendOptions("rknn-sim"), entry.label)
    try:
        ctx.load(manifest.path_of(entry))
        ctx.init()
        return ctx.run(inputs)
    finally:
        ctx.release()


def test_every_subgraph_matches_onnxruntime_fp32(converted):
    import onnxruntime as ort
    sim, source = load_manifest(converted / "float16"), load_manifest(converted / "fp32")
    for entry, src in zip(sim.entries(), source.entries()):
        inputs = _inputs(entry)
        out = _run(entry, sim, inputs)
        session = ort.InferenceSession(str(source.path_of(src)), providers=["CPUExecutionProvider"])
        ref = session.run(None, {i.name: a for i, a in zip(session.get_inputs(), inputs)})
        assert out[0].dtype == np.float32 and out[0].shape == ref[0].shape, entry.label
        assert cosine(out[0], ref[0]) >= 0.9999, entry.label        # the decoder's input is 4-D (NCHW)
    assert live_contexts() == 0


def test_a_model_is_built_once_per_session(converted, toolkit_version):
    from harness.backends.rknn_sim import worker_for
    sim = load_manifest(converted / "float16")
    entry = sim.subgraphs[2]
    first = _run(entry, sim, _inputs(entry))
    models = worker_for(toolkit_version).stats()["models"]
    again = _run(entry, sim, _inputs(entry))          # load/init/release again, as every step does
    assert worker_for(toolkit_version).stats()["models"] == models
    np.testing.assert_array_equal(first[0], again[0])


def test_a_rknn_that_is_not_what_its_source_builds_is_refused(converted, tmp_path):
    """Block 0's FFN .rknn replaced by block 1's (same size, other weights), with a manifest that
    vouches for it: the checksum cannot see it, the rebuild comparison does."""
    part = tmp_path / "float16"
    shutil.copytree(converted / "float16", part)
    data = json.loads((part / "manifest.json").read_text())
    victim = next(e for e in data["subgraphs"] if e["index"] == 2)
    donor = next(e for e in data["subgraphs"] if e["index"] == 5)
    shutil.copyfile(part / donor["file"], part / victim["file"])
    victim["sha256"], victim["bytes"] = donor["sha256"], donor["bytes"]
    (part / "manifest.json").write_text(json.dumps(data))
    sim = load_manifest(part)
    sim.verify()                                       # consistent: checksums alone pass it
    entry = sim.subgraphs[2]
    with pytest.raises(BackendError, match=r"rknn-sim: subgraph 2 \(block 0 ffn\): load failed: verify: "
                                           r"the model built from 02_block00_ffn.onnx .* does not match"):
        _run(entry, sim, _inputs(entry))
    assert live_contexts() == 0


def test_a_changed_source_onnx_is_refused(converted, tmp_path):
    src = tmp_path / "fp32"
    shutil.copytree(converted / "fp32", src)
    part = tmp_path / "float16"
    shutil.copytree(converted / "float16", part)
    data = json.loads((part / "manifest.json").read_text())
    data["conversion"]["source"]["directory"] = str(src)
    (part / "manifest.json").write_text(json.dumps(data))
    (src / "01_block00_cross_attn.onnx").write_bytes((src / "01_block00_cross_attn.onnx").read_bytes() + b"\0")
    sim = load_manifest(part)
    with pytest.raises(BackendError, match="01_block00_cross_attn.onnx has changed since"):
        _run(sim.subgraphs[1], sim, _inputs(sim.subgraphs[1]))
