"""The fault matrix: every fault the suite promises to handle, end to end through the CLI
(`python -m harness generate`) and pytest (the suite's gates), asserting for each:

- a non-zero exit, the one the fault calls for;
- exactly one error line, and it names the option, file or subgraph at fault; no traceback;
- no process left behind;
- no torn file (every JSON parses, no temporary file) and no stale one: a run that started removed
  the previous run's outputs; a run refused before it started left them byte for byte;
- the report present and marked with how the run ended (failed, interrupted, terminated), or, for
  a run refused before it started, no new report at all.

Faults run in batches, several per interpreter (cli.main and pytest.main in one subprocess), on a
small random model with one sampler step; signals need processes of their own and run in parallel.
Every row has a kind (KIND_OF); docs/faults.md's table of kinds is read by
test_every_kind_in_the_table_has_rows, which fails for a kind without a row or a row without a kind.
Rows that take long (more signals, outside memory pressure, telemetry, name collisions) are `slow`,
the conversion rows `toolkit`.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import psutil
import pytest

from harness.gates.cases import load_cases
from harness.gates.golden import GoldenStore
from harness.model.bundle import load_bundle
from harness.model.config import REPO_ROOT
from harness.partition.onnx_export import ExportSettings, export_partition
from tests.helpers import add_output_and_resign, alive, make_random_model_dir, shared_blocks, worker_processes

STALE = {"status": "ok", "stale": "from the previous run"}


@dataclass(frozen=True)
class Fault:
    name: str
    via: str                 # "cli" or "pytest"
    args: tuple              # with {model}, {partition}, {golden}, {dir}, ... filled in from the world
    code: int
    names: str               # regex the one error line must match
    report: str | None       # expected report status; None: refused before the run started
    kind: str = ""           # from KIND_OF: one of the kinds docs/faults.md lists


def cli(name, args, code, names, report=None):
    return Fault(name, "cli", tuple(args), code, names, report)


def gate(name, args, code, names, report=None, test="tests/acceptance/test_numerics.py"):
    return Fault(name, "pytest", (test, *args), code, names, report)


GEN = ("generate", "--model-dir={model}", "--partition={partition}", "--steps=1", "--quiet",
       "--backend=onnxruntime")
FAULTS = [
    # refused before the run starts: argument checks
    cli("cli-steps-zero", (*GEN, "--steps=0"), 2, r"--steps"),
    cli("cli-mem-floor-abc", (*GEN, "--mem-floor=abc"), 2, r"--mem-floor.*'abc'"),
    cli("cli-cfg-out-of-range", (*GEN, "--cfg=99"), 2, r"--cfg"),
    cli("cli-out-not-png", (*GEN, "--out={dir}/x.jpg"), 2, r"--out .*x\.jpg"),
    cli("cli-out-under-a-file", (*GEN, "--out={file}/x.png"), 2, r"--out .*cannot create files under"),
    cli("cli-out-report-is-a-folder", (*GEN, "--out={dir}/folder.png"), 2, r"folder\.json is a folder"),
    cli("cli-disk-full", (*GEN, "--min-free=100TiB"), 2, r"--out=.*MiB free.*--min-free"),
    cli("cli-fault-unknown", (*GEN, "--backend=faults", "--fault=bogus"), 2, r"--fault 'bogus'"),
    cli("cli-fault-wrong-backend", (*GEN, "--fault=nan@3"), 2, r"--fault nan@3: only --backend faults"),
    cli("cli-core-mask-bad", (*GEN, "--core-mask=9"), 2, r"--core-mask"),
    # the run starts (model loaded, settings valid) and fails: one line, report "failed"
    cli("cli-weights-truncated", (*GEN, "--model-dir={bad_weights}"), 2, r"dit\.safetensors"),
    cli("cli-no-manifest", (*GEN, "--partition={empty}"), 2, r"manifest\.json.*no manifest", "failed"),
    cli("cli-manifest-nul-name", (*GEN, "--partition={nul}"), 2, r"subgraph 2 \(block 0 ffn\).*not a plain path",
        "failed"),
    cli("cli-subgraph-truncated", (*GEN, "--partition={truncated}"), 2, r"subgraph 4 .*truncated", "failed"),
    cli("cli-other-weights", (*GEN, "--model-dir={other_model}"), 2, r"exported from other weights", "failed"),
    cli("cli-subgraphs-swapped", (*GEN, "--partition={swapped}"), 2,
        r"subgraph 3 .*another subgraph per its ONNX metadata", "failed"),
    cli("cli-onnx-garbage", (*GEN, "--partition={garbage}"), 2, r"subgraph 7 .*init failed: onnxruntime rejected",
        "failed"),
    cli("cli-nan-subgraph", (*GEN, "--backend=faults", "--fault=nan@37"), 3, r"block 12, branch cross_attn", "failed"),
    cli("cli-output-shape", (*GEN, "--backend=faults", "--fault=shape@5"), 2,
        r"subgraph 5 .*output 'y' is float32 \[1, 64, 64\]", "failed"),
    cli("cli-nan-decoder", (*GEN, "--backend=faults", "--fault=nan@84"), 3,
        r"NaN/Inf in the image from subgraph 84 \(decoder\)", "failed"),
    cli("cli-guard-trip", (*GEN, "--mem-floor=1000TiB"), 4, r"memory guard tripped: MemAvailable", "failed"),
    cli("cli-trend-store-not-a-database", ("trend", "--results=sqlite:///{torn_history}", "--out={dir}/trend.png"), 2,
        r"results store sqlite:///.*torn\.jsonl: cannot open \(file is not a database\)"),
    cli("cli-results-not-a-url", ("results", "export", "--results=results.sqlite"), 2,
        r"--results 'results\.sqlite': not a database URL"),
    # pytest: refused at configure time, one "ERROR:" line
    gate("pytest-mem-floor-abc", ("--mem-floor=abc",), 4, r"--mem-floor: memory size 'abc'"),
    gate("pytest-profile-mem-floor-float", ("--board-profile={profile}",), 4,
         r"board\.toml \[suite\]: --mem-floor: memory size 1\.5"),
    gate("pytest-golden-dir-missing", ("--golden-dir={dir}/nowhere",), 4,
         r"--golden-dir=.*nowhere.*no such golden cases file"),
    gate("pytest-profile-missing", ("--board-profile={dir}/none.toml",), 4,
         r"none\.toml: no such board profile \(--board-profile\)"),
    gate("pytest-case-unknown", ("--cases=nosuch",), 4, r"--cases: no golden case 'nosuch'"),
    gate("pytest-backend-unknown", ("--backend=bogus",), 4, r"--backend bogus: unknown"),
    gate("pytest-artifacts-under-a-file", ("--artifacts={file}/art",), 4, r"--artifacts=.*is not a folder"),
    gate("pytest-results-under-a-file", ("--results=sqlite:///{file}/r.sqlite",), 4, r"--results=.*is not a folder"),
    gate("pytest-disk-full", ("--min-free=100TiB",), 4, r"--artifacts=.*MiB free.*--min-free"),
    gate("pytest-artifacts-foreign", ("--artifacts={foreign}",), 4, r"--artifacts=.*not a suite run's"),
    gate("pytest-artifacts-in-use", ("--artifacts={busy}",), 4, r"--artifacts=.*in use by pid \d+.*--artifacts=OTHER"),
    # pytest: the run starts and a gate judges it failed (a NaN, a guard trip, a golden it cannot be judged
    # against): one FAILED line, report "failed"; a run that ends before any gate judged it (a runtime
    # returning what its subgraph does not declare, a partition or weights file that does not open) is
    # an infrastructure error: one ERROR line (docs/gates.md), report "failed"
    gate("pytest-nan-subgraph", ("--backend=faults", "--fault=nan@37"), 1, r"FAILED .*block 12, branch cross_attn",
         "failed"),
    gate("pytest-output-shape", ("--backend=faults", "--fault=shape@5"), 1, r"ERROR .*subgraph 5 .*\[1, 64, 64\]",
         "failed"),
    gate("pytest-nan-decoder", ("--backend=faults", "--fault=nan@84"), 1, r"FAILED .*subgraph 84 \(decoder\)",
         "failed"),
    gate("pytest-guard-trip", ("--mem-floor=1000TiB",), 1, r"FAILED .*memory guard tripped", "failed"),
    gate("pytest-subgraph-truncated", ("--partition={truncated}",), 1, r"ERROR .*subgraph 4 .*truncated", "failed"),
    gate("pytest-weights-truncated", ("--model-dir={bad_weights}", "--partition={partition}"), 1,
         r"ERROR .*dit\.safetensors", "failed"),
    gate("pytest-golden-wrong-shape", ("--golden-dir={bad_golden}",), 1,
         r"FAILED .*one\.npy has shape \(32, 32, 3\), the model makes \(64, 64, 3\)", "failed",
         test="tests/acceptance/test_quality.py"),
    gate("pytest-benchmark-guard-trip", ("--mem-floor=1000TiB", "--bench-steps=1"), 1,
         r"FAILED .*no benchmark: memory guard tripped", "failed", test="tests/acceptance/test_benchmark.py"),
]
SIGNALS = ["cli-sigterm", "cli-sigint", "bin-test-sigterm", "bin-test-ctrl-c-in-benchmark"]
# slow: SIGHUP (an SSH drop on the board) and SIGQUIT (Ctrl-backslash), stopping a run like SIGTERM
STOP_SIGNALS = [("cli-sighup", signal.SIGHUP, 129), ("cli-sigquit", signal.SIGQUIT, 131),
                ("bin-test-sighup", signal.SIGHUP, 129), ("bin-test-sigquit", signal.SIGQUIT, 131)]
# Every row of the matrix by kind; the kinds themselves are docs/faults.md's table.
KIND_OF = {
    "argument": ["cli-steps-zero", "cli-mem-floor-abc", "cli-cfg-out-of-range", "cli-fault-unknown",
                 "cli-fault-wrong-backend", "cli-core-mask-bad", "pytest-mem-floor-abc",
                 "pytest-profile-mem-floor-float", "pytest-golden-dir-missing", "pytest-profile-missing",
                 "pytest-case-unknown", "pytest-backend-unknown", "cli-results-not-a-url"],
    "output": ["cli-out-not-png", "cli-out-under-a-file", "cli-out-report-is-a-folder", "cli-disk-full",
               "pytest-artifacts-under-a-file", "pytest-results-under-a-file", "pytest-disk-full",
               "pytest-artifacts-foreign", "pytest-artifacts-in-use"],
    "input file": ["cli-weights-truncated", "cli-no-manifest", "cli-manifest-nul-name", "cli-subgraph-truncated",
                   "cli-other-weights", "cli-subgraphs-swapped", "cli-onnx-garbage", "cli-trend-store-not-a-database",
                   "pytest-subgraph-truncated", "pytest-weights-truncated", "pytest-golden-wrong-shape"],
    "numerics": ["cli-nan-subgraph", "cli-output-shape", "cli-nan-decoder", "pytest-nan-subgraph",
                 "pytest-output-shape", "pytest-nan-decoder"],
    "memory": ["cli-guard-trip", "pytest-guard-trip", "pytest-benchmark-guard-trip",
               "cli-prefetch-outside-memory-pressure", "pytest-prefetch-workers-over-the-pss-budget"],
    "signal": SIGNALS + [name for name, _, _ in STOP_SIGNALS],
    "leftovers": ["pytest-killed-golden-update", "cli-killed-writer"],
    "toolkit": ["pytest-rknn-tampered", "pytest-rknn-version-mismatch", "cli-inspect-rknn-version-mismatch",
                "cli-inspect-onnx-resigned", "cli-convert-disk-full"],
    "telemetry": ["bin-test-clock-moves-mid-benchmark"],
    "name collision": ["pytest-derived-run-named-like-a-case"],
}
ROWS = {name: kind for kind, names in KIND_OF.items() for name in names}
FAULTS = [replace(f, kind=ROWS.get(f.name, "")) for f in FAULTS]
GATE_COMMON = ("-p", "no:cacheprovider", "-p", "no:faulthandler", "-q", "--suite-run", "--model-dir={model}",
               "--partition={partition}", "--golden-dir={golden}", "--artifacts={dir}/artifacts",
               "--results=sqlite:///{dir}/results.sqlite", "--cache-dir={dir}/cache")

CASES = """[defaults]
ssim_min = 0.9999
psnr_min = 50.0
steps = 1
cfg = 4.0
sampler = "flow-euler"
shift = 3.0

[[case]]
name = "one"
prompt = "a handwritten digit one"
seed = 1
"""


# ----------------------------------------------------------------------------- the world

def _edit_manifest(src: Path, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    doc = json.loads((dst / "manifest.json").read_text())
    edit(doc, dst)
    (dst / "manifest.json").write_text(json.dumps(doc))
    return dst


def _swap(doc, dst):
    a, b = doc["subgraphs"][3], doc["subgraphs"][6]
    for key in ("file", "sha256", "bytes"):
        a[key], b[key] = b[key], a[key]


def _garbage(doc, dst):
    import hashlib
    entry = doc["subgraphs"][7]
    data = b"not an onnx model\n" * 8
    (dst / entry["file"]).write_bytes(data)
    entry.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))


def _truncate(doc, dst):
    path = dst / doc["subgraphs"][4]["file"]
    path.write_bytes(path.read_bytes()[:100])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    model = make_random_model_dir(root / "model", seed=0)
    bundle = load_bundle(model)
    partition = root / "partition"
    export_partition(bundle.weights, bundle.cfg, partition, ExportSettings(precision="float32"))
    golden = root / "golden"
    golden.mkdir()
    (golden / "cases.toml").write_text(CASES)
    # What `kill -9` during a golden update leaves (pid 999999999 never exists), and a write in
    # flight by a live process (this one): the next suite run removes the first, keeps the second.
    (golden / ".one.npy.999999999.abcd1234.tmp").write_bytes(b"half a golden")
    (golden / f".one.png.{os.getpid()}.abcd1234.tmp").write_bytes(b"a golden being written")
    bad_golden = root / "bad_golden"
    shutil.copytree(golden, bad_golden)
    # A consistent golden (its metadata vouches for its array) of another model's image size: it
    # used to pass every check on load and escape as a traceback after a full run.
    case = load_cases(bad_golden / "cases.toml")[0]
    GoldenStore(bad_golden).write(case, np.full((32, 32, 3), 0.5, np.float32),
                                  {"backend": "onnxruntime", "manifest_hash": "0" * 64}, precision="float32")
    torn_history = root / "torn.jsonl"
    torn_history.write_text('{"time": "2026-11-')       # a record cut short
    bad_weights = root / "bad_weights"
    shutil.copytree(model, bad_weights)
    weights = bad_weights / "dit.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    empty = root / "empty"
    empty.mkdir()
    foreign = root / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("someone's files\n")
    (root / "a-file").write_text("a file, not a folder\n")
    busy = root / "busy"        # held by this process, as a concurrent bin/test holds it
    busy.mkdir()
    lock = open(busy / ".lock", "w")
    lock.write(f"pid {os.getpid()} since now")
    lock.flush()
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    (root / "board.toml").write_text('[suite]\nmem_floor = 1.5\n')
    yield {
        "root": root, "model": model, "partition": partition, "golden": golden, "bad_golden": bad_golden,
        "bad_weights": bad_weights, "torn_history": torn_history,
        "other_model": make_random_model_dir(root / "other_model", seed=9),
        "empty": empty, "foreign": foreign, "busy": busy, "file": root / "a-file", "profile": root / "board.toml",
        "nul": _edit_manifest(partition, root / "nul",
                              lambda d, _: d["subgraphs"][2].update(file="02_block00\x00ffn.onnx")),
        "truncated": _edit_manifest(partition, root / "truncated", _truncate),
        "swapped": _edit_manifest(partition, root / "swapped", _swap),
        "garbage": _edit_manifest(partition, root / "garbage", _garbage),
    }
    lock.close()


def fill(args, world, fault_dir: Path) -> list[str]:
    values = {k: str(v) for k, v in world.items()} | {"dir": str(fault_dir)}
    return [a.format(**values) for a in args]


def seed_previous_run(fault: Fault, fault_dir: Path) -> dict[Path, bytes]:
    """Files of a previous run where this run writes; returns them as they were."""
    if fault.via == "cli":
        files = {fault_dir / "x.png": b"previous image", fault_dir / "x.json": json.dumps(STALE).encode()}
    else:
        art = fault_dir / "artifacts"
        files = {art / ".anima-artifacts": b"", art / "junit.xml": b"<previous/>",
                 art / "session.json": json.dumps(STALE).encode(),
                 art / "runs" / "one.json": json.dumps(STALE).encode()}
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (fault_dir / "folder.json").mkdir(exist_ok=True)
    return files


# ----------------------------------------------------------------------------- running batches

DRIVER = r"""
import contextlib, io, json, sys, traceback
jobs = json.load(open(sys.argv[1]))
results = {}
for name, (via, argv) in jobs.items():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            if via == "cli":
                from harness.cli.main import main
                code = main(argv)
            else:
                import pytest
                code = int(pytest.main(argv))
        except SystemExit as exc:
            code = exc.code
        except BaseException:
            code, _ = "crashed", buf.write(traceback.format_exc())
    results[name] = {"code": code, "out": buf.getvalue()}
json.dump(results, open(sys.argv[2], "w"))
"""


def run_batch(world, faults: list[Fault]) -> dict:
    root = world["root"]
    jobs = {}
    for f in faults:
        fault_dir = root / f.name
        fault_dir.mkdir()
        previous = seed_previous_run(f, fault_dir)
        # The fault's own arguments come last: for a repeated option the last one counts.
        args = fill(f.args if f.via == "cli" else (*GATE_COMMON, *f.args), world, fault_dir)
        if f.via == "cli" and not any(a.startswith("--out") for a in args):
            args.append(f"--out={fault_dir / 'x.png'}")
        if f.via == "pytest":
            args = ["-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={REPO_ROOT}",
                    *(str(REPO_ROOT / a) if a.startswith("tests/") else a for a in args)]
        jobs[f.name] = (f.via, args)
        world.setdefault("previous", {})[f.name] = previous
    spec, out = root / f"batch-{faults[0].name}.json", root / f"results-{faults[0].name}.json"
    spec.write_text(json.dumps(jobs))
    subprocess.run([sys.executable, "-c", DRIVER, str(spec), str(out)], cwd=root, timeout=600,
                   env={**os.environ, "COLUMNS": "1000"}, check=True)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def everything(world):
    """All faults at once: the batch faults in two interpreters (CLI, pytest) beside the four
    signal runs, which mostly wait on their slowed backend."""
    import concurrent.futures
    cli_faults = [f for f in FAULTS if f.via == "cli"]
    gate_faults = [f for f in FAULTS if f.via == "pytest"]
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        signals = pool.submit(run_signals, world)
        parts = list(pool.map(lambda fs: run_batch(world, fs), [cli_faults, gate_faults]))
        signals = signals.result()
    print(f"fault matrix: {len(FAULTS) + len(signals)} faults in {time.perf_counter() - started:.1f} s")
    return parts[0] | parts[1], signals


@pytest.fixture(scope="module")
def results(everything):
    return everything[0]


@pytest.fixture(scope="module")
def signal_runs(everything):
    return everything[1]


# ----------------------------------------------------------------------------- what every fault must show

_ERROR_LINE = {
    "cli": re.compile(r"\berror:"),
    "pytest": re.compile(r"^(ERROR:|FAILED |ERROR |!+ harness\.core\.errors\.)"),
}


def error_lines(via: str, out: str) -> list[str]:
    return [line for line in out.splitlines() if _ERROR_LINE[via].search(line)]


def assert_no_leftover_process(root: Path) -> None:
    """No process of any fault run is alive: each has this matrix's folder in its command line."""
    mine = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["pid"] != os.getpid() and str(root) in cmdline:
            mine.append((proc.info["pid"], cmdline[:160]))
    assert not mine, f"left running: {mine}"


def assert_outputs(fault_dir: Path, previous: dict[Path, bytes], started: bool, via: str) -> None:
    leftovers = [p for p in fault_dir.rglob("*.tmp")]
    assert not leftovers, f"temporary files left: {leftovers}"
    for path in (p for p in fault_dir.rglob("*.json") if p.is_file()):
        json.loads(path.read_text())        # no torn JSON
    for path, data in previous.items():
        if not started:
            assert path.read_bytes() == data, f"{path} changed by a run refused before it started"
        elif path.exists() and path.name != ".anima-artifacts":
            assert path.read_bytes() != data, f"{path} is still the previous run's"


def report_status(fault: Fault, fault_dir: Path) -> str | None:
    if fault.via == "cli":
        path = fault_dir / "x.json"
    else:
        path = fault_dir / "artifacts" / "session.json"
    return json.loads(path.read_text())["status"] if path.exists() else None


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_fault(fault, results, world):
    check_fault(fault, results, world)


def check_fault(fault: Fault, results: dict, world) -> None:
    got = results[fault.name]
    out = got["out"]
    assert got["code"] == fault.code, out
    assert "Traceback" not in out, out
    lines = error_lines(fault.via, out)
    assert len(lines) == 1, f"expected one error line, got {lines}\n{out}"
    assert re.search(fault.names, lines[0]), lines[0]
    fault_dir = world["root"] / fault.name
    assert_outputs(fault_dir, world["previous"][fault.name], fault.report is not None, fault.via)
    if fault.report is not None:
        assert report_status(fault, fault_dir) == fault.report
        if fault.via == "cli":
            assert not (fault_dir / "x.png").exists(), "a failed run wrote an image"
        else:
            # bin/test's JUnit XML and benchmark JSON follow --artifacts (--suite-run)
            assert "testsuite" in (fault_dir / "artifacts" / "junit.xml").read_text()
            if "benchmark" in fault.name:
                assert json.loads((fault_dir / "artifacts" / "benchmark.json").read_text())["benchmarks"] == []
            runs = fault_dir / "artifacts" / "runs"
            for report in runs.glob("*.json") if runs.is_dir() else []:
                assert json.loads(report.read_text())["status"] == "failed"
    assert_no_leftover_process(world["root"])


def test_a_killed_golden_updates_leftovers_are_swept_by_the_next_suite_run(results, world):
    names = sorted(p.name for p in world["golden"].glob(".*.tmp"))
    assert names == [f".one.png.{os.getpid()}.abcd1234.tmp"], names


def _table_kinds() -> list[str]:
    """The kinds in docs/faults.md's fault-kind table (its first column, header and rule skipped)."""
    text = (REPO_ROOT / "docs" / "faults.md").read_text()
    table = text.split("<!-- fault kinds -->", 1)[1].split("<!-- /fault kinds -->", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in table.splitlines() if line.strip().startswith("|")]
    return [cells[0].strip().strip("`") for cells in rows[2:]]


def test_every_kind_in_the_table_has_rows_and_every_row_a_kind_of_the_table():
    kinds = _table_kinds()
    assert kinds and len(set(kinds)) == len(kinds), kinds
    untyped = [f.name for f in FAULTS if not f.kind]
    assert not untyped, f"rows without a kind in KIND_OF: {untyped}"
    assert set(KIND_OF) == set(kinds), (f"kinds in KIND_OF but not docs/faults.md: {set(KIND_OF) - set(kinds)}; "
                                        f"in the table without a row: {set(kinds) - set(KIND_OF)}")
    assert all(KIND_OF[k] for k in kinds), [k for k in kinds if not KIND_OF[k]]
    assert len(ROWS) == sum(len(v) for v in KIND_OF.values()), "a row listed under two kinds"
    # each named row exists: a fault of the batches, a signal run, or a test of this module's own
    tests = {name.removeprefix("test_") for name in globals() if name.startswith("test_")}
    own = {f.name for f in FAULTS} | set(SIGNALS) | {n for n, _, _ in STOP_SIGNALS} | set(OWN_TESTS)
    assert set(ROWS) <= own, f"rows named in KIND_OF that nothing runs: {set(ROWS) - own}"
    assert set(OWN_TESTS.values()) <= tests, set(OWN_TESTS.values()) - tests
    print("fault matrix kinds: " + ", ".join(f"{k} {len(KIND_OF[k])}" for k in kinds))


# ----------------------------------------------------------------------------- signals

def _wait_for(predicate, what: str, timeout: float = 180.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _json_or_none(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class SignalRun:
    """One real process, sent a real signal once `ready()` says its run is under way."""

    def __init__(self, name: str, world, argv: list[str], signum: int, ready):
        self.name, self.signum, self.ready = name, signum, ready
        self.dir = world["root"] / name
        self.dir.mkdir()
        self.log = self.dir / "output.txt"
        self.exe = None
        self.proc = subprocess.Popen(fill(argv, world, self.dir), cwd=self.dir, stdout=open(self.log, "w"),
                                     stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "1000"})

    def poll(self) -> bool:
        """Signal the process if its run is under way; True once signalled or ended unsignalled."""
        if self.exe is not None or self.proc.poll() is not None:
            return True
        if not self.ready(self.dir):
            return False
        self.exe = psutil.Process(self.proc.pid).cmdline()
        self.proc.send_signal(self.signum)
        return True

    def finish(self) -> tuple[int, str]:
        code = self.proc.wait(timeout=120)
        return code, self.log.read_text()


def _after(condition, seconds: float = 1.0):
    """True `seconds` after `condition(dir)` was first seen true."""
    seen = {}

    def ready(d):
        if "t" not in seen and condition(d):
            seen["t"] = time.monotonic()
        return "t" in seen and time.monotonic() - seen["t"] >= seconds
    return ready


def _denoising(report: str):
    """The run's report says "running" (written just before the first step), a second ago."""
    return _after(lambda d: (_json_or_none(d / report) or {}).get("status") == "running")


def _in_test(name: str, seconds: float = 5.0):
    """session.json has named test `name` as the one running, `seconds` ago: past the imports and
    the partition check of the test's set-up (a signal inside a C extension's import is reported by
    Python as that import failing), well inside a 20-step benchmark round (~20 s)."""
    return _after(lambda d: name in str((_json_or_none(d / "artifacts" / "session.json") or {}).get("test")),
                  seconds)


SLOW_CLI = (sys.executable, "-m", "harness", *GEN, "--backend=faults", "--fault=slow=0.02", "--steps=8",
            "--out={dir}/x.png")
BIN_TEST = (str(REPO_ROOT / "bin" / "test"), *GATE_COMMON, "--backend=faults")


def _numerics_run(world, name, signum):
    return SignalRun(name, world,
                     [*BIN_TEST, "--fault=slow=0.02", str(REPO_ROOT / "tests/acceptance/test_numerics.py")],
                     signum, _denoising("artifacts/runs/one.json"))


def _started(runs) -> dict:
    """Signal each run once it is under way; every run's (run, exit code, output)."""
    try:
        _wait_for(lambda: all([run.poll() for run in runs]), "every run to be under way", timeout=240)
    except AssertionError:
        pass                        # the test of each run that was never signalled says so
    for run in runs:
        if run.exe is None and run.proc.poll() is None:
            run.proc.kill()
    return {run.name: (run, *run.finish()) for run in runs}


def run_signals(world):
    """The four signal faults side by side, each signalled once its run is under way."""
    return _started([
        SignalRun("cli-sigterm", world, list(SLOW_CLI), signal.SIGTERM, _denoising("x.json")),
        SignalRun("cli-sigint", world, list(SLOW_CLI), signal.SIGINT, _denoising("x.json")),
        _numerics_run(world, "bin-test-sigterm", signal.SIGTERM),
        SignalRun("bin-test-ctrl-c-in-benchmark", world, [*BIN_TEST, "--fault=slow=0.01", "--bench-steps=20",
                  str(REPO_ROOT / "tests/acceptance/test_benchmark.py")], signal.SIGINT,
                  _in_test("test_denoise_time")),
    ])


@pytest.fixture(scope="module")
def stop_signal_runs(world):
    """SIGHUP and SIGQUIT to the CLI and to bin/test, side by side."""
    return _started([SignalRun(name, world, list(SLOW_CLI), signum, _denoising("x.json")) if name.startswith("cli")
                     else _numerics_run(world, name, signum) for name, signum, _ in STOP_SIGNALS])


@pytest.mark.parametrize("name,code,status", [
    ("cli-sigterm", 143, "terminated"), ("cli-sigint", 130, "interrupted"),
    ("bin-test-sigterm", 143, "terminated"), ("bin-test-ctrl-c-in-benchmark", 2, "interrupted")])
def test_signal(signal_runs, world, name, code, status):
    check_signal_run(*signal_runs[name], world, code, status)


@pytest.mark.slow
@pytest.mark.parametrize("name,signum,code", STOP_SIGNALS, ids=[n for n, _, _ in STOP_SIGNALS])
def test_hangup_and_quit_stop_like_sigterm(stop_signal_runs, world, name, signum, code):
    check_signal_run(*stop_signal_runs[name], world, code, "terminated")


def check_signal_run(run, got, out, world, code, status):
    name = run.name
    assert run.exe is not None, f"{name} ended or hung before its run was under way:\n{out}"
    assert got == code, out
    assert "Traceback" not in out, out
    via = "cli" if name.startswith("cli") else "pytest"
    lines = error_lines(via, out)
    assert len(lines) == 1, f"expected one error line, got {lines}\n{out}"
    signame = signal.Signals(run.signum).name
    assert signame in lines[0], lines[0]
    assert not list(run.dir.rglob("*.tmp"))
    if via == "cli":
        report = json.loads((run.dir / "x.json").read_text())
        assert report["status"] == status and signame in report["error"]
        assert "manifest_sha256" in report, "stopped inside the pipeline, after the partition opened"
        assert not (run.dir / "x.png").exists()
    else:
        # bin/test execs pytest: the signalled pid was pytest itself, so nothing can be orphaned.
        assert "pytest" in run.exe, run.exe
        art = run.dir / "artifacts"
        assert json.loads((art / "session.json").read_text())["status"] == status
        assert "testsuite" in (art / "junit.xml").read_text()        # this run's, not a stale one
        for report in (art / "runs").glob("*.json") if (art / "runs").is_dir() else []:
            assert json.loads(report.read_text())["status"] == status
        if "benchmark" not in name:
            report = json.loads((art / "runs" / "one.json").read_text())
            assert report["status"] == "terminated" and "manifest_sha256" in report
            assert "test_numerics" in lines[0]
        else:
            assert "test_denoise_time" in lines[0]
    assert_no_leftover_process(world["root"])


def test_a_killed_writers_leftovers_are_removed_by_the_next_run(world, tmp_path):
    """SIGKILL (which nothing can catch) mid-write leaves a temporary file; the next run removes it
    and keeps another live writer's file."""
    out = tmp_path / "out"
    out.mkdir()
    child = subprocess.Popen([sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    live_pid = int(child.stdout.readline())
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    killed = out / f".x.png.{dead_pid}.abcd1234.tmp"
    in_flight = out / f".x.png.{live_pid}.abcd1234.tmp"
    killed.write_bytes(b"half an image")
    in_flight.write_bytes(b"another run's image in flight")
    try:
        proc = subprocess.run([sys.executable, "-m", "harness", *fill(GEN, world, tmp_path), f"--out={out / 'x.png'}"],
                              capture_output=True, text=True, timeout=300)
    finally:
        child.kill()
        child.wait()
    assert proc.returncode == 0, proc.stderr
    assert not killed.exists() and in_flight.exists()
    assert json.loads((out / "x.json").read_text())["status"] == "ok"


# ----------------------------------------------------------------------------- convert and the toolkit

TOOLKIT_FAULTS = [
    # a .rknn changed after conversion, not re-signed: the run refuses it by its checksum
    gate("pytest-rknn-tampered", ("--backend=rknn-sim", "--partition={rknn_tampered}"), 1,
         r"ERROR .*subgraph 4 \(block 1 cross_attn\).*04_block01_cross_attn\.rknn' fails its checksum", "failed"),
    # the manifest claims another toolkit than built the files: named, not "environment absent"
    gate("pytest-rknn-version-mismatch", ("--backend=rknn-sim", "--partition={rknn_mismatch}"), 1,
         r"ERROR .*00_block00_self_attn\.rknn was built by rknn-toolkit2 {version}, the conversion record "
         r".* says {other}", "failed"),
    cli("cli-convert-disk-full", ("convert", "{partition}", "--out={small}/conv", "--quiet"), 2,
        r"error: rknn-toolkit2 {version}: subgraph \d+ \(.*\): export_rknn failed writing \S+\.rknn into "
        r"--out \S+/small/conv: OSError: \[Errno 28\] No space left on device"),
]
TOOLKIT_FAULTS = [replace(f, kind=ROWS[f.name]) for f in TOOLKIT_FAULTS]


@pytest.fixture(scope="module")
def toolkit_world(world, toolkit_version):
    """The world's partition converted, a tampered and a mislabelled copy, and a 600 KiB tmpfs."""
    from harness.toolkit.convert import ConvertSettings, convert_partition
    from tests.helpers import small_tmpfs
    root = world["root"]
    converted = root / "rknn"
    convert_partition(world["partition"], converted, ConvertSettings(version=toolkit_version, quiet=True))
    other = "2.3.2" if toolkit_version != "2.3.2" else "2.5.0"

    def tamper(doc, dst):
        path = dst / doc["subgraphs"][4]["file"]
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))

    extra = {"rknn": converted, "version": re.escape(toolkit_version), "other": re.escape(other),
             "rknn_tampered": _edit_manifest(converted, root / "rknn_tampered", tamper),
             "rknn_mismatch": _edit_manifest(converted, root / "rknn_mismatch",
                                             lambda d, _: d["conversion"].update(toolkit_version=other))}
    with small_tmpfs(root / "small", "600k") as small:
        yield {**world, **extra, "small": small}


@pytest.fixture(scope="module")
def toolkit_results(toolkit_world):
    faults = [replace(f, names=f.names.format(**toolkit_world)) for f in TOOLKIT_FAULTS]
    return run_batch(toolkit_world, faults), {f.name: f for f in faults}


@pytest.mark.toolkit
@pytest.mark.slow
@pytest.mark.parametrize("name", [f.name for f in TOOLKIT_FAULTS])
def test_toolkit_fault(name, toolkit_results, toolkit_world):
    results, faults = toolkit_results
    check_fault(faults[name], results, toolkit_world)
    if name == "cli-convert-disk-full":
        left = sorted(p.name for p in toolkit_world["small"].iterdir())
        assert left == [], f"left on the full disk: {left}"


def _inspect(directory) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, "-m", "harness", "inspect", str(directory)], capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "1000"}, timeout=300)
    return done.returncode, done.stdout.splitlines()


@pytest.mark.toolkit
@pytest.mark.slow
def test_inspect_rknn_version_mismatch(toolkit_world):
    assert _inspect(toolkit_world["rknn"])[0] == 0
    code, out = _inspect(toolkit_world["rknn_mismatch"])
    fails = [line for line in out if line.startswith("FAIL ")]
    assert code == 1 and out[-1] == "verdict: failed", out
    assert len(fails) == 85 and all(re.search(rf"\.rknn was built by rknn-toolkit2 {toolkit_world['version']}, "
                                              rf"the manifest's conversion says {toolkit_world['other']}$", f)
                                    for f in fails), fails[:3]


def test_inspect_onnx_resigned(world, tmp_path):
    """An ONNX subgraph given an extra output and re-signed (sha256 and size updated) passes every
    checksum; inspect reads the file and names the output the manifest does not list."""
    resigned = tmp_path / "resigned"
    shutil.copytree(world["partition"], resigned)
    add_output_and_resign(resigned, 7)
    code, out = _inspect(resigned)
    fails = [line for line in out if line.startswith("FAIL ")]
    assert code == 1 and out[-1] == "verdict: failed", out
    assert len(fails) == 1 and re.search(r"subgraph 7 \(block 2 cross_attn\): 07_block02_cross_attn\.onnx declares "
                                         r"outputs \[y float32 \[2, 64, 64\], \S+ untyped \[\]\]", fails[0]), fails


# ----------------------------------------------------------------------------- memory pressure from outside

PRESSURE = ("import sys, numpy as np; a = np.ones(int(sys.argv[1]), np.uint8); print('held', flush=True); "
            "sys.stdin.read()")


@pytest.mark.slow
def test_outside_memory_pressure_trips_a_prefetch_runs_guard_and_no_worker_survives(world):
    """Another process takes memory while a prefetch:2 run holds contexts in its workers: the guard
    trips, the run stops with one line and exit 4, its workers are gone and its shared blocks too."""
    fault_dir = world["root"] / "cli-prefetch-outside-memory-pressure"
    fault_dir.mkdir()
    floor = psutil.virtual_memory().available - (400 << 20)
    cmd = [sys.executable, "-m", "harness", *fill(GEN, world, fault_dir), "--backend=board-sim",
           "--time-scale=0.02", "--steps=20", "--lifecycle=prefetch:2", f"--mem-floor={floor}",
           f"--out={fault_dir / 'x.png'}"]
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env={**os.environ, "COLUMNS": "1000"})
    pressure = None
    try:
        # both workers up and attached to their blocks (they map them before saying hello)
        _wait_for(lambda: len(shared_blocks(worker_processes(run.pid))) == 4 and
                  (_json_or_none(fault_dir / "x.json") or {}).get("status") == "running", "the workers")
        workers = worker_processes(run.pid)
        blocks = shared_blocks(workers)
        pressure = subprocess.Popen([sys.executable, "-c", PRESSURE, str(800 << 20)], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
        assert pressure.stdout.readline().strip() == "held"
        out, _ = run.communicate(timeout=120)
    finally:
        for proc in (run, pressure):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert run.returncode == 4, out
    lines = error_lines("cli", out)
    assert len(lines) == 1 and "memory guard tripped: MemAvailable" in lines[0] and "Traceback" not in out, out
    assert not [w.pid for w in workers if alive(w)]
    assert len(blocks) == 4 and not [b for b in blocks if os.path.exists(b)], blocks
    report = json.loads((fault_dir / "x.json").read_text())
    assert report["status"] == "failed" and report["lifecycle"] == "prefetch:2"
    assert report["lifecycle_counters"]["live"] == 0                # no context survives the trip
    assert report["memory"]["run_max_worker_processes"] >= 2
    assert not (fault_dir / "x.png").exists()
    assert_no_leftover_process(world["root"])


@pytest.mark.slow
def test_the_pss_gate_of_a_prefetch_run_counts_its_workers_and_names_the_lifecycle(world):
    """A 2 MiB budget: the prefetch:2 run's workers hold far more than that. Counted from the
    pipeline process alone, the gate passed; it must fail, naming the lifecycle and both parts."""
    fault_dir = world["root"] / "pytest-prefetch-workers-over-the-pss-budget"
    done = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"),
                           f"--rootdir={REPO_ROOT}", *fill(GATE_COMMON, world, fault_dir), "--lifecycle=prefetch:2",
                           "--pss-budget=2MiB", str(REPO_ROOT / "tests/acceptance/test_memory.py")],
                          capture_output=True, text=True, cwd=world["root"], timeout=600,
                          env={**os.environ, "COLUMNS": "1000"})
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    lines = error_lines("pytest", out)
    assert len(lines) == 1 and "Traceback" not in out, out
    match = re.search(r"lifecycle prefetch:2: peak added PSS ([\d.]+) MiB \(pipeline -?[\d.]+ MiB, (\d+) child "
                      r"process\(es\) ([\d.]+) MiB\) over the budget 2\.0 MiB", lines[0])
    assert match and int(match[2]) >= 2 and float(match[3]) > 2.0, lines[0]
    junit = (fault_dir / "artifacts" / "junit.xml").read_text()
    assert 'name="lifecycle" value="prefetch:2"' in junit and 'name="workers_pss_added_bytes"' in junit
    assert_no_leftover_process(world["root"])


# ----------------------------------------------------------------------------- telemetry mid-benchmark

@pytest.mark.slow
def test_a_clock_moving_mid_benchmark_marks_it_invalid_and_no_baseline(world):
    """The NPU clock changes while the benchmark's rounds run: the run is flagged INVALID in the
    benchmark JSON and the results store, and is not saved as a baseline even with --save-baseline."""
    sysfs = world["root"] / "clock-moves-sysfs"          # the board's clocks, as this run will read them
    shutil.copytree(REPO_ROOT / "tests" / "data" / "sysfs-rk3588", sysfs)
    npu_clock = sysfs / "sys/class/devfreq/fdab0000.npu/cur_freq"
    before = npu_clock.read_text().strip()
    run = SignalRun("bin-test-clock-moves-mid-benchmark", world,
                    [*BIN_TEST, "--fault=slow=0.01", "--bench-steps=20", f"--telemetry-root={sysfs}",
                     "--save-baseline",
                     str(REPO_ROOT / "tests/acceptance/test_benchmark.py")], 0, _in_test("test_denoise_time"))
    fault_dir = run.dir
    _wait_for(lambda: run.ready(run.dir) or run.proc.poll() is not None, "the benchmark's rounds")
    npu_clock.write_text(str(int(before) // 2) + "\n")          # the governor stepped the NPU down
    code, out = run.finish()
    art = run.dir / "artifacts"
    bench = json.loads((art / "benchmark.json").read_text())["benchmarks"]
    assert len(bench) == 1, out
    info = bench[0]["extra_info"]
    assert info["valid"] is False, info
    moved = f"frequency changed during the window: {int(before) / 1e6:g} MHz -> {int(before) // 2 / 1e6:g} MHz"
    assert any(moved in reason for reason in info["invalid_reasons"]), info["invalid_reasons"]
    from harness.results.store import ResultsStore
    with ResultsStore(f"sqlite:///{fault_dir / 'results.sqlite'}", create=False) as store:
        [stored] = store.runs()
        assert stored.valid is False and list(stored.invalid_reasons) == info["invalid_reasons"]
        assert store.baseline_pairs() == [], "an INVALID run became a baseline"
    assert "INVALID" in out and "Traceback" not in out, out
    assert code == 0, out            # the gate passed; its figures are marked, not trusted
    assert_no_leftover_process(world["root"])


# ----------------------------------------------------------------------------- name collisions

COLLIDING = CASES + """
[[case]]
name = "one-spectrum"
prompt = "a handwritten digit one"
seed = 1
steps = 4
sampler = "spectrum"
spectrum = { preset = "13-of-28", warmup = 3, degree = 2 }
"""


@pytest.mark.slow
def test_a_derived_run_named_like_a_case_neither_stands_in_for_it_nor_rewrites_its_golden(world):
    """--bench-sampler=spectrum derives a Spectrum run from case `one`; a golden case is called
    `one-spectrum`. Updating the goldens with both in one session must write `one-spectrum` from its
    own render: the next quality run of that case alone passes."""
    fault_dir = world["root"] / "pytest-derived-run-named-like-a-case"
    golden = fault_dir / "golden"
    golden.mkdir(parents=True)
    (golden / "cases.toml").write_text(COLLIDING)
    common = [*GATE_COMMON, f"--golden-dir={golden}"]
    update = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"),
                             f"--rootdir={REPO_ROOT}", *fill(common, world, fault_dir), "--update-goldens",
                             "--bench-sampler=spectrum", "--cases=one,one-spectrum",
                             str(REPO_ROOT / "tests/acceptance/test_benchmark.py"),
                             str(REPO_ROOT / "tests/acceptance/test_quality.py")],
                            capture_output=True, text=True, cwd=fault_dir, timeout=600)
    assert update.returncode == 0, update.stdout + update.stderr
    assert (golden / "one-spectrum.npy").is_file() and not list(golden.glob("one+*")), "a derived run wrote a golden"
    check = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"),
                            f"--rootdir={REPO_ROOT}", *fill(common, world, fault_dir / "again"),
                            "--cases=one-spectrum", str(REPO_ROOT / "tests/acceptance/test_quality.py")],
                           capture_output=True, text=True, cwd=fault_dir, timeout=600)
    assert check.returncode == 0, check.stdout + check.stderr
    runs = fault_dir / "artifacts" / "runs"
    assert (runs / "one+spectrum+bench.json").is_file() and (runs / "one-spectrum.json").is_file()
    assert json.loads((runs / "one-spectrum.json").read_text())["steps"]["total"] == 4
    assert_no_leftover_process(world["root"])


# the matrix's rows that are tests of their own (name in KIND_OF -> the test that runs it)
OWN_TESTS = {
    "pytest-killed-golden-update": "a_killed_golden_updates_leftovers_are_swept_by_the_next_suite_run",
    "cli-killed-writer": "a_killed_writers_leftovers_are_removed_by_the_next_run",
    "cli-inspect-rknn-version-mismatch": "inspect_rknn_version_mismatch",
    "cli-inspect-onnx-resigned": "inspect_onnx_resigned",
    "cli-prefetch-outside-memory-pressure":
        "outside_memory_pressure_trips_a_prefetch_runs_guard_and_no_worker_survives",
    "bin-test-clock-moves-mid-benchmark": "a_clock_moving_mid_benchmark_marks_it_invalid_and_no_baseline",
    "pytest-prefetch-workers-over-the-pss-budget":
        "the_pss_gate_of_a_prefetch_run_counts_its_workers_and_names_the_lifecycle",
    "pytest-derived-run-named-like-a-case":
        "a_derived_run_named_like_a_case_neither_stands_in_for_it_nor_rewrites_its_golden",
    **{f.name: "toolkit_fault" for f in TOOLKIT_FAULTS},
}
