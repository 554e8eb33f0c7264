"""FP16 headroom over a whole denoise: how close every subgraph comes to the float16 maximum (65504).

The numerics gate sees an overflow only after it happened (an inf or NaN in a branch output). This
observer watches the magnitudes that get there first, so a run warns while a board with slightly
larger activations (field reports name FP16 overflow on the board the simulator did not show) still
has room:

    inputs        x (and text_emb for cross-attention), as the backend got them
    output        y, as the backend returned it
    intermediates the FFN hidden layer before and after GELU (`layer1`, `gelu`) and the attention
                  logits before and after the 1/sqrt(d) scale (`attn/qk`, `attn/scores`): a wide
                  matmul output grows with the model's width long before the branch output does

Intermediates are not outputs of a subgraph, so a probe runs each invocation's inputs once more
through the same subgraph with those tensors added as graph outputs: an onnxruntime session of the
partition's own ONNX file on the host (cut after those tensors: its nodes up to them only), and on the
simulator (rknn-sim) the subgraph rebuilt by the toolkit from its source ONNX with the conversion's
recorded settings. A probe is kept for the whole run: it is not on the board's lifecycle, so it is not
loaded and released per step.

headroom = 65504 / peak magnitude (an infinite or NaN peak has headroom 0). The gate fails a subgraph
whose lowest headroom over its tensors is below `min_headroom`, naming the tensor, step and stream.

A tensor the conversion does not hold in float16 is not judged against its maximum (`held`): every
tensor of a quantised subgraph (the board's INT8 FFNs, `harness reduce`'s int16 remedy: fixed point
whose range is the calibrated one) and every tensor a split subgraph's host part computes (FP32 on the
host, harness/toolkit/split.py). Its peak is still recorded, with what holds it; a subgraph with no
float16 tensor left has no headroom to judge (null).
"""
from __future__ import annotations

import hashlib
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError
from ..model.config import BRANCHES
from ..partition.manifest import FUSED_BRANCH
from ..runtime.pipeline import Invocation, batch_of
from ..toolkit.split import PLAN_SUFFIX

__all__ = ["DEFAULT_MIN_HEADROOM", "Peak", "probe_model", "pruned_probe_model", "OnnxProbe", "make_probe",
           "held_outside_float16",
           "HeadroomObserver", "min_headroom_of", "headroom_failures", "REPORT_KEY"]

FP16_MAX = float(np.finfo(np.float16).max)      # 65504
# 8x is three binades: a board run whose activations are several times larger than here (other
# prompts, seeds, the full-size model's width) still stays finite. The embedded model's worst
# subgraph sits far above it (docs/precision.md), a scaled overflow far below.
DEFAULT_MIN_HEADROOM = 8.0
REPORT_KEY = "headroom"
# Per branch, the exported graph's intermediate tensors that overflow first (names from
# harness/partition/onnx_export.py; a float16 island's Cast back keeps the name).
PROBE_TENSORS = {
    "ffn": ("layer1", "gelu"),
    "self_attn": ("attn/qk", "attn/scores"),
    "cross_attn": ("attn/qk", "attn/scores"),
}


def probe_tensors(entry) -> tuple[str, ...]:
    """The intermediates watched in one subgraph: its branch's, or in a fused subgraph every branch's
    of every block it holds, under the `b{block}/{branch}/` prefix its bodies are named with
    (harness/partition/fused.py), so a failure names the block and branch inside the subgraph."""
    if entry.branch != FUSED_BRANCH:
        return PROBE_TENSORS[entry.branch]
    return tuple(f"b{block}/{branch}/{name}" for block in entry.blocks for branch in BRANCHES
                 for name in PROBE_TENSORS[branch])


@dataclass
class Peak:
    """The largest magnitude one tensor of one subgraph reached, and where."""
    tensor: str
    peak: float
    step: int
    stream: str

    @property
    def headroom(self) -> float:
        return FP16_MAX / self.peak if self.peak > 0 else float("inf")


# A float's magnitude bits (the sign bit cleared) order like its magnitude, and every inf or NaN
# sorts above every finite value: max |a| is then an integer max over a view, with no float copy
# (numpy emulates float16 arithmetic, and a float32 copy of every tensor cost more than the max).
_MAGNITUDE = {np.dtype(np.float16): (np.uint16, 0x7FFF), np.dtype(np.float32): (np.uint32, 0x7FFFFFFF),
              np.dtype(np.float64): (np.uint64, 0x7FFFFFFFFFFFFFFF)}


def _peaks(array) -> list[float]:
    """max |a| of each row (stream) along axis 0; inf for a row where anything is not finite (an
    overflow already happened)."""
    a = np.asarray(array)
    if a.dtype not in _MAGNITUDE:
        a = a.astype(np.float32)
    if a.size == 0:
        return [0.0] * len(a)
    uint, mask = _MAGNITUDE[a.dtype]
    bits = np.bitwise_and(np.ascontiguousarray(a).view(uint).reshape(len(a), -1), mask).max(axis=1)
    values = bits.astype(uint).view(a.dtype).astype(np.float64)
    return [float(v) if np.isfinite(v) else float("inf") for v in values]


def probe_model(onnx_path: Path, tensors) -> bytes:
    """The subgraph's ONNX model with `tensors` appended as graph outputs (after y); a ConfigError
    naming the file when one of them is not in the graph."""
    import onnx
    from onnx import helper
    model = onnx.load(str(onnx_path))
    graph = model.graph
    produced = {out: node for node in graph.node for out in node.output}
    elem = graph.output[0].type.tensor_type.elem_type
    for name in tensors:
        if name not in produced:
            raise ConfigError(f"headroom probe: {onnx_path} has no tensor '{name}'")
        graph.output.append(helper.make_tensor_value_info(name, elem, None))
    return model.SerializeToString()


def pruned_probe_model(onnx_path: Path, tensors) -> bytes:
    """probe_model's graph cut down to what `tensors` are computed from: its outputs are those tensors
    only (no y), and the nodes after them (the FFN's second layer, attention's softmax, value product
    and output projection) are gone, so a probe costs the host less than the invocation it watches.
    The nodes kept are the graph's own, in its order: the probed values do not change."""
    import onnx
    from onnx.utils import Extractor
    model = onnx.load_from_string(probe_model(onnx_path, tensors))
    inputs = [i.name for i in model.graph.input]      # all kept, so inputs are fed as the subgraph's
    return Extractor(model).extract_model(inputs, list(tensors)).SerializeToString()


class OnnxProbe:
    """Intermediates on the host: one onnxruntime session per subgraph of the partition under test,
    of its graph pruned to the probed tensors (pruned_probe_model)."""

    def __init__(self, manifest):
        self.manifest = manifest
        self._sessions: dict[int, object] = {}

    def _session(self, entry):
        if entry.index not in self._sessions:
            import onnxruntime as ort

            from ..backends.onnxruntime import session_options
            model = pruned_probe_model(self.manifest.path_of(entry), probe_tensors(entry))
            self._sessions[entry.index] = ort.InferenceSession(
                model, sess_options=session_options(1), providers=["CPUExecutionProvider"])
        return self._sessions[entry.index]

    def run(self, entry, inputs) -> list[np.ndarray]:
        session = self._session(entry)
        names = [i.name for i in session.get_inputs()]
        return session.run(None, dict(zip(names, inputs)))

    def close(self) -> None:
        self._sessions.clear()


class SimProbe:
    """Intermediates on the toolkit simulator: each subgraph's source ONNX plus the probe outputs,
    built by the rknn-sim worker with the settings the partition was converted with."""

    def __init__(self, manifest):
        self.manifest = manifest
        self._dir = Path(tempfile.mkdtemp(prefix="anima-headroom-"))
        self._keys: dict[int, tuple] = {}

    def _key(self, entry):
        if entry.index not in self._keys:
            from ..backends.rknn_sim import conversion_record, worker_for
            if self.manifest.path_of(entry).name.endswith(PLAN_SUFFIX):
                # a split subgraph is no one toolkit model: its intermediates from the source ONNX in
                # FP32 (the host part's are computed so; an NPU part's are what FP32 would feed it)
                self._keys[entry.index] = (_SourceProbe(self.manifest, entry), None)
                return self._keys[entry.index]
            record = conversion_record(self.manifest.path_of(entry))
            model = probe_model(Path(record["onnx"]), probe_tensors(entry))
            path = self._dir / f"probe_{entry.index:02d}.onnx"
            path.write_bytes(model)
            key = "probe-" + hashlib.sha256(model + record["key"].encode()).hexdigest()[:24]
            worker = worker_for(record["version"])
            for header in ({"op": "load", "key": key, "onnx": str(path), "config": record["config"],
                            "rknn": None}, {"op": "init", "key": key}):
                self._ask(worker, entry, header)
            self._keys[entry.index] = (worker, key)
        return self._keys[entry.index]

    @staticmethod
    def _ask(worker, entry, header, arrays=()):
        from ..core.errors import BackendError
        reply, outputs = worker.request(header, arrays)
        if not reply.get("ok"):
            raise BackendError(f"headroom probe on rknn-sim: {entry.label}: {reply.get('stage')}: "
                               f"{reply.get('detail')} (toolkit log: {worker.log_path})")
        return outputs

    def run(self, entry, inputs) -> list[np.ndarray]:
        worker, key = self._key(entry)
        if key is None:
            return worker.run(inputs)
        return self._ask(worker, entry, {"op": "run", "key": key}, inputs)[1:]

    def close(self) -> None:
        for worker, key in self._keys.values():
            if key is not None and worker.proc.poll() is None:
                worker.request({"op": "evict", "key": key})
        self._keys.clear()
        import shutil
        shutil.rmtree(self._dir, ignore_errors=True)


class _SourceProbe:
    """A split subgraph's probe: onnxruntime over its source ONNX, pruned to the probed tensors."""

    def __init__(self, manifest, entry):
        import onnxruntime as ort

        from ..backends.onnxruntime import session_options
        record = _record(manifest, entry)
        source = Path(manifest.conversion["source"]["directory"]) / record["onnx_file"]
        self.session = ort.InferenceSession(pruned_probe_model(source, probe_tensors(entry)),
                                            sess_options=session_options(1), providers=["CPUExecutionProvider"])

    def run(self, inputs) -> list[np.ndarray]:
        names = [i.name for i in self.session.get_inputs()]
        return self.session.run(None, {n: np.asarray(a, np.float32) for n, a in zip(names, inputs)})


def _record(manifest, entry) -> dict:
    return next(r for r in manifest.conversion["subgraphs"] if r["file"] == entry.file)


def held_outside_float16(manifest) -> dict[int, dict[str, str]]:
    """{subgraph index: {tensor: what holds it}} for the tensors a converted partition does not hold in
    float16 (module docstring); "*" stands for every tensor of the subgraph."""
    if not manifest.conversion:
        return {}
    held: dict[int, dict[str, str]] = {}
    for entry in manifest.entries():
        record = _record(manifest, entry)
        quant = record.get("quantization")
        if quant:
            held[entry.index] = {"*": f"{quant.get('quantized_dtype', 'fixed point')} (calibrated range)"}
        for part in (record.get("split") or {}).get("parts", []):
            if part["on"] == "host":
                held.setdefault(entry.index, {}).update(
                    {name: "FP32 on the host (split)" for name in _written(manifest.directory / part["onnx_file"])})
    return held


def _written(onnx_path: Path) -> list[str]:
    import onnx
    return [name for node in onnx.load(str(onnx_path)).graph.node for name in node.output]


def make_probe(manifest, backend: str):
    """The probe for a run on `backend`: the host's for ONNX partitions, the simulator's for
    converted ones; None on the board, whose runtime returns a subgraph's outputs only (its inputs
    and outputs are still watched there)."""
    if backend == "rknn-sim":
        return SimProbe(manifest)
    if backend == "rknnlite":
        return None
    return OnnxProbe(manifest)


class HeadroomObserver:
    """Pipeline observer: the peak of every watched tensor of every subgraph over the whole run."""

    def __init__(self, probe, min_headroom: float = DEFAULT_MIN_HEADROOM, held: dict | None = None):
        self.probe = probe
        self.min_headroom = min_headroom
        self.held = held or {}          # held_outside_float16(manifest): not judged against 65504
        self.peaks: dict[int, dict[str, Peak]] = {}
        self.labels: dict[int, str] = {}

    def __call__(self, inv: Invocation) -> None:
        entry = inv.entry
        self.labels[entry.index] = entry.label
        for spec, array in zip(entry.inputs, inv.inputs):
            self._see(entry.index, spec.name, array, inv)
        # In dataflow order, so that of several overflowed tensors the gate names the first.
        self._intermediates(inv)
        self._see(entry.index, "y", inv.output, inv)

    def _intermediates(self, inv: Invocation) -> None:
        entry = inv.entry
        if self.probe is None:
            return
        batch = batch_of(entry)
        rows = len(inv.streams)
        for k in range(0, rows, batch):
            chunk = [a[k:k + batch] for a in inv.inputs]
            if len(chunk[0]) < batch:       # one stream on a partition exported for two
                chunk = [np.concatenate([a, np.repeat(a[-1:], batch - len(a), 0)]) for a in chunk]
            outs = self.probe.run(entry, chunk)
            for name, out in zip(probe_tensors(entry), outs):
                self._see(entry.index, name, np.asarray(out)[:rows - k], inv, offset=k)

    def _see(self, index: int, tensor: str, array, inv: Invocation, offset: int = 0) -> None:
        # Per stream: the gate names the stream whose activations came closest.
        peaks = self.peaks.setdefault(index, {})
        for k, value in enumerate(_peaks(array)):
            have = peaks.get(tensor)
            if have is None or value > have.peak:
                peaks[tensor] = Peak(tensor, value, inv.step, inv.streams[offset + k])

    def summary(self) -> list[dict]:
        """Per subgraph (execution order): its lowest float16 headroom, where, and every tensor's peak."""
        out = []
        for index in sorted(self.peaks):
            tensors = self.peaks[index]
            held = self.held.get(index, {})
            how = {name: held.get(name, held.get("*")) for name in tensors}
            judged = [p for name, p in tensors.items() if how[name] is None]
            worst = max(judged, key=lambda p: p.peak) if judged else None
            out.append({"subgraph": index, "label": self.labels[index],
                        "headroom": _finite(worst.headroom) if worst else None,
                        "tensor": worst.tensor if worst else None, "step": worst.step if worst else None,
                        "stream": worst.stream if worst else None, "peak": _finite(worst.peak) if worst else None,
                        "tensors": {name: {**asdict(p), "peak": _finite(p.peak), "headroom": _finite(p.headroom),
                                           **({"held": how[name]} if how[name] else {})}
                                    for name, p in tensors.items()}})
        return out

    def report_section(self) -> dict:
        """The run report's `headroom` section (run_partitioned adds it, also to a failed run's)."""
        return {REPORT_KEY: {"float16_max": FP16_MAX, "min_headroom": self.min_headroom,
                             "intermediates": "probed" if self.probe else "not reachable on this backend",
                             "subgraphs": self.summary()}}

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()


def _finite(value: float):
    # JSON has no inf: an overflow's peak is recorded as the string "inf" and its headroom as 0.
    if value == float("inf"):
        return "inf"
    return float(value)


def min_headroom_of(cfg) -> float:
    """The model's stated headroom ([gates] float16_headroom_min in model.toml), or the default."""
    value = cfg.raw_gates.get("float16_headroom_min", DEFAULT_MIN_HEADROOM)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 1.0:
        raise ConfigError(f"{cfg.source}: [gates] float16_headroom_min = {value!r}: a number >= 1 "
                          f"(how many times below the FP16 maximum every tensor must stay)")
    return float(value)


def headroom_failures(section: dict, min_headroom: float | None = None) -> list[str]:
    """One line per subgraph of a report's `headroom` section whose headroom is below the limit."""
    limit = section["min_headroom"] if min_headroom is None else min_headroom
    lines = []
    for sub in section["subgraphs"]:
        if sub["headroom"] is None:     # no tensor of it is held in float16
            continue
        headroom = float(sub["headroom"])
        if headroom < limit:
            peak = "inf/NaN (overflowed)" if sub["peak"] == "inf" else f"{float(sub['peak']):.6g}"
            lines.append(f"{sub['label']}: tensor {sub['tensor']} peaked at {peak} at step {sub['step']}, "
                         f"stream {sub['stream']}: headroom {headroom:.3g}x to the FP16 maximum "
                         f"{FP16_MAX:.0f}, below {limit:g}x")
    return lines
