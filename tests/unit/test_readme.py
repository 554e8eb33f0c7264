"""The README stays on one screen and every command in it works. Each `bin/harness` line parses with
the harness's own parser and each `bin/test` line uses pytest's options and markers (fast); and every
line of its ```bash blocks is run, in order, as a reader would paste it (slow): the main job and the
other commands on the embedded model, so a misspelt or removed command or option fails. The options
table in docs/options.md is the option declaration's.

Running a README line here changes only where it works and how long it takes:
- `bin/harness` runs in a temporary working folder (the real bin/harness works from the checkout), so
  out/, artifacts/ and .benchmarks/ are the test's (models/, boards/ and toolkit/ are linked from the
  checkout); what a line takes as given is made there first:
  anima.safetensors (an anima-2b-shaped sparse checkpoint: inspect-checkpoint reads its header only),
  bench-ab's out/old and out/new (two FP16 exports of the embedded model), and a fleet in the results
  store (three ROCK 5C boards' runs interleaved in time, built as tests/results_data.py builds them) for
  `results boards`;
- `bin/test` runs the real bin/test with --artifacts and --results in that folder; `-m npu` (the gates,
  whose runs `trend`, `results` and `accept-golden` read) runs its tests, every other line --collect-only
  (the whole suite and the slow tiers are the suite's own runs, not this test's);
- `accept-golden` writes into a copy of the golden folder, not into the checkout;
- `search-precision` (13-20 minutes of conversions, docs/precision.md) runs for SEARCH_SECONDS and must
  not have failed by then.
A line whose comment says "exits N" must exit N; every other line must exit 0."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest

from harness.cli.main import build_parser
from harness.cli.optiondoc import options_table
from tests.doc_commands import FAILED, bash_blocks, command_lines, commands_of, run_script, suite_wrappers
from tests.helpers import parser_commands

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SEARCH_SECONDS = 60
# The checkout's input folders, linked into the working folder (golden/ is copied: accept-golden writes it).
READ_ONLY = ("models", "boards", "toolkit")
# A steady fleet's step times (fractions of 1 s) for `results boards`: no board an outlier.
FLEET_NOISE = (0.0, 0.004, -0.003, 0.002, -0.001, 0.003)


def readme_commands(program: str) -> list[list[str]]:
    """The arguments of every README line that runs `program`."""
    return [argv for _, block in bash_blocks(README.read_text()) for argv in commands_of(block, program)]


def readme_lines() -> list[str]:
    return [line for _, block in bash_blocks(README.read_text()) for line in command_lines(block)]


HARNESS = readme_commands("bin/harness")
TESTS = readme_commands("bin/test")


def test_readme_and_every_docs_page_are_at_most_250_lines():
    # a page that explains stays short; a longer one has grown a log (git keeps the history)
    pages = [README, *sorted((README.parent / "docs").glob("*.md"))]
    long = {page.name: n for page in pages if (n := len(page.read_text().splitlines())) > 250}
    assert long == {}, f"pages over 250 lines: {long}"


def test_the_readme_lists_every_command():
    listed = {argv[0] for argv in HARNESS}
    commands = parser_commands(build_parser())
    assert commands - listed == set(), "commands missing from the README's command list"


@pytest.mark.parametrize("argv", HARNESS, ids=[" ".join(a)[:60] for a in HARNESS])
def test_readme_harness_command_parses(argv, capsys):
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"bin/harness {shlex.join(argv)}: {capsys.readouterr().err.strip()} (exit {exc.code})")


def _markers() -> set[str]:
    block = re.search(r"^markers =\n((?:[ \t]+[^\n]*\n)+)", (ROOT / "pytest.ini").read_text(), flags=re.M).group(1)
    return {line.split(":")[0].strip() for line in block.splitlines()}


@pytest.mark.parametrize("argv", TESTS, ids=[" ".join(a)[:60] or "(no arguments)" for a in TESTS])
def test_readme_test_command_uses_known_markers_and_options(argv, suite_help):
    markers = _markers()
    for i, arg in enumerate(argv):
        if arg.startswith("-") and not arg.startswith("--no-"):
            assert re.search(rf"(^|[\s,]){re.escape(arg.split('=')[0])}[\s=,]", suite_help, flags=re.M), \
                f"bin/test {shlex.join(argv)}: pytest has no option {arg}"
        if i and argv[i - 1] == "-m":
            words = set(re.findall(r"\w+", arg)) - {"and", "or", "not"}
            assert words <= markers, f"bin/test {shlex.join(argv)}: no marker {sorted(words - markers)} in pytest.ini"


def test_the_shell_extraction_finds_a_misspelt_command(capsys):
    [(_, block)] = bash_blocks("```bash\nbin/harness genrate --seed 1   # misspelt\n```\n")
    argv = commands_of(block, "bin/harness")
    assert argv == [["genrate", "--seed", "1"]]
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv[0])


def test_options_table_is_the_declaration():
    text = (ROOT / "docs/options.md").read_text()
    table = text.split("<!-- options table: generated -->\n", 1)[1].split("<!-- end of the options table -->", 1)[0]
    assert table == options_table(), "docs/options.md is stale: python -m harness.cli.optiondoc"


def _as_run(line: str, tmp: Path) -> tuple[str, set[int]]:
    """The line as this test runs it (see the module's docstring) and the exit statuses it may end with."""
    said = re.search(r"#.*\bexits (\d+)", line)
    statuses = {int(said.group(1)) if said else 0}
    argv = shlex.split(line, comments=True)
    if argv[0] == "bin/test" and argv[1:] != ["-m", "npu"]:
        # Its own artifacts folder: a run empties its folder, and accept-golden reads the npu run's.
        line = f"{line.split('#')[0].rstrip()} --collect-only -q --artifacts={tmp}/collected"
    elif argv[:2] == ["bin/harness", "accept-golden"]:
        line = f"{line.split('#')[0].rstrip()} --golden-dir={tmp}/golden"
    elif argv[:2] == ["bin/harness", "search-precision"]:
        line, statuses = f"timeout {SEARCH_SECONDS} {line}", statuses | {124}
    return line, statuses


def run_line(line: str, tmp: Path) -> str | None:
    """Run one README line in the working folder; None, or what went wrong."""
    script, statuses = _as_run(line, tmp)
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    status, tail = run_script(script, tmp, env)
    return None if status in statuses else f"`{line}` exited {status} (expected {sorted(statuses)}):\n{tail}"


@pytest.fixture
def workdir(tmp_path) -> Path:
    suite_wrappers(tmp_path)
    for name in READ_ONLY:      # a line naming models/... finds what bin/harness finds from the checkout
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    return tmp_path


@pytest.fixture
def readme_workdir(workdir) -> Path:
    """The working folder with what the README's lines take as given."""
    from harness.gates.cases import golden_dir_for
    from harness.model.bundle import load_bundle
    from harness.model.config import EMBEDDED_DIR, load_profile
    from harness.model.safetensors_io import write_streamed
    from harness.model.weights import expected_shapes
    from harness.partition.onnx_export import ExportSettings, export_partition
    from harness.results.store import ResultsStore
    from tests.results_data import make_run
    anima = load_profile("anima-2b")
    write_streamed(workdir / "anima.safetensors", [(k, "BF16", s) for k, s in expected_shapes(anima).items()], None)
    bundle = load_bundle(EMBEDDED_DIR)
    for side in ("old", "new"):
        export_partition(bundle.weights, bundle.cfg, workdir / "out" / side, ExportSettings(precision="float16"))
    shutil.copytree(golden_dir_for(bundle.cfg.name), workdir / "golden")
    with ResultsStore(f"sqlite:///{workdir}/.benchmarks/results.sqlite") as store:
        for b, board in enumerate(("rock-5c-aaaa", "rock-5c-bbbb", "rock-5c-cccc")):
            for i, noise in enumerate(FLEET_NOISE):
                store.add_run(make_run(f"{board}-{i}", 1.0 + noise, board=board, minute=3 * i + b))
    return workdir


@pytest.mark.parametrize("old, new, said", [
    ("bin/harness plan --budget", "bin/harness plna --budget", "unknown command 'plna' (did you mean plan?)"),
    pytest.param("plan --budget 2GiB", "plan --budgte 2GiB", "unrecognized arguments", marks=pytest.mark.slow)])
def test_a_misspelt_readme_command_fails_when_run(workdir, old, new, said):
    [line] = [line for line in readme_lines() if old in line]
    failure = run_line(line.replace(old, new), workdir)
    assert failure is not None and FAILED in failure and said in failure, failure


@pytest.mark.slow           # every README line: about 10 minutes, most of it rknn-toolkit2 conversions
@pytest.mark.toolkit
def test_every_readme_command_runs(readme_workdir, toolkit_version):
    lines = readme_lines()
    assert len(lines) >= 25 and lines[0].startswith("bin/harness generate")
    for line in lines:      # in order, stopping at the first failure: later lines use earlier lines' files
        start = time.monotonic()
        failure = run_line(line, readme_workdir)
        print(f"{time.monotonic() - start:6.1f} s  {line.split('#')[0].strip()}")     # with -s: the time of each
        assert failure is None, f"README command fails:\n{failure}"
