"""Anima NPU acceptance harness: the partitioned DiT, its backends, lifecycle records and gates.

The public API; everything else is internal to its module. Names are imported on first use
(PEP 562), so a process that needs one backend (a prefetch worker) does not pay for the rest.
"""
from .core.lazy import lazy_getattr

# The one place the suite's version is written (pyproject.toml reads it): the venv holds the
# dependencies only, so there is no installed distribution to ask.
__version__ = "0.1.0"

_WHERE = {
    "BRANCHES": "model.config", "ModelConfig": "model.config", "load_model_dir": "model.config",
    "load_profile": "model.config",
    "HarnessError": "core.errors", "ConfigError": "core.errors", "WeightsError": "core.errors",
    "ManifestError": "core.errors",
    "BackendError": "core.errors", "NumericsError": "core.errors", "MemoryGuardTripped": "core.errors",
    "sample_reference": "sampling.reference_run", "sample_settings": "sampling.reference_run",
    "MemoryGuard": "memory.guard",
    "ModelBundle": "model.bundle", "load_bundle": "model.bundle",
    "Manifest": "partition.manifest", "load_manifest": "partition.manifest",
    "inspect_partition": "partition.manifest", "export_partition": "partition.onnx_export",
    "RunRequest": "runtime.run", "RunResult": "runtime.run", "run_partitioned": "runtime.run",
    "expected_shapes": "model.weights", "load_weights": "model.checkpoint", "Checkpoint": "model.checkpoint",
}

__all__ = list(_WHERE)
__getattr__ = lazy_getattr(__name__, _WHERE)
