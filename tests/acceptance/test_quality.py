"""Gate: each golden case against its golden FP16 result: the decoded image by SSIM and PSNR, or, for
a partition without a decoder (Anima's VAE is not in it), the final latent by SSIM over its channels,
PSNR and cosine. The line with every metric, threshold and margin goes to the terminal summary.

With --update-goldens the case's golden is written instead and the test is reported as skipped
("goldens written"): an update run judged nothing, so it must not read as a passed gate."""
from dataclasses import dataclass

import pytest

from harness.core.errors import HarnessError
from harness.gates.golden import GoldenError, GoldenStore, relative_to_repo
from harness.gates.runner import quality_check, quality_line
from harness.pytest_plugin.fixtures import judged_run
from harness.pytest_plugin.state import state_of

pytestmark = [pytest.mark.npu, pytest.mark.quality]
# The fast tier judges the first case of each sampler (the same gate on the same path; every case is
# a whole 20-step render here), the full suite and -m npu every case.
FAST_TIER_CASES = 1


@dataclass
class Judged:
    kind: str                   # what is compared: "image" or "latent"
    store: GoldenStore
    golden: object              # the golden array (None in an update run)
    refused: GoldenError | None  # a golden the case cannot be judged against: the test fails on it, no run made
    run: object                 # the case's shared run (gates.runner.CaseRun), None when refused


@pytest.fixture
def judged(request, golden_case, gate_runner, suite, npu_guard) -> Judged | None:
    """The golden checked, then (only when it can be judged against) the case's shared run, both in setup:
    a bad golden is found before a run is spent on it (the test fails on it), a run the board could not
    finish is the test's error (judged_run)."""
    if suite.require_npu and suite.npu_problem:
        return None             # the call-time --require-npu check fails the test; nothing runs here
    try:
        kind = gate_runner.golden_kind
    except HarnessError as exc:
        pytest.fail(f"{golden_case.name}: the partition does not open: {exc}", pytrace=False)
    store = GoldenStore(suite.golden_dir, image_shape=gate_runner.image_shape if kind == "image" else None, kind=kind)
    golden = None
    try:
        if suite.update_goldens:      # refuse a quantised golden before spending a run on it
            store.check_writable(golden_case, gate_runner.precision, suite.force_goldens)
        else:
            golden, _ = store.load(golden_case)
    except GoldenError as exc:
        return Judged(kind, store, None, exc, None)
    run = judged_run(request, golden_case, lambda: gate_runner.case_run(golden_case, npu_guard))
    return Judged(kind, store, golden, None, run)


def test_matches_golden(golden_case, judged, gate_runner, suite, artifacts, record_property, request):
    case = golden_case
    if judged.refused is not None:
        pytest.fail(str(judged.refused), pytrace=False)
    kind, store, golden, run = judged.kind, judged.store, judged.golden, judged.run
    if run.error is not None:
        pytest.fail(f"{case.name}: no result to judge: {run.error}", pytrace=False)
    obtained = run.result.image if kind == "image" else run.result.latent[0]
    if suite.update_goldens:
        meta = {"backend": suite.backend, "manifest_hash": gate_runner.manifest_hash,
                "model": gate_runner.bundle.cfg.name, "partition": relative_to_repo(gate_runner.partition)}
        written, why = store.update(case, obtained, meta, precision=gate_runner.precision, force=suite.force_goldens)
        state_of(request.config).golden_updates.append((case.name, written, why))
        # Nothing was compared: an update run must not count as a passed quality gate. A skip keeps
        # the update command's exit code 0 and says in the summary (and the JUnit XML) what it did.
        if written:
            pytest.skip(f"goldens written, not compared: {store.paths(case)['npy']}")
        pytest.skip(f"golden {why}")
    try:
        q, diff = quality_check(case, obtained, golden, artifacts, kind)
    except HarnessError as exc:
        pytest.fail(f"{case.name}: cannot compare with {store.paths(case)['npy']}: {exc}", pytrace=False)
    line = quality_line(case, q)
    state_of(request.config).quality_lines.append(line)
    record_property("quality_on", kind)
    record_property("ssim", q.ssim)
    record_property("psnr", q.psnr)
    if q.cosine is not None:
        record_property("cosine", q.cosine)
    state_of(request.config).quality_results.append({
        "case": case.name, "kind": kind, "ssim": q.ssim, "psnr": q.psnr, "ssim_min": case.ssim_min,
        "psnr_min": case.psnr_min, "passed": diff is None, "golden_npy": str(store.paths(case)["npy"]),
        "obtained_npy": str(suite.artifacts / "runs" / f"{case.name}-{'image' if kind == 'image' else 'latent'}.npy")})
    assert diff is None, (f"{case.name}: the gate ran on the {kind}: {q.summary()} fails SSIM >= "
                          f"{case.ssim_min} / PSNR >= {case.psnr_min} dB"
                          + (f" / cosine >= {case.cosine_min}" if kind == "latent" else "")
                          + f"; obtained, golden and diff heat map: {diff}. {line}")
