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
The README's fault table lists the same faults.
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import pytest

from harness.model.config import REPO_ROOT
from harness.gates.golden import GoldenStore, load_cases
from harness.model.bundle import load_bundle
from harness.partition.onnx_export import export_partition
from tests.helpers import make_random_model_dir

STALE = {"status": "ok", "stale": "from the previous run"}


@dataclass(frozen=True)
class Fault:
    name: str
    via: str                 # "cli" or "pytest"
    args: tuple              # with {model}, {partition}, {golden}, {dir}, ... filled in from the world
    code: int
    names: str               # regex the one error line must match
    report: str | None       # expected report status; None: refused before the run started


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
    cli("cli-manifest-nul-name", (*GEN, "--partition={nul}"), 2, r"subgraph 2 \(block 0 ffn\).*not a plain path", "failed"),
    cli("cli-subgraph-truncated", (*GEN, "--partition={truncated}"), 2, r"subgraph 4 .*truncated", "failed"),
    cli("cli-other-weights", (*GEN, "--model-dir={other_model}"), 2, r"exported from other weights", "failed"),
    cli("cli-subgraphs-swapped", (*GEN, "--partition={swapped}"), 2, r"subgraph 3 .*another subgraph per its ONNX metadata", "failed"),
    cli("cli-onnx-garbage", (*GEN, "--partition={garbage}"), 2, r"subgraph 7 .*init failed: onnxruntime rejected", "failed"),
    cli("cli-nan-subgraph", (*GEN, "--backend=faults", "--fault=nan@37"), 3, r"block 12, branch cross_attn", "failed"),
    cli("cli-output-shape", (*GEN, "--backend=faults", "--fault=shape@5"), 2, r"subgraph 5 .*output 'y' is float32 \[1, 64, 64\]", "failed"),
    cli("cli-nan-decoder", (*GEN, "--backend=faults", "--fault=nan@84"), 3, r"NaN/Inf in the image from subgraph 84 \(decoder\)", "failed"),
    cli("cli-guard-trip", (*GEN, "--mem-floor=1000TiB"), 4, r"memory guard tripped: MemAvailable", "failed"),
    cli("cli-trend-store-not-a-database", ("trend", "--results=sqlite:///{torn_history}", "--out={dir}/trend.png"), 2,
        r"results store sqlite:///.*torn\.jsonl: cannot open \(file is not a database\)"),
    cli("cli-results-not-a-url", ("results", "export", "--results=results.sqlite"), 2,
        r"--results 'results\.sqlite': not a database URL"),
    # pytest: refused at configure time, one "ERROR:" line
    gate("pytest-mem-floor-abc", ("--mem-floor=abc",), 4, r"--mem-floor: memory size 'abc'"),
    gate("pytest-profile-mem-floor-float", ("--board-profile={profile}",), 4, r"board\.toml \[suite\]: --mem-floor: memory size 1\.5"),
    gate("pytest-golden-dir-missing", ("--golden-dir={dir}/nowhere",), 4, r"--golden-dir=.*nowhere.*no such golden cases file"),
    gate("pytest-profile-missing", ("--board-profile={dir}/none.toml",), 4, r"none\.toml: no such board profile \(--board-profile\)"),
    gate("pytest-case-unknown", ("--cases=nosuch",), 4, r"--cases: no golden case 'nosuch'"),
    gate("pytest-backend-unknown", ("--backend=bogus",), 4, r"--backend bogus: unknown"),
    gate("pytest-artifacts-under-a-file", ("--artifacts={file}/art",), 4, r"--artifacts=.*is not a folder"),
    gate("pytest-results-under-a-file", ("--results=sqlite:///{file}/r.sqlite",), 4, r"--results=.*is not a folder"),
    gate("pytest-disk-full", ("--min-free=100TiB",), 4, r"--artifacts=.*MiB free.*--min-free"),
    gate("pytest-artifacts-foreign", ("--artifacts={foreign}",), 4, r"--artifacts=.*not a suite run's"),
    gate("pytest-artifacts-in-use", ("--artifacts={busy}",), 4, r"--artifacts=.*in use by pid \d+.*--artifacts=OTHER"),
    # pytest: the run starts and fails, one FAILED line, report "failed"
    gate("pytest-nan-subgraph", ("--backend=faults", "--fault=nan@37"), 1, r"FAILED .*block 12, branch cross_attn", "failed"),
    gate("pytest-output-shape", ("--backend=faults", "--fault=shape@5"), 1, r"FAILED .*subgraph 5 .*\[1, 64, 64\]", "failed"),
    gate("pytest-nan-decoder", ("--backend=faults", "--fault=nan@84"), 1, r"FAILED .*subgraph 84 \(decoder\)", "failed"),
    gate("pytest-guard-trip", ("--mem-floor=1000TiB",), 1, r"FAILED .*memory guard tripped", "failed"),
    gate("pytest-subgraph-truncated", ("--partition={truncated}",), 1, r"FAILED .*subgraph 4 .*truncated", "failed"),
    gate("pytest-weights-truncated", ("--model-dir={bad_weights}", "--partition={partition}"), 1,
         r"FAILED .*dit\.safetensors", "failed"),
    gate("pytest-golden-wrong-shape", ("--golden-dir={bad_golden}",), 1, r"FAILED .*one\.npy has shape \(32, 32, 3\), the model makes \(64, 64, 3\)", "failed",
         test="tests/acceptance/test_quality.py"),
    gate("pytest-benchmark-guard-trip", ("--mem-floor=1000TiB", "--bench-steps=1"), 1,
         r"FAILED .*no benchmark: memory guard tripped", "failed", test="tests/acceptance/test_benchmark.py"),
]
SIGNALS = ["cli-sigterm", "cli-sigint", "bin-test-sigterm", "bin-test-ctrl-c-in-benchmark"]
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
    export_partition(bundle.weights, bundle.cfg, partition, dtype="float32")
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
        "bad_weights": bad_weights, "torn_history": torn_history, "other_model": make_random_model_dir(root / "other_model", seed=9),
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
    "pytest": re.compile(r"^(ERROR:|FAILED |ERROR |!+ harness\.errors\.)"),
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


def test_the_matrix_is_at_least_thirty_distinct_faults():
    assert len({f.name for f in FAULTS} | set(SIGNALS)) == len(FAULTS) + len(SIGNALS) >= 30
    assert {f.via for f in FAULTS} == {"cli", "pytest"}


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


def run_signals(world):
    """The four signal faults side by side, each signalled once its run is under way."""
    runs = [
        SignalRun("cli-sigterm", world, list(SLOW_CLI), signal.SIGTERM, _denoising("x.json")),
        SignalRun("cli-sigint", world, list(SLOW_CLI), signal.SIGINT, _denoising("x.json")),
        SignalRun("bin-test-sigterm", world, [*BIN_TEST, "--fault=slow=0.02",
                  str(REPO_ROOT / "tests/acceptance/test_numerics.py")], signal.SIGTERM,
                  _denoising("artifacts/runs/one.json")),
        SignalRun("bin-test-ctrl-c-in-benchmark", world, [*BIN_TEST, "--fault=slow=0.01", "--bench-steps=20",
                  str(REPO_ROOT / "tests/acceptance/test_benchmark.py")], signal.SIGINT,
                  _in_test("test_denoise_time")),
    ]
    try:
        _wait_for(lambda: all([run.poll() for run in runs]), "every run to be under way", timeout=240)
    except AssertionError:
        pass                        # the test of each run that was never signalled says so
    for run in runs:
        if run.exe is None and run.proc.poll() is None:
            run.proc.kill()
    return {run.name: (run, *run.finish()) for run in runs}


@pytest.mark.parametrize("name,code,status", [
    ("cli-sigterm", 143, "terminated"), ("cli-sigint", 130, "interrupted"),
    ("bin-test-sigterm", 143, "terminated"), ("bin-test-ctrl-c-in-benchmark", 2, "interrupted")])
def test_signal(signal_runs, world, name, code, status):
    run, got, out = signal_runs[name]
    assert run.exe is not None, f"{name} ended or hung before its run was under way:\n{out}"
    assert got == code, out
    assert "Traceback" not in out, out
    via = "cli" if name.startswith("cli") else "pytest"
    lines = error_lines(via, out)
    assert len(lines) == 1, f"expected one error line, got {lines}\n{out}"
    signame = "SIGTERM" if run.signum == signal.SIGTERM else "SIGINT"
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
        if name == "bin-test-sigterm":
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
