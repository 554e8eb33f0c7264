"""Builders shared by tests: model directories with random weights in the real file layout."""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import numpy as np
import pytest

from harness.model.config import EMBEDDED_DIR, REPO_ROOT, load_model_dir
from harness.model.embedded import PROMPT_KEYS
from harness.model.weights import random_weights, save_weights

__all__ = ["make_random_model_dir", "random_bundle", "export_fp32", "missing_tool", "small_tmpfs", "worker_processes",
           "alive", "gate_runner_for", "TWO_STEP_DEFAULTS", "resign", "add_output_and_resign", "shared_blocks",
           "parser_commands", "ci_plan", "make_unseen_model"]


def missing_tool(reason: str) -> NoReturn:
    """Skip a test whose tool (a toolkit environment, a browser) is missing here. Under CI=true it
    fails instead: CI's set-up (bin/test) installs every tool, so a missing one is a broken set-up."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the set-up must provide it)", pytrace=False)
    pytest.skip(reason)


def make_random_model_dir(target: Path, seed: int = 0, blocks: int | None = None) -> Path:
    """A copy of the embedded model's model.toml with random DiT and prompt-encoder weights; `blocks`
    makes it shallower (what a test's partitions and runs cost grows with the depth)."""
    target.mkdir(parents=True, exist_ok=True)
    text = (EMBEDDED_DIR / "model.toml").read_text()
    if blocks is not None:
        shallower = text.replace("\nblocks = 28\n", f"\nblocks = {blocks}\n", 1)
        if shallower == text:       # the embedded model's depth moved: fail rather than test 28 blocks
            raise ValueError(f"{EMBEDDED_DIR / 'model.toml'}: no 'blocks = 28' line to make {blocks} blocks of")
        text = shallower
    (target / "model.toml").write_text(text)
    cfg = load_model_dir(target)
    save_weights(random_weights(cfg, seed=seed), target / cfg.files["weights"])
    rng = np.random.default_rng(seed + 1)
    vocab = len(cfg.prompt["vocab"])
    save_weights({
        PROMPT_KEYS[0]: rng.standard_normal((vocab, cfg.text_emb_dim)).astype(np.float32),
        PROMPT_KEYS[1]: rng.standard_normal((cfg.text_emb_tokens, cfg.text_emb_dim)).astype(np.float32),
    }, target / cfg.files["prompt_encoder"])
    return target


def make_unseen_model(target: Path, golden: Path, blocks: int, width: int, seed: int = 0) -> tuple[Path, Path]:
    """A model no golden or threshold was made for: the Anima-shaped model.toml (latent goldens, text
    embeddings from files) at another depth and width, random weights, and a golden folder whose
    cases.toml names two text embeddings and no thresholds. Returns (model dir, golden dir)."""
    import tomllib

    import tomli_w
    raw = tomllib.loads((REPO_ROOT / "models" / "anima-shaped" / "model.toml").read_text())
    raw["name"] = f"unseen-{blocks}x{width}"
    raw["description"] = f"{blocks}-block width-{width} random-weight DiT (a model upgrade's stand-in)"
    raw["network"].update(blocks=blocks, width=width, heads=width // 16, text_emb_dim=width // 2)
    target.mkdir(parents=True, exist_ok=True)
    (target / "model.toml").write_text(tomli_w.dumps(raw))
    cfg = load_model_dir(target)
    save_weights(random_weights(cfg, seed=seed), target / cfg.files["weights"])
    golden.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed + 1)
    for name in ("cond_a.npy", "cond_b.npy", "uncond.npy"):
        np.save(golden / name, rng.standard_normal((cfg.text_emb_tokens, cfg.text_emb_dim)).astype(np.float32))
    (golden / "cases.toml").write_text(UNSEEN_CASES)
    return target, golden


# A new model's cases: what to render, no thresholds yet (`harness goldens thresholds` writes them).
UNSEEN_CASES = """format = 2

[defaults]
steps = 4
cfg = 4.0
sampler = "flow-euler"
shift = 3.0

[[case]]
name = "a"
text_emb = "cond_a.npy"
uncond_text_emb = "uncond.npy"
seed = 1

[[case]]
name = "b"
text_emb = "cond_b.npy"
uncond_text_emb = "uncond.npy"
seed = 2
"""


def random_bundle(tmp_path_factory, seed: int, blocks: int | None = None):
    """A loaded random-weight model in a fresh temporary directory (one per test module)."""
    from harness.model.bundle import load_bundle
    return load_bundle(make_random_model_dir(tmp_path_factory.mktemp("model"), seed=seed, blocks=blocks))


def export_fp32(bundle, tmp_path_factory) -> Path:
    """The bundle's partition exported in FP32 to a fresh temporary directory."""
    from harness.partition.onnx_export import ExportSettings, export_partition
    out = tmp_path_factory.mktemp("partition") / "fp32"
    export_partition(bundle.weights, bundle.cfg, out, ExportSettings(precision="float32"))
    return out


@contextlib.contextmanager
def small_tmpfs(mount: Path, size: str):
    """A tmpfs of `size` (e.g. "600k") mounted at `mount` for the block, to fill a disk for real.
    Needs root; elsewhere the test skips, and with CI=true fails, saying so."""
    mount.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        missing_tool(f"cannot mount a {size} tmpfs at {mount} (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=False)


def worker_processes(pid: int):
    """The prefetch workers among a process's descendants (psutil.Process objects)."""
    import psutil
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            if "worker_main" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def alive(proc) -> bool:
    """A psutil.Process still running (a zombie is not)."""
    import psutil
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# The [defaults] of a cases.toml for runs of two Euler steps (add [[case]] tables after it).
TWO_STEP_DEFAULTS = """
[defaults]
ssim_min = 0.9999
psnr_min = 50.0
steps = 2
cfg = 4.0
sampler = "flow-euler"
shift = 3.0
"""


def gate_runner_for(tmp_path: Path, cases_toml: str, seed: int, cache: Path | None = None,
                    blocks: int | None = None):
    """A GateRunner on a random model (FP32 partition exported on first use, into `cache` when given: a
    folder shared by tests of the same seed exports once; `blocks` makes the model shallower) and a golden
    folder holding `cases_toml`; returns (runner, golden folder)."""
    from harness.gates.runner import GateRunner
    from harness.pytest_plugin import OPTIONS, resolve_settings
    model = make_random_model_dir(tmp_path / "model", seed=seed, blocks=blocks)
    golden = tmp_path / "golden"
    golden.mkdir()
    (golden / "cases.toml").write_text(cases_toml)
    cli = {name: None for name in OPTIONS}
    cli.update(model_dir=str(model), golden_dir=str(golden), cache_dir=str(cache or tmp_path / "cache"),
               artifacts=str(tmp_path / "artifacts"), precision="float32", telemetry_root=str(tmp_path))
    return GateRunner(resolve_settings(cli, None)), golden


def resign(directory: Path, index: int) -> None:
    """Update the manifest's sha256 and size of subgraph `index` to its file as it is now."""
    import hashlib
    import json
    doc = json.loads((directory / "manifest.json").read_text())
    entry = next(e for e in [*doc["subgraphs"], doc.get("decoder") or {}] if e.get("index") == index)
    data = (directory / entry["file"]).read_bytes()
    entry.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (directory / "manifest.json").write_text(json.dumps(doc))


def add_output_and_resign(directory: Path, index: int) -> str:
    """Give subgraph `index`'s ONNX file an extra output (an intermediate tensor) and re-sign it, so
    every checksum passes; returns the extra output's name."""
    import json

    import onnx
    doc = json.loads((directory / "manifest.json").read_text())
    entry = next(e for e in [*doc["subgraphs"], doc.get("decoder") or {}] if e.get("index") == index)
    path = directory / entry["file"]
    model = onnx.load(str(path))
    hidden = model.graph.node[0].output[0]
    model.graph.output.append(onnx.helper.make_empty_tensor_value_info(hidden))
    onnx.save(model, str(path))
    resign(directory, index)
    return hidden


def shared_blocks(workers) -> set[str]:
    """The /dev/shm blocks the prefetch workers have mapped (two each: inputs and outputs)."""
    import psutil
    blocks = set()
    for worker in workers:
        try:
            blocks |= {m.path for m in worker.memory_maps() if m.path.startswith("/dev/shm/")}
        except psutil.NoSuchProcess:
            pass            # gone already: it maps nothing
    return blocks


def parser_commands(parser: argparse.ArgumentParser) -> set[str]:
    """The command names a `bin/harness` parser (harness.cli.main.build_parser) accepts."""
    return {name for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name in action.choices}


def ci_plan(path: Path = REPO_ROOT / ".ci" / "plan.py"):
    """The CI plan script (.ci/plan.py, run by the workflow's plan job, not a package module) as a module."""
    spec = importlib.util.spec_from_file_location("ci_plan", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pytest_artifacts(tmp_path: Path, module_source: str, *options: str) -> Path:
    """Run a real pytest over one test module written from `module_source` and return the artifacts
    folder holding its JUnit XML (xunit1, as the suite writes it) and whatever `options` add."""
    module = tmp_path / "test_quality.py"
    module.write_text(module_source)
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                    "-o", "junit_family=xunit1", f"--junitxml={artifacts / 'junit.xml'}",
                    *(option.format(artifacts=artifacts) for option in options), str(module)],
                   cwd=tmp_path, capture_output=True, timeout=120)
    return artifacts


def converted_subgraph_cosine(converted: Path, source: Path, index: int, stem: str):
    """Subgraph `index` of a converted partition run as the runtime runs it (a split one too) on the
    rknn-sim backend, against onnxruntime FP32 of its source ONNX `stem`.onnx: (cosine, the context)."""
    from harness.backends.base import BackendOptions
    from harness.lifecycle.split import context_for
    from harness.partition.manifest import load_manifest
    from harness.report.toolkit import cosine, reference_outputs
    from harness.toolkit.samples import sample_inputs
    manifest = load_manifest(converted)
    entry = manifest.subgraphs[index]
    ctx = context_for(BackendOptions("rknn-sim"), entry.label, manifest.path_of(entry))
    inputs = sample_inputs(entry, 1, 0)[0]
    ctx.load(manifest.path_of(entry))
    try:
        ctx.init()
        out = ctx.run(inputs)[0]
    finally:
        ctx.release()
    return cosine(out, reference_outputs(source / f"{stem}.onnx", [inputs])[0]), ctx
