"""Gate: each golden case's image against its golden FP16 image by SSIM and PSNR.

With --update-goldens the case's golden is written instead and the test is reported as skipped
("goldens written"): an update run judged nothing, so it must not read as a passed gate."""
import pytest

from harness.gates import quality_check
from harness.golden import GoldenError, GoldenStore, relative_to_repo
from harness.pytest_plugin.state import GOLDEN_UPDATES, QUALITY_RESULTS, append_to

pytestmark = [pytest.mark.npu, pytest.mark.quality]


def test_image_matches_golden(golden_case, gate_runner, npu_guard, suite, artifacts, record_property, request):
    case = golden_case
    store = GoldenStore(suite.golden_dir)
    try:
        if suite.update_goldens:      # refuse a quantised golden before spending a run on it
            store.check_writable(case, gate_runner.precision, suite.force_goldens)
        else:
            golden, _ = store.load(case)
    except GoldenError as exc:
        pytest.fail(str(exc), pytrace=False)
    run = gate_runner.case_run(case, npu_guard)
    if run.error is not None:
        pytest.fail(f"{case.name}: no image to judge: {run.error}", pytrace=False)
    image = run.result.image
    if image is None:
        pytest.fail(f"{case.name}: the partition has no decoder model, so there is no image to compare",
                    pytrace=False)
    if suite.update_goldens:
        meta = {"backend": suite.backend, "manifest_hash": gate_runner.manifest_hash,
                "model": gate_runner.bundle.cfg.name, "partition": relative_to_repo(gate_runner.partition)}
        written, why = store.update(case, image, meta, precision=gate_runner.precision, force=suite.force_goldens)
        append_to(request.config, GOLDEN_UPDATES, (case.name, written, why))
        # Nothing was compared: an update run must not count as a passed quality gate. A skip keeps
        # the update command's exit code 0 and says in the summary (and the JUnit XML) what it did.
        if written:
            pytest.skip(f"goldens written, not compared: {store.paths(case)['npy']}")
        pytest.skip(f"golden {why}")
    q, diff = quality_check(case, image, golden, artifacts)
    record_property("ssim", q.ssim)
    record_property("psnr", q.psnr)
    append_to(request.config, QUALITY_RESULTS, {
        "case": case.name, "ssim": q.ssim, "psnr": q.psnr, "ssim_min": case.ssim_min,
        "psnr_min": case.psnr_min, "passed": diff is None, "golden_npy": str(store.paths(case)["npy"]),
        "obtained_npy": str(suite.artifacts / "runs" / f"{case.name}-image.npy")})
    assert diff is None, (f"{case.name}: {q.summary()} fails SSIM >= {case.ssim_min} / PSNR >= "
                          f"{case.psnr_min} dB; obtained, golden and diff heat map: {diff}")
