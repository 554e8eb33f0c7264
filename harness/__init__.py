"""Anima NPU acceptance harness: the partitioned DiT, its backends, lifecycle records and gates.

The public API; everything else is internal to its module. Names are imported on first use
(PEP 562), so a process that needs one backend (a prefetch worker) does not pay for the rest.
"""
import importlib

_WHERE = {
    "BRANCHES": "config", "ModelConfig": "config", "load_model_dir": "config", "load_profile": "config",
    "HarnessError": "errors", "ConfigError": "errors", "WeightsError": "errors", "ManifestError": "errors",
    "BackendError": "errors", "NumericsError": "errors", "MemoryGuardTripped": "errors",
    "sample_reference": "reference_run", "sample_settings": "reference_run", "MemoryGuard": "memory",
    "ModelBundle": "model.bundle", "load_bundle": "model.bundle",
    "Manifest": "partition.manifest", "load_manifest": "partition.manifest",
    "inspect_partition": "partition.manifest", "export_partition": "partition.onnx_export",
    "RunResult": "run", "run_partitioned": "run",
    "expected_shapes": "weights", "load_weights": "weights", "Checkpoint": "checkpoint",
}

__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value
