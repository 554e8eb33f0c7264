"""The Anima path through every gate, on the Anima-shaped CI model (models/anima-shaped: 16 latent
channels + the padding mask, text-embedding files, no prompt encoder, no decoder, a BF16 checkpoint
with a `net.` prefix and an `llm_adapter.*` group): numerics, the latent quality gate, benchmark and
memory pass at FP16, and the latent gate fails the FFN W8A8 variant with its margins printed."""
import pytest

from harness.model.config import REPO_ROOT

pytestmark = pytest.mark.slow
MODEL = f"--model-dir={REPO_ROOT / 'models' / 'anima-shaped'}"
CASES = ("a", "b", "a-cfg1")


def _latent_lines(out: str) -> str:
    return "\n".join(line for line in out.splitlines() if "[latent]" in line and "margin" in line)


def test_every_gate_passes_on_the_anima_shaped_model(run_suite):
    result = run_suite("tests/acceptance", "-m", "npu", MODEL, "--bench-steps=2")
    out = result.stdout.str()
    # numerics x3, quality x3, headroom x3, benchmark, Spectrum benchmark, memory, core masks, and the
    # smoke tier's host checks (one subgraph, the model for 2 steps); its board-only checks are
    # deselected off the board
    result.assert_outcomes(passed=15)
    for case in CASES:
        assert f"{case} [latent] pass: SSIM" in out, out
    print(_latent_lines(out))


def test_latent_gate_fails_ffn_w8a8_with_margins(run_suite, pytester):
    result = run_suite("tests/acceptance/test_quality.py", MODEL, "--fake-quant=w8a8-ffn")
    out = result.stdout.str()
    result.assert_outcomes(failed=3)
    for case in CASES:
        assert f"{case} [latent] FAIL: SSIM" in out, out
    assert "the gate ran on the latent" in out
    assert list((pytester.path / "artifacts").rglob("a-diff.png"))
    print(_latent_lines(out))
