"""The toolkit's layer table and the CPU-fallback gate.

A verbose build prints a "Network Layer Information Table": one row per op of the compiled model with
ID, OpType, DataType, Target (NPU or CPU), shapes, cycles, RW(KB) and FullName ("Erf:gelu/erf").
An op with Target CPU runs on the board's CPU inside the NPU runtime, between NPU tasks: slow, and not
what the partition was designed for. The input and output operators are always listed on the CPU
(they only hand buffers over), so the gate leaves them aside.

If the toolkit prints the table more than once in one log, the last one describes the exported model.

Size limits (docs/granularity.md, measured with rknn-toolkit2 2.5.0 and 2.3.2 on single-op graphs and
on the full-size model): the toolkit moves an op to the CPU when a tensor is too large for the
NPU's register fields, and says so in its log without naming the op:
  - "Transpose will fallback to CPU, because input shape has exceeded the max limit, height(H) *
    width(W) = P, required product no larger than 8192!" (2.5.0; the full-size attention's q/k
    transposes at 16 heads x 1024 tokens, before the export split heads head-major);
  - "channel is too large, may produce thousands of regtask, fallback to cpu!" (a layout transpose of
    a MatMul with a dimension over 8192: 8192 stays on the NPU, 8193 does not);
and when it cannot, it writes the register anyway: "REGTASK: The bit width of field value exceeds
the limit, ... limit: 0x1fff, value: 0x2010" (13-bit fields: 8191; a softmax over 16383+ values).
The simulator does not execute register tasks, so only the log shows that the board would run
truncated fields. `size_limits` reads these lines; the gates tie them to the ops of the layer table.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.errors import ToolkitError

__all__ = ["Layer", "parse_layer_table", "cpu_fallbacks", "check_no_cpu_ops", "register_overflow"]

TITLE = "Network Layer Information Table"
BOUNDARY_OPS = ("InputOperator", "OutputOperator")
# "D RKNN: [08:22:55.704] " before every line of the table; ANSI colours around some log lines.
_PREFIX = re.compile(r"^\s*(?:[DIWE]\s+RKNN:\s*)?(?:\[[0-9:.]+\]\s*)?")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RULE = re.compile(r"^-{20,}\s*$")
_CYCLES = re.compile(r"^\d+/\d+/\d+$")
# The limit behind "channel is too large" (the message states none): measured by bisection on a
# MatMul's output width and token count, 8192 on the NPU and 8193 on the CPU (2.5.0 and 2.3.2).
CHANNEL_LIMIT = 8192
_TRANSPOSE_LIMIT = re.compile(r"Transpose will fallback to CPU, because input shape has exceeded the max "
                              r"limit, height\((\d+)\) \* width\((\d+)\) = (\d+), required product no "
                              r"larger than (\d+)")
_CHANNEL_LIMIT = re.compile(r"channel is too large, may produce thousands of regtask, fallback to cpu")
_REGTASK = re.compile(r"REGTASK: The bit width of field value exceeds the limit, .*limit: (0x[0-9a-fA-F]+), "
                      r"value: (0x[0-9a-fA-F]+)")


@dataclass(frozen=True)
class Layer:
    id: int
    op_type: str
    data_type: str
    target: str
    full_name: str
    input_shape: str = ""       # as the table prints it, e.g. "(2,128,16,1024)"; "" if not printed
    output_shape: str = ""
    cycles: int = 0             # the toolkit's estimate, Cycles(DDR/NPU/Total)'s total (0 on the CPU)

    def dims(self) -> list[int]:
        """Every dimension of its input and output shapes."""
        return [int(d) for d in re.findall(r"\d+", self.input_shape + " " + self.output_shape)]

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
    shapes = header[4:6] == ["InputShape", "OutputShape"]
    layers: list[Layer] = []
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
                            target=cells[3].upper(), full_name=cells[-1] if ":" in cells[-1] else "",
                            input_shape=_shape_cell(cells[4]) if shapes and len(cells) > 5 else "",
                            output_shape=_shape_cell(cells[5]) if shapes and len(cells) > 5 else "",
                            cycles=_cycles(cells)))
    if not layers:
        raise ToolkitError(f"{where}: the layer table lists no ops")
    return layers


def _cycles(cells: list[str]) -> int:
    found = next((c for c in cells if _CYCLES.match(c)), None)
    return int(found.rsplit("/", 1)[1]) if found else 0


def _shape_cell(cell: str) -> str:
    return "" if cell == "\\" else cell


@dataclass(frozen=True)
class SizeLimit:
    """One size-limit line of a build log: what the toolkit measured against which limit."""
    kind: str               # "transpose", "channel" or "register"
    limit: int
    value: int | None       # the product / field value the toolkit named; None if it named none
    dims: tuple = ()        # (height, width) for "transpose"


def size_limits(text: str) -> list[SizeLimit]:
    """Every size-limit line of one subgraph's build log, in order."""
    found = []
    for line in _lines(text):
        if m := _TRANSPOSE_LIMIT.search(line):
            found.append(SizeLimit("transpose", int(m[4]), int(m[3]), (int(m[1]), int(m[2]))))
        elif _CHANNEL_LIMIT.search(line):
            found.append(SizeLimit("channel", CHANNEL_LIMIT, None))
        elif m := _REGTASK.search(line):
            found.append(SizeLimit("register", int(m[1], 16), int(m[2], 16)))
    return found


def _why(layer: Layer, limits: list[SizeLimit]) -> str | None:
    """The size limit that moved this op to the CPU, if the log names one that fits its shapes."""
    for lim in limits:
        # the toolkit's height x width is of its own packed layout: the width is the input's last
        # dimension, the height not always one of the input's (16 heads x 16 channels show as 8)
        if lim.kind == "transpose" and layer.op_type == "Transpose" \
                and layer.input_shape.split("),")[0].endswith(f",{lim.dims[1]})"):
            return (f"input {layer.input_shape}: the toolkit's height {lim.dims[0]} x width {lim.dims[1]} = "
                    f"{lim.value}, over its limit {lim.limit}")
        if lim.kind == "channel" and max(layer.dims(), default=0) > lim.limit:
            return (f"dimension {max(layer.dims())} of {layer.input_shape or layer.output_shape} over the "
                    f"toolkit's channel limit {lim.limit} ('channel is too large ... fallback to cpu')")
    return None


def cpu_fallbacks(layers: list[Layer], log_text: str = "") -> list[dict]:
    """The ops placed off the NPU, input and output operators aside; with the build log, each op a
    size limit moved there carries `why` (its shape, the dimension and the limit)."""
    limits = [lim for lim in size_limits(log_text) if lim.kind != "register"]
    out = []
    for layer in layers:
        if layer.target == "NPU" or layer.op_type in BOUNDARY_OPS:
            continue
        op = {"id": layer.id, "op": layer.op_type, "name": layer.name, "target": layer.target}
        if layer.input_shape:
            op["input"] = layer.input_shape
        why = _why(layer, limits)
        if why:
            op["why"] = why
        out.append(op)
    return out


def register_overflow(layers: list[Layer], log_text: str) -> str | None:
    """What the toolkit compiled past a register field's limit (None if nothing): the fields, their
    limit, the largest value, and the ops whose shapes have a dimension over that limit."""
    over = [lim for lim in size_limits(log_text) if lim.kind == "register"]
    if not over:
        return None
    limit = min(lim.limit for lim in over)
    largest = max(lim.value for lim in over if lim.value is not None)     # a register line names its value
    suspects = [f"{layer.op_type}{' ' + repr(layer.name) if layer.name else ''} "
                f"{layer.input_shape or layer.output_shape}"
                for layer in layers if layer.op_type not in BOUNDARY_OPS and max(layer.dims(), default=0) > limit]
    suspects = list(dict.fromkeys(suspects))
    named = ", ".join(suspects[:3]) + (f" and {len(suspects) - 3} more" if len(suspects) > 3 else "")
    return (f"{len(over)} register field(s) written past their limit {limit:#x} ({limit}), largest "
            f"{largest:#x} ({largest}); op(s) with a dimension over {limit}: {named or 'none in the layer table'}")


def check_no_cpu_ops(by_subgraph: dict[str, list[dict]]) -> None:
    """The gate: every op of every subgraph on the NPU; the first failure names subgraph and op."""
    bad = {label: ops for label, ops in by_subgraph.items() if ops}
    if not bad:
        return
    label, ops = next(iter(bad.items()))
    first = ops[0]
    more = sum(len(o) for o in bad.values()) - 1
    # the toolkit's size limit when it named one (its why holds the shape), else the op's input shape
    why = f": {first['why']}" if first.get("why") else f" (input {first['input']})" if first.get("input") else ""
    raise ToolkitError(f"CPU fallback: {label}: op {first['op']} '{first['name']}' runs on the "
                       f"{first['target']}{why}"
                       + (f" (and {more} more op(s) in {len(bad)} subgraph(s))" if more else ""))
