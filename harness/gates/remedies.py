"""The remedies `harness reduce` tries for a diverging range, cheapest first, each judged by the same
check as the bisection on the whole subgraph rebuilt with it:

1. op_target: the range's ops pinned to the CPU (`op_target` in rknn.config, keyed by the toolkit's
   own tensor names, read from its graph);
2. int16: the subgraph quantised with 16-bit activations (w16a16i_dfp in 2.5.0, w16a16i in 2.3.2;
   calibrated on the failing inputs): a range the toolkit's float16 cannot hold may fit 16-bit
   fixed point. The toolkit has no float32 on the NPU (float_dtype: float16 only);
For an INT8 build (reduce --int8: the ranges bisected INT8, each calibrated on its own inputs): the
build as is, then `int8-hybrid`, the range kept as a float16 island in the INT8 build (the toolkit's
hybrid quantization, custom_hybrid), then split.

3. split: the subgraph split at the range, the host running it in FP32 (as AdaLN is), grown forward
   node by node until the check passes (an overflowed tensor's consumers overflow too); convert
   builds it (toolkit/split.py) and the runtime runs it (lifecycle/split.py).

Each outcome: passes or not, the lowest cosine, and the time estimate: the toolkit's cycle estimate
of what stays on the NPU (its layer table; CPU ops have none) and the host part's measured time.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..core.errors import ToolkitError
from ..toolkit.cut import Graph
from ..toolkit.split import split_setting
from .bisect import judge
from .sim_runner import INT8, SimRunner

__all__ = ["Outcome", "try_remedies", "INT16"]

INT16 = {"2.5.0": "w16a16i_dfp", "2.3.2": "w16a16i"}


@dataclass
class Outcome:
    remedy: str
    what: str
    passes: bool
    cosine: float | None
    npu_cycles: int | None = None
    cpu_ops: int | None = None
    host_ms: float | None = None
    convert_config: dict | None = None      # what convert applies (None: convert cannot apply it)
    note: str = ""
    seconds: float = 0.0
    tries: list[str] = field(default_factory=list)

    def line(self) -> str:
        check = ("not run" if self.cosine is None else "not finite" if not np.isfinite(self.cosine)
                 else f"cosine {self.cosine:.7f}")
        cost = [f"{self.npu_cycles:,} NPU cycles" if self.npu_cycles is not None else "",
                f"{self.cpu_ops} op(s) on the CPU" if self.cpu_ops else "",
                f"host FP32 {self.host_ms:.2f} ms" if self.host_ms is not None else ""]
        cost_text = ", ".join(c for c in cost if c)
        return (f"{self.remedy:9s} {'PASSES' if self.passes else 'fails '}  {check}"
                + (f"  [{cost_text}]" if cost_text else "") + f"  {self.what}"
                + (f" ({self.note})" if self.note else ""))


@dataclass(frozen=True)
class Context:
    """What every remedy needs: the graph, its FP32 values per input set, the reduced range, and the
    build it is judged in (one object: the remedies read it and never change it)."""
    graph: Graph
    values: list[dict]
    start: int
    end: int
    version: str
    threshold: float
    scratch: Path
    dataset: Path
    onnx_path: Path
    build: dict = field(default_factory=dict)       # {"quantization": INT8} for an INT8 build

    @property
    def int8(self) -> bool:
        return bool(self.build.get("quantization"))

    def whole(self, config: dict) -> tuple[float, SimRunner]:
        runner = SimRunner(self.version, {**self.build, **config}, self.scratch)
        n = len(self.graph.nodes)
        segment = self.graph.segment(0, n, self.values[0])
        outs = runner(segment, [segment.feeds(v) for v in self.values])
        return judge(outs, [[v[o] for o in segment.outputs] for v in self.values])[0], runner


def _npu_cycles(layers) -> tuple[int, int]:
    npu = sum(layer.cycles for layer in layers if layer.target == "NPU")
    cpu = sum(1 for layer in layers
              if layer.target == "CPU" and layer.op_type not in ("InputOperator", "OutputOperator"))
    return npu, cpu


def _as_built(ctx: Context) -> Outcome:
    """The subgraph as converted (float16, or INT8): the figures each remedy is compared with."""
    cos, runner = ctx.whole({})
    npu, cpu = _npu_cycles(runner.last_layers)
    return Outcome("none", f"{'INT8' if ctx.int8 else 'float16'} as converted", bool(cos >= ctx.threshold), cos,
                   npu, cpu)


def _island(ctx: Context, say) -> Outcome:
    """An INT8 build with the range kept in float16 (hybrid quantization's custom_hybrid: from the
    range's first op's input to its last op's output, in the toolkit's own tensor names), grown forward
    node by node until the check passes (an outlier activation stays one until a linear folds it)."""
    nodes = SimRunner(ctx.version, None, ctx.scratch).toolkit_graph(ctx.onnx_path, ctx.dataset)
    quant = {k: v for k, v in INT8.items() if k != "dataset"}
    tries: list[str] = []
    outcome = Outcome("int8-hybrid", "float16 island", False, None,
                      note="none of the range's ops is in the toolkit's graph by name (fused away)")
    for end in range(ctx.end, len(ctx.graph.nodes) + 1):
        names = {node.name for node in ctx.graph.nodes[ctx.start:end]}
        inside = [node for node in nodes if node["name"].split("#")[0] in names]
        if not inside:
            continue
        island = [inside[0]["inputs"][0], inside[-1]["outputs"][0]]
        if outcome.convert_config and outcome.convert_config["quantization"]["custom_hybrid"] == [island]:
            continue        # a fused op: the same island as the node before
        cos, runner = ctx.whole({"quantization": {**INT8, "custom_hybrid": [island]}})
        npu, cpu = _npu_cycles(runner.last_layers)
        line = (f"  int8-hybrid: float16 {island[0]} .. {island[1]} ({ctx.graph.describe(ctx.start, end)}): "
                + ("not finite" if not np.isfinite(cos) else f"cosine {cos:.7f}"))
        say(line)
        tries.append(line.strip())
        outcome = Outcome("int8-hybrid", f"INT8 with float16 island {island[0]} .. {island[1]}",
                          bool(cos >= ctx.threshold), cos, npu, cpu, tries=tries,
                          convert_config={"quantization": {**quant, "custom_hybrid": [island]}})
        if outcome.passes:
            break
    return outcome


def _op_target(ctx: Context) -> Outcome:
    names = {node.name for node in ctx.graph.nodes[ctx.start:ctx.end]}
    nodes = SimRunner(ctx.version, None, ctx.scratch).toolkit_graph(ctx.onnx_path, ctx.dataset)
    pinned = {out: "cpu" for node in nodes if node["name"].split("#")[0] in names
              for out in node["outputs"]}
    what = "op_target " + ", ".join(f"{k}: cpu" for k in pinned)
    if not pinned:
        return Outcome("op_target", "op_target", False, None,
                       note="none of the range's ops is in the toolkit's graph by name (fused away)")
    cos, runner = ctx.whole({"op_target": pinned})
    npu, cpu = _npu_cycles(runner.last_layers)
    datatypes = sorted({layer.data_type for layer in runner.last_layers if layer.target == "CPU"
                        and layer.op_type not in ("InputOperator", "OutputOperator")})
    note = f"the toolkit's CPU ops run in {'/'.join(datatypes)}" if datatypes else ""
    return Outcome("op_target", what, bool(cos >= ctx.threshold), cos, npu, cpu,
                   convert_config={"op_target": pinned}, note=note)


def _quantized(ctx: Context, name: str, dtype: str, algorithm: str = "normal") -> Outcome:
    """The whole subgraph quantised with `dtype`, calibrated on the failing inputs: fixed point with
    the range the inputs need, where float16 has a fixed one."""
    quant = {"dataset": str(ctx.dataset), "quantized_dtype": dtype, "quantized_algorithm": algorithm,
             "quantized_method": "channel"}
    try:
        cos, runner = ctx.whole({"quantization": quant})
    except ToolkitError as exc:
        return Outcome(name, f"quantized_dtype {dtype}", False, None, note=f"the toolkit refuses: {exc}"[:300])
    npu, cpu = _npu_cycles(runner.last_layers)
    return Outcome(name, f"quantized_dtype {dtype} ({algorithm}), calibrated on the failing inputs",
                   bool(cos >= ctx.threshold),
                   cos, npu, cpu, convert_config={"quantization": {k: v for k, v in quant.items() if k != "dataset"}})


def _split(ctx: Context, say) -> Outcome:
    """Host FP32 for nodes [start, end'), end' grown until the whole subgraph passes."""
    n = len(ctx.graph.nodes)
    runner = SimRunner(ctx.version, ctx.build, ctx.scratch)     # the NPU parts built as the subgraph is
    tries = []
    for end in range(ctx.end, n + 1):
        cos, npu, host_ms = _composed(ctx, runner, ctx.start, end)
        line = f"  split: host FP32 nodes {ctx.start}-{end - 1} ({ctx.graph.describe(ctx.start, end)}): " \
               + ("not finite" if not np.isfinite(cos) else f"cosine {cos:.7f}")
        say(line)
        tries.append(line.strip())
        if cos >= ctx.threshold:
            return Outcome("split", f"host FP32 runs {ctx.graph.describe(ctx.start, end)}", True, cos, npu, 0,
                           host_ms, {"split": split_setting(ctx.graph, ctx.start, end)}, tries=tries)
    return Outcome("split", "host FP32 from the range to the end", False, cos, npu, 0, host_ms, tries=tries)


def _composed(ctx: Context, runner: SimRunner, start: int, end: int) -> tuple[float, int, float]:
    """The subgraph as simulator [0, start) + onnxruntime FP32 [start, end) + simulator [end, n)."""
    import onnxruntime as ort
    n = len(ctx.graph.nodes)
    outputs = ctx.graph.outputs
    cycles, host = 0, 0.0
    finals = []
    for values in ctx.values:
        known = {i.name: values[i.name] for i in ctx.graph.model.graph.input}
        for a, b, on_host in ((0, start, False), (start, end, True), (end, n, False)):
            if a == b:
                continue
            segment = ctx.graph.segment(a, b, values)
            feeds = [known[name] for name in segment.inputs]
            if on_host:
                session = ort.InferenceSession(segment.model.SerializeToString(), providers=["CPUExecutionProvider"])
                began = time.perf_counter()
                outs = session.run(None, dict(zip(segment.inputs, feeds)))
                host += (time.perf_counter() - began) * 1e3
            else:
                outs = runner(segment, [feeds])[0]
                cycles += _npu_cycles(runner.last_layers)[0]
            known.update(zip(segment.outputs, outs))
        finals.append([known[name] for name in outputs])
    cos = judge(finals, [[v[name] for name in outputs] for v in ctx.values])[0]
    sets = len(ctx.values)
    return cos, cycles // sets, host / sets


def try_remedies(ctx: Context, say=print) -> list[Outcome]:
    """The subgraph as built, then every remedy in order, cheapest first; each said on one line."""
    outcomes = []
    int16 = INT16.get(ctx.version, "w16a16i_dfp")
    tried = ((("none", lambda: _as_built(ctx)), ("int8-hybrid", lambda: _island(ctx, say))) if ctx.int8 else
             (("none", lambda: _as_built(ctx)),
              ("op_target", lambda: _op_target(ctx)),
              ("int16", lambda: _quantized(ctx, "int16", int16)),
              ("int8", lambda: _quantized(ctx, "int8", "w8a8")),
              ("int8-mmse", lambda: _quantized(ctx, "int8-mmse", "w8a8", "mmse"))))
    for name, attempt in (*tried, ("split", lambda: _split(ctx, say))):
        began = time.perf_counter()
        try:
            outcome = attempt()
        except ToolkitError as exc:
            outcome = Outcome(name, name, False, None, note=str(exc)[:300])
        outcome.seconds = round(time.perf_counter() - began, 2)
        say(outcome.line())
        outcomes.append(outcome)
    return outcomes


def as_json(outcomes: list[Outcome]) -> list[dict]:
    return [asdict(o) for o in outcomes]
