"""The bisection of `harness reduce`: the smallest node range of a subgraph whose output, run by the
backend under test, diverges from onnxruntime FP32 by the gate's own check.

A `run(model, input_sets) -> output_sets` callable stands for the backend (the toolkit's simulator in
`harness reduce`; onnxruntime in FP16 in the unit test). Every try is one range, judged on every
input set: the lowest cosine of any output against the FP32 reference, NaN when either side is not
finite (accuracy.cosine), bad below the threshold. Two binary searches, Polygraphy's `debug reduce`
way: the shortest failing prefix [0, end) first (its last node is where the divergence appears),
then the latest start that still fails with the FP32 values fed in (what the range needs to go wrong
by itself). Both assume that an error, once made, stays in what the range computes; the result is
tried once more and reported with its own check, so a non-monotone graph shows as a good "result".
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from ..toolkit.cut import Graph, Segment
from .accuracy import cosine, max_rel_err

__all__ = ["Try", "Reduction", "judge", "reduce_graph"]

Runner = Callable[[Segment, list[list[np.ndarray]]], list[list[np.ndarray]]]


@dataclass
class Try:
    number: int
    start: int
    end: int
    nodes: str
    cosine: float
    max_rel_err: float
    good: bool
    seconds: float

    def line(self, threshold: float) -> str:
        verdict = "good" if self.good else "BAD"
        check = "not finite" if not np.isfinite(self.cosine) else f"cosine {self.cosine:.7f}"
        sign = ">=" if self.good else "<"
        return (f"try {self.number:2d}  nodes {self.start}-{self.end - 1}  {self.nodes}: {check} {sign} "
                f"{threshold}  {verdict}  ({self.seconds:.1f} s)")


@dataclass
class Reduction:
    """Where the divergence is: nodes [start, end), their ops and tensors, and every try."""
    start: int
    end: int
    nodes: str
    ops: list[dict]
    cosine: float
    max_rel_err: float
    tries: list[Try] = field(default_factory=list)

    def to_json(self) -> dict:
        return {**asdict(self), "tries": [asdict(t) for t in self.tries]}


def judge(outputs: list[list[np.ndarray]], references: list[list[np.ndarray]]) -> tuple[float, float]:
    """(lowest cosine, largest max relative error) over every input set and output; a shape the
    backend changed counts as cosine -1."""
    cosines, errors = [], []
    for outs, refs in zip(outputs, references):
        for out, ref in zip(outs, refs):
            if np.shape(out) != np.shape(ref):
                return -1.0, float("inf")
            cosines.append(cosine(out, ref))
            errors.append(max_rel_err(out, ref))
    worst = min(cosines, key=lambda c: c if np.isfinite(c) else -np.inf)
    return worst, max(errors)


class _Trier:
    def __init__(self, graph: Graph, values: list[dict], run: Runner, threshold: float, say):
        self.graph, self.values, self.run, self.threshold, self.say = graph, values, run, threshold, say
        self.tries: list[Try] = []
        self._seen: dict[tuple[int, int], Try] = {}

    def __call__(self, start: int, end: int) -> Try:
        if (start, end) in self._seen:
            return self._seen[(start, end)]
        began = time.perf_counter()
        segment = self.graph.segment(start, end, self.values[0])
        outputs = self.run(segment, [segment.feeds(v) for v in self.values])
        references = [[v[name] for name in segment.outputs] for v in self.values]
        worst, error = judge(outputs, references)
        one = Try(len(self.tries) + 1, start, end, self.graph.describe(start, end), worst, error,
                  bool(worst >= self.threshold), time.perf_counter() - began)
        self.tries.append(one)
        self._seen[(start, end)] = one
        self.say(one.line(self.threshold))
        return one


def reduce_graph(graph: Graph, values: list[dict], run: Runner, threshold: float,
                 say: Callable[[str], None] = print) -> Reduction | None:
    """The smallest failing range, or None when the whole graph passes the check (nothing to reduce)."""
    trier = _Trier(graph, values, run, threshold, say)
    n = len(graph.nodes)
    if trier(0, n).good:
        return None
    lo, hi = 1, n           # the shortest failing prefix: [0, hi) fails
    while lo < hi:
        mid = (lo + hi) // 2
        if trier(0, mid).good:
            lo = mid + 1
        else:
            hi = mid
    end = hi
    lo, hi = 0, end - 1     # the latest failing start: [lo, end) fails
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if trier(mid, end).good:
            hi = mid - 1
        else:
            lo = mid
    found = trier(lo, end)
    ops = [{"op": node.op_type, "name": node.name, "inputs": [i for i in node.input if i],
            "outputs": list(node.output)} for node in graph.nodes[lo:end]]
    return Reduction(lo, end, found.nodes, ops, found.cosine, found.max_rel_err, trier.tries)
