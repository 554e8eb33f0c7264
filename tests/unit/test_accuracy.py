"""Per-subgraph accuracy analysis on the embedded model: FP16 and FP32 partitions against the FP32
reference, a fake-quantised FFN found worst-first, a NaN fault named and reproduced by one command."""
import json
import subprocess
import sys

import numpy as np
import pytest

from harness.backends.base import BackendOptions
from harness.cli.main import main
from harness.gates.accuracy import analyze, cosine, max_rel_err, worst_first
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.runtime.run import RunRequest
from harness.sampling.reference_run import sample_settings

STEPS = 2


@pytest.fixture(scope="module")
def float16_partition(embedded_fp32, tmp_path_factory):
    bundle, _ = embedded_fp32
    out = tmp_path_factory.mktemp("acc") / "float16"
    export_partition(bundle.weights, bundle.cfg, out, ExportSettings(precision="float16"))
    return out


def _analyze(embedded_fp32, partition, out, backend="onnxruntime", options=None, threshold=0.9999):
    bundle, reference = embedded_fp32
    request = RunRequest(bundle, partition, backend, "digit one", sample_settings(bundle, STEPS),
                         BackendOptions(backend, options or {}))
    return analyze(request, reference, threshold, out)


def test_metrics():
    ref = np.array([1.0, -2.0, 4.0], np.float32)
    assert cosine(ref, 3 * ref) == pytest.approx(1.0)
    assert cosine(ref, -ref) == pytest.approx(-1.0)
    assert np.isnan(cosine(ref, np.array([1.0, np.nan, 4.0])))
    assert max_rel_err(ref + np.array([0, 0, 0.4], np.float32), ref) == pytest.approx(0.1)


def test_fp32_partition_matches_the_reference_and_float16_clears_the_bar(embedded_fp32, float16_partition, tmp_path):
    bundle, reference = embedded_fp32
    same, error = _analyze(embedded_fp32, reference, tmp_path / "fp32")
    assert error is None and len(same.rows) == bundle.cfg.subgraphs * STEPS
    assert min(r.cosine for r in same.rows) > 0.9999999 and max(r.max_abs_err for r in same.rows) < 1e-5
    float16, error = _analyze(embedded_fp32, float16_partition, tmp_path / "float16")
    assert error is None and float16.first_failure is None and float16.repro is None
    worst = worst_first(float16.rows)[0]
    print(f"FP16 vs FP32, {STEPS} steps: worst {worst.label} step {worst.step} cosine {worst.cosine:.7f}")
    assert 0.9999 <= worst.cosine < 0.9999999       # FP16 rounding is seen, and is small
    saved = json.loads((tmp_path / "float16" / "accuracy.json").read_text())
    assert len(saved["rows"]) == len(float16.rows) and saved["first_failure"] is None


def test_fake_quantised_ffns_come_first_and_the_first_one_is_named(embedded_fp32, tmp_path):
    bundle, _ = embedded_fp32
    quant = tmp_path / "w8a8"
    export_partition(bundle.weights, bundle.cfg, quant, ExportSettings(precision="float16", fake_quant="w8a8-ffn"))
    analysis, _ = _analyze(embedded_fp32, quant, tmp_path / "acc")
    ranked = worst_first(analysis.rows)
    assert {r.branch for r in ranked[:bundle.cfg.blocks * STEPS]} == {"ffn"}
    first = next(r for r in analysis.rows if r.cosine < 0.9999)      # rows are in execution order
    assert analysis.first_failure == first and first.branch == "ffn"
    saved = json.loads((analysis.repro / "repro.json").read_text())
    assert saved["subgraph"] == first.subgraph and saved["step"] == first.step


def test_a_nan_fault_is_named_and_one_printed_command_reproduces_it(embedded_fp32, float16_partition, tmp_path, capsys):
    _, reference = embedded_fp32
    out = tmp_path / "acc"
    rc = main(["accuracy", "--backend", "faults", "--fault", "nan@41", "--partition", str(float16_partition),
               "--reference", str(reference), "--steps", str(STEPS), "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 1
    assert "first below 0.9999: subgraph 41 (block 13 ffn) at step 0" in " ".join(text.split())
    command = next(line for line in text.splitlines() if line.startswith("reproduce: "))[len("reproduce: "):]
    assert command.startswith("bin/harness accuracy --replay ")
    args = command.split()[1:]         # after bin/harness
    done = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert "subgraph 41 (block 13 ffn) at step 0 on faults: cosine nan" in done.stdout
    assert "still fails" in done.stdout


def test_replay_passes_once_the_fault_is_gone(embedded_fp32, float16_partition, tmp_path):
    analysis, error = _analyze(embedded_fp32, float16_partition, tmp_path, "faults", {"nan_subgraph": 5})
    assert error is not None and analysis.first_failure.subgraph == 5
    saved = analysis.repro / "repro.json"
    record = json.loads(saved.read_text())
    record["backend_options"] = {}          # the "fixed" backend
    saved.write_text(json.dumps(record))
    assert main(["accuracy", "--replay", str(analysis.repro)]) == 0


@pytest.mark.parametrize("args,fragment", [
    (["--fault", "nan@3"], "--fault nan@3: only --backend faults reads it, this run uses onnxruntime"),
    (["--backend", "rknnlite"], "--backend rknnlite: not an RK3588"),
    (["--backend", "onnxruntime", "--precision", "w8a8-ffn"], "--precision w8a8-ffn: choose float16 or float32"),
    (["--replay", "/nonexistent"], "--replay /nonexistent: no repro.json"),
])
def test_bad_options_give_one_line(args, fragment, capsys):
    assert main(["accuracy", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and len(err.splitlines()) == 1


def test_threshold_is_a_cosine(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["accuracy", "--threshold", "2"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("--threshold: must be within 0..1, got 2.0")


def test_the_reference_must_be_fp32(embedded_fp32, float16_partition, tmp_path, capsys):
    rc = main(["accuracy", "--partition", str(float16_partition), "--reference", str(float16_partition),
               "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "the reference must be a plain FP32 export" in err
