"""The memory guard stops a run that holds real memory, and a run whose swap grows, between
subgraph invocations, with every context released and the samples kept."""
import json

import pytest

from harness.backends import live_contexts
from harness.backends.base import BackendOptions
from harness.core.errors import MemoryGuardTripped
from harness.memory.guard import MemoryGuard, MemoryReading, read_memory
from harness.memory.residency import residency_probe
from harness.model.bundle import load_bundle
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.runtime.run import RunRequest, run_partitioned
from harness.sampling.reference_run import sample_settings
from tests.helpers import make_random_model_dir

pytestmark = pytest.mark.memory
MiB = 2 ** 20


@pytest.mark.slow
def test_guard_trips_on_real_contexts_and_releases_them_all(tmp_path, anima_block):
    """Full-width anima-2b subgraphs (FFN 128 MiB of FP32 weights each) held until MemAvailable
    falls 400 MiB below where it started."""
    _, _, manifest = anima_block
    floor = read_memory().mem_available - 400 * MiB
    with MemoryGuard(floor, 16 * MiB, interval=0.02) as guard:
        probe = residency_probe(BackendOptions("onnxruntime"), manifest, guard, limit=24)
    guard.write_samples(tmp_path / "memory.json")
    assert probe.tripped and "MemAvailable" in probe.tripped and "below floor" in probe.tripped
    assert 0 < len(probe.rows) < 24, "tripped only after holding contexts, well before the limit"
    assert probe.rows[-1].pss_added_mib > 150
    assert live_contexts() == 0
    samples = json.loads((tmp_path / "memory.json").read_text())
    assert samples["summary"]["trip_reason"] == guard.trip_reason
    print("residency probe (x86 CI box):", [(r.contexts, round(r.pss_added_mib)) for r in probe.rows],
          f"released in {probe.release_seconds:.2f} s")


class SwapAfter:
    """Real MemAvailable and PSS, with swap scripted to grow 20 MiB after `n` readings (no swap here)."""

    def __init__(self, n):
        self.n, self.calls = n, 0

    def __call__(self):
        self.calls += 1
        real = read_memory()
        swap = 20 * MiB if self.calls > self.n else 0
        return MemoryReading(real.t, real.mem_available, swap, real.pss, real.pss_source)


def test_swap_growth_stops_the_pipeline_between_invocations(tmp_path):
    bundle = load_bundle(make_random_model_dir(tmp_path / "model"))
    export_partition(bundle.weights_source, bundle.cfg, tmp_path / "p", ExportSettings(precision="float32"))
    report = tmp_path / "report.json"
    guard = MemoryGuard("1MiB", "16MiB", interval=60, reader=SwapAfter(40))
    with guard, pytest.raises(MemoryGuardTripped, match=r"swap growth 20.0 MiB over limit 16.0 MiB"):
        run_partitioned(
            RunRequest(bundle, tmp_path / "p", "onnxruntime", "digit one", sample_settings(bundle, steps=2)),
            guard=guard, report_path=report)
    assert live_contexts() == 0
    saved = json.loads(report.read_text())
    assert saved["status"] == "failed" and saved["memory"]["trip_reason"].startswith("swap growth")
    runs = [r for r in saved["lifecycle_records"] if r["stage"] == "run"]
    assert 0 < len(runs) < 84 * 2, "stopped part-way, between invocations"
