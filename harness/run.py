"""A partitioned generation end to end: verify the manifest, denoise over the subgraphs, decode,
and keep a JSON report on disk whatever happens (a failed run writes its partial report too).
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .atomic import atomic_write_json
from .errors import HarnessError, ManifestError
from .generate import stream_contexts
from .lifecycle import LifecycleRecorder, OnDemand
from .model.bundle import ModelBundle
from .partition.manifest import load_manifest, network_settings
from .pipeline import PartitionedPipeline
from .report import summarize
from .sampler import denoise, initial_noise

__all__ = ["RunResult", "run_partitioned", "open_partition"]


@dataclass
class RunResult:
    latent: np.ndarray | None = None
    image: np.ndarray | None = None
    report: dict = field(default_factory=dict)
    recorder: LifecycleRecorder | None = None


def open_partition(bundle: ModelBundle, partition_dir: str | Path):
    """Load and verify a partition (checksums, paths, order) and that it is this model's."""
    manifest = load_manifest(partition_dir)
    manifest.verify()
    want = network_settings(bundle.cfg)
    have = manifest.model.get("network", {})
    for key, value in want.items():
        if have.get(key) != value:
            raise ManifestError(f"{manifest.file}: exported for {key}={have.get(key)!r}, but model "
                                f"{bundle.cfg.name} has {key}={value!r}")
    return manifest


def run_partitioned(bundle: ModelBundle, partition_dir: str | Path, backend: str, prompt: str,
                    settings: dict, backend_options: dict | None = None, guard=None,
                    report_path: str | Path | None = None,
                    on_step: Callable[[int], None] | None = None) -> RunResult:
    """Generate one image through the partition; `settings` as from generate.sample_settings."""
    result = RunResult(recorder=LifecycleRecorder())
    report = result.report
    report.update(status="running", error=None, backend=backend, backend_options=backend_options or {},
                  prompt=prompt, settings=dict(settings), partition=str(partition_dir), model=bundle.cfg.name)
    strategy = None
    step_walls: list[float] = []
    try:
        manifest = open_partition(bundle, partition_dir)
        report["manifest_sha256"] = hashlib.sha256(manifest.file.read_bytes()).hexdigest()
        report["export"] = manifest.export
        strategy = OnDemand(backend, result.recorder, manifest.path_of, **(backend_options or {}))
        pipeline = PartitionedPipeline(bundle, manifest, strategy,
                                       stream_contexts(bundle, [prompt], settings["cfg_scale"]),
                                       between_invocations=[guard.check] if guard else [])
        report["streams"] = pipeline.streams
        mark = [time.perf_counter()]

        def step_done(i: int) -> None:
            now = time.perf_counter()
            step_walls.append(now - mark[0])
            mark[0] = now
            if on_step:
                on_step(i)

        noise = initial_noise((1, *bundle.latent_shape), settings["seed"])
        result.latent = denoise(pipeline.velocity, noise, settings["steps"], settings["shift"],
                                settings["cfg_scale"], on_step=step_done)
        result.image = pipeline.decode(result.latent, settings["steps"])
        report["status"] = "ok"
    except HarnessError as exc:
        report.update(status="failed", error=str(exc), error_kind=type(exc).__name__)
        raise
    finally:
        if strategy is not None:
            strategy.close()        # nothing stays loaded, whatever failed
        host = pipeline.host.as_dicts() if "pipeline" in locals() else []
        report.update(summarize(result.recorder.as_dicts(), host, step_walls))
        if guard is not None:
            report["memory"] = guard.summary()
        if report_path is not None:
            atomic_write_json(report_path, report)
    return result
