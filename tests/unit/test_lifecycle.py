"""Lifecycle strategies: the same numbers under every strategy, counters that say what each did,
stream batching, and every context released on success, error, guard abort and worker death."""
import dataclasses

import numpy as np
import psutil
import pytest

from harness.backends import live_contexts
from harness.backends.base import BackendOptions
from harness.cli.main import main
from harness.core.errors import BackendError, ConfigError, MemoryGuardTripped, NumericsError
from harness.lifecycle import parse_lifecycle, pinned_subset
from harness.memory.guard import MemoryGuard, MemoryReading, read_memory
from harness.partition.manifest import load_manifest
from harness.runtime.run import RunRequest, run_partitioned
from harness.sampling.reference_run import sample_settings
from tests.helpers import export_fp32, random_bundle

STEPS = 2
# 16 blocks, 48 subgraphs: still room for pinned:16 (all FFNs), subgraph 40's NaN and the guard's 30th
# reading mid-run; every claim here is per subgraph and per step (what a run costs grows with the depth).
BLOCKS = 16
SUBGRAPHS = 3 * BLOCKS
PROMPT = "the number 3"
MiB = 2 ** 20


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return random_bundle(tmp_path_factory, seed=5, blocks=BLOCKS)


@pytest.fixture(scope="module")
def partition(model, tmp_path_factory):
    # FP32: stream batching is compared with single runs to float noise, which FP16 would amplify.
    return export_fp32(model, tmp_path_factory)


def _run(model, partition, lifecycle, backend="onnxruntime", options=None, images=1, **kw):
    return run_partitioned(RunRequest(model, partition, backend, PROMPT, sample_settings(model, steps=STEPS),
                                      backend_options=BackendOptions(backend, options or {}), lifecycle=lifecycle,
                                      images=images), **kw)


@pytest.fixture(scope="module")
def runs(model, partition):
    """One run per strategy, made on first use and shared by the tests of this module."""
    cache = {}

    def get(spec):
        if spec not in cache:
            cache[spec] = _run(model, partition, spec)
        return cache[spec]
    return get


@pytest.fixture(scope="module")
def on_demand(runs):
    return runs("on-demand")


def _children() -> set[int]:
    """Prefetch workers alive under this process (multiprocessing's resource tracker, started by
    the first shared-memory block and kept for the process's life, is not one)."""
    workers = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "worker_main" in " ".join(p.cmdline()):
                workers.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return workers


@pytest.mark.parametrize("spec", ["resident", "lru:4", "pinned:16", "pinned:@0,5-7", "prefetch:2"])
def test_every_strategy_gives_the_same_latent_bit_for_bit(runs, on_demand, spec):
    before = _children()
    run = runs(spec)
    assert np.array_equal(run.latent, on_demand.latent), spec
    assert np.array_equal(run.image, on_demand.image), spec
    c = run.report["lifecycle_counters"]
    assert c["strategy"] == str(parse_lifecycle(spec)) and c["loads"] == c["releases"] and c["live"] == 0
    assert c["hits"] + c["misses"] == SUBGRAPHS * STEPS + 1          # every subgraph every step + the decoder
    assert live_contexts() == 0 and _children() <= before     # no context, no worker left behind


def test_counters_say_what_each_strategy_did(runs, on_demand):
    od = on_demand.report["lifecycle_counters"]
    assert (od["hits"], od["loads"], od["peak_live"]) == (0, SUBGRAPHS * STEPS + 1, 1)
    resident = runs("resident").report["lifecycle_counters"]
    assert (resident["hits"], resident["loads"], resident["peak_live"]) == (
        SUBGRAPHS * (STEPS - 1), SUBGRAPHS + 1, SUBGRAPHS + 1)
    lru = runs("lru:4").report["lifecycle_counters"]
    assert (lru["hits"], lru["peak_live"]) == (0, 4)      # the fixed cyclic order never hits
    pinned = runs("pinned:16").report["lifecycle_counters"]
    assert (pinned["hits"], pinned["peak_live"]) == (16 * (STEPS - 1), 17)
    # On demand, every lifecycle second is waited for: nothing is hidden.
    assert od["overlap"] == 0.0 and od["waited_s"] == pytest.approx(od["lifecycle_s"])


def test_prefetch_keeps_at_most_k_alive_and_measures_its_overlap(runs):
    c = runs("prefetch:2").report["lifecycle_counters"]
    assert c["peak_live"] == 2 and c["workers"] == 2
    # all but the first subgraph and the decoder were loaded ahead
    assert (c["hits"], c["misses"]) == (SUBGRAPHS * STEPS - 1, 2)
    assert c["lifecycle_s"] > 0 and 0.0 <= c["overlap"] <= 1.0
    assert c["hidden_s"] == pytest.approx(c["lifecycle_s"] * c["overlap"])


def test_pinned_subset_is_the_dearest_branches_or_the_named_indices(partition):
    manifest = load_manifest(partition)
    ffn = {e.index for e in manifest.subgraphs if e.branch == "ffn"}
    assert pinned_subset(parse_lifecycle("pinned:16"), manifest) <= ffn
    assert pinned_subset(parse_lifecycle("pinned:@0,5-7"), manifest) == {0, 5, 6, 7}
    with pytest.raises(ConfigError, match="no subgraph 99"):
        pinned_subset(parse_lifecycle("pinned:@99"), manifest)


@pytest.mark.parametrize("bad", ["lru:0", "lru", "prefetch:-1", "pinned:@x", "everything", "resident:2"])
def test_bad_lifecycle_values_are_one_error_naming_the_option(bad, model, capsys):
    with pytest.raises(ConfigError, match="--lifecycle"):
        parse_lifecycle(bad)
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "--model-dir", str(model.model_dir), "--backend", "onnxruntime",
              "--lifecycle", bad, "--quiet"])
    assert exit_.value.code == 2
    assert "--lifecycle" in capsys.readouterr().err


@pytest.mark.parametrize("spec", ["resident", pytest.param("prefetch:2", marks=pytest.mark.slow)])
def test_numerics_failure_releases_everything(model, partition, spec):
    before = _children()
    with pytest.raises(NumericsError, match="subgraph 40"):
        _run(model, partition, spec, backend="faults", options={"nan_subgraph": 40})
    assert live_contexts() == 0 and _children() <= before


class SwapAfter:
    """Real MemAvailable and PSS; swap scripted to grow 20 MiB after `n` readings (no swap here)."""

    def __init__(self, n):
        self.n, self.calls = n, 0

    def __call__(self):
        self.calls += 1
        real = read_memory()
        return MemoryReading(real.t, real.mem_available, 20 * MiB if self.calls > self.n else 0,
                             real.pss, real.pss_source)


@pytest.mark.parametrize("spec", ["pinned:8", "prefetch:2"])
def test_guard_abort_mid_run_releases_everything(model, partition, tmp_path, spec):
    before = _children()
    report = tmp_path / "report.json"
    with MemoryGuard("1MiB", "16MiB", interval=60, reader=SwapAfter(30)) as guard:
        with pytest.raises(MemoryGuardTripped, match="swap growth"):
            _run(model, partition, spec, guard=guard, report_path=report)
    assert live_contexts() == 0 and _children() <= before
    assert '"status": "failed"' in report.read_text()


def test_worker_dying_mid_invocation_fails_the_run_naming_the_subgraph(model, partition, tmp_path, capsys):
    before = _children()
    with pytest.raises(BackendError) as err:
        _run(model, partition, "prefetch:2", backend="faults", options={"crash_subgraph": 7})
    assert "subgraph 7 (block 2 cross_attn)" in str(err.value) and "killed by SIGKILL" in str(err.value)
    assert "\n" not in str(err.value)
    assert live_contexts() == 0 and _children() <= before


def test_stream_batching_serves_every_image_from_one_loaded_context(model, partition, on_demand):
    run = _run(model, partition, "on-demand", images=2)
    assert run.latent.shape[0] == 2 and run.images.shape[0] == 2
    two = run.report["lifecycle_records"]
    single = on_demand.report["lifecycle_records"]
    def count(recs, stage):
        return sum(1 for r in recs if r["stage"] == stage)
    # The same loads/inits/releases for 2 images as for 1: lifecycle stages per image halve.
    for stage in ("load", "init", "release"):
        assert count(two, stage) == count(single, stage)
    assert count(two, "run") == 2 * count(single, "run")     # batch axis 2: 4 stream rows, 2 calls
    # Image 0 is the single run's image (its seed), image 1 the next seed's; batching changes the
    # host math's batch size only, so the latents agree to float noise.
    assert np.abs(run.latent[:1] - on_demand.latent).max() < 1e-4
    second = run_partitioned(
        RunRequest(model, partition, "onnxruntime", PROMPT,
                   dataclasses.replace(sample_settings(model, steps=STEPS), seed=sample_settings(model).seed + 1)))
    assert np.abs(run.latent[1:2] - second.latent).max() < 1e-4
    assert np.abs(run.latent[1:2] - run.latent[:1]).max() > 0.1       # two different images


def test_prefetch_follows_spectrum_forecast_steps_with_the_same_numbers(model, partition):
    """Forecast steps run no subgraph: the fixed order still predicts the next one (subgraph 0 of
    the next computed step), so prefetch keeps hitting and the latent stays bit for bit."""
    from harness.sampling.spectrum import PRESETS, SpectrumParams
    params = SpectrumParams(**{**PRESETS["13-of-28"].as_dict(), "warmup": 2, "degree": 1})
    settings = sample_settings(model, steps=5, sampler="spectrum", spectrum=params)

    def run(spec):
        return run_partitioned(
            RunRequest(model, partition, "onnxruntime", PROMPT, settings, lifecycle=spec, images=2))
    od, pf = run("on-demand"), run("prefetch:2")
    computed = len(od.report["sampler"]["computed_steps"])
    assert computed < 5 and np.array_equal(od.latent, pf.latent)
    c = pf.report["lifecycle_counters"]
    assert (c["hits"], c["misses"]) == (SUBGRAPHS * computed - 1, 2) and c["live"] == 0
