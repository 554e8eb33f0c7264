"""Golden cases given as text-embedding files (for a model whose text encoder does not run here,
like Anima's Qwen3): the same run as the prompt they encode, and a clear error for a bad file."""
import numpy as np
import pytest

from harness.core.errors import ConfigError
from harness.gates.cases import load_cases
from harness.model.bundle import load_bundle
from tests.helpers import TWO_STEP_DEFAULTS, gate_runner_for

CASES = TWO_STEP_DEFAULTS + """
[[case]]
name = "by-prompt"
prompt = "digit one"
seed = 5

[[case]]
name = "by-text-emb"
text_emb = "one.npy"
uncond_text_emb = "empty.npy"
seed = 5
"""


@pytest.fixture
def runner(tmp_path):
    gates, golden = gate_runner_for(tmp_path, CASES, seed=6, blocks=4)   # 4 blocks: per case, not per depth
    bundle = load_bundle(gates.s.model_dir)     # not the runner's: a test edits model.toml before it loads
    np.save(golden / "one.npy", bundle.text_emb("digit one"))
    np.save(golden / "empty.npy", bundle.text_emb(""))
    return gates, golden


def test_text_emb_case_renders_what_its_prompt_renders(runner):
    gates, golden = runner
    by_prompt, by_text_emb = load_cases(golden / "cases.toml")
    a = gates.run(by_prompt, guard=None, keep=False).image
    b = gates.run(by_text_emb, guard=None, keep=False).image
    np.testing.assert_array_equal(a, b)


def test_bad_text_emb_file_names_case_and_file(runner):
    gates, golden = runner
    np.save(golden / "one.npy", np.zeros((3, 5), np.float32))
    case = load_cases(golden / "cases.toml")[1]
    with pytest.raises(ConfigError, match=r"golden case 'by-text-emb': .*one.npy is float32 \[3, 5\]"):
        gates.run(case, guard=None, keep=False)


def test_model_without_prompt_encoder_runs_text_emb_cases_only(runner):
    gates, golden = runner
    toml = gates.s.model_dir / "model.toml"
    toml.write_text("\n".join(line for line in toml.read_text().splitlines() if not line.startswith("prompt_encoder")))
    by_prompt, by_text_emb = load_cases(golden / "cases.toml")
    assert gates.bundle.encoder is None
    assert gates.run(by_text_emb, guard=None, keep=False).image.shape == (64, 64, 3)
    with pytest.raises(ConfigError, match="has no prompt encoder here"):
        gates.run(by_prompt, guard=None, keep=False)
