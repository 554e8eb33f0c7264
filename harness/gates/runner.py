"""What the acceptance gates run, kept out of the test modules so they stay thin.

`GateRunner` is created once per pytest session and does nothing expensive until asked: it loads the
model, finds or exports the partition, and renders each golden case once (numerics and quality share
the run; for every case but the one the memory gate measures, it is the FP16 headroom gate's probed
run too). A benchmark asks for a fresh run instead. Every run's report and image land in the
artifacts folder, failed runs included.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.atomic import atomic_save_npy
from ..core.errors import HarnessError, MemoryGuardTripped, NumericsError
from ..core.imageio import save_png
from ..lifecycle.steptimes import STAGE_NAMES
from ..model.bundle import ModelBundle, load_bundle
from ..partition.manifest import (
    default_partition_dir,
    load_manifest,
    manifest_path,
    manifest_sha256,
    partition_precision,
)
from ..results.compare import slowest_subgraphs
from .cases import GoldenCase, case_inputs, run_key
from .golden import latent_preview
from .quality import QualityResult, compare, compare_latents, diff_figure

__all__ = ["GateRunner", "derived_case", "memory_case", "quality_check", "quality_line", "benchmark_info",
           "is_verdict", "numerics_coverage"]

# The errors a run ends with that are a gate's verdict on the model: the numerics check the pipeline makes on
# every output (NaN/Inf) and the memory guard's trip. Any other HarnessError (a lifecycle stage the driver
# failed, a runtime or device node missing, a partition or weights file that does not open, a runtime
# returning what its subgraph does not declare) ends the run before anything was judged: infrastructure.
VERDICTS = (NumericsError, MemoryGuardTripped)

if TYPE_CHECKING:
    from ..runtime.run import RunResult


def is_verdict(error: BaseException | None) -> bool:
    """Whether a run's error is a gate's verdict (the test fails), not infrastructure (the test errors)."""
    return isinstance(error, VERDICTS)


@dataclass
class CaseRun:
    case: GoldenCase
    result: RunResult | None
    error: HarnessError | None
    report_path: Path

    @property
    def infrastructure(self) -> bool:
        """The run ended for a reason of the board or its inputs, before any gate could judge it."""
        return self.error is not None and not is_verdict(self.error)


class GateRunner:
    def __init__(self, settings):
        self.s = settings
        self._bundle: ModelBundle | None = None
        self._partition: Path | None = None
        # keyed by run_key (what decides the render), never by a name a derived run can share
        self._runs: dict[str, CaseRun] = {}
        self._prepared = False
        self._probe = None
        # (label, total steps) -> per-step callback; the pytest plugin sets one that writes progress
        # lines to the log (harness/pytest_plugin/reporting.py).
        self.progress = None

    # -------------------------------------------------------------- model and partition
    @property
    def bundle(self) -> ModelBundle:
        if self._bundle is None:
            self._bundle = load_bundle(self.s.model_dir)
        return self._bundle

    @property
    def partition(self) -> Path:
        """The partition under test: given, or (host backends only) exported once and cached."""
        if self._partition is None:
            self._partition = self.s.partition or self._cached_export()
        return self._partition

    def used_partition(self) -> Path | None:
        """The partition if a test ran on it (None if none did): naming it must not export one."""
        return self._partition

    def _cache_path(self) -> Path:
        b = self.bundle
        return self.s.cache_dir / "partitions" / default_partition_dir(
            b.cfg, b.digest, self.s.precision, self.s.fake_quant, granularity=self.s.granularity).name

    def _cached_export(self) -> Path:
        if self.s.backend == "rknn-sim":       # the converted partition, converted on first use
            from ..runtime.converted import cached_conversion
            return cached_conversion(self.bundle, self.s.cache_dir, self.s.precision, self.s.calibration,
                                     granularity=self.s.granularity)
        if self.s.backend == "rknnlite":       # a fresh board has no toolkit: the partition shipped with the suite
            return self._shipped()
        from ..runtime.partitions import exported_partition
        return exported_partition(self.bundle, self.s.precision, self.s.fake_quant,
                                  root=self.s.cache_dir / "partitions", granularity=self.s.granularity)

    def _shipped(self) -> Path:
        """The embedded model's converted float16 partition from models/ (harness/runtime/shipped.py); any
        other model, precision or granularity needs --partition, converted on the PC."""
        from ..runtime.shipped import shipped_partition
        precision = self.s.precision if not self.s.fake_quant else f"{self.s.precision}+{self.s.fake_quant}"
        return shipped_partition(self.bundle, self.s.cache_dir, precision, self.s.granularity)

    def describe_partition(self) -> str:
        """For the report header: the partition and its manifest hash, without exporting anything."""
        try:
            path = self.s.partition or self._cache_path()
        except HarnessError as exc:
            return f"model not loadable: {exc}"
        if self.s.backend == "rknn-sim" and not self.s.partition:
            return f"converted with rknn-toolkit2 on first use under {self.s.cache_dir} ({self.s.precision})"
        if not manifest_path(path).exists():
            return f"{path} (exported on first use, {self.s.precision})"
        return f"{path}, manifest sha256 {manifest_sha256(path)[:16]}"

    @property
    def image_shape(self) -> tuple[int, int, int] | None:
        """The decoder's image [H, W, 3], so a golden of another shape is refused before the run."""
        cfg = self.bundle.cfg
        if not cfg.decoder or cfg.latent_channels != 1:
            return None
        scale = int(cfg.decoder.get("scale", 4))
        return (cfg.latent_size[0] * scale, cfg.latent_size[1] * scale, 3)

    @property
    def subgraphs(self) -> int:
        """Body subgraphs of the partition under test (84 for the branch partition of 28 blocks,
        fewer for a fused granularity)."""
        return len(load_manifest(self.partition).subgraphs)

    @property
    def manifest_hash(self) -> str:
        return manifest_sha256(self.partition)

    @property
    def golden_kind(self) -> str:
        """What the quality gate compares: the image when the partition has a decoder, else the latent."""
        return "image" if load_manifest(self.partition).decoder is not None else "latent"

    @property
    def precision(self) -> str:
        """The partition's precision as goldens name it: float16, or e.g. float16+w8a8-ffn."""
        return partition_precision(self.partition)

    # -------------------------------------------------------------- runs
    def prepare(self) -> None:
        """Everything a run needs before it is measured: weights, the verified partition and the
        backend's module, so neither a memory guard's start nor a benchmark round pays for loading."""
        from ..backends.base import backend_class
        from ..runtime.run import open_partition
        if not self._prepared:
            manifest = open_partition(self.bundle, self.partition, verify=True)
            backend_class(self.s.backend).import_runtime()     # now, not inside a measured run
            if self.s.backend == "rknn-sim":
                self._build_in_simulator(manifest)
            self._prepared = True

    def _build_in_simulator(self, manifest) -> None:
        """rknn-sim builds each model in its worker on first load (seconds each, 85 of them): do that
        here, once, so no measured step or memory guard's start includes building."""
        from ..lifecycle.split import context_for
        for entry in manifest.entries():
            ctx = context_for(self.s.backend_options, entry.label, manifest.path_of(entry))
            try:
                ctx.load(manifest.path_of(entry))
                ctx.init()
            finally:
                ctx.release()

    def run(self, case: GoldenCase, guard, steps: int | None = None, tag: str = "",
            keep: bool = True, observers=(), lifecycle: str | None = None) -> RunResult:
        """A fresh partitioned run of `case`; raises HarnessError. With keep, its report and image
        go to the artifacts (a failed run's report too); a benchmark round keeps them afterwards.
        lifecycle: this run's, instead of the suite's."""
        from ..runtime.run import RunRequest, run_partitioned  # onnx: imported by a run, not by the report header
        self.prepare()
        report = self._report_path(f"{case.name}{tag}") if keep else None
        inputs = case_inputs(case, self.bundle.cfg, self.s.golden_dir, steps)
        on_step = self.progress(f"{case.name}{tag}", inputs.settings.steps) if self.progress else None
        result = run_partitioned(
            RunRequest(self.bundle, self.partition, self.s.backend, inputs.prompt, inputs.settings,
                       backend_options=self.s.backend_options, verify=False,
                       text_embs=inputs.text_embs, lifecycle=lifecycle or self.s.lifecycle, images=self.s.images),
            guard=guard, on_step=on_step, report_path=report, observers=observers)
        if keep:
            self._save_outputs(result, f"{case.name}{tag}")
        return result

    def _report_path(self, name: str) -> Path:
        return self.s.artifacts / "runs" / f"{name}.json"

    def _save_outputs(self, result: RunResult, name: str) -> None:
        atomic_save_npy(self.s.artifacts / "runs" / f"{name}-latent.npy", result.latent)
        if result.image is not None:
            # The obtained float32 image: `harness accept-golden` promotes it without a rerun.
            atomic_save_npy(self.s.artifacts / "runs" / f"{name}-image.npy", result.image.astype(np.float32))
            save_png(result.image, self.s.artifacts / "runs" / f"{name}.png")

    def keep(self, result: RunResult, name: str) -> None:
        from ..core.atomic import atomic_write_json
        atomic_write_json(self._report_path(name), result.report)
        self._save_outputs(result, name)

    def loaded(self) -> bool:
        """Whether a test got as far as loading the model (the run summary names it only then)."""
        return self._bundle is not None

    def case_reports(self) -> dict[str, dict]:
        """{case name: run report} of the golden-case runs made so far (failed runs included)."""
        return {run.case.name: run.result.report for run in self._runs.values() if run.result is not None}

    def share(self, case: GoldenCase, result: RunResult, steps: int | None) -> bool:
        """Offer a finished run of `case` at `steps` (a benchmark round) as a shared run, so numerics,
        quality and memory judge it instead of rendering the same image again. It is found only by a
        golden case whose run key (settings and steps) is the same, and only before that key has run;
        its report is kept in the artifacts under the run's name."""
        key = run_key(case, steps)
        if key in self._runs:
            return False
        self.keep(result, case.name)
        self._runs[key] = CaseRun(case, result, None, self._report_path(case.name))
        return True

    def headroom_run(self, case: GoldenCase, guard, min_headroom: float,
                     share: bool = False) -> tuple[CaseRun, dict]:
        """A run of `case` watched by the FP16 headroom observer. Returns the run and its report's
        section. With `share`, and before the case has run, it is also the case's shared run
        (numerics and quality judge it rather than render the same image again: the observer reads
        the subgraphs' inputs and changes no output). Never for the case the memory gate measures
        (`memory_case`): the probe's own sessions must not count in that run's memory."""
        from .headroom import REPORT_KEY, HeadroomObserver, held_outside_float16, make_probe
        self.prepare()
        manifest = load_manifest(self.partition)
        if self._probe is None:      # kept for the session: probes build once, like the partition
            self._probe = make_probe(manifest, self.s.backend)
        observer = HeadroomObserver(self._probe, min_headroom, held_outside_float16(manifest))
        key = run_key(case)
        shared = share and key not in self._runs
        report = self._report_path(f"{case.name}-headroom")
        try:
            run = CaseRun(case, self.run(case, guard, tag="-headroom", observers=[observer],
                                         lifecycle=self._probed_lifecycle()), None, report)
        except HarnessError as exc:
            run = CaseRun(case, None, exc, report)
        if shared and run.result is not None:
            self.keep(run.result, case.name)
            self._runs[key] = replace(run, report_path=self._report_path(case.name))
        elif shared:        # a failed run's report is the one its run wrote
            self._runs[key] = run
        return run, observer.report_section()[REPORT_KEY]

    def _probed_lifecycle(self) -> str:
        """A probed run is never timed (its time includes the probe's) nor the memory gate's, and its outputs
        are bitwise those of an on-demand run (tests/unit/test_run_key.py): where the subgraphs are small
        enough that making their sessions is most of a run (onnxruntime, every subgraph under
        RUN_DOMINATED_BYTES: the embedded model), they stay loaded for the whole run instead of being made
        again every step. The benchmark, memory, soak and smoke gates still measure on-demand runs; on the
        board, on a simulated one and under a lifecycle of the user's own the probed run goes as the others."""
        from ..backends.onnxruntime import RUN_DOMINATED_BYTES
        if self.s.backend != "onnxruntime" or self.s.lifecycle != "on-demand":
            return self.s.lifecycle
        manifest = load_manifest(self.partition)
        small = all(manifest.path_of(e).stat().st_size < RUN_DOMINATED_BYTES for e in manifest.entries())
        return "resident" if small else self.s.lifecycle

    def unprobed_run(self, case: GoldenCase, guard) -> CaseRun:
        """A run of `case` at its own steps whose time is the pipeline's alone: the case's shared run
        when no probe watched it (in a whole session, the benchmark's last round of the memory case),
        else a fresh one. A headroom run's time includes its probe, so it is never the one returned."""
        from .headroom import REPORT_KEY
        shared = self.case_run(case, guard)
        if shared.result is None or REPORT_KEY not in shared.result.report:
            return shared
        report = self._report_path(f"{case.name}+unprobed")        # a derived run's name: no case's
        try:
            return CaseRun(case, self.run(case, guard, tag="+unprobed"), None, report)
        except HarnessError as exc:
            return CaseRun(case, None, exc, report)

    def case_run(self, case: GoldenCase, guard) -> CaseRun:
        """The one shared run of a golden case (numerics and quality both look at it)."""
        key = run_key(case)
        if key not in self._runs:
            report = self._report_path(case.name)
            try:
                self._runs[key] = CaseRun(case, self.run(case, guard), None, report)
            except HarnessError as exc:
                self._runs[key] = CaseRun(case, None, exc, report)
        return self._runs[key]


def memory_case(cases: list[GoldenCase]) -> GoldenCase:
    """The golden case whose shared run the memory gate measures: the first (in the suite's own
    order, the benchmark's last round renders it)."""
    return cases[0]


def derived_case(case: GoldenCase, what: str, **changes) -> GoldenCase:
    """A run made from a golden case with other settings (a benchmark's sampler or steps). Its name
    `<case>+<what>` is one no golden case can have ('+' is not allowed in cases.toml), so neither its
    artifacts nor its report can be taken for a case's."""
    return replace(case, name=f"{case.name}+{what}", **changes)


def quality_check(case: GoldenCase, obtained: np.ndarray, golden: np.ndarray, artifacts: Path,
                  kind: str = "image") -> tuple[QualityResult, Path | None]:
    """SSIM/PSNR (and cosine for latents) against the golden; on failure write obtained, golden and a
    diff heat map (latents: their channels tiled, scaled by the golden's range)."""
    q = compare(obtained, golden) if kind == "image" else compare_latents(obtained, golden)
    if q.passes(case.ssim_min, case.psnr_min, case.cosine_min):
        return q, None
    if kind == "latent":
        obtained, golden = latent_preview(np.asarray(obtained).reshape(golden.shape), golden), latent_preview(golden)
    figure = diff_figure(obtained, golden, artifacts / "quality" / f"{case.name}-diff.png",
                         f"{case.name}: obtained vs golden {kind}", result=q)
    save_png(obtained, artifacts / "quality" / f"{case.name}-obtained.png")
    save_png(golden, artifacts / "quality" / f"{case.name}-golden.png")
    return q, figure


def quality_line(case: GoldenCase, q: QualityResult) -> str:
    """One line per judged case: the metrics, thresholds and margins (measured minus threshold)."""
    m = q.margins(case.ssim_min, case.psnr_min, case.cosine_min)
    parts = [f"SSIM {q.ssim:.7f} (min {case.ssim_min}, margin {m['ssim']:+.2e})",
             f"PSNR {q.psnr:.2f} dB (min {case.psnr_min}, margin {m['psnr_db']:+.2f})"]
    if "cosine" in m:
        parts.append(f"cosine {q.cosine:.8f} (min {case.cosine_min}, margin {m['cosine']:+.2e})")
    verdict = "pass" if q.passes(case.ssim_min, case.psnr_min, case.cosine_min) else "FAIL"
    return f"{case.name} [{q.kind}] {verdict}: " + ", ".join(parts)


def numerics_coverage(report: dict, steps: int, subgraphs: int) -> list[str]:
    """What the numerics gate did not see in a run's report: every subgraph must have run (its output
    checked as it arrived) at every computed step and at no forecast step, whose forecast was checked
    per stream instead; [] when it saw everything."""
    sampler = report["sampler"]
    computed, forecast = sampler["computed_steps"], sampler["forecast_steps"]
    ran = {(r["step"], r["subgraph"]) for r in report["lifecycle_records"]
           if r["stage"] == "run" and r["branch"] != "decoder"}
    expected = {(s, i) for s in computed for i in range(subgraphs)}
    checks = [(len(computed) + len(forecast) == steps, f"{len(computed)} computed + {len(forecast)} forecast "
                                                       f"steps of {steps}"),
              (ran == expected, f"{len(expected - ran)} subgraph run(s) missing, {len(ran - expected)} unexpected"),
              (sampler.get("forecasts_checked", 0) == len(forecast) * len(report["streams"]),
               f"{sampler.get('forecasts_checked', 0)} forecasts checked of {len(forecast) * len(report['streams'])}")]
    return [problem for ok, problem in checks if not ok]


def benchmark_info(report: dict) -> dict:
    """The benchmark's extra_info: the board profile's tables for this run."""
    t = report["tables"]
    steps = max(len(report["step_seconds"]), 1)
    return {
        "denoise_s": report["denoise_seconds"],
        "mean_step_s": report["denoise_seconds"] / steps,
        "steps": steps,
        "core_s_per_step": t["core_per_step"],
        "lifecycle_s_per_step": {k: t["lifecycle_pass"][k] for k in STAGE_NAMES},
        "step_split_s": t["step_split"],
        "invocations": report["invocations"],
        "stage_records": report["stage_records"],
        # per computed step: Spectrum's forecast steps run no subgraph
        "slowest_subgraphs": slowest_subgraphs(report["lifecycle_records"], max(report["steps"]["computed"], 1)),
        "peak_pss_added_bytes": (report.get("memory") or {}).get("run_peak_pss_added_bytes"),
        "lifecycle": report.get("lifecycle_counters", {}),     # strategy, hits, peak live, overlap
        # Spectrum: computed and forecast steps counted apart; a pass happens on computed steps only.
        "sampler": (report.get("sampler") or {}).get("name", "flow-euler"),
        "computed_steps": report["steps"]["computed"],
        "forecast_steps": report["steps"]["forecast"],
        "computed_step_s": t["per_image"]["per_computed_step"],
        "forecast_step_s": t["per_image"]["per_forecast_step"],
        "image_s": t["per_image"]["denoise"],
    }
