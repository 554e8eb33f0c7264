"""Spectrum through the partitioned pipeline: the same final latent as the monolithic reference
running Spectrum, no subgraph on a forecast step, and the schedule and step counts in the report."""
import json
from dataclasses import replace

import numpy as np
import pytest

from harness.backends import live_contexts
from harness.cli.main import main
from harness.sampling.reference_run import sample_reference, sample_settings
from harness.sampling.spectrum import PRESETS
from tests.helpers import export_fp32, random_bundle

# 6 steps, warmup 2, degree 1: CCFCFC (2 forecast steps), small enough for a unit test.
PARAMS = replace(PRESETS["13-of-28"], warmup=2, degree=1, flex=0.0)
STEPS = 6
PROMPT = "the number 3"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return random_bundle(tmp_path_factory, seed=4)


@pytest.fixture(scope="module")
def partition(model, tmp_path_factory):
    return export_fp32(model, tmp_path_factory)


@pytest.fixture(scope="module")
def settings(model):
    return sample_settings(model, steps=STEPS, sampler="spectrum", spectrum=PARAMS)


@pytest.fixture(scope="module")
def spectrum_run(model, partition, settings, tmp_path_factory):
    from harness.runtime.run import RunRequest, run_partitioned
    report = tmp_path_factory.mktemp("run") / "r.json"
    return run_partitioned(RunRequest(model, partition, "onnxruntime", PROMPT, settings), report_path=report)


def test_partitioned_spectrum_matches_the_monolithic_reference_running_spectrum(model, settings, spectrum_run):
    s = settings
    ref = sample_reference(model, [PROMPT], [s.seed], s)
    assert np.abs(spectrum_run.latent - ref).max() <= 1e-4


def test_no_subgraph_runs_on_a_forecast_step(spectrum_run, model):
    report = spectrum_run.report
    assert report["sampler"]["schedule"] == "CCFCFC"
    assert report["sampler"]["params"] == PARAMS.as_dict()
    body = [r for r in report["lifecycle_records"] if r["branch"] != "decoder"]
    for stage in ("load", "init", "run", "release"):
        steps = {r["step"] for r in body if r["stage"] == stage}
        assert steps == {0, 1, 3, 5}, stage
    assert report["invocations"] == model.cfg.subgraphs * 4
    # the forecast is host math of its own, on forecast steps no block's AdaLN runs
    host = {(h["step"], h["category"]) for h in report["host_times"]}
    assert {(2, "forecast"), (4, "forecast"), (2, "final"), (4, "final")} <= host
    assert not {(2, "adaln"), (4, "adaln"), (2, "residual")} & host
    assert live_contexts() == 0


def test_report_counts_computed_and_forecast_steps_apart(spectrum_run):
    report = spectrum_run.report
    assert report["steps"] == {"total": 6, "computed": 4, "forecast": 2}
    image = report["tables"]["per_image"]
    walls = report["step_seconds"]
    assert image["computed_seconds"] == pytest.approx(sum(walls[i] for i in (0, 1, 3, 5)))
    assert image["forecast_seconds"] == pytest.approx(walls[2] + walls[4])
    assert image["per_computed_step"] == pytest.approx(image["computed_seconds"] / 4)
    # one pass over the subgraphs per computed step: the lifecycle table is per computed step
    records = [r for r in report["lifecycle_records"] if r["branch"] != "decoder" and r["stage"] == "init"]
    assert report["tables"]["lifecycle_pass"]["init"] == pytest.approx(sum(r["seconds"] for r in records) / 4)
    # a forecast step is far cheaper than a computed one (no lifecycle at all)
    assert report["tables"]["forecast_step"]["step"] < report["tables"]["step_split"]["step"]


def test_cli_spectrum_prints_the_schedule_and_records_it(model, partition, tmp_path, capsys):
    out = tmp_path / "img.png"
    assert main(["generate", "--model-dir", str(model.model_dir), "--backend", "onnxruntime",
                 "--partition", str(partition), "--steps", str(STEPS), "--out", str(out),
                 "--sampler", "spectrum", "--spectrum-warmup", "2", "--spectrum-degree", "1",
                 "--spectrum-flex", "0"]) == 0
    printed = capsys.readouterr().out
    assert "Spectrum schedule, 4 computed of 6 steps (C computed, F forecast): CCFCFC" in printed
    assert "2 forecast steps x" in printed and "per computed step" in printed
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["sampler"]["schedule"] == "CCFCFC" and report["settings"]["sampler"] == "spectrum"


@pytest.mark.parametrize("args,fragment", [
    (["--spectrum-degree", "5"], "--spectrum-degree 5: a degree-5 Chebyshev fit needs 6 computed steps"),
    (["--spectrum-window", "0"], "--spectrum-window 0: the window must be at least 1"),
    (["--spectrum-ridge", "-0.1"], "--spectrum-ridge -0.1: the ridge lambda must be 0 or more"),
    (["--spectrum-tail", "29"], "--spectrum-tail 29: more always-computed tail steps than the run's 28 steps"),
])
def test_cli_bad_spectrum_parameter_is_one_line_before_anything_runs(model, partition, tmp_path, capsys,
                                                                     args, fragment):
    out = tmp_path / "img.png"
    code = main(["generate", "--model-dir", str(model.model_dir), "--backend", "onnxruntime", "--partition",
                 str(partition), "--steps", "28", "--quiet", "--out", str(out), "--sampler", "spectrum", *args])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and fragment in err and "Traceback" not in err
    assert not out.with_suffix(".json").exists() and live_contexts() == 0


def test_cli_spectrum_option_without_the_sampler_is_refused(model, tmp_path, capsys):
    code = main(["generate", "--model-dir", str(model.model_dir), "--spectrum-window", "3", "--quiet",
                 "--out", str(tmp_path / "x.png")])
    assert code == 2 and "--spectrum-window needs --sampler spectrum" in capsys.readouterr().err
