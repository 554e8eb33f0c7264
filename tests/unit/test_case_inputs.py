"""A golden case becomes run settings in one place (harness.gates.cases.case_inputs): compare-toolkits,
accuracy and calibration capture render a case as its golden was rendered, sampler and text
embeddings included, and a model without a prompt encoder (Anima) runs through `--case`."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.gates.cases import find_case, golden_dir_for
from harness.gates.compare_toolkits import image_rows
from harness.model.bundle import load_bundle
from harness.model.config import REPO_ROOT
from harness.partition.onnx_export import ExportSettings, export_partition

ANIMA_SHAPED = REPO_ROOT / "models" / "anima-shaped"


def _harness(*args, cwd):
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)})


def test_compare_toolkits_renders_the_spectrum_case_with_its_sampler(tmp_path):
    """The image part judged seven-spectrum's Euler render against its Spectrum golden (SSIM 0.929)."""
    bundle = load_bundle(REPO_ROOT / "models" / "embedded")
    case = find_case(golden_dir_for(bundle.cfg.name), "seven-spectrum")
    partition = tmp_path / "float16"
    export_partition(bundle.weights, bundle.cfg, partition, ExportSettings(precision="float16"))
    rows = image_rows(bundle, {"float16": partition}, [case], backend="onnxruntime")
    assert rows[0]["versions"]["float16"]["ssim"] >= case.ssim_min, rows


@pytest.fixture(scope="module")
def anima_fp32(tmp_path_factory):
    bundle = load_bundle(ANIMA_SHAPED)
    out = tmp_path_factory.mktemp("anima") / "fp32"
    export_partition(bundle.weights, bundle.cfg, out, ExportSettings(precision="float32"))
    return out


def test_accuracy_runs_a_model_without_prompt_encoder_through_its_case(anima_fp32, tmp_path):
    done = _harness("accuracy", "--model-dir", ANIMA_SHAPED, "--partition", anima_fp32, "--reference",
                    anima_fp32, "--case", "a", "--steps", "2", "--out", tmp_path / "acc", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    run = json.loads((tmp_path / "acc" / "run.json").read_text())
    assert run["status"] == "ok" and run["steps"]["total"] == 2


def test_accuracy_without_a_case_names_the_option_to_give(anima_fp32, tmp_path):
    done = _harness("accuracy", "--model-dir", ANIMA_SHAPED, "--partition", anima_fp32, "--out",
                    tmp_path / "acc", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: model anima-shaped has no prompt encoder here ({ANIMA_SHAPED}): give --case NAME, a golden "
        f"case of {golden_dir_for('anima-shaped') / 'cases.toml'} with its text-embedding files"]


def test_a_case_and_its_own_settings_are_not_given_twice(anima_fp32, tmp_path):
    done = _harness("accuracy", "--model-dir", ANIMA_SHAPED, "--partition", anima_fp32, "--case", "a",
                    "--seed", "4", "--out", tmp_path / "acc", cwd=tmp_path)
    assert done.returncode == 2 and "--case a decides the prompt, CFG and seed: drop --seed" in done.stderr


def test_calibration_capture_runs_a_case(anima_fp32, tmp_path):
    done = _harness("capture-calibration", "--model-dir", ANIMA_SHAPED, "--partition", anima_fp32,
                    "--case", "b", "--sampler-steps", "2", "--out", tmp_path / "cal", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    assert record["generation"]["seed"] == find_case(golden_dir_for("anima-shaped"), "b").seed
