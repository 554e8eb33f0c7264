"""Anima NPU acceptance harness: the partitioned DiT, its backends, lifecycle records and gates.

The public API; everything else is internal to its module.
"""
from .checkpoint import Checkpoint
from .config import BRANCHES, ModelConfig, load_model_dir, load_profile
from .errors import (BackendError, ConfigError, HarnessError, ManifestError, MemoryGuardTripped,
                     NumericsError, WeightsError)
from .reference_run import sample_reference, sample_settings
from .memory import MemoryGuard
from .model.bundle import ModelBundle, load_bundle
from .partition.manifest import Manifest, inspect_partition, load_manifest
from .partition.onnx_export import export_partition
from .run import RunResult, run_partitioned
from .weights import expected_shapes, load_weights

__all__ = [
    "BRANCHES", "ModelConfig", "load_model_dir", "load_profile",
    "HarnessError", "ConfigError", "WeightsError", "ManifestError", "BackendError", "NumericsError",
    "MemoryGuardTripped",
    "sample_reference", "sample_settings", "MemoryGuard", "ModelBundle", "load_bundle",
    "Manifest", "load_manifest", "inspect_partition", "export_partition", "RunResult", "run_partitioned",
    "expected_shapes", "load_weights", "Checkpoint",
]
