"""A new user's first hour (issue 45): every expected mistake is one line naming the fix, with no traceback;
paths are read from where the user stands; nothing is written by a refused run; --help answers at once.
The commands run as the user runs them: pytest and `python -m harness` in processes of their own."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli.main import COMMANDS, build_parser, listing_parser, main
from harness.cli.usage import PROG, actions
from harness.core.locks import output_lock
from harness.gates.cases import golden_dir_for
from harness.model.config import REPO_ROOT
from harness.pytest_plugin.caller import from_caller
from harness.results.telemetry import detect_rk3588
from tests.helpers import parser_commands

OFF_BOARD = not detect_rk3588("/")


def pytest_run(tmp_path, *args, env=None):
    """pytest on the suite's configuration, from the checkout's root, as a user types it."""
    return subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"),
                           "-p", "no:cacheprovider", f"--artifacts={tmp_path / 'artifacts'}",
                           f"--results=sqlite:///{tmp_path / 'r.sqlite'}", *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env)


def harness_run(*args, cwd=REPO_ROOT):
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def only_line(proc) -> str:
    """The one line a refused command prints (stdout and stderr together), asserting there is one."""
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip() and "Warning" not in line
             and not line.startswith("  warner(")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr and "INTERNALERROR" not in proc.stdout, lines
    return lines[0]


# ------------------------------------------------------------------ pytest-level mistakes

@pytest.mark.parametrize("expression, line", [
    ("not slow and not smok", "ERROR: -m 'not slow and not smok': no marker 'smok' (did you mean smoke?); "
                              "bin/test --markers lists them"),
    ("npu and (", "ERROR: -m 'npu and (': not a marker expression (column 10: "),
], ids=["unknown", "unparsable"])
def test_a_bad_marker_expression_is_one_line_before_any_worker_starts(tmp_path, expression, line):
    """Under xdist (as bin/test runs a tier) a misspelt marker ended in 35 lines of INTERNALERROR, exit 3."""
    proc = pytest_run(tmp_path, "-n", "2", "-m", expression)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    assert only_line(proc).startswith(line)


def test_a_case_without_thresholds_names_the_command_for_each_sampler(tmp_path):
    """Thresholds missing from a flow-euler and a Spectrum case: one line, once, naming both commands with
    the folder and the sampler (it was six tracebacks of 175 lines and a command without --sampler)."""
    golden = tmp_path / "golden"
    golden.mkdir()
    text = (golden_dir_for("embedded-digits") / "cases.toml").read_text()
    (golden / "cases.toml").write_text("\n".join(line for line in text.splitlines()
                                                 if not line.startswith(("ssim_min", "psnr_min"))))
    proc = pytest_run(tmp_path, "-p", "no:xdist", "--co", f"--golden-dir={golden}", "-m", "quality")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    command = f"bin/harness goldens thresholds --golden-dir={golden}"
    assert only_line(proc) == (f"ERROR: {golden / 'cases.toml'}: no ssim_min / psnr_min for case(s) seven, three, "
                               f"zero, seven-spectrum: derive them from the model's own runs with {command} and "
                               f"{command} --sampler spectrum")


@pytest.mark.slow       # a pytest inside a pytest inside this one (~10 s)
def test_plain_pytest_from_the_root_starts_subprocesses_that_find_the_harness(tmp_path):
    """`python -m pytest` with none of bin/test's environment (no PYTHONPATH): a test whose pytest runs in a
    folder of its own (pytester) still imports the plugin, as the fault matrix's runs do."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ANIMA_CWD", "PYTEST_XDIST_WORKER")}
    proc = pytest_run(tmp_path, "-p", "no:xdist", "-q",
                      "tests/unit/test_suite_settings.py::test_report_header_names_board_runtime_and_backend", env=env)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-2000:]


def test_test_paths_and_path_options_are_read_from_where_the_user_stands(tmp_path):
    here = tmp_path / "tests"
    (here / "unit").mkdir(parents=True)
    (here / "unit" / "test_x.py").write_text("")
    args = ["-m", "unit", "unit/test_x.py::test_y", "--artifacts=out", "--golden-dir", "g", "--results=sqlite:///r.db",
            "-k", "unit", "tests/absent.py", f"--model-dir={tmp_path}"]
    assert from_caller(args, here) == [
        "-m", "unit", f"{here}/unit/test_x.py::test_y", f"--artifacts={here / 'out'}", "--golden-dir",
        str(here / "g"), f"--results=sqlite:///{here / 'r.db'}", "-k", "unit", "tests/absent.py",
        f"--model-dir={tmp_path}"]


# ------------------------------------------------------------------ bin/harness

@pytest.mark.skipif(not OFF_BOARD, reason="checks the refusal off an RK3588")
@pytest.mark.parametrize("args, line", [
    (["probe-board"], "error: probe-board --backend auto: not an RK3588, so no board to measure: --backend "
                      "board-sim measures "),
    (["probe-board", "--backend", "onnxruntime"], "error: probe-board --backend onnxruntime: not an RK3588, so "),
    (["probe-board", "--backend", "rknnlite"], "error: --backend rknnlite: not an RK3588 (no rockchip,rk3588 "),
    (["generate", "--backend", "rknnlite"], "error: --backend rknnlite: not an RK3588 (no rockchip,rk3588 "),
], ids=["probe-board", "probe-board-onnxruntime", "probe-board-rknnlite", "generate-rknnlite"])
def test_a_board_command_off_the_board_is_one_line_and_writes_nothing(tmp_path, args, line):
    proc = harness_run(*args, "--out", tmp_path / "out" / "x.png")
    assert proc.returncode == 2 and only_line(proc).startswith(line)
    assert not (tmp_path / "out").exists(), "a refused run writes nothing (no report)"


@pytest.mark.parametrize("argv, line", [
    (["generat"], f"{PROG}: error: unknown command 'generat' (did you mean generate?); {PROG} --help lists them"),
    (["generate", "--stpes", "3"], f"{PROG}: error: unrecognized arguments: --stpes 3 (did you mean --steps?)"),
    (["generate", "--steps", "-1"], f"{PROG} generate: error: argument --steps: must be positive, got -1"),
    (["generate", "--require-npu"], f"{PROG}: error: unrecognized arguments: --require-npu (--require-npu is an "
                                    f"option of the suite's, bin/test --require-npu: docs/options.md)"),
    (["results", "chek"], f"{PROG} results: error: argument results_command: invalid choice: 'chek' (choose from "),
])
def test_a_usage_mistake_is_one_line_with_the_closest_match(capsys, argv, line):
    code = main(argv) if argv == ["generat"] else pytest.raises(SystemExit, main, argv).value.code
    assert code == 2
    [err] = capsys.readouterr().err.splitlines()
    assert err.startswith(line) and (argv[-1] != "chek" or err.endswith("(did you mean check?)")), err


def test_path_options_are_read_from_where_the_user_stands_and_named_whole(tmp_path):
    """bin/harness changes into the checkout: `--model-dir bad/empty` typed in tmp_path is tmp_path's."""
    (tmp_path / "bad" / "empty").mkdir(parents=True)
    env = {**os.environ, "ANIMA_VENV": os.environ.get("ANIMA_VENV", str(Path(sys.executable).parents[1])),
           "COLUMNS": "400"}
    proc = subprocess.run([str(REPO_ROOT / "bin" / "harness"), "inspect", "bad/empty"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and f"{tmp_path}/bad/empty/manifest.json: no manifest" in proc.stdout, proc.stdout


def test_a_second_run_into_the_same_out_is_refused_in_one_line(tmp_path):
    out = tmp_path / "out" / "x.png"
    with output_lock(out, "--out"):
        proc = harness_run("generate", "--steps", "1", "--out", out)
    assert proc.returncode == 2
    assert only_line(proc).startswith(f"error: --out {out}: another run is writing there (pid {os.getpid()} since ")
    assert not out.parent.exists()


def test_a_store_is_never_made_in_a_folder_that_does_not_exist(tmp_path, capsys):
    export = tmp_path / "runs.csv"
    export.write_text("")
    url = f"sqlite:///{tmp_path / 'missing' / 'x.db'}"
    assert main(["results", "import", str(export), "--results", url]) == 2
    assert capsys.readouterr().err == (f"error: --results {url}: no folder {tmp_path / 'missing'}; a store is made "
                                       f"only in a folder that exists\n")
    assert not (tmp_path / "missing").exists()


def test_help_lists_every_command_without_importing_one():
    """`bin/harness --help` took 3-8 s on a loaded machine importing every command's module (SQLAlchemy,
    onnx, scipy) for a list; the list is read from the modules' source."""
    probe = ("import sys\nfrom harness.cli.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             "print('loaded', *sorted(m for m in sys.modules if m.startswith(('harness.', 'numpy', 'sqlalchemy'))))")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    loaded = set(proc.stdout.splitlines()[-1].split()[1:])
    # cli.installed reads which installed distributions add a command (entry_points.txt), no command module
    known = ("harness.cli", "harness.cli.main", "harness.cli.usage", "harness.cli.installed")
    assert loaded and all(m.startswith("harness.core") or m in known for m in loaded), loaded
    listed = listing_parser()
    assert parser_commands(listed) == parser_commands(build_parser())
    full = {a.dest: a.help for p in (build_parser(),) for a in p._subparsers._group_actions[0]._choices_actions}
    short = {a.dest: a.help for a in listed._subparsers._group_actions[0]._choices_actions}
    assert short == full


@pytest.mark.parametrize("module", sorted(COMMANDS))
def test_every_option_has_help_and_every_command_an_example_from_the_readme(module):
    parser = build_parser([module])
    missing = [a.option_strings for a in actions(parser) if a.option_strings and not a.help]
    assert not missing, f"options without help text: {missing}"
    readme = (REPO_ROOT / "README.md").read_text()
    for command in COMMANDS[module]:
        epilog = parser._subparsers._group_actions[0].choices[command].epilog
        assert epilog and epilog.startswith("example:\n"), command
        for line in epilog.splitlines()[1:]:
            assert line.split("#")[0].strip() in readme, line


@pytest.mark.slow
@pytest.mark.timed      # it loads both cores for a few seconds: never beside a test that measures
def test_busy_starts_the_neighbour_and_stops_it_whole():
    """bin/busy: two spinning processes and one mapping 200 MiB with numpy and onnxruntime loaded; a stop
    (SIGTERM) leaves none of them behind."""
    import psutil
    env = {**os.environ, "ANIMA_VENV": os.environ.get("ANIMA_VENV", str(Path(sys.executable).parents[1]))}
    busy = subprocess.Popen([str(REPO_ROOT / "bin" / "busy")], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert busy.stdout.readline().startswith("busy: spinning (pids ")
        workers = psutil.Process(busy.pid).children()
        assert len(workers) == 3
        deadline = time.monotonic() + 60
        while workers[2].memory_info().rss < 100 << 20:      # the churn: numpy, onnxruntime, 200 MiB mapped
            assert time.monotonic() < deadline, "the mapping process never held 100 MiB"
            time.sleep(0.05)
    finally:
        busy.terminate()
        assert busy.wait(timeout=30) == 0
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, alive


def test_inspect_checkpoint_takes_a_model_folder_and_finds_the_profile(tmp_path, capsys):
    """It assumed anima-2b (a refusal for every other model) and refused a folder."""
    embedded = REPO_ROOT / "models" / "embedded"
    assert main(["inspect-checkpoint", str(embedded)]) == 0
    assert "dit.safetensors (profile embedded-digits)" in " ".join(capsys.readouterr().out.split())
    assert main(["inspect-checkpoint", str(embedded / "dit.safetensors")]) == 0      # its model.toml beside it
    lone = tmp_path / "lone.safetensors"
    lone.write_bytes((embedded / "dit.safetensors").read_bytes())
    capsys.readouterr()
    assert main(["inspect-checkpoint", str(lone)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {lone}: matches no profile (anima-2b: tensor ") and "cosmos-tiny: " in line
    lone.write_bytes(b"\x08")
    assert main(["inspect-checkpoint", str(lone)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {lone}: not a readable safetensors file") and "profile" not in line
