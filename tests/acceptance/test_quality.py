"""Gate: each golden case's image against its golden FP16 image by SSIM and PSNR.

With --update-goldens the case's golden is written instead and the test is reported as skipped
("goldens written"): an update run judged nothing, so it must not read as a passed gate."""
import pytest

from harness.errors import HarnessError
from harness.gates import quality_check
from harness.golden import GoldenError, GoldenStore

pytestmark = [pytest.mark.npu, pytest.mark.quality]


def test_image_matches_golden(golden_case, gate_runner, npu_guard, suite, artifacts, record_property):
    case = golden_case
    store = GoldenStore(suite.golden_dir, image_shape=gate_runner.image_shape)
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
                "model": gate_runner.bundle.cfg.name, "partition": str(gate_runner.partition)}
        store.write(case, image, meta, precision=gate_runner.precision, force=suite.force_goldens)
        # Nothing was compared: an update run must not count as a passed quality gate. A skip keeps
        # the update command's exit code 0 and says in the summary (and the JUnit XML) what it did.
        pytest.skip(f"goldens written, not compared: {store.paths(case)['npy']}")
    try:
        q, diff = quality_check(case, image, golden, artifacts)
    except HarnessError as exc:
        pytest.fail(f"{case.name}: cannot compare with {store.paths(case)['npy']}: {exc}", pytrace=False)
    record_property("ssim", q.ssim)
    record_property("psnr", q.psnr)
    assert diff is None, (f"{case.name}: {q.summary()} fails SSIM >= {case.ssim_min} / PSNR >= "
                          f"{case.psnr_min} dB; obtained, golden and diff heat map: {diff}")
