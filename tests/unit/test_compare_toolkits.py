"""`harness compare-toolkits OLD NEW` gates NEW: exit 0 only when NEW passes every part, 1 when a case
or a subgraph fails or a part did not run (a golden that does not match its record), 2 on bad input
with one `error:` line and nothing written. The report (report.json with every row, report.md with the
verdict first and the worst subgraphs) lands in --out beside the two conversions. The toolkit runs
are real: rknn-toolkit2 2.3.2 and 2.5.0 with their simulator, on small partitions (one block of the
embedded model; the 4-block Anima-shaped model, 12 subgraphs, for the image part)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from harness.core.errors import ToolkitError
from harness.gates.cases import case_inputs, load_cases
from harness.gates.compare_toolkits import REPORT_JSON, REPORT_MD, CompareInputs, Comparison, compare_toolkits
from harness.gates.golden import GoldenStore
from harness.model.bundle import load_bundle
from harness.model.config import EMBEDDED_DIR, REPO_ROOT
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.report.toolkit import WORST_SHOWN, comparison_markdown
from harness.runtime.run import RunRequest, run_partitioned
from harness.toolkit.envs import toolkit_python
from tests.helpers import missing_tool

ANIMA_SHAPED = REPO_ROOT / "models" / "anima-shaped"


def _harness(*args, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=1800)


def _toolkits() -> None:
    for version in ("2.3.2", "2.5.0"):
        try:
            toolkit_python(version)
        except ToolkitError:
            missing_tool(f"no rknn-toolkit2 {version} environment: create it with bin/toolkit-env {version}")


@pytest.fixture(scope="module")
def block0(tmp_path_factory):
    bundle = load_bundle(EMBEDDED_DIR)
    out = tmp_path_factory.mktemp("export") / "block0"
    export_partition(bundle.weights, bundle.cfg, out, ExportSettings(precision="float32", blocks=[0]))
    return out


def test_absent_version_is_one_line(block0, tmp_path):
    done = _harness("compare-toolkits", "2.3.2", "2.5.0", "--partition", block0, "--out", tmp_path / "cmp",
                    cwd=REPO_ROOT, env={"ANIMA_TOOLKIT_HOME": str(tmp_path / "none")})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: toolkit environment 2.3.2 is absent or out of date at {tmp_path / 'none' / '2.3.2'}: "
        f"create it with bin/toolkit-env 2.3.2"]
    assert not (tmp_path / "cmp").exists()


def _row(label: str, cosines: dict, cpu: dict | None = None) -> dict:
    cpu = cpu or {}
    return {"subgraph": label, "file": "x.rknn", "versions": {
        v: {"cosine": c, "max_abs": 0.0, "shapes_match": True, "cpu_ops": cpu.get(v, []), "bytes": 1024,
            "build_seconds": 0.5, "passes": c >= 0.9999 and not cpu.get(v)} for v, c in cosines.items()}}


def _comparison(rows: list[dict], failures=(), not_run=()) -> Comparison:
    header = {"target": "rk3588", "precision": "float16", "partition": "p", "model": "m", "golden_dir": "g",
              "sim_samples": 1, "cosine_min": 0.9999, "conversion_seconds": {"2.3.2": 30.0, "2.5.0": 20.0}}
    return Comparison("2.3.2", "2.5.0", header, rows, [], list(failures), list(not_run))


def test_the_markdown_says_the_verdict_first_then_only_the_worst_subgraphs():
    rows = [_row(f"subgraph {i}", {"2.3.2": 0.99999, "2.5.0": 1 - i * 1e-7}) for i in range(85)]
    rows[40] = _row("subgraph 40", {"2.3.2": 0.99999, "2.5.0": 0.99999}, {"2.5.0": ["Erf gelu/erf"]})
    text = comparison_markdown(_comparison(rows, failures=["1 op(s) on the CPU"]).to_json())
    assert text.splitlines()[0].startswith("**2.5.0 fails** (rknn-toolkit2 2.3.2 -> 2.5.0, rk3588, float16): 1 op(s)")
    shown = [line.split(" | ")[0] for line in text.splitlines() if re.match(r"\| subgraph \d", line)]
    # the failing subgraph first, then the lowest cosines on NEW: 84, 83, 82, 81
    assert shown == ["| subgraph 40", "| subgraph 84", "| subgraph 83", "| subgraph 82", "| subgraph 81"]
    assert len(shown) == WORST_SHOWN and f"worst of 85 subgraphs on 2.5.0 (every row: {REPORT_JSON})" in text


def test_a_part_that_did_not_run_is_never_a_pass():
    comparison = _comparison([_row("subgraph 0", {"2.3.2": 1.0, "2.5.0": 1.0})],
                             not_run=["case seven: golden does not match the sha256 recorded"])
    assert comparison.status == "not judged"
    first = comparison_markdown(comparison.to_json()).splitlines()[0]
    assert first.startswith("**2.5.0 not judged**") and "Did not run (never a pass): case seven" in first
    assert _comparison([_row("subgraph 0", {"2.3.2": 1.0, "2.5.0": 1.0})]).status == "passes"


@pytest.mark.toolkit
def test_bad_input_is_one_line_and_writes_nothing(block0, tmp_path):
    _toolkits()
    busy = tmp_path / "busy"
    (busy / "2.5.0").mkdir(parents=True)
    (busy / "2.5.0" / "notes.txt").write_text("not a conversion")
    for out, args, message in [
        (tmp_path / "cmp", ("--cases", "seven,eight"), "error: --cases: unknown case(s) eight in "),
        (tmp_path / "cmp", ("--golden-dir", tmp_path / "nowhere"),
         f"error: {tmp_path / 'nowhere' / 'cases.toml'}: no such golden cases file"),
        (tmp_path / "cmp", ("--sim-samples", "0"), "error: compare-toolkits: --sim-samples must be at least 1"),
        (busy, (), f"error: --out {busy / '2.5.0'} exists and is not a converted partition"),
    ]:
        done = _harness("compare-toolkits", "2.3.2", "2.5.0", "--partition", block0, "--out", out, *args,
                        cwd=tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(message), line
        assert not (tmp_path / "cmp").exists() and sorted(p.name for p in busy.iterdir()) == ["2.5.0"]


def _golden_dir(root: Path, fp32: Path) -> Path:
    """Goldens of the Anima-shaped model, rendered by onnxruntime on its FP32 export: `fair` (its own
    render, which both builds pass), `swapped` (recorded with seed 1's settings but seed 2's latent: no
    build can pass it) and `tampered` (its .npy no longer matches the sha256 in its record)."""
    golden = root / "golden"
    golden.mkdir()
    for name in ("cond_a.npy", "uncond.npy"):
        (golden / name).write_bytes((REPO_ROOT / "golden" / "anima-shaped" / name).read_bytes())
    cases = "".join(f'[[case]]\nname = "{n}"\ntext_emb = "cond_a.npy"\nuncond_text_emb = "uncond.npy"\nseed = 1\n\n'
                    for n in ("fair", "swapped", "tampered"))
    (golden / "cases.toml").write_text(
        'format = 2\n[defaults]\nssim_min = 0.999\npsnr_min = 40.0\ncosine_min = 0.999\nsteps = 3\ncfg = 4.0\n'
        f'sampler = "flow-euler"\nshift = 3.0\n\n{cases}')
    bundle, store = load_bundle(ANIMA_SHAPED), GoldenStore(golden, kind="latent")
    meta = {"backend": "onnxruntime", "manifest_hash": "test"}
    for case in load_cases(golden / "cases.toml"):
        inputs = case_inputs(case, bundle.cfg, golden)
        settings = replace(inputs.settings, seed=2) if case.name == "swapped" else inputs.settings
        latent = run_partitioned(RunRequest(bundle, fp32, "onnxruntime", inputs.prompt, settings,
                                            text_embs=inputs.text_embs)).latent
        store.write(case, np.asarray(latent).reshape(latent.shape[-3:]), meta, "float32")
    tampered = np.load(golden / "tampered.npy")
    tampered[0, 0, 0] += 0.5
    np.save(golden / "tampered.npy", tampered)
    return golden


@pytest.mark.toolkit
def test_a_golden_no_build_can_pass_exits_1_and_writes_the_report(tmp_path):
    _toolkits()
    bundle = load_bundle(ANIMA_SHAPED)
    fp32 = tmp_path / "fp32"
    export_partition(bundle.weights, bundle.cfg, fp32, ExportSettings(precision="float32"))
    golden = _golden_dir(tmp_path, fp32)
    out = tmp_path / "cmp"
    done = _harness("compare-toolkits", "2.3.2", "2.5.0", "--model-dir", ANIMA_SHAPED, "--golden-dir", golden,
                    "--partition", fp32, "--out", out, "--quiet", cwd=tmp_path)
    print(done.stdout)
    assert done.returncode == 1, done.stdout + done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["2.3.2", "2.5.0", REPORT_JSON, REPORT_MD]
    assert done.stdout == (out / REPORT_MD).read_text()
    first = done.stdout.splitlines()[0]
    assert first.startswith("**2.5.0 fails** (rknn-toolkit2 2.3.2 -> 2.5.0, rk3588, float16): "
                            "case swapped: SSIM"), first
    report = json.loads((out / REPORT_JSON).read_text())
    assert report["verdict"]["status"] == "fails"
    assert [f.split(":")[0] for f in report["verdict"]["failures"]] == ["case swapped"]
    [not_run] = report["verdict"]["not_run"]
    assert not_run.startswith("case tampered: golden case 'tampered': ") and "does not match the sha256" in not_run
    assert len(report["subgraphs"]) == 12
    assert all(set(row["versions"]) == {"2.3.2", "2.5.0"} for row in report["subgraphs"])
    cells = {row["case"]: row["versions"] for row in report["images"]}
    assert all(cell["passes"] for cell in cells["fair"].values()), cells["fair"]
    assert not any(cell["passes"] for cell in cells["swapped"].values()), cells["swapped"]
    assert cells["tampered"] == {}
    assert sum(bool(re.match(r"\| subgraph \d", line)) for line in done.stdout.splitlines()) == WORST_SHOWN


@pytest.mark.toolkit
@pytest.mark.slow
def test_per_subgraph_rows_and_verdict(block0, tmp_path):
    _toolkits()
    block_only = CompareInputs(block0, case_names=[])
    report = compare_toolkits("2.3.2", "2.5.0", block_only, tmp_path / "cmp", quiet=True).to_json()
    rows = report["subgraphs"]
    assert [r["subgraph"] for r in rows] == [
        "subgraph 0 (block 0 self_attn)", "subgraph 1 (block 0 cross_attn)", "subgraph 2 (block 0 ffn)",
        "subgraph 84 (decoder)"]
    ffn = rows[2]["versions"]
    # 2.3.2 leaves the GELU's Erf on the CPU even constant-second; 2.5.0 fuses it onto the NPU.
    assert ffn["2.3.2"]["cpu_ops"] == ["Erf gelu/erf"] and ffn["2.5.0"]["cpu_ops"] == []
    # 2.3.2 does not fuse the head-major q/k RMS norm (2.5.0 does): its mean's reshape stays on the CPU.
    for attn in rows[:2]:
        assert sorted(attn["versions"]["2.3.2"]["cpu_ops"]) == ["Reshape k_norm/mean_rs", "Reshape q_norm/mean_rs"]
        assert attn["versions"]["2.5.0"]["cpu_ops"] == []
    assert all(cell["cosine"] >= 0.9999 for r in rows for cell in r["versions"].values())
    # every subgraph passes on 2.5.0, but the image part was not asked for: no pass
    assert report["verdict"] == {"status": "not judged", "failures": [], "not_run": ["image part: not asked for"]}
    reverse = compare_toolkits("2.5.0", "2.3.2", block_only, tmp_path / "cmp2", quiet=True)
    assert reverse.failures[0] == ("5 op(s) on the CPU in 3 subgraph(s), first Reshape q_norm/mean_rs in "
                                   "subgraph 0 (block 0 self_attn)")
