"""The LAVA jobs `bin/harness lab lava-job` writes for every board profile with a [lava] table, each tier
and each device type's health check, pass LAVA's own validator, `lava_common.schemas.validate(job,
strict=True)` from Debian's lava-common (bin/debian-packages.txt), run in the system Python it is
installed for; a misspelt key fails it. Every job runs the one test definition at the reviewed commit
and hands it only parameters it declares; the definition hands every parameter to lava/board-session
as an argument. harness/lab/results.py turns a real run's JUnit and benchmark JSON into LAVA's test
sets, cases and measurements; `lab setup-board` makes the board's directories in a throw-away root.
That LAVA's dispatcher runs all this as intended is tests/lab/test_lava_run.py."""
from __future__ import annotations

import json
import os
import pwd
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from harness.cli.main import main
from harness.core.errors import ConfigError
from harness.lab.jobs import (
    DEFINITION,
    TIERS,
    commit_of,
    definition_params,
    job_yaml,
    lab_boards,
    lava_job,
    load_board,
)
from harness.lab.results import lava_commands
from harness.lab.setup import SUBFOLDERS, WORK_ROOT
from harness.model.config import REPO_ROOT
from tests.helpers import missing_tool, pytest_artifacts

LAVA = REPO_ROOT / "lava"
SESSION = LAVA / "board-session"
# A commit of this checkout whose board profiles are the working tree's (the generator checks both).
SHA = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
SYSTEM_PYTHON = "/usr/bin/python3"
# Device types LAVA ships (lava/etc/dispatcher-config/device-types upstream); the others are in lava/device-types.
UPSTREAM_DEVICE_TYPES = {"rk3588-rock-5b", "ssh"}
# Runs in the system Python: prints {file: null | "the validator's message"} for every file named.
VALIDATE = """
import json, sys, yaml
from lava_common.schemas import validate
out = {}
for name in sys.argv[1:]:
    try:
        validate(yaml.safe_load(open(name)), strict=True)
        out[name] = None
    except Exception as exc:
        out[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def lava_validate(*paths: Path) -> dict[str, str | None]:
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import lava_common.schemas"], capture_output=True, text=True)
    if probe.returncode != 0:
        missing_tool(f"Debian's lava-common is not installed for {SYSTEM_PYTHON}: bin/test installs it as root")
    proc = subprocess.run([SYSTEM_PYTHON, "-c", VALIDATE, *map(str, paths)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return {Path(k).name: v for k, v in json.loads(proc.stdout).items()}


def load(path: Path) -> dict:
    return YAML(typ="safe").load(path.read_text())


def every_job() -> dict[str, dict]:
    """file name -> job: every LAVA board in every tier, and one health check per device type."""
    jobs = {}
    for board in lab_boards():
        for tier in TIERS:
            jobs[f"{board.name}-{tier}.yaml"] = lava_job(board, tier, suite_sha=SHA, allow_placeholders=True)
        if board.boot != "ssh":
            jobs[f"health-{board.device_type}.yaml"] = lava_job(board, "smoke", health_check=True,
                                                                 allow_placeholders=True)
    return jobs


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("jobs")
    for name, job in every_job().items():
        (out / name).write_text(job_yaml(job, "test"))
    return {name: out / name for name in every_job()}


def test_every_generated_job_validates_strictly(written):
    assert {"rock5c-8gb-nightly.yaml", "rock5b-pr.yaml", "health-rk3588-rock-5b.yaml",
            "health-rk3588-rock-5c.yaml", "host-ci-pr.yaml"} <= set(written)
    assert lava_validate(*written.values()) == {name: None for name in written}


def test_the_rock5b_job_names_its_own_device_type_and_profile(tmp_path):
    out = tmp_path / "rock5b.yaml"
    assert main(["lab", "lava-job", "--board", "rock5b", "--tier", "pr", "--suite-sha", "HEAD", "--out", str(out),
                 "--allow-placeholders"]) == 0
    assert lava_validate(out) == {"rock5b.yaml": None}
    job = load(out)
    assert job["device_type"] == "rk3588-rock-5b"
    definition = _definition(job)
    assert definition["parameters"]["BOARD_PROFILE"] == "boards/rock5b.toml"
    assert (REPO_ROOT / definition["parameters"]["BOARD_PROFILE"]).is_file()


@pytest.mark.parametrize("old, new, named", [
    ("    transfer_overlay:\n", "    transfer_overlays:\n", "transfer_overlays"),
    ("      login_prompt:", "      login_promt:", "login_promt"),
    # a definition matches none of LAVA's three kinds: the message points at the definition
    ("      repository:", "      repositroy:", "['definitions'][0]"),
    ("timeouts:\n", "timeout:\n", "timeout"),
])
def test_a_misspelt_key_fails_the_validation(written, tmp_path, old, new, named):
    text = written["rock5c-8gb-nightly.yaml"].read_text()
    assert text.count(old) == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(old, new))
    message = lava_validate(bad)["bad.yaml"]
    assert message is not None and named in message, message


def _definition(job: dict) -> dict:
    [test] = [a["test"] for a in job["actions"] if "test" in a]
    [definition] = test["definitions"]
    return definition


@pytest.mark.parametrize("name", sorted(every_job()))
def test_the_job_runs_the_one_definition_at_the_reviewed_commit(name):
    job = every_job()[name]
    definition = _definition(job)
    assert definition["from"] == "git" and definition["path"] == DEFINITION
    assert (REPO_ROOT / DEFINITION).is_file()
    if name.startswith("health-"):
        assert "revision" not in definition and definition["parameters"]["TIER"] == "smoke"
    else:
        assert definition["revision"] == SHA
    assert set(definition["parameters"]) <= set(definition_params())
    assert (REPO_ROOT / definition["parameters"]["BOARD_PROFILE"]).is_file()


def test_the_definition_hands_every_parameter_to_the_session_as_an_argument():
    # LAVA writes the parameters as plain shell assignments in run.sh: an exported-only use would be empty
    [step] = load(LAVA / "definitions" / "anima-npu.yaml")["run"]["steps"]
    argv = shlex.split(step)
    assert argv[0] == "lava/board-session"
    passed = dict(zip(argv[1::2], argv[2::2]))
    assert sorted(passed.values()) == sorted(f"${name}" for name in definition_params())
    accepted = set(re.findall(r"\[([a-z0-9-]+)\]=", SESSION.read_text()))
    assert {flag.removeprefix("--") for flag in passed} == accepted


def test_the_sessions_pytest_runs_use_options_the_suite_has(suite_options):
    text = SESSION.read_text()
    runs = [line.strip() for line in text.splitlines() if line.strip().startswith("suite -m ")]
    assert len(runs) == 2 and '--tier="${opt[tier]}"' in runs[1]
    # the smoke tier requires the NPU where the profile does ([suite] require_npu): every board's does
    assert "--require-npu" not in text
    for board in lab_boards():
        suite = tomllib.loads((REPO_ROOT / board.profile).read_text()).get("suite", {})
        assert bool(suite.get("require_npu")) is (board.boot != "ssh"), board.profile
    common = text[text.index("common=("):text.index(")", text.index("common=("))]
    flags = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", " ".join(runs) + common))
    assert {"--partition", "--results", "--board-profile", "--no-save-baseline"} <= flags
    assert flags <= suite_options, flags - suite_options
    assert ".ci/board-diagnostics" in text


def test_the_session_refuses_an_option_it_does_not_know():
    proc = subprocess.run([str(SESSION), "--partition-ulr", "x"], capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "error: board-session: unknown option or missing value: --partition-ulr"


@pytest.mark.parametrize("argv, fragment", [
    (["--board", "rock5d"], "--board rock5d: no board profile"),
    (["--board", "rock5b", "--suite-sha", "abc"], "--suite-sha abc: not a commit of this checkout"),
    (["--board", "rock5b", "--suite-sha", "0" * 40], f"--suite-sha {'0' * 40}: not a commit of this checkout"),
    (["--board", "rock5b"], "--suite-sha: a job runs one reviewed commit"),
    # a profile's name reaches run.sh as BOARD_PROFILE: a quote, a space, a '$' are refused
    (["--board", "o'pi", "--suite-sha", SHA], "--board o'pi: a profile's name is letters, digits"),
    (["--board", "o$(id)", "--suite-sha", SHA], "--board o$(id): a profile's name is letters"),
    (["--board", "rock5b", "--suite-sha", SHA], "--set PARTITION_URL: not given, and the job would name the "
                                                "placeholder http://lab-store.lab.invalid/"),
    # every value is written KEY='value' into LAVA's run.sh
    (["--board", "rock5b", "--suite-sha", SHA, "--allow-placeholders", "--set", "GATE_OPTIONS=-k \"it's\""],
     "--set GATE_OPTIONS='-k \"it\\'s\"': \"'\" is refused in a job's value"),
    (["--board", "rock5b", "--suite-sha", SHA, "--allow-placeholders", "--set", "MODEL_DIR=/opt/anima;reboot"],
     "--set MODEL_DIR='/opt/anima;reboot': ';' is refused"),
    (["--board", "rock5b", "--suite-sha", SHA, "--allow-placeholders", "--set", "UPLOAD_URL=http://s/$HOME"],
     "--set UPLOAD_URL='http://s/$HOME': '$' is refused"),
    (["--board", "rock5b", "--suite-sha", SHA, "--allow-placeholders", "--set", "MODEL_DIR=/opt/my models"],
     "--set MODEL_DIR='/opt/my models': ' ' is refused"),
    (["--board", "rock5b", "--suite-sha", SHA, "--allow-placeholders", "--suite-repo", "https://x/a b.git"],
     "--suite-repo 'https://x/a b.git': ' ' is refused"),
    (["--board", "rock5b", "--suite-sha", SHA, "--set", "PARTITON_URL=x"], "--set PARTITON_URL: not a parameter"),
    (["--board", "rock5b", "--suite-sha", SHA, "--set", "TIER"], "--set TIER: expected KEY=VALUE"),
    (["--board", "rock5b", "--suite-sha", SHA, "--health-check"], "--health-check: the smoke tier"),
])
def test_bad_lava_job_input_is_one_error_line(tmp_path, capsys, argv, fragment):
    out = tmp_path / "job.yaml"
    assert main(["lab", "lava-job", "--tier", "pr", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and fragment in err and "\n" not in err, err
    assert not out.exists()


def test_a_value_the_session_reads_as_options_keeps_its_spaces_and_double_quotes():
    board = load_board("rock5b")
    job = lava_job(board, "pr", suite_sha=SHA, allow_placeholders=True,
                   values={"GATE_OPTIONS": '-k "test_numerics or test_quality"',
                           "UPLOAD_URL": "https://store/x.tar.gz?sig=1&exp=2"})
    assert _definition(job)["parameters"]["GATE_OPTIONS"] == '-k "test_numerics or test_quality"'


def test_a_non_root_login_is_refused(tmp_path):
    """LAVA unpacks its overlay at / as the login user: a user cannot, and under sudo its test runner
    cannot write its results, so the job would pass having run nothing (docs/lab.md, Why root)."""
    text = (REPO_ROOT / "boards" / "rock5b.toml").read_text()
    assert 'login = "root"' in text
    (tmp_path / "opi.toml").write_text(text.replace('login = "root"', 'login = "anima-ci"'))
    with pytest.raises(ConfigError) as raised:
        load_board("opi", tmp_path)
    assert str(raised.value) == (f"{tmp_path}/opi.toml [lava]: login 'anima-ci': LAVA's test shell needs root (a "
                                 "user cannot unpack LAVA's overlay at / nor, unpacked by sudo, write its results)")


def test_a_profile_must_be_committed_at_the_suite_sha_as_it_is_here(tmp_path):
    """The job names the profile by its path in the checkout LAVA makes at --suite-sha: an uncommitted
    profile, or one edited since, would be another board's settings or none."""
    repo = tmp_path / "repo"
    (repo / "boards").mkdir(parents=True)
    text = (REPO_ROOT / "boards" / "rock5b.toml").read_text()
    (repo / "boards" / "rock5b.toml").write_text(text)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "empty"], check=True)
    board = load_board("rock5b", repo / "boards")
    board = type(board)(**{**board.__dict__, "profile": "boards/rock5b.toml"})
    with pytest.raises(ConfigError, match=r"boards/rock5b.toml is not committed at [0-9a-f]{12}: the job"):
        commit_of("HEAD", board, repo)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "the profile"], check=True)
    assert re.fullmatch(r"[0-9a-f]{40}", commit_of("HEAD", board, repo))
    (repo / "boards" / "rock5b.toml").write_text(text + "\n# edited\n")
    with pytest.raises(ConfigError, match=r"differs from its copy at [0-9a-f]{12}: commit it"):
        commit_of("HEAD", board, repo)


def test_a_board_that_boots_its_own_os_downloads_the_overlay_afresh_and_checks_it():
    """The overlay goes into a new folder (a failed download never finds a previous job's file) and is
    unpacked only when it is whole; otherwise lava-test-raise's signal goes into the prompt. What LAVA
    does with it is tests/lab/test_lava_run.py's; here the shell's side, run by sh as LAVA would type it."""
    boot = next(a["boot"] for a in every_job()["rock5c-8gb-pr.yaml"]["actions"] if "boot" in a)
    transfer = boot["transfer_overlay"]
    script = (f'PS1="root@board# "; rm overlay.tar.gz 2>/dev/null; {transfer["download_command"]} '
              f'http://127.0.0.1:9/tmp/overlay.tar.gz; {transfer["unpack_command"]} overlay.tar.gz; '
              'echo "PS1=$PS1"; echo "cwd=$PWD"')
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=REPO_ROOT)
    lines = dict(line.split("=", 1) for line in proc.stdout.splitlines())
    assert Path(lines["cwd"]).parent == Path(os.environ.get("TMPDIR", "/tmp")) and Path(lines["cwd"]) != REPO_ROOT
    assert lines["PS1"] == "<LAVA_SIGNAL_TESTRAISE overlay-not-unpacked:overlay.tar.gz> root@board# "
    Path(lines["cwd"]).rmdir()


def test_a_board_profile_without_a_lava_table_is_named(tmp_path):
    (tmp_path / "plain.toml").write_text('[suite]\nbackend = "onnxruntime"\n')
    with pytest.raises(Exception, match=r"plain.toml: no \[lava\] table"):
        load_board("plain", tmp_path)


def test_each_device_type_is_shipped_or_upstream():
    from jinja2 import Environment, FileSystemLoader, meta
    env = Environment(loader=FileSystemLoader([str(LAVA / "device-types"), str(LAVA / "devices")]))
    for board in lab_boards():
        template = LAVA / "device-types" / f"{board.device_type}.jinja2"
        assert template.is_file() or board.device_type in UPSTREAM_DEVICE_TYPES, board
        if template.is_file():
            assert list(meta.find_referenced_templates(env.parse(template.read_text()))) == ["base-uboot.jinja2"]
    for device in (LAVA / "devices").glob("*.jinja2"):
        parents = list(meta.find_referenced_templates(env.parse(device.read_text())))
        assert [(LAVA / "device-types" / p).is_file() for p in parents] == [True], device


# ------------------------------------------------------------------ what the session reports

def _run(tmp_path) -> Path:
    """A real run's artifacts: pytest with JUnit and pytest-benchmark's JSON on a module with a passing,
    a failing, a skipped test, properties, and a benchmark whose extra_info has the suite's keys."""
    source = (
        "import pytest, time\n"
        "def test_matches_golden_seven(record_property):\n"
        "    time.sleep(0.05); record_property('ssim', 0.9999760198); record_property('quality_on', 'image')\n"
        "    record_property('psnr', float('inf'))\n"
        "def test_matches_golden_three():\n    assert False\n"
        "@pytest.mark.skip(reason='no board')\ndef test_skipped():\n    pass\n"
        "def test_denoise_time(benchmark):\n"
        "    benchmark.pedantic(time.sleep, args=(0.01,), rounds=1)\n"
        "    benchmark.extra_info.update(mean_step_s=0.25, core_s_per_step={'ffn': 0.012, 'self_attn': 0.02},\n"
        "        verdict={'verdicts': [{'label': 'denoise step', 'shift_pct': 3.5, 'regression': False},\n"
        "                              {'label': 'ffn core', 'shift_pct': 41.0, 'regression': True}]})\n")
    return pytest_artifacts(tmp_path, source, "--benchmark-json={artifacts}/benchmark.json")


def test_a_run_becomes_one_set_per_gate_one_case_per_test_and_its_measurements(tmp_path):
    commands = [shlex.split(c) for c in lava_commands(_run(tmp_path))]
    assert commands[0] == ["lava-test-set", "start", "quality"] and commands[-1] == ["lava-test-set", "stop", "quality"]
    cases = {c[1]: c for c in commands if c[0] == "lava-test-case"}
    seven = cases["test_matches_golden_seven"]
    assert seven[2:4] == ["--result", "pass"] and seven[6:] == ["--units", "s"] and float(seven[5]) >= 0.05
    assert cases["test_matches_golden_three"][3] == "fail" and cases["test_skipped"][3] == "skip"
    assert cases["test_matches_golden_seven.ssim"][3:] == ["pass", "--measurement", "0.9999760198", "--units", "SSIM"]
    assert "test_matches_golden_seven.quality_on" not in cases       # not a number: no measurement
    assert "test_matches_golden_seven.psnr" not in cases             # not finite: LAVA takes numbers
    assert cases["test_denoise_time.step"][3:] == ["pass", "--measurement", "0.25", "--units", "s"]
    assert cases["test_denoise_time.ffn_core"][3:] == ["pass", "--measurement", "0.012", "--units", "s"]
    assert cases["test_denoise_time.shift.denoise_step"][3:] == ["pass", "--measurement", "3.5", "--units", "%"]
    # a figure that regressed fails its own case
    assert cases["test_denoise_time.shift.ffn_core"][3] == "fail"
    assert all(re.fullmatch(r"[-_a-zA-Z0-9.]+", name) for name in cases)        # LAVA's name pattern


def test_a_run_without_results_is_one_failed_case(tmp_path):
    proc = subprocess.run([SYSTEM_PYTHON, "-m", "harness.lab.results", str(tmp_path / "gates")], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stdout.strip() == "lava-test-case gates-results --result fail"
    assert proc.stderr.startswith("error: ") and "gates" in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------------ the board's directories

def test_setup_board_makes_the_directories_owned_by_the_ci_user(tmp_path, capsys):
    if os.geteuid() != 0:
        missing_tool("giving folders to another user needs root")
    nobody = pwd.getpwnam("nobody")
    assert main(["lab", "setup-board", "--root", str(tmp_path), "--user", "nobody"]) == 0
    base = tmp_path / WORK_ROOT
    for folder in [base, *(base / name for name in SUBFOLDERS)]:
        assert folder.is_dir() and folder.stat().st_uid == nobody.pw_uid, folder
        assert folder.stat().st_mode & 0o777 == 0o755
    assert {"lava", "venvs", "partitions"} <= set(SUBFOLDERS)
    # again, after someone took a folder: it is given back
    os.chown(base / "lava", 0, 0)
    assert main(["lab", "setup-board", "--root", str(tmp_path), "--user", "nobody"]) == 0
    assert (base / "lava").stat().st_uid == nobody.pw_uid
    assert str(base / "lava") in capsys.readouterr().out


def test_setup_board_names_a_missing_user(tmp_path, capsys):
    assert main(["lab", "setup-board", "--root", str(tmp_path), "--user", "anima-ci-nobody-here"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: --user anima-ci-nobody-here: no such user")
    assert not (tmp_path / WORK_ROOT).exists()


def test_the_session_work_root_is_the_one_setup_board_makes():
    # the session's default and the folder it writes are what setup-board makes
    text = SESSION.read_text()
    assert f"[work-root]=/{WORK_ROOT}" in text and '"$root/lava"' in text
    assert definition_params()["WORK_ROOT"] == f"/{WORK_ROOT}"


# ------------------------------------------------------------------ docs/lab.md

def test_the_lab_pages_lab_commands_parse_and_the_runnable_ones_write_valid_jobs(tmp_path, capsys):
    from harness.cli.main import build_parser
    from tests.doc_commands import bash_blocks, command_lines
    blocks = bash_blocks((REPO_ROOT / "docs" / "lab.md").read_text())
    ran = []
    for marker, script in blocks:
        for line in command_lines(script):
            argv = shlex.split(line, comments=True)
            argv = argv[1:] if argv[0] == "sudo" else argv
            if argv[:2] != ["bin/harness", "lab"]:
                continue
            build_parser(["lab"]).parse_args(argv[1:])       # a misspelt option exits here
            if marker == "":
                argv = [a.replace("out/", f"{tmp_path}/") for a in argv[1:]]
                assert main(argv) == 0, capsys.readouterr().err
                ran.append(Path(argv[argv.index("--out") + 1]))
    assert len(ran) >= 2 and any(m == "board-only" for m, _ in blocks)
    assert lava_validate(*ran) == {p.name: None for p in ran}


# ------------------------------------------------------------------ the NPU check before the gates

def test_the_gates_need_the_npu_node_only_where_the_profile_requires_the_npu(tmp_path):
    from harness.lab.node import node_problem
    board_tree = REPO_ROOT / "tests" / "data" / "sysfs-rk3588"
    rock5b, host = REPO_ROOT / "boards" / "rock5b.toml", REPO_ROOT / "boards" / "host-ci.toml"
    assert node_problem(rock5b, board_tree) is None
    problem = node_problem(rock5b, tmp_path)
    assert problem.startswith(f"{rock5b} requires the NPU: no NPU device node under {tmp_path}"), problem
    assert node_problem(host, tmp_path) is None


def test_the_npu_check_prints_its_problem_for_the_session(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness.lab.node", str(tmp_path / "none.toml")], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "none.toml" in proc.stdout and "Traceback" not in proc.stderr


# ------------------------------------------------------------------ GATE_OPTIONS beside the tier's -m

@pytest.mark.parametrize("options, marks, rest", [
    ('--backend=faults -k "test_numerics or test_quality"', "npu and not smoke",
     ["--backend=faults", "-k", "test_numerics or test_quality"]),
    ('-m "numerics or quality" --fault=nan@3', "(npu and not smoke) and (numerics or quality)", ["--fault=nan@3"]),
    ("--markexpr=quality -mnumerics", "(npu and not smoke) and (quality) and (numerics)", []),
    ("", "npu and not smoke", []),
])
def test_gate_options_never_replace_the_tiers_marker_expression(options, marks, rest):
    """pytest takes the last -m: one in GATE_OPTIONS is joined to the tier's with "and", and said."""
    proc = subprocess.run([SYSTEM_PYTHON, "-m", "harness.lab.gate_options", "npu and not smoke", options],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.splitlines() == [marks, *rest], proc
    said = f"board-session: GATE_OPTIONS' -m combined with the tier's: -m '{marks}'\n"
    assert proc.stderr == (said if marks != "npu and not smoke" else "")


def test_gate_options_that_do_not_split_are_one_error_line():
    proc = subprocess.run([SYSTEM_PYTHON, "-m", "harness.lab.gate_options", "npu", '-k "open'], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr == "error: No closing quotation\n"
