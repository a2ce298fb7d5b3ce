"""The ``graph`` section of a schedule file: every operator of the network, what became of
it, and where each mapped layer reads and writes.

A compiler reads it to know where every tensor comes from: ``operators`` lists the graph in
topological order with the fields it was given (``fate``: its own ``layer``, ``folded`` or
``fused`` into the layer ``into``, a ``view`` of ``into``, a ``concat`` buffer);
``buffers`` the stored tensors (network inputs, layer and concat outputs); ``steps`` each
mapped layer in execution order with the buffer slices (``buffer``, first channel
``offset``, ``shape``) of its operands, residual, channel gate and output. The operators are
the claim's source: reading the file rebuilds the graph from them (every shape rule
re-checked), and the audit lowers it again and compares the stored fates, buffers and steps
with the result.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    model_serializer,
)

from autotune.io.errors import InputError
from autotune.ir.graph import OP_KINDS, Graph, GraphError, Operator, make_operator
from autotune.ir.lowering import FateKind, Lowering, TensorRef
from autotune.ir.resample import UpsampleMode

#: Operator fields written when they differ from their default (the rest is implied).
_OPTIONAL_FIELDS: dict[str, object] = {
    "out_channels": 0,
    "kernel": (1, 1),
    "stride": (1, 1),
    "padding": (0, 0),
    "dilation": (1, 1),
    "groups": 1,
    "ceil_mode": False,
    "count_include_pad": False,
    "scale": 1,
    "mode": "nearest",
    "channels": (0, 0),
    "alpha": 0.01,
    "low": 0.0,
    "high": 6.0,
    "epsilon": 1e-5,
    "bias": False,
}


#: Kinds whose kernel is required even when 1x1.
_KERNEL_KINDS = frozenset({"conv", "maxpool", "avgpool"})


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _finite_or_infinite(value: float) -> float:
    if math.isnan(value):
        raise ValueError("a bound must be a number or infinite, not NaN")
    return value


def _bound_json(value: float) -> float | str:
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


#: A clip's bound as a file writes it: a number, or an infinite one (a bound left out, as an
#: ONNX ``Clip`` may) as ``"Infinity"`` / ``"-Infinity"``, which JSON has no number for and
#: pydantic reads back. The schedule's layer records use it too.
ClipBound = Annotated[
    float,
    Field(allow_inf_nan=True),
    AfterValidator(_finite_or_infinite),
    PlainSerializer(_bound_json, when_used="json"),
    WithJsonSchema({"anyOf": [{"type": "number"}, {"enum": ["Infinity", "-Infinity"]}]}),
]


class OperatorRecord(_Record):
    name: str
    kind: str = Field(description=f"one of {', '.join(OP_KINDS)}")
    inputs: list[str]
    shape: list[int] = Field(description="output volume [height, width, channels], per image")
    fate: FateKind
    into: str = Field(description="the layer it was folded or fused into, or its buffer")
    out_channels: int | None = None
    kernel: list[int] | None = None
    stride: list[int] | None = None
    padding: list[int] | None = Field(
        default=None, description="[h, w] on each side, or [top, left, bottom, right] (a conv)"
    )
    dilation: list[int] | None = None
    groups: int | None = None
    ceil_mode: bool | None = None
    count_include_pad: bool | None = None
    scale: int | None = None
    mode: UpsampleMode | None = Field(
        default=None, description="an upsample's interpolation (absent: nearest)"
    )
    channels: list[int] | None = Field(
        default=None, description="a slice's [start, stop] of the channels kept"
    )
    alpha: float | None = None
    low: ClipBound | None = None
    high: ClipBound | None = None
    epsilon: float | None = None
    bias: bool | None = None

    _omit_absent = model_serializer(mode="wrap")(
        lambda self, handler: {k: v for k, v in handler(self).items() if v is not None}
    )


class TensorRecord(_Record):
    name: str
    shape: list[int]


class BufferRecord(_Record):
    name: str
    shape: list[int]
    producer: str | None = Field(description="the layer or concat that fills it; null: input")


class RefRecord(_Record):
    tensor: str
    buffer: str
    offset: int = Field(description="first channel of the slice within the buffer")
    shape: list[int] = Field(description="the slice's volume [height, width, channels]")
    view: list[int] | None = Field(
        default=None, description="the shape the layer reads it as, when a flatten differs"
    )

    _omit_absent = model_serializer(mode="wrap")(
        lambda self, handler: {k: v for k, v in handler(self).items() if v is not None}
    )


class StepRecord(_Record):
    layer: str
    op: str = Field(description="the graph operator it maps; '' for a concat copy")
    inputs: list[RefRecord]
    residual: RefRecord | None = None
    gate: RefRecord | None = Field(
        default=None,
        description="a mul by a channel gate [1, 1, c]: the tensor of each image's factors",
    )
    output: RefRecord
    absorbed: list[str] = Field(default_factory=list)
    prologue: str | None = Field(
        default=None,
        description="a 1x1 conv fused with the depthwise step before it: that step's name "
        "(its operators' fate is 'fused' into this step)",
    )

    _omit_gate = model_serializer(mode="wrap")(  # absent but for a gated mul's or fused step
        lambda self, handler: {
            k: v for k, v in handler(self).items() if k not in ("gate", "prologue") or v is not None
        }
    )


class GraphRecord(_Record):
    inputs: list[TensorRecord]
    outputs: list[str]
    operators: list[OperatorRecord]
    buffers: list[BufferRecord]
    steps: list[StepRecord]


def graph_record(graph: Graph, lowering: Lowering) -> GraphRecord:
    """The record of a graph and its lowering."""
    fates = {fate.op: fate for fate in lowering.fates}
    operators = []
    for op in graph.ops:
        extra: dict[str, Any] = {}
        for key, default in _OPTIONAL_FIELDS.items():
            value = getattr(op, key)
            if value != default or (key == "kernel" and op.kind in _KERNEL_KINDS):
                extra[key] = list(value) if isinstance(value, tuple) else value
        if op.padding_end is not None:  # unequal: [top, left, bottom, right]
            extra["padding"] = [*op.padding, *op.padding_end]
        fate = fates[op.name]
        operators.append(
            OperatorRecord(
                name=op.name,
                kind=op.kind,
                inputs=list(op.inputs),
                shape=list(op.shape),
                fate=fate.kind,
                into=fate.into,
                **extra,
            )
        )
    return GraphRecord(
        inputs=[TensorRecord(name=name, shape=list(shape)) for name, shape in graph.inputs],
        outputs=list(graph.outputs),
        operators=operators,
        buffers=[
            BufferRecord(name=b.name, shape=list(b.shape), producer=b.producer)
            for b in lowering.buffers
        ],
        steps=[
            StepRecord(
                layer=step.name,
                op=step.op,
                inputs=[_ref(r) for r in step.inputs],
                residual=None if step.residual is None else _ref(step.residual),
                gate=None if step.gate is None else _ref(step.gate),
                output=_ref(step.output),
                absorbed=list(step.absorbed),
                prologue=None if step.prologue is None else step.prologue.name,
            )
            for step in lowering.steps
        ],
    )


def fused_steps_of(record: GraphRecord) -> tuple[str, ...]:
    """The steps a graph record says absorbed the step before them (``ir.fusion``), in
    step order: those with a ``prologue``, and those a conv operator's fate ``fused``
    names (lowering the graph again with them checks both claims). The fate alone does not
    tell: an activation or a residual add fused into its own conv has it too, and the
    absorbed step need not be a conv operator (a standalone batch norm is a depthwise, as
    in DenseNet's norm, ReLU, 1x1)."""
    named = {step.layer for step in record.steps if step.prologue is not None}
    named |= {op.into for op in record.operators if op.kind == "conv" and op.fate == "fused"}
    # (a name that is no step goes last: lowering again refuses it by name)
    position = {step.layer: i for i, step in enumerate(record.steps)}
    return tuple(sorted(named, key=lambda name: (position.get(name, len(position)), name)))


def _ref(ref: TensorRef) -> RefRecord:
    return RefRecord(
        tensor=ref.tensor,
        buffer=ref.buffer,
        offset=ref.offset,
        shape=list(ref.stored),
        view=None if ref.view == ref.stored else list(ref.view),
    )


def graph_from_record(record: GraphRecord, path: str | Path, network: str) -> Graph:
    """The graph the record's operators describe, every shape re-inferred and checked
    (``InputError`` naming the operator and field otherwise)."""
    shapes: dict[str, tuple[int, int, int]] = {}
    inputs = []
    for tensor in record.inputs:
        if len(tensor.shape) != 3 or min(tensor.shape) < 1:
            raise InputError(path, "expected [h, w, c] >= 1", layer=tensor.name, field="graph")
        shape = (tensor.shape[0], tensor.shape[1], tensor.shape[2])
        shapes[tensor.name] = shape
        inputs.append((tensor.name, shape))
    ops: list[Operator] = []
    for rec in record.operators:
        fields: dict[str, Any] = {
            key: getattr(rec, key) for key in _OPTIONAL_FIELDS if getattr(rec, key) is not None
        }
        try:
            op = make_operator(rec.name, rec.kind, rec.inputs, shapes, shape=rec.shape, **fields)
        except (GraphError, TypeError, ValueError) as exc:
            reason = exc.reason if isinstance(exc, GraphError) else str(exc)
            field = exc.field if isinstance(exc, GraphError) else "graph"
            raise InputError(path, reason, layer=rec.name, field=f"graph.{field}") from None
        if rec.name in shapes:
            raise InputError(path, "duplicate operator name", layer=rec.name, field="graph.name")
        shapes[rec.name] = op.shape
        ops.append(op)
    try:
        return Graph(network, tuple(inputs), tuple(ops), tuple(record.outputs))
    except GraphError as exc:
        raise InputError(path, exc.reason, layer=exc.op, field=f"graph.{exc.field}") from None
