"""`harness compare` on real run reports and history records, and `harness accept-golden` from a real
run's kept image, with --update-goldens' rule of leaving goldens within tolerance alone."""
import json

import numpy as np
import pytest

from harness.backends.base import BackendOptions
from harness.cli.accept import accept_golden
from harness.cli.main import main
from harness.core.errors import ConfigError
from harness.gates.cases import load_cases
from harness.gates.golden import GoldenRefused, GoldenStale, GoldenStore
from harness.memory.guard import MemoryGuard
from harness.model.bundle import load_bundle
from harness.results.compare import compare_rows, load_view, slowest_subgraphs
from harness.runtime.run import RunRequest, run_partitioned
from harness.sampling.reference_run import sample_settings
from harness.sampling.settings import SampleSettings

STEPS = 1


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """The embedded model and its FP16 partition, from the suite's partition cache (keyed by the
    weights' digest, as the gates use it; exported on first use)."""
    from harness.model.config import EMBEDDED_DIR, REPO_ROOT
    from harness.runtime.partitions import exported_partition
    model = load_bundle(EMBEDDED_DIR)
    return model, exported_partition(model, "float16", root=REPO_ROOT / ".cache" / "partitions")


@pytest.fixture(scope="module")
def reports(embedded, kept_source, tmp_path_factory):
    """Two real runs of one prompt, each with its JSON report on disk: on-demand onnxruntime (the kept
    quality run's, one run fewer), and the same partition on a backend slowed by 2 ms per invocation."""
    model, partition = embedded
    slowed = tmp_path_factory.mktemp("runs") / "slowed.json"
    with MemoryGuard("1MiB", "1GiB", interval=0.05) as guard:
        run_partitioned(
            RunRequest(model, partition, "faults", "a handwritten digit one", sample_settings(model, steps=STEPS),
                       backend_options=BackendOptions("faults", {"delay": 0.002})),
            guard=guard, report_path=slowed)
    return {"plain": kept_source[0] / "artifacts" / "runs" / "one.json", "slowed": slowed}


def test_compare_two_run_reports_per_stage_branch_subgraph_and_memory(reports, capsys):
    a, b = load_view(str(reports["plain"])), load_view(str(reports["slowed"]))
    raw = json.loads(reports["slowed"].read_text())
    assert (a["backend"], b["backend"]) == ("onnxruntime", "faults") and b["steps"] == STEPS
    assert b["precision"] == "float16"
    assert b["lifecycle"]["init"] == raw["tables"]["lifecycle_pass"]["init"]
    assert b["core"]["ffn"] == raw["tables"]["core_per_step"]["ffn"]
    assert len(b["slowest"]) == 85 and b["slowest"][0]["seconds_per_step"] >= b["slowest"][-1]["seconds_per_step"]
    # The slowest subgraph's seconds are its four stages summed over the run, per step.
    top = b["slowest"][0]
    stages = [r["seconds"] for r in raw["lifecycle_records"] if r["subgraph"] == top["subgraph"]]
    assert len(stages) == 4 * STEPS and top["seconds_per_step"] == pytest.approx(sum(stages) / STEPS)
    assert b["peak_pss_bytes"] == raw["memory"]["run_peak_pss_added_bytes"]
    sections = dict(compare_rows(a, b))
    init = next(r for r in sections["lifecycle per stage [s/step]"] if r[0] == "init")
    assert float(init[3]) == pytest.approx(b["lifecycle"]["init"] - a["lifecycle"]["init"], abs=1e-4)
    assert main(["compare", str(reports["plain"]), str(reports["slowed"])]) == 0
    out = capsys.readouterr().out
    for title in ("lifecycle per stage", "core per branch", "10 slowest subgraphs", "peak added PSS"):
        assert title in out


def test_compare_two_runs_of_the_results_store(tmp_path, capsys):
    from harness.results.store import ResultsStore
    from tests.results_data import make_run
    url = f"sqlite:///{tmp_path / 'results.sqlite'}"
    with ResultsStore(url) as store:
        store.add_run(make_run("r1", 1.0))
        store.add_run(make_run("r2", 1.25, minute=1))
    assert main(["compare", "run:r1", "run:r2/cat", "--results", url]) == 0
    out = capsys.readouterr().out
    assert "+25.0 %" in out and "block00_ffn" in out     # step 1.0 -> 1.25 s, subgraphs from the store
    assert main(["compare", "run:r7", "run:r1", "--results", url]) == 2
    assert "no run 'r7'" in capsys.readouterr().err


def test_slowest_subgraphs_sums_stages_per_subgraph():
    records = [{"subgraph": s, "block": s // 3, "branch": "ffn", "stage": st, "seconds": s + 1.0}
               for s in range(12) for st in ("load", "init", "run", "release")]
    rows = slowest_subgraphs(records, steps=2)
    assert [r["subgraph"] for r in rows] == list(range(11, 1, -1))
    assert rows[0]["seconds_per_step"] == 4 * 12.0 / 2


# ----------------------------------------------------------------------------- goldens

@pytest.fixture(scope="module")
def kept_source(embedded, tmp_path_factory):
    """A golden dir with one case and an artifacts folder as a quality run leaves it (real files)."""
    tmp_path = tmp_path_factory.mktemp("kept")
    model, partition = embedded
    golden = tmp_path / "golden"
    golden.mkdir()
    (golden / "cases.toml").write_text('[defaults]\nssim_min = 0.9999\npsnr_min = 50.0\nsteps = 1\ncfg = 4.0\n'
                                       'sampler = "flow-euler"\nshift = 3.0\n\n[[case]]\nname = "one"\n'
                                       'prompt = "a handwritten digit one"\nseed = 3\n')
    runs = tmp_path / "artifacts" / "runs"
    case = load_cases(golden / "cases.toml")[0]
    settings = SampleSettings(steps=case.steps, cfg_scale=case.cfg, shift=case.shift, seed=case.seed)
    with MemoryGuard("1MiB", "1GiB", interval=0.05) as guard:      # its report is also compare's "plain" run
        result = run_partitioned(
            RunRequest(model, partition, "onnxruntime", case.prompt, settings),
            guard=guard, report_path=runs / "one.json")
    np.save(runs / "one-image.npy", result.image)
    return tmp_path, case, result


@pytest.fixture
def kept_run(kept_source, tmp_path):
    import shutil
    source, case, result = kept_source
    for name in ("golden", "artifacts"):
        shutil.copytree(source / name, tmp_path / name)
    return tmp_path, tmp_path / "golden", case, result


def test_accept_golden_promotes_the_kept_image_with_relative_paths(kept_run, capsys):
    tmp_path, golden, case, result = kept_run
    assert main(["accept-golden", "one", f"--artifacts={tmp_path / 'artifacts'}", f"--golden-dir={golden}"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {golden / 'one.npy'}" in out and f"wrote {golden / 'one.json'}" in out
    image, meta = GoldenStore(golden).load(case)
    assert np.array_equal(image, result.image.astype(np.float32)) and meta["precision"] == "float16"
    assert not any(isinstance(v, str) and v.startswith("/") for v in meta.values())


def test_accept_golden_refuses_like_update_goldens(kept_run):
    tmp_path, golden, case, _ = kept_run
    report = tmp_path / "artifacts" / "runs" / "one.json"
    data = json.loads(report.read_text())
    data["export"]["fake_quant"] = "w8a8-ffn"
    report.write_text(json.dumps(data))
    with pytest.raises(GoldenRefused, match="refusing to write a golden from a 'float16\\+w8a8-ffn' run"):
        accept_golden("one", tmp_path / "artifacts", golden)
    data["export"]["fake_quant"] = None
    data["settings"]["steps"] = 5
    report.write_text(json.dumps(data))
    with pytest.raises(GoldenStale, match="steps: run 5 vs case 1"):
        accept_golden("one", tmp_path / "artifacts", golden)
    assert not (golden / "one.npy").exists()
    with pytest.raises(ConfigError, match="no .*nine.json; run the quality gate first"):
        accept_golden("nine", tmp_path / "artifacts", golden)


def test_update_leaves_goldens_within_tolerance_alone_and_lists_what_it_writes(kept_run):
    tmp_path, golden, case, result = kept_run
    store = GoldenStore(golden)
    meta = {"backend": "onnxruntime", "manifest_hash": "x" * 64, "partition": "p"}
    written, why = store.update(case, result.image, meta, "float16")
    assert written == [golden / "one.npy", golden / "one.png", golden / "one.json"] and why.startswith("written")
    stamp = (golden / "one.json").stat().st_mtime_ns
    nudged = np.clip(result.image + 1e-5, 0, 1)          # FP16-level noise: within tolerance
    written, why = store.update(case, nudged, meta, "float16")
    assert written == [] and why.startswith("left alone: within tolerance")
    assert (golden / "one.json").stat().st_mtime_ns == stamp
    changed = np.clip(result.image[::-1], 0, 1)          # another image: beyond tolerance
    written, why = store.update(case, changed, meta, "float16")
    assert len(written) == 3 and "differs beyond tolerance" in why
    with pytest.raises(ConfigError, match="absolute paths"):
        store.write(case, result.image, {**meta, "partition": "/abs/p"}, "float16")
