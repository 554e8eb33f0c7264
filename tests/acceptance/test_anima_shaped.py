"""The Anima path through every gate, on the Anima-shaped CI model (models/anima-shaped: 16 latent
channels + the padding mask, text-embedding files, no prompt encoder, no decoder, a BF16 checkpoint
with a `net.` prefix and an `llm_adapter.*` group): numerics, the latent quality gate, benchmark and
memory pass at FP16, and the latent gate fails the FFN W8A8 variant with its margins printed."""
import pytest

from harness.config import REPO_ROOT
from tests.acceptance.test_gates_can_fail import suite

pytestmark = pytest.mark.slow
MODEL = f"--model-dir={REPO_ROOT / 'models' / 'anima-shaped'}"
CASES = ("a", "b", "a-cfg1")


def test_every_gate_passes_on_the_anima_shaped_model(tmp_path):
    code, out = suite(tmp_path, "tests/acceptance", "-m", "npu", MODEL, "--bench-steps=2")
    assert code == 0, out
    assert "8 passed" in out, out          # numerics x3, quality x3, benchmark, memory
    for case in CASES:
        assert f"{case} [latent] pass: SSIM" in out, out
    print("\n".join(line for line in out.splitlines() if "[latent]" in line))


def test_latent_gate_fails_ffn_w8a8_with_margins(tmp_path):
    code, out = suite(tmp_path, "tests/acceptance/test_quality.py", MODEL, "--fake-quant=ffn-w8a8")
    assert code == 1, out
    for case in CASES:
        assert f"{case} [latent] FAIL: SSIM" in out, out
    assert "the gate ran on the latent" in out
    assert list((tmp_path / "artifacts").rglob("a-diff.png"))
    print("\n".join(line for line in out.splitlines() if "[latent]" in line))
