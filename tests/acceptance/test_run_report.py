"""The run summary and HTML report of a failing quality run (the FFN W8A8 what-if against the FP16
goldens), made by the suite itself under pytester: markdown to artifacts and $GITHUB_STEP_SUMMARY, a
self-contained HTML file, progress lines in a non-terminal log, and the HTML as a real headless
browser draws it."""
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from harness.gates.cases import find_case, golden_dir_for
from harness.model.config import REPO_ROOT
from tests.helpers import missing_tool

pytestmark = pytest.mark.slow       # one 20-step case plus a 1-step benchmark, ~30 s here
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def w8a8_run(tmp_path_factory):
    """(pytester result, tmp dir): quality + memory + benchmark gates on case seven, FFN W8A8."""
    tmp = tmp_path_factory.mktemp("w8a8-run")
    step_summary = tmp / "github-step-summary.md"
    step_summary.write_text("earlier step's summary\n")
    cmd = ["-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={REPO_ROOT}", "-p", "no:cacheprovider",
           str(REPO_ROOT / "tests/acceptance/test_quality.py"), str(REPO_ROOT / "tests/acceptance/test_memory.py"),
           str(REPO_ROOT / "tests/acceptance/test_benchmark.py"), "--cases=seven", "--fake-quant=w8a8-ffn",
           "--bench-steps=1", f"--artifacts={tmp / 'artifacts'}", f"--results=sqlite:///{tmp / 'results.sqlite'}",
           f"--cache-dir={tmp / 'cache'}", f"--junitxml={tmp / 'junit.xml'}"]
    return cmd, tmp, step_summary


@pytest.fixture
def ran(w8a8_run, pytester, monkeypatch):
    cmd, tmp, step_summary = w8a8_run
    if not (tmp / "artifacts" / "report.html").exists():
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
        result = pytester.runpytest(*cmd)
        result.assert_outcomes(passed=2, failed=1)
        (tmp / "stdout.txt").write_text(result.stdout.str())
    return tmp


def junit_ssim(tmp) -> float:
    root = ET.parse(tmp / "junit.xml").getroot()
    return float(root.find(".//testcase[@name='test_matches_golden[seven]']//property[@name='ssim']").get("value"))


def test_markdown_summary_in_artifacts_and_the_github_step_summary(ran):
    text = (ran / "artifacts" / "summary.md").read_text()
    assert text.startswith("## Anima NPU acceptance: FAILED: 2 passed, 1 failed, 0 skipped")
    ssim = junit_ssim(ran)
    seven = find_case(golden_dir_for("embedded-digits"), "seven")      # the thresholds the summary shows
    assert ssim < seven.ssim_min
    assert re.search(rf"\| seven \| {ssim:.6f} \| >= {seven.ssim_min:g} \| [\d.]+ dB \| >= {seven.psnr_min:g} dB "
                     rf"\| ❌ fail \|", text), text
    assert "| seven | " in text and "no baseline yet" in text and "| valid |" in text
    assert "precision `float16+w8a8-ffn`" in text
    slow_rows = re.findall(r"^\| \d+ \| \d+ \| (self_attn|cross_attn|ffn) \| [\d.]+ \|$", text, re.M)
    assert len(slow_rows) == 10
    assert "### Memory" in text and "seven (benchmark)" in text
    # Appended to GitHub's step summary file, after what an earlier step wrote there.
    assert (ran / "github-step-summary.md").read_text() == "earlier step's summary\n" + text + "\n"


def test_progress_in_a_log_is_plain_lines_first_last_and_every_ten_seconds(ran):
    """A log gets plain lines (no carriage returns), the first step, the last, and one line every 10 s
    between (harness/core/progress.py): a 20-step render of a few seconds is two lines, not twenty."""
    out = (ran / "stdout.txt").read_text()
    steps = [int(s) for s in re.findall(r"^seven: step (\d+)/20, elapsed \d[^,]* s, ETA \d[^,]* s$", out, re.M)]
    assert steps[0] == 1 and steps[-1] == 20 and steps == sorted(set(steps)) and len(steps) < 20, steps
    assert "\r" not in out
    assert re.search(r"^seven: step 1/1, elapsed .*, ETA 0.0 s$", out, re.M), "the benchmark's one step"


def test_html_report_is_self_contained_with_thumbnails_trend_and_memory_curve(ran):
    page = (ran / "artifacts" / "report.html").read_text()
    sources = re.findall(r'<img [^>]*src="([^"]+)"', page)
    assert len(sources) == 3 + 1 + 1, "golden, obtained, diff; trend; memory curve"
    assert all(src.startswith("data:image/png;base64,") for src in sources)
    assert not re.search(r'(href|src)="(?!data:)', page), "nothing loaded from outside the file"
    assert f"SSIM {junit_ssim(ran):.6f}" in page and '<td class="fail">FAIL</td>' in page


def test_html_report_in_headless_chromium(ran, tmp_path):
    if not shutil.which(CHROMIUM):
        missing_tool(f"{CHROMIUM} not installed (bin/debian-packages.txt lists chromium): browser check skipped")
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1100,1400", f"--screenshot={shot}", (ran / "artifacts" / "report.html").as_uri()],
                   capture_output=True, timeout=120, check=True)
    from PIL import Image
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert pixels.shape == (1400, 1100, 3)
    # The FAILED heading in #cf222e, drawn at the top of the page.
    red = np.all(np.abs(pixels - [0xCF, 0x22, 0x2E]) < 40, axis=-1)
    assert red[:80].sum() > 200
    # The thumbnails: dark digit backgrounds and the magma heat map's purples, not a blank page.
    dark = np.all(pixels < 60, axis=-1).sum()
    assert dark > 3 * 100 * 100
