"""The toolkit side of a conversion: runs under a toolkit environment's own python (bin/toolkit-env).

Imports only the standard library, numpy and rknn-toolkit2, never the suite: the toolkit pins
numpy<=1.26.4 and onnx<=1.18, which the suite's environment does not. The suite drives it with
`python worker.py JOB.json` (harness/toolkit/convert.py) and reads one JSON event per line on stdout.

All subgraphs are built in this one process (start-up and toolkit import cost ~10 s; a subgraph build
is well under a second). Everything the toolkit prints while building one subgraph (its log and its
layer table) goes to that subgraph's log file, by redirecting file descriptors 1 and 2, because the
toolkit also prints from native code.

`build_rknn(onnx_path, config)` is the one place a model is built; the rknn-sim backend imports it
too, so the simulator runs exactly what `convert` exported. It returns the built RKNN object: the
caller may run the PC simulator on it (init_runtime() with no target), export it, and must release it.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["build_rknn", "BuildFailed", "toolkit_version", "toolkit_graph"]


class BuildFailed(Exception):
    """A toolkit call returned an error: `stage` is the call, the log holds the toolkit's reason."""

    def __init__(self, stage: str, detail: str = ""):
        super().__init__(f"{stage} failed" + (f": {detail}" if detail else ""))
        self.stage = stage
        self.detail = detail


def toolkit_version() -> str:
    from importlib.metadata import version
    return version("rknn-toolkit2")


def _check(stage: str, ret) -> None:
    if ret != 0:
        raise BuildFailed(stage, f"returned {ret}")


def _call(stage: str, fn, *args, **kwargs) -> None:
    """One toolkit call: it returns -1 on some errors and raises on others; both name the call."""
    try:
        ret = fn(*args, **kwargs)
    except BuildFailed:
        raise
    except Exception as exc:
        raise BuildFailed(stage, _exception_line(exc)) from exc
    _check(stage, ret)


def _exception_line(exc: Exception) -> str:
    """One line for an exception. The toolkit re-raises some errors with a whole traceback as the
    message (export_rknn on a full disk): its last line is the reason, its first only a header."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if lines and lines[0].startswith("Traceback"):
        return lines[-1][:300]          # "OSError: [Errno 28] ...": it names its own type
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def build_rknn(onnx_path, config: dict, verbose: bool = True):
    """Build one subgraph from its ONNX file with the recorded config; return the built RKNN object.

    config keys (the manifest's `conversion.config` plus the subgraph's own `quantization`):
      target_platform  e.g. "rk3588"
      float_dtype      "float16" (the toolkit converts the FP32 export to FP16 itself)
      optimization_level
      op_target        {toolkit tensor name: "cpu"}: the ops producing those tensors pinned to a
                       target (names of the toolkit's own graph: toolkit_graph; `harness reduce`)
      quantization     None for FP16, or {"dataset": list file, "custom_hybrid": [[in, out], ...],
                       "hybrid_float": ["gelu", "output"], "quantized_dtype", "quantized_algorithm",
                       "quantized_method"}: INT8 with those parts kept in float16
                       (hybrid_quantization_step1/step2; see _hybrid_build)
    """
    from rknn.api import RKNN
    quant = config.get("quantization")
    if quant and (quant.get("custom_hybrid") or quant.get("hybrid_float")):
        return _hybrid_build(Path(onnx_path), config, quant, verbose)
    rknn = RKNN(verbose=verbose)
    try:
        _call("config", rknn.config, **_settings(config, quant))
        _call("load_onnx", rknn.load_onnx, model=str(onnx_path))
        if not quant:
            _call("build", rknn.build, do_quantization=False)
        else:
            _call("build", rknn.build, do_quantization=True, dataset=quant["dataset"])
        return rknn
    except BaseException:
        rknn.release()
        raise


def _settings(config: dict, quant: dict | None) -> dict:
    settings = {"target_platform": config["target_platform"],
                "float_dtype": config.get("float_dtype", "float16"),
                "optimization_level": config.get("optimization_level", 3)}
    if config.get("op_target"):
        settings["op_target"] = dict(config["op_target"])
    if quant:
        settings.update({k: quant[k] for k in ("quantized_dtype", "quantized_algorithm",
                                               "quantized_method") if k in quant})
    return settings


def _hybrid_build(onnx_path: Path, config: dict, quant: dict, verbose: bool):
    """INT8 with float16 islands: hybrid_quantization_step1, then step2 on a fresh RKNN object
    (step2 refuses an object that has loaded a model). Returns the built RKNN object.

    step1 writes <model>.model, <model>.data and <model>.quantization.cfg into the working directory.
    `hybrid_float` ranges are found in that .model (the toolkit's graph, with its own tensor names),
    so step1 runs once to see the graph and once more with those ranges as custom_hybrid.
    """
    from rknn.api import RKNN
    dataset = str(Path(quant["dataset"]).resolve())
    stem = onnx_path.stem
    settings = _settings(config, quant)
    with tempfile.TemporaryDirectory(prefix="hybrid-") as work, _chdir(work):
        files = [Path(work) / f"{stem}.{ext}" for ext in ("model", "data", "quantization.cfg")]
        ranges = [list(p) for p in quant.get("custom_hybrid", [])]
        if quant.get("hybrid_float"):
            _step1(onnx_path, settings, dataset, [], files, verbose)
            ranges += hybrid_ranges(files[0], quant["hybrid_float"])
        _step1(onnx_path, settings, dataset, ranges, files, verbose)
        rknn = RKNN(verbose=verbose)
        try:
            _call("config", rknn.config, **settings)
            _call("hybrid_quantization_step2", rknn.hybrid_quantization_step2, *map(str, files))
        except BaseException:
            rknn.release()
            raise
        return rknn


def _step1(onnx_path: Path, settings: dict, dataset: str, ranges: list, files: list, verbose: bool) -> None:
    from rknn.api import RKNN
    rknn = RKNN(verbose=verbose)
    try:
        _call("config", rknn.config, **settings)
        _call("load_onnx", rknn.load_onnx, model=str(onnx_path))
        _call("hybrid_quantization_step1", rknn.hybrid_quantization_step1, dataset=dataset,
              proposal=False, custom_hybrid=ranges or None)
    finally:
        rknn.release()
    missing = [f.name for f in files if not f.exists()]
    if missing:
        raise BuildFailed("hybrid_quantization_step1", f"wrote no {', '.join(missing)}")


def hybrid_ranges(model_file: Path, parts) -> list[list[str]]:
    """[first tensor, last tensor] ranges of the toolkit's graph (step1's .model, an ONNX-format
    graph) that stay in float:
      "gelu":   each fused GELU op, input to output (the linear before it still runs INT8)
      "output": from the last convolution's (linear's) output to the tensor the graph output is
                converted from, so the branch output leaves in float16
      "layer1", "layer2": the FFN's first or second linear, input to output (mixed precision
                within one FFN: `harness search-precision`)
    """
    import onnx
    graph = onnx.load(str(model_file)).graph
    nodes = list(graph.node)
    ranges = []
    for part in parts:
        if part == "gelu":
            gelus = [n for n in nodes if "gelu" in n.op_type.lower()]
            if not gelus:
                raise BuildFailed("hybrid_quantization_step1", "no fused GELU op in the toolkit's graph "
                                  "(is GELU written so it fuses? docs/architecture.md section 8)")
            ranges += [[n.input[0], n.output[0]] for n in gelus]
        elif part == "output":
            linears = [n for n in nodes if n.op_type in ("Conv", "MatMul", "exMatMul", "Gemm")]
            outputs = {o.name for o in graph.output}
            last = next((n for n in reversed(nodes) if set(n.output) & outputs), None)
            if not linears or last is None:
                raise BuildFailed("hybrid_quantization_step1", "no linear before the graph output")
            end = last.input[0] if last.op_type == "exDataConvert" else last.output[0]
            ranges.append([linears[-1].output[0], end])
        elif part in ("layer1", "layer2"):
            # One of the FFN's two linears kept in float16: the first or the last linear op of the
            # toolkit's graph, its input to its output (the other linear stays INT8).
            linears = [n for n in nodes if n.op_type in ("Conv", "MatMul", "exMatMul", "Gemm")]
            if len(linears) < 2:
                raise BuildFailed("hybrid_quantization_step1", f"{part}: fewer than two linears in the graph")
            node = linears[0] if part == "layer1" else linears[-1]
            ranges.append([node.input[0], node.output[0]])
        else:
            raise BuildFailed("hybrid_quantization_step1", f"unknown hybrid_float part {part!r}")
    return ranges


def toolkit_graph(onnx_path, config: dict, dataset) -> list[dict]:
    """The toolkit's own graph of a model after its optimisations, as hybrid_quantization_step1 writes
    it: [{"op", "name", "inputs", "outputs"}] in order. op_target and custom_hybrid take this graph's
    tensor names (an ONNX MatMul `layer1` becomes the Conv `layer1#2` writing `layer1_mm`), which no
    build log prints."""
    import onnx
    onnx_path = Path(onnx_path).resolve()
    settings = _settings(config, None)
    settings.pop("op_target", None)
    with tempfile.TemporaryDirectory(prefix="graph-") as work, _chdir(work):
        files = [Path(work) / f"{onnx_path.stem}.{ext}" for ext in ("model", "data", "quantization.cfg")]
        _step1(onnx_path, settings, str(Path(dataset).resolve()), [], files, False)
        graph = onnx.load(str(files[0])).graph
        return [{"op": n.op_type, "name": n.name, "inputs": list(n.input), "outputs": list(n.output)}
                for n in graph.node]


@contextlib.contextmanager
def _chdir(path):
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


@contextlib.contextmanager
def redirected(log_path):
    """Send fds 1 and 2 (Python and native prints alike) to log_path for the duration."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _simulate(rknn, samples: list[dict], out_dir: Path, name: str) -> list[str]:
    """Run the PC simulator on saved sample inputs; save outputs as .npy; return their paths."""
    _call("init_runtime", rknn.init_runtime)
    written = []
    for k, sample in enumerate(samples):
        inputs = [np.load(p) for p in sample["inputs"]]
        # The simulator refuses a 4-D input without a layout ("expect 'nhwc'"): ours are NCHW.
        formats = ["nchw" if a.ndim == 4 else None for a in inputs]
        outputs = rknn.inference(inputs=inputs, data_format=formats if any(formats) else None)
        if outputs is None:
            raise BuildFailed("inference", f"sample {k} returned None")
        for j, out in enumerate(outputs):
            path = out_dir / f"{name}.sample{k}.out{j}.npy"
            np.save(path, np.asarray(out, dtype=np.float32))
            written.append(str(path))
    return written


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXCEPTION = re.compile(r"^[\w.]+(Error|Exception): ")


def _reason(log_path: Path) -> str:
    """The toolkit's reason for a failure: the exception ending its traceback, else its last E line."""
    try:
        lines = [_ANSI.sub("", ln).strip() for ln in log_path.read_text(errors="replace").splitlines()]
    except OSError:
        return ""
    found = [ln for ln in lines if _EXCEPTION.match(ln)]
    if not found:
        # A traceback's header is no reason (a log cut short by a full disk can end there): skip it,
        # so the caller's own exception is said instead.
        found = [ln[2:].strip() for ln in lines if ln.startswith("E ") and "toolkit2 version" not in ln
                 and not ln.endswith("Traceback (most recent call last):")]
    if not found:
        return ""
    text = found[-1]
    return text if len(text) <= 300 else f"{text[:120]} ... {text[-170:]}"


def _one(item: dict, config: dict, out_dir: Path, emit) -> None:
    log_path = out_dir / "logs" / f"{item['name']}.log"
    started = time.perf_counter()
    rknn = None
    stage = "build"
    try:
        with redirected(log_path):
            rknn = build_rknn(item["onnx"], {**config, **item.get("settings", {}),
                                             "quantization": item.get("quantization")})
            built = time.perf_counter() - started
            stage = "export_rknn"
            _call("export_rknn", rknn.export_rknn, str(out_dir / item["rknn"]))
            outputs = []
            if item.get("samples"):
                stage = "simulate"
                outputs = _simulate(rknn, item["samples"], out_dir / "sim", item["name"])
    except BuildFailed as exc:
        emit({"event": "failed", "name": item["name"], "stage": exc.stage,
              "detail": _reason(log_path) or exc.detail, "log": str(log_path)})
        return
    except Exception as exc:  # the toolkit raises on some bad models instead of returning -1
        emit({"event": "failed", "name": item["name"], "stage": stage,
              "detail": _reason(log_path) or _exception_line(exc),
              "log": str(log_path)})
        return
    finally:
        if rknn is not None:
            rknn.release()
    emit({"event": "built", "name": item["name"], "seconds": round(built, 3),
          "log": str(log_path), "sim_outputs": outputs})


def run_job(job: dict, emit) -> int:
    """Build every item of the job in order; stop at the first failure (the caller discards all)."""
    out_dir = Path(job["out_dir"]).resolve()
    (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    # The toolkit drops check*.onnx files into its working directory: keep them in the scratch dir.
    (out_dir / "scratch").mkdir(exist_ok=True)
    os.chdir(out_dir / "scratch")
    (out_dir / "sim").mkdir(exist_ok=True)
    emit({"event": "start", "toolkit": toolkit_version(), "count": len(job["items"])})
    for item in job["items"]:
        failed: list[dict] = []
        _one(item, job["config"], out_dir, lambda ev, failed=failed: (failed.append(ev), emit(ev)))
        if failed and failed[-1]["event"] == "failed":
            return 1
    emit({"event": "done"})
    return 0


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[1]).read_text())
    # Events go to the real stdout, saved before any redirection; the toolkit's chatter never does.
    channel = os.fdopen(os.dup(1), "w", buffering=1)

    def emit(event: dict) -> None:
        channel.write(json.dumps(event) + "\n")
        channel.flush()

    Path(job["out_dir"]).mkdir(parents=True, exist_ok=True)
    job["out_dir"] = str(Path(job["out_dir"]).resolve())      # run_job changes the cwd
    try:
        with redirected(Path(job["out_dir"]) / "toolkit-import.log"):
            import rknn.api  # noqa: F401  (slow: torch, onnx; its warnings belong in a log)
    except Exception as exc:
        emit({"event": "failed", "name": None, "stage": "import",
              "detail": f"{type(exc).__name__}: {exc}"})
        return 1
    return run_job(job, emit)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
