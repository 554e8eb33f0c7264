"""The toolkit's layer table and the CPU-fallback gate.

A verbose build prints a "Network Layer Information Table": one row per op of the compiled model with
ID, OpType, DataType, Target (NPU or CPU), shapes, cycles, RW(KB) and FullName ("Erf:gelu/erf").
An op with Target CPU runs on the board's CPU inside the NPU runtime, between NPU tasks: slow, and not
what the partition was designed for. The input and output operators are always listed on the CPU
(they only hand buffers over), so the gate leaves them aside.

If the toolkit prints the table more than once in one log, the last one describes the exported model.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.errors import ToolkitError

__all__ = ["Layer", "parse_layer_table", "cpu_fallbacks", "check_no_cpu_ops", "BOUNDARY_OPS"]

TITLE = "Network Layer Information Table"
BOUNDARY_OPS = ("InputOperator", "OutputOperator")
# "D RKNN: [08:22:55.704] " before every line of the table; ANSI colours around some log lines.
_PREFIX = re.compile(r"^\s*(?:[DIWE]\s+RKNN:\s*)?(?:\[[0-9:.]+\]\s*)?")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RULE = re.compile(r"^-{20,}\s*$")


@dataclass(frozen=True)
class Layer:
    id: int
    op_type: str
    data_type: str
    target: str
    full_name: str

    @property
    def name(self) -> str:
        """The graph node the op came from: FullName after 'OpType:'."""
        return self.full_name.split(":", 1)[1] if ":" in self.full_name else self.full_name


def _lines(text: str) -> list[str]:
    return [_PREFIX.sub("", _ANSI.sub("", line)).rstrip() for line in text.splitlines()]


def parse_layer_table(text: str, where: str = "build log") -> list[Layer]:
    """The rows of the last layer table in a build log; ToolkitError naming `where` if there is none
    or its header lacks the columns the gate reads."""
    lines = _lines(text)
    starts = [k for k, line in enumerate(lines) if line.strip() == TITLE]
    if not starts:
        raise ToolkitError(f"{where}: the build log has no '{TITLE}' (was the build verbose?)")
    k = starts[-1] + 1
    while k < len(lines) and (not lines[k].strip() or _RULE.match(lines[k])):
        k += 1
    header = lines[k].split() if k < len(lines) else []
    needed = ("ID", "OpType", "DataType", "Target", "FullName")
    if any(col not in header for col in needed) or header[:4] != list(needed[:4]):
        raise ToolkitError(f"{where}: layer table header {' '.join(header) or '(none)'} lacks "
                           f"ID OpType DataType Target ... FullName")
    layers = []
    for line in lines[k + 1:]:
        if _RULE.match(line):
            if layers:
                break
            continue
        cells = line.split()
        if not cells or not cells[0].isdigit():
            break
        # FullName is "OpType:node"; some fused ops have none, and the row then ends at RW(KB).
        layers.append(Layer(id=int(cells[0]), op_type=cells[1], data_type=cells[2],
                            target=cells[3].upper(), full_name=cells[-1] if ":" in cells[-1] else ""))
    if not layers:
        raise ToolkitError(f"{where}: the layer table lists no ops")
    return layers


def cpu_fallbacks(layers: list[Layer]) -> list[dict]:
    """The ops placed off the NPU, input and output operators aside."""
    return [{"id": l.id, "op": l.op_type, "name": l.name, "target": l.target} for l in layers
            if l.target != "NPU" and l.op_type not in BOUNDARY_OPS]


def check_no_cpu_ops(by_subgraph: dict[str, list[dict]]) -> None:
    """The gate: every op of every subgraph on the NPU; the first failure names subgraph and op."""
    bad = {label: ops for label, ops in by_subgraph.items() if ops}
    if not bad:
        return
    label, ops = next(iter(bad.items()))
    first = ops[0]
    more = sum(len(o) for o in bad.values()) - 1
    raise ToolkitError(f"CPU fallback: {label}: op {first['op']} '{first['name']}' runs on the "
                       f"{first['target']}" + (f" (and {more} more op(s) in {len(bad)} subgraph(s))"
                                               if more else ""))
