"""Node ranges run on rknn-toolkit2's PC simulator for `harness reduce`: each range built by the
rknn-sim worker of one toolkit version (worker.build_rknn, with the conversion's settings plus a
remedy's), run on every input set, then evicted. A verbose build's layer table says where each op
ran and what the toolkit estimates it costs."""
from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

import numpy as np

from ..core.errors import ToolkitError
from ..toolkit.cut import Segment
from ..toolkit.layers import parse_layer_table

__all__ = ["SimRunner", "BASE_CONFIG", "INT8", "ON_INPUTS"]

BASE_CONFIG = {"target_platform": "rk3588", "float_dtype": "float16", "optimization_level": 3}
ON_INPUTS = "@inputs"       # a quantization's dataset: each range calibrated on the inputs it is run on
# An INT8 build as toolkit/precisions.toml's w8a8-ffn makes the FFNs (its hybrid_float aside: the
# remedy decides what stays float)
INT8 = {"quantized_dtype": "w8a8", "quantized_algorithm": "normal", "quantized_method": "channel",
        "dataset": ON_INPUTS}


class SimRunner:
    """`run(segment, input_sets)` on the simulator with `config` (BASE_CONFIG plus a remedy's keys)."""

    def __init__(self, version: str, config: dict | None = None, scratch: Path | None = None):
        from ..backends.rknn_sim import worker_for
        self.version = version
        self.config = {**BASE_CONFIG, **(config or {})}
        self.worker = worker_for(version)
        self.scratch = Path(scratch or tempfile.mkdtemp(prefix="anima-reduce-"))
        self.last_layers: list = []

    def _ask(self, header: dict, arrays=()):
        reply, outputs = self.worker.request(header, arrays)
        if not reply.get("ok"):
            raise ToolkitError(f"rknn-toolkit2 {self.version}: {reply.get('stage')}: {reply.get('detail')} "
                               f"(toolkit log: {self.worker.log_path})")
        return reply, outputs

    def __call__(self, segment: Segment, input_sets: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
        data = segment.model.SerializeToString()
        key = "reduce-" + hashlib.sha256(data + json.dumps(self.config, sort_keys=True).encode()).hexdigest()[:24]
        path = self.scratch / f"{key}.onnx"
        path.write_bytes(data)
        log = self.scratch / f"{key}.log"
        log.unlink(missing_ok=True)
        config = self._calibrated(key, input_sets)
        try:
            self._ask({"op": "load", "key": key, "onnx": str(path), "config": config, "rknn": None,
                       "log": str(log)})
            self.last_layers = parse_layer_table(log.read_text(errors="replace"), where=str(log))
            self._ask({"op": "init", "key": key})
            return [[np.asarray(o, np.float32) for o in self._ask({"op": "run", "key": key},
                                                                   [np.ascontiguousarray(a) for a in inputs])[1]]
                    for inputs in input_sets]
        finally:
            self.worker.request({"op": "evict", "key": key})

    def _calibrated(self, key: str, input_sets) -> dict:
        """The config, a quantization whose dataset is ON_INPUTS calibrated on the range's own inputs
        (an INT8 build of a node range: the activations it would get inside the whole subgraph)."""
        quant = self.config.get("quantization")
        if not quant or quant.get("dataset") != ON_INPUTS:
            return self.config
        lines = []
        for k, arrays in enumerate(input_sets):
            names = []
            for j, array in enumerate(arrays):
                np.save(self.scratch / f"{key}.set{k}.in{j}.npy", np.ascontiguousarray(array))
                names.append(str(self.scratch / f"{key}.set{k}.in{j}.npy"))
            lines.append(" ".join(names))
        (self.scratch / f"{key}.txt").write_text("\n".join(lines) + "\n")
        return {**self.config, "quantization": {**quant, "dataset": str(self.scratch / f"{key}.txt")}}

    def toolkit_graph(self, onnx_path: Path, dataset: Path) -> list[dict]:
        """The toolkit's own graph of a model (its tensor names for op_target)."""
        reply, _ = self._ask({"op": "graph", "onnx": str(onnx_path), "config": self.config, "dataset": str(dataset)})
        return reply["nodes"]
