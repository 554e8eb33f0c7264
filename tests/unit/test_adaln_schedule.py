"""The AdaLN modulations are computed for the whole known schedule before the first step: each
layer is read from the mapped checkpoint once per run, not once per step, and the latent still
matches the monolithic FP32 reference."""
import dataclasses
import os
from collections import Counter
from collections.abc import Mapping

import numpy as np
import pytest

from harness.runtime.run import RunRequest, run_partitioned
from harness.sampling.reference_run import sample_reference, sample_settings
from tests.helpers import export_fp32, random_bundle

STEPS = 3
# Four blocks: each claim here holds per layer and per step (what a run costs grows with the depth).
BLOCKS = 4


class CountingWeights(Mapping):
    """The bundle's real host weights, counting each key's reads."""

    def __init__(self, weights):
        self.weights, self.reads = weights, Counter()

    def __getitem__(self, key):
        self.reads[key] += 1
        return self.weights[key]

    def __iter__(self):
        return iter(self.weights)

    def __len__(self):
        return len(self.weights)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return random_bundle(tmp_path_factory, seed=6, blocks=BLOCKS)


def test_each_adaln_layer_is_read_once_per_run(model, tmp_path_factory):
    partition = export_fp32(model, tmp_path_factory)
    counting = CountingWeights(model.weights)
    bundle = dataclasses.replace(model, weights=counting)
    settings = sample_settings(model, steps=STEPS)
    run = run_partitioned(RunRequest(bundle, partition, "onnxruntime", "the number 3", settings))
    adaln = {k: n for k, n in counting.reads.items() if ".adaln_modulation_" in k and k.startswith("blocks.")}
    assert len(adaln) == 6 * model.cfg.blocks
    assert set(adaln.values()) == {1}, f"read per step instead of once: {sorted(set(adaln.values()))}"
    ref = sample_reference(model, ["the number 3"], [settings.seed], settings)
    assert np.abs(run.latent - ref).max() <= 1e-4


class BlasThreadsSeen(CountingWeights):
    """Records how many BLAS threads were allowed whenever the host math reads a tensor."""

    def __getitem__(self, key):
        from threadpoolctl import threadpool_info
        self.reads[max((i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"), default=1)] += 1
        return self.weights[key]


def test_host_math_runs_on_one_blas_thread(model, tmp_path_factory):
    from threadpoolctl import threadpool_info, threadpool_limits
    with threadpool_limits(limits=os.cpu_count(), user_api="blas"):   # the unit tests' one thread (conftest) lifted
        if max((i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"), default=1) < 2:
            pytest.skip("BLAS has one thread here already: nothing to limit")
        partition = export_fp32(model, tmp_path_factory)
        seen = BlasThreadsSeen(model.weights)
        run_partitioned(RunRequest(dataclasses.replace(model, weights=seen), partition, "onnxruntime",
                                   "the number 3", sample_settings(model, steps=2)))
    assert set(seen.reads) == {1}, f"host GEMMs ran with BLAS threads {sorted(seen.reads)}"


def test_precomputed_latent_is_bitwise_the_per_step_one(model, tmp_path_factory, monkeypatch):
    from harness.partition.onnx_export import ExportSettings, export_partition
    from harness.runtime.pipeline import PartitionedPipeline
    float16 = tmp_path_factory.mktemp("float16")
    export_partition(model.weights_source, model.cfg, float16, ExportSettings(precision="float16"))
    settings = sample_settings(model, steps=STEPS)
    ahead = run_partitioned(RunRequest(model, float16, "onnxruntime", "the number 3", settings)).latent
    monkeypatch.setattr(PartitionedPipeline, "precompute_modulations", lambda self, sigmas, step=0: None)
    per_step = run_partitioned(RunRequest(model, float16, "onnxruntime", "the number 3", settings)).latent
    np.testing.assert_array_equal(ahead, per_step)
