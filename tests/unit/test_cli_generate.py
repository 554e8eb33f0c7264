"""`python -m harness generate`: the main job, its determinism and its errors."""
import subprocess
import sys

import numpy as np
import pytest

from harness.cli.main import main
from harness.core.imageio import load_png
from tests.helpers import make_random_model_dir


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """Four blocks: the command's determinism, its errors and its log lines do not depend on the depth
    (each process's partition export and run do)."""
    return make_random_model_dir(tmp_path_factory.mktemp("model"), blocks=4)


def test_generate_writes_a_png_of_the_decoder_size(model_dir, tmp_path):
    out = tmp_path / "img.png"
    assert main(["generate", "--model-dir", str(model_dir), "--steps", "2", "--out", str(out), "--quiet"]) == 0
    assert load_png(out).shape == (64, 64, 3)


def test_same_command_twice_gives_identical_bytes(model_dir, tmp_path):
    # Two fresh processes (nothing shared but the files), side by side on the machine's cores;
    # determinism does not depend on the step count, so two steps suffice. The other seed needs no
    # process of its own.
    args = ["generate", "--model-dir", str(model_dir), "--steps", "2", "--quiet"]
    a, b, c = tmp_path / "a.png", tmp_path / "b.png", tmp_path / "c.png"
    procs = [subprocess.Popen([sys.executable, "-m", "harness", *args, "--out", str(out)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for out in (a, b)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, out + err
    assert a.read_bytes() == b.read_bytes()
    assert main([*args, "--out", str(c), "--seed", "99"]) == 0
    assert c.read_bytes() != a.read_bytes()


@pytest.mark.parametrize("args,fragment", [
    (["--steps", "0"], "--steps: must be positive"),
    (["--steps", "many"], "--steps: expected a whole number"),
    (["--cfg", "abc"], "--cfg: expected a number"),
    (["--seed", "-4"], "--seed: must be within"),
])
def test_bad_cli_values_are_one_clear_error(model_dir, capsys, args, fragment):
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--model-dir", str(model_dir), *args])
    assert exit_info.value.code == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.parametrize("args,fragment", [
    (["--prompt", "a handwritten giraffe"], "prompt word 'giraffe' is not in the vocabulary"),
    (["--out", "x.jpg"], "x.jpg: the image is written as PNG"),
])
def test_bad_run_values_name_the_culprit(model_dir, capsys, args, fragment):
    assert main(["generate", "--model-dir", str(model_dir), "--steps", "1", "--quiet", *args]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


def test_bad_weights_file_exits_without_traceback(model_dir, tmp_path):
    broken = make_random_model_dir(tmp_path / "broken", blocks=4)
    (broken / "dit.safetensors").write_bytes(b"not a safetensors file at all")
    proc = subprocess.run([sys.executable, "-m", "harness", "generate", "--model-dir", str(broken)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "dit.safetensors: not a readable safetensors file" in proc.stderr
    assert "Traceback" not in proc.stderr
    missing = subprocess.run([sys.executable, "-m", "harness", "generate", "--model-dir", str(tmp_path / "nope")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "model directory does not exist" in missing.stderr


def test_batched_reference_equals_single_runs(model_dir):
    from harness.model.bundle import load_bundle
    from harness.sampling.reference_run import sample_reference
    from harness.sampling.settings import SampleSettings
    bundle = load_bundle(model_dir)
    # Two steps: the second sees the first's update, which is where rows could mix.
    s = SampleSettings(steps=2, cfg_scale=4.0, shift=3.0, seed=5)
    batch = sample_reference(bundle, ["digit one", "the number 7"], [5, 6], s)
    single = sample_reference(bundle, ["the number 7"], [6], s)
    np.testing.assert_allclose(batch[1:], single, atol=1e-5)


def test_progress_in_a_log_is_a_few_plain_lines(model_dir, tmp_path):
    # stderr is a pipe here, as in a CI log: no live bar; the first and the last step's line (with elapsed
    # and ETA), and one more only when 10 s passed (the three steps take less).
    proc = subprocess.run([sys.executable, "-m", "harness", "generate", "--model-dir", str(model_dir),
                           "--steps", "3", "--out", str(tmp_path / "p.png")], capture_output=True, text=True,
                          check=True)
    lines = [line for line in proc.stderr.splitlines() if "step" in line]
    assert [line.split(": step ")[1].split(",")[0] for line in lines] == ["1/3", "3/3"], proc.stderr
    assert all(", elapsed " in line and ", ETA " in line for line in lines)
    assert "\r" not in proc.stderr and "\x1b[" not in proc.stderr, "no terminal control codes in a log"


def test_step_lines_estimate_the_remaining_time():
    from harness.core.progress import StepLines
    now = [100.0]
    written = []
    lines = StepLines(4, "seven", written.append, clock=lambda: now[0])
    now[0] = 110.0
    lines()
    now[0] = 190.0
    lines()
    assert written == ["seven: step 1/4, elapsed 10.0 s, ETA 30.0 s",
                       "seven: step 2/4, elapsed 1 min 30 s, ETA 1 min 30 s"]
    now[0] = 195.0          # 5 s after the last line: not yet
    lines()
    assert len(written) == 2
    now[0] = 196.0          # the last step: always
    lines()
    assert written[-1] == "seven: step 4/4, elapsed 1 min 36 s, ETA 0.0 s"
