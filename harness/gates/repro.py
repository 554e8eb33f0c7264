"""The minimal repro `harness reduce` writes: the reduced ONNX model, its inputs and the onnxruntime
FP32 outputs (.npy), and `repro.py`, a script using only rknn-toolkit2's public API (config, load_onnx,
build, init_runtime, inference) and numpy, small enough to attach to an upstream issue. It exits 1 and
prints DIVERGES when the simulator's output falls below the cosine, 0 otherwise.

Before the folder is kept, the script runs in a fresh process of the toolkit's own interpreter: a repro
that does not reproduce is an error, not a file."""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ..core.atomic import atomic_directory
from ..core.errors import ToolkitError
from ..toolkit.cut import Segment
from ..toolkit.envs import toolkit_python

__all__ = ["write_repro", "SCRIPT"]

SCRIPT = '''"""{title}

Run with an rknn-toolkit2 {version} environment:  python repro.py
Exit 1 (and DIVERGES) when the simulator's output is below cosine {threshold} against the expected
onnxruntime FP32 output, 0 when it is not.
"""
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from rknn.api import RKNN

HERE = Path(__file__).resolve().parent
SPEC = json.loads((HERE / "repro.json").read_text())


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("nan")
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


rknn = RKNN(verbose=False)
rknn.config(**SPEC["config"])
assert rknn.load_onnx(model=str(HERE / "model.onnx")) == 0
quantize = bool(SPEC.get("quantize"))
listing = None
if quantize:    # calibrated on the repro's own input (the toolkit reads list entries from its cwd)
    listing = Path(tempfile.mkstemp(suffix=".txt")[1])
    listing.write_text(" ".join(str(HERE / name) for name in SPEC["inputs"]) + "\\n")
assert rknn.build(do_quantization=quantize, dataset=str(listing) if listing else None) == 0
assert rknn.init_runtime() == 0
inputs = [np.load(HERE / name) for name in SPEC["inputs"]]
formats = ["nchw" if a.ndim == 4 else None for a in inputs]
outputs = rknn.inference(inputs=inputs, data_format=formats if any(formats) else None)
rknn.release()
below = []
for name, out in zip(SPEC["expected"], outputs):
    expected = np.load(HERE / name)
    c = cosine(out, expected)
    finite = bool(np.isfinite(out).all())
    print(f"{{name}}: cosine {{c:.7f}}, simulator output finite: {{finite}}, "
          f"max |simulator| {{np.nanmax(np.abs(out)):.6g}}, max |expected| {{np.abs(expected).max():.6g}}")
    if not c >= SPEC["threshold"]:         # NaN (an output that is not finite) too
        below.append(f"{{name}} cosine {{c}}")
if below:
    print(f"DIVERGES: {{', '.join(below)}} < {{SPEC['threshold']}}")
    sys.exit(1)
print("does not diverge")
'''


def write_repro(folder: Path, segment: Segment, values: dict, version: str, config: dict,
                threshold: float, title: str) -> str:
    """Write the repro into `folder` (whole or not at all) once it reproduces in a fresh toolkit
    process; return what the script printed. ToolkitError when it does not reproduce."""
    python = toolkit_python(version)
    with atomic_directory(folder) as staging:
        (staging / "model.onnx").write_bytes(segment.model.SerializeToString())
        inputs, expected = [], []
        for k, name in enumerate(segment.inputs):
            inputs.append(f"input{k}.npy")
            np.save(staging / inputs[-1], np.asarray(values[name], np.float32))
        for k, name in enumerate(segment.outputs):
            expected.append(f"expected{k}.npy")
            np.save(staging / expected[-1], np.asarray(values[name], np.float32))
        quant = config.get("quantization")
        config = {**{k: v for k, v in config.items() if k != "quantization"},
                  **{k: v for k, v in (quant or {}).items() if k.startswith("quantized_")}}
        spec = {"config": config, "quantize": bool(quant), "threshold": threshold, "inputs": inputs,
                "expected": expected,
                "tensors": {"inputs": segment.inputs, "outputs": segment.outputs}, "toolkit": version}
        (staging / "repro.json").write_text(json.dumps(spec, indent=1) + "\n")
        (staging / "repro.py").write_text(SCRIPT.format(title=title, version=version, threshold=threshold))
        with tempfile.TemporaryDirectory(prefix="anima-repro-") as cwd:     # the toolkit litters its cwd
            done = subprocess.run([str(python), str(staging / "repro.py")], cwd=cwd, capture_output=True,
                                  text=True, timeout=600)
        said = "\n".join(line for line in done.stdout.splitlines() if line.strip())
        if done.returncode != 1 or "DIVERGES" not in said:
            tail = (said or done.stderr.strip().splitlines()[-1:] or ["no output"])
            raise ToolkitError(f"reduce: the repro of {title} does not reproduce in a fresh rknn-toolkit2 "
                               f"{version} process (exit {done.returncode}): {str(tail)[-300:]}")
    return said
