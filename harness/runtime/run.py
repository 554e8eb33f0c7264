"""A partitioned generation end to end: verify the manifest, denoise over the subgraphs, decode,
and keep a JSON report on disk whatever happens (a failed run writes its partial report too).
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..backends.base import BackendOptions, backend_class, run_options
from ..core.atomic import atomic_write_json
from ..core.errors import BackendError, HarnessError, ManifestError, StorageError
from ..core.run_report import check_run_report
from ..core.signals import stop_status
from ..lifecycle import LifecycleRecorder, make_strategy
from ..lifecycle.steptimes import summarize
from ..memory.guard import read_memory
from ..model.bundle import ModelBundle
from ..partition.manifest import load_manifest, manifest_sha256, network_settings
from ..sampling.flow import denoise, flow_sigmas
from ..sampling.reference_run import initial_latents, stream_text_embs
from ..sampling.settings import SampleSettings
from ..sampling.spectrum import sampler_velocity
from .pipeline import PartitionedPipeline

__all__ = ["RunRequest", "RunResult", "run_partitioned", "open_partition"]


def _run_memory(guard, start) -> dict:
    """Peak PSS this run added over its own start (the guard may have been armed earlier), for the
    whole process tree and for the pipeline process and its workers apart (each part's own peak)."""
    during = [s for s in guard.samples if s.t >= start.t] + [start]
    return {"run_start_pss_bytes": start.pss,
            "run_peak_pss_added_bytes": max(s.pss for s in during) - start.pss,
            "run_peak_pipeline_pss_added_bytes": max(s.pss_pipeline for s in during) - start.pss_pipeline,
            "run_peak_workers_pss_added_bytes": max(s.pss_workers for s in during) - start.pss_workers,
            "run_max_worker_processes": max(s.workers for s in during)}


def _write_report(path, report: dict) -> None:
    """A run whose report cannot be written has failed (StorageError naming the path); after a run
    that already failed, only warn: the run's own error is the one to see."""
    check_run_report(report, f"run report {path}", error=ValueError)     # a wrong shape is a bug here
    try:
        atomic_write_json(path, report)
    except (OSError, StorageError) as exc:
        if report.get("status") == "ok":
            raise StorageError(f"cannot write the run report {path}: {getattr(exc, 'strerror', None) or exc}") from None
        print(f"warning: could not write the run report {path}: {exc}", file=sys.stderr)


@dataclass
class RunResult:
    latent: np.ndarray | None = None
    image: np.ndarray | None = None
    images: np.ndarray | None = None        # [N, H, W, 3] with --images N (image is images[0])
    report: dict = field(default_factory=dict)
    recorder: LifecycleRecorder | None = None


def open_partition(bundle: ModelBundle, partition_dir: str | Path, verify: bool = True):
    """Load a partition and prove it belongs to this model: checksums, paths and order (verify),
    the network settings, the weights it was exported from, and every block present.

    A partition exported from other weights would mix old subgraphs with the current host math and
    still produce an image, so each of these is an error rather than a warning.
    """
    manifest = load_manifest(partition_dir)
    if verify:
        manifest.verify()
    want = network_settings(bundle.cfg)
    have = manifest.model.get("network", {})
    for key, value in want.items():
        if have.get(key) != value:
            raise ManifestError(f"{manifest.file}: exported for {key}={have.get(key)!r}, but model "
                                f"{bundle.cfg.name} has {key}={value!r}")
    if manifest.weights_sha256 != bundle.digest:
        raise ManifestError(f"{manifest.file}: exported from other weights (sha256 {manifest.weights_sha256[:12]}..., "
                            f"{bundle.model_dir} has {bundle.digest[:12]}...): export the partition again")
    blocks = manifest.blocks_held()
    if blocks != set(range(bundle.cfg.blocks)):
        missing = sorted(set(range(bundle.cfg.blocks)) - blocks)
        raise ManifestError(f"{manifest.file}: a partial partition ({len(blocks)} of {bundle.cfg.blocks} "
                            f"blocks; block {missing[0]} missing) cannot run the model")
    return manifest


@dataclass(frozen=True)
class RunRequest:
    """What one partitioned run is asked to do.

    settings: as from sampling.reference_run.sample_settings. verify=False skips re-hashing the
    subgraph files (for benchmark rounds after a verified first open: on the board that is gigabytes
    of sha256 that do not belong in a step time). text_embs ({stream: [1, L, C]}) replaces the prompt
    for models whose text encoder is not here. lifecycle: the context strategy (harness.lifecycle.spec).
    images: how many images are generated together (seeds seed, seed+1, ...), every stream of every
    image served by each loaded context. backend_options: the BackendOptions of `backend` (None: its
    defaults).
    """
    bundle: ModelBundle
    partition: str | Path
    backend: str
    prompt: str
    settings: SampleSettings
    backend_options: BackendOptions | None = None
    verify: bool = True
    text_embs: dict | None = None
    lifecycle: str = "on-demand"
    images: int = 1

    @property
    def options(self) -> BackendOptions:
        given = self.backend_options
        if given is None:
            return BackendOptions(self.backend)
        if given.backend != self.backend:
            raise ValueError(f"options of backend {given.backend} for a run on {self.backend}")
        return given


def run_partitioned(request: RunRequest, guard=None, report_path: str | Path | None = None,
                    on_step: Callable[[int], None] | None = None, observers=()) -> RunResult:
    """Generate one image through the partition, watched by `guard` (a MemoryGuard), its report kept
    at `report_path`. observers are called with every invocation (pipeline.Invocation): calibration
    capture and accuracy analysis watch the run itself rather than a second forward.
    """
    run = _Run(request, guard, observers)
    _clear_report(report_path)
    try:
        run.open()
        if report_path is not None:     # "running" until it ends: what a SIGKILLed run leaves behind
            atomic_write_json(report_path, check_run_report({**run.report, "pid": os.getpid()},
                                                            f"run report {report_path}", error=ValueError))
        run.denoise(on_step)
        run.report["status"] = "ok"
    except BaseException as exc:
        _record_failure(run.report, exc)
        raise
    finally:
        run.close()
        if report_path is not None:
            _write_report(report_path, run.report)
    return run.result


def _clear_report(report_path) -> None:
    """A previous run's report must not stay behind, looking current."""
    if report_path is None:
        return
    try:
        Path(report_path).unlink(missing_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot write the run report {report_path}: {exc.strerror or exc}") from None


def _record_failure(report: dict, exc: BaseException) -> None:
    """A failed run's status, error and the runtime's log; a bug, Ctrl-C or SIGTERM is its own status:
    the report must not claim to be still running."""
    if isinstance(exc, HarnessError):
        report.update(status="failed", error=str(exc), error_kind=type(exc).__name__)
        if isinstance(exc, BackendError) and exc.runtime_log:
            report["runtime_log"] = exc.runtime_log
    else:
        report.update(status=stop_status(exc), error=str(exc) or repr(exc), error_kind=type(exc).__name__)


class _Run:
    """One run's parts, in the order they are made: the report's header, the partition and the
    strategy (open), the denoising (denoise), and what the report keeps whatever happened (close)."""

    def __init__(self, request: RunRequest, guard, observers):
        self.request, self.guard, self.observers = request, guard, observers
        self.recorder = LifecycleRecorder()
        self.result = RunResult(recorder=self.recorder)
        self.report = self.result.report
        r = request
        self.report.update(status="running", error=None, backend=r.backend, backend_options=r.options.as_dict(),
                           prompt=r.prompt, settings=r.settings.as_dict(), partition=str(r.partition),
                           model=r.bundle.cfg.name, lifecycle=str(r.lifecycle), images=r.images)
        self.manifest: Any = None
        self.strategy: Any = None
        self.pipeline: PartitionedPipeline | None = None
        self.sampler_summary: Callable[[], dict] | None = None
        self.step_walls: list[float] = []
        self.start = read_memory()

    def open(self) -> None:
        """The partition checked against the model, the backend's runtime, the strategy and the pipeline."""
        r, report = self.request, self.report
        manifest = self.manifest = open_partition(r.bundle, r.partition, r.verify)
        report["weights_digest"] = {"sha256": r.bundle.digest, **(r.bundle.digest_info or {})}
        report["manifest_sha256"] = manifest_sha256(manifest.directory)
        report["export"] = manifest.export
        options = run_options(r.options)
        backend = backend_class(r.backend)
        backend.import_runtime()
        self.strategy = make_strategy(r.lifecycle, options, self.recorder, manifest)
        streams = ({s: np.repeat(c, r.images, axis=0) for s, c in r.text_embs.items()} if r.text_embs
                   else stream_text_embs(r.bundle, [r.prompt] * r.images, r.settings.cfg_scale))
        between = [lambda entry: self.guard.check()] if self.guard else []
        self.pipeline = PartitionedPipeline(r.bundle, manifest, self.strategy, streams,
                                            between_invocations=between + backend.between_invocations(options),
                                            observers=self.observers)
        report["streams"] = self.pipeline.streams

    def denoise(self, on_step) -> None:
        """The sampler over the steps, then the decoder where the partition has one."""
        r, pipeline, result = self.request, self.pipeline, self.result
        assert pipeline is not None         # open() made it
        settings = r.settings
        mark = [time.perf_counter()]

        def step_done(i: int) -> None:
            now = time.perf_counter()
            self.step_walls.append(now - mark[0])
            mark[0] = now
            if on_step:
                on_step(i)

        velocity, self.sampler_summary = sampler_velocity(pipeline, settings, pipeline.host.timed)
        pipeline.precompute_modulations(flow_sigmas(settings.steps, settings.shift)[:-1])
        noise = initial_latents(r.bundle, [settings.seed + k for k in range(r.images)])
        result.latent = denoise(velocity, noise, settings.steps, settings.shift, settings.cfg_scale,
                                on_step=step_done)
        # A partition without a decoder (Anima's Wan VAE is not part of it yet) ends at the latent.
        if self.manifest.decoder:
            decoded = pipeline.decode(result.latent, settings.steps)
            result.images = decoded if r.images > 1 else decoded[None]
            result.image = result.images[0]     # the case's own seed: what gates compare
        if pipeline.padded_to:
            self.report["streams_padded_to"] = pipeline.padded_to

    def close(self) -> None:
        """Nothing stays loaded, whatever failed; the report gets the counters, the sampler's schedule
        (and how far a failed run got), the step tables, the memory and the observers' findings."""
        report, strategy = self.report, self.strategy
        if strategy is not None:
            strategy.close()
            report["lifecycle_counters"] = strategy.stats()
        if self.sampler_summary is not None:
            report["sampler"] = self.sampler_summary()
        report.update(summarize(self.recorder.as_dicts(), self.pipeline.host.as_dicts() if self.pipeline else [],
                                self.step_walls, (report.get("sampler") or {}).get("computed_steps"),
                                hidden_s=strategy.counters.as_dict()["hidden_s"] if strategy else 0.0))
        if self.guard is not None:
            report["memory"] = {**self.guard.summary(), **_run_memory(self.guard, self.start)}
        for observe in self.observers:       # an observer with findings of its own adds them (headroom)
            section = getattr(observe, "report_section", None)
            if section is not None:
                report.update(section())
