"""`harness reduce --from-report`: the failing case read from the headroom gate's run report (the
subgraph below its limit, the tensor, step and stream; the case the report's name says)."""
import json

import pytest

from harness.core.errors import ConfigError
from harness.gates.failing import from_headroom_report
from harness.gates.headroom import HeadroomObserver
from harness.partition.manifest import load_manifest
from harness.runtime.pipeline import Invocation


def _report(tmp_path, embedded_fp32, peaks: dict[int, float], name="seven-headroom.json"):
    """A run report whose headroom section the observer wrote: output y of each subgraph at `peak`."""
    import numpy as np
    _, partition = embedded_fp32
    observer = HeadroomObserver(None)
    for entry in load_manifest(partition).subgraphs[:3]:
        x = np.ones(entry.inputs[0].shape, np.float32)
        y = np.zeros(entry.outputs[0].shape, np.float32)
        y[1].flat[0] = peaks.get(entry.index, 1.0)
        for step in range(3):
            observer(Invocation(entry, step, 1.0, ("cond", "uncond"), (x,), y * (step == 2 or 0.5)))
    path = tmp_path / name
    path.write_text(json.dumps({"settings": {"steps": 20, "seed": 1}, **observer.report_section()}))
    return path


def test_the_subgraph_below_its_headroom_with_its_step_and_stream(tmp_path, embedded_fp32):
    path = _report(tmp_path, embedded_fp32, {1: 30000.0, 2: 40000.0})
    found = from_headroom_report(path, None, ["seven", "three"])
    assert (found.subgraph, found.tensor, found.step, found.stream, found.case) == (1, "y", 2, "uncond", "seven")
    assert from_headroom_report(path, "2", []).subgraph == 2 and from_headroom_report(path, "2", []).case is None
    with pytest.raises(ConfigError, match="subgraph 0 does not fail its headroom there"):
        from_headroom_report(path, "0", [])


def test_a_report_without_a_failure_or_a_headroom_section_is_one_line(tmp_path, embedded_fp32):
    with pytest.raises(ConfigError, match="no subgraph below its headroom"):
        from_headroom_report(_report(tmp_path, embedded_fp32, {}), None, [])
    (tmp_path / "run.json").write_text('{"status": "ok"}')
    with pytest.raises(ConfigError, match=r"run.json: no headroom section"):
        from_headroom_report(tmp_path / "run.json", None, [])


def test_the_sessions_summary_links_a_repro_reduce_wrote_beside_the_run_reports(tmp_path):
    from harness.gates.failing import link_in_summary, reduced_beside
    from harness.report.summary import markdown_summary
    assert link_in_summary(tmp_path) is None            # no suite run's summary here: nothing to link from
    summary = markdown_summary({"outcome": "failed", "counts": {"failed": 1}, "memory": [],
                                "tests": [{"nodeid": "test_headroom", "outcome": "failed", "seconds": 1.0,
                                           "message": "subgraph 14: tensor layer1"}]})
    (tmp_path / "summary.md").write_text(summary)
    folder = tmp_path / "reduce" / "subgraph14"
    (folder / "repro").mkdir(parents=True)
    (folder / "repro" / "repro.py").write_text("# the repro\n")
    (folder / "report.json").write_text(json.dumps({
        "subgraph": "subgraph 14 (block 4 ffn)", "toolkit": "2.5.0", "reproduces": True,
        "reduction": {"nodes": "MatMul layer1"},
        "winner": {"remedy": "split", "what": "host FP32 runs MatMul layer1 .. MatMul y (7 nodes)", "written": None}}))
    (tmp_path / "reduce" / "broken").mkdir()
    (tmp_path / "reduce" / "broken" / "report.json").write_text("{")
    rows = reduced_beside(tmp_path)
    assert [r["repro"] for r in rows] == ["reduce/subgraph14/repro/repro.py"]
    for _ in range(2):      # a second reduce replaces the table, the gate's page stays
        link_in_summary(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    assert text.startswith(summary.rstrip()) and text.count("### Reduced subgraphs") == 1
    assert "| subgraph 14 (block 4 ffn) | 2.5.0 | MatMul layer1 | [reduce/subgraph14/repro/repro.py]" in text
    assert (tmp_path / rows[0]["repro"]).is_file()
    (folder / "repro" / "repro.py").unlink()        # a repro that is gone is not linked
    assert reduced_beside(tmp_path)[0]["repro"] is None
