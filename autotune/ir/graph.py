"""A network as a graph: operators in topological order, each naming its input tensors.

A tensor is named after the operator that produces it (one output per operator) or is one of
the network's inputs (``Graph.inputs``). Shapes are per image, ``(h, w, c)``
(the volume's height, width and channels, laid out channel-major as the report's depth
slices: NCHW for the batch). ``flatten`` is a view: its output has shape ``(1, 1, h·w·c)``
over the same bytes, in NCHW order (channel, then row, then column), as ONNX ``Flatten``.

``make_operator`` infers an operator's output shape from its inputs' shapes and checks the
fields its kind needs; ``Graph`` checks that the operators form a DAG in topological order
with unique names and known inputs. Errors are ``GraphError``s naming the operator (and,
for a mismatch between a producer and a consumer, both).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from autotune.ir.errors import ArgumentsError
from autotune.ir.layer import out_size
from autotune.ir.resample import UPSAMPLE_MODES

#: Elementwise functions of one operand (they may fuse into their producer's epilogue).
ActivationOpKind = Literal[
    "relu",
    "relu6",
    "clip",
    "leaky_relu",
    "sigmoid",
    "silu",
    "hardswish",
    "hardsigmoid",
    "tanh",
    "gelu",
]
ACTIVATION_KINDS = frozenset(get_args(ActivationOpKind))
OpKind = Literal[
    "conv",
    "fc",
    "maxpool",
    "avgpool",
    "global_avgpool",
    "add",
    "mul",
    "concat",
    "slice",
    "shuffle",
    "upsample",
    ActivationOpKind,
    "batchnorm",
    "flatten",
    "softmax",
]
#: Every operator kind of ``network.yaml`` (``clip`` is ReLU6 with other bounds, from ONNX).
OP_KINDS: tuple[str, ...] = get_args(OpKind)
#: Kinds that read exactly one input tensor.
UNARY_KINDS = frozenset(OP_KINDS) - {"add", "mul", "concat"}
#: Kinds whose epilogue can add a per-channel bias of their own (``Operator.bias``); a batch
#: norm's shift is one of its four weight vectors, not a bias
BIASED_KINDS = frozenset({"conv", "fc"})

Shape = tuple[int, int, int]
Pair = tuple[int, int]


class GraphError(ArgumentsError, ValueError):
    """An operator that does not fit the graph; names the operator, the field and, for a
    mismatch with the tensor it reads, the producer."""

    def __init__(self, op: str, field_name: str, message: str, producer: str | None = None) -> None:
        where = f"layer {op!r}"
        if producer is not None:
            where += f" (input from {producer!r})"
        super().__init__(f"{where}, field {field_name!r}: {message}")
        self.op = op
        self.field = field_name
        self.reason = message
        self.producer = producer


@dataclass(frozen=True)
class Operator:
    """One operator of the graph with its output shape (inferred by ``make_operator``).

    Fields beyond ``name``, ``kind``, ``inputs`` and ``shape`` are those of the ONNX
    counterpart, used by the kinds that have them: ``out_channels``, ``kernel``, ``stride``,
    ``padding`` (zeros on each side, ``(h, w)``; ``padding_end``: the zeros below and to the
    right when they differ, ``(bottom, right)``, a conv only), ``dilation``, ``groups`` (conv);
    ``kernel``, ``stride``, ``padding``, ``ceil_mode``, ``count_include_pad`` (pools);
    ``scale`` and ``mode`` (upsample: ``autotune.ir.resample``); ``channels`` (slice:
    ``(start, stop)``); ``groups`` (shuffle);
    ``alpha`` (leaky relu); ``low``/``high`` (clip; relu6 is 0..6);
    ``epsilon`` (batch norm, whose statistics are weights); ``bias`` (a conv or fc adds a
    per-channel bias). ``shape`` is the output, per image.

    ``add`` sums two or more inputs of one shape; ``mul`` multiplies its first input by its
    second, of the same shape (elementwise) or a gate ``(1, 1, c)`` that scales each channel
    of each image by the image's own factor (a squeeze-excitation block's last step).
    ``slice`` keeps channels ``start … stop − 1`` (ONNX ``Slice``/``Split`` on the channels);
    ``shuffle`` is ShuffleNet's channel shuffle of ``groups`` groups (ONNX: ``Reshape`` to
    ``N×g×(C/g)×H×W``, ``Transpose`` of the two group axes, ``Reshape`` back): output channel
    ``j`` is input channel ``(j mod g)·C/g + j div g``.
    """

    name: str
    kind: OpKind
    inputs: tuple[str, ...]
    shape: Shape
    out_channels: int = 0
    kernel: Pair = (1, 1)
    stride: Pair = (1, 1)
    padding: Pair = (0, 0)
    dilation: Pair = (1, 1)
    groups: int = 1
    ceil_mode: bool = False
    count_include_pad: bool = False
    scale: int = 1
    mode: str = "nearest"
    channels: Pair = (0, 0)
    alpha: float = 0.01
    low: float = 0.0
    high: float = 6.0
    epsilon: float = 1e-5
    bias: bool = False
    padding_end: Pair | None = None

    @property
    def weight_words(self) -> int:
        """Parameters stored with the operator (conv/fc filters, batch norm's four vectors)."""
        if self.kind == "conv":
            return (
                self.out_channels
                * (self.in_channels // self.groups)
                * self.kernel[0]
                * self.kernel[1]
            )
        if self.kind == "fc":
            return self.out_channels * self.in_words
        if self.kind == "batchnorm":
            return 4 * self.shape[2]
        return 0

    # the input volume of a single-input operator, recorded at construction
    in_shape: Shape = field(default=(0, 0, 0), compare=False)

    @property
    def in_channels(self) -> int:
        return self.in_shape[2]

    @property
    def padding_bottom_right(self) -> Pair:
        """The zeros below and to the right: ``padding_end``, else ``padding``."""
        return self.padding if self.padding_end is None else self.padding_end

    @property
    def in_words(self) -> int:
        h, w, c = self.in_shape
        return h * w * c


def _pair(value: int | Iterable[int] | None, default: Pair) -> Pair:
    if value is None:
        return default
    if isinstance(value, int):
        return (value, value)
    h, w = value
    return (int(h), int(w))


def _padding(value: int | Iterable[int] | None) -> tuple[Pair, Pair]:
    """(top, left) and (bottom, right) from an int, ``(h, w)`` or ONNX's ``(top, left,
    bottom, right)``."""
    if value is not None and not isinstance(value, int):
        values = tuple(int(v) for v in value)
        if len(values) == 4:
            return (values[0], values[1]), (values[2], values[3])
        value = values
    begin = _pair(value, (0, 0))
    return begin, begin


def make_operator(
    name: str,
    kind: str,
    inputs: Iterable[str],
    input_shapes: Mapping[str, Shape],
    *,
    out_channels: int | None = None,
    kernel: int | Iterable[int] | None = None,
    stride: int | Iterable[int] | None = None,
    padding: int | Iterable[int] | None = None,
    dilation: int | Iterable[int] | None = None,
    groups: int = 1,
    ceil_mode: bool = False,
    count_include_pad: bool = False,
    scale: int | None = None,
    mode: str = "nearest",
    channels: Iterable[int] | None = None,
    alpha: float = 0.01,
    low: float = 0.0,
    high: float = 6.0,
    epsilon: float = 1e-5,
    bias: bool = False,
    shape: Iterable[int] | None = None,
) -> Operator:
    """The operator with its output shape inferred from ``input_shapes`` (tensor name ->
    shape); every shape rule and field check of its kind. ``shape``, when given, is the
    output shape the caller expects (checked). Raises ``GraphError``."""
    inputs = tuple(inputs)
    if kind not in OP_KINDS:
        raise GraphError(name, "kind", f"must be one of {', '.join(OP_KINDS)}, got {kind!r}")
    if not inputs:
        raise GraphError(name, "inputs", "needs at least one input")
    for tensor in inputs:
        if tensor not in input_shapes:
            raise GraphError(name, "inputs", f"no tensor named {tensor!r} before this layer")
    if kind in UNARY_KINDS and len(inputs) != 1:
        raise GraphError(name, "inputs", f"a {kind} layer reads one input, got {len(inputs)}")
    if kind in ("add", "concat") and len(inputs) < 2:
        raise GraphError(name, "inputs", f"a {kind} layer reads two or more inputs")
    if kind == "mul" and len(inputs) != 2:
        raise GraphError(name, "inputs", f"a mul layer reads two inputs, got {len(inputs)}")
    shapes = [input_shapes[t] for t in inputs]
    in_shape = shapes[0]
    h, w, c = in_shape
    kernel_hw = _pair(kernel, (1, 1))
    stride_hw = _pair(stride, (1, 1))
    padding_hw, padding_end = _padding(padding)
    dilation_hw = _pair(dilation, (1, 1))
    if min(*padding_hw, *padding_end) < 0:
        raise GraphError(name, "padding", "must be non-negative")
    if padding_end != padding_hw and kind != "conv":
        raise GraphError(name, "padding", "only a conv is padded unequally on both sides")

    def window() -> Pair:
        extent = [(k - 1) * d + 1 for k, d in zip(kernel_hw, dilation_hw, strict=True)]
        axes = zip(("height", "width"), (h, w), extent, padding_hw, padding_end, strict=True)
        for axis, size, ext, p, q in axes:
            if ext > size + p + q:
                raise GraphError(
                    name,
                    "kernel",
                    f"kernel {axis} {ext} exceeds the padded input {axis} {size + p + q}",
                    inputs[0],
                )
            if max(p, q) >= ext:
                raise GraphError(name, "padding", "padding must be smaller than the kernel")
        return (
            out_size(h, extent[0], stride_hw[0], padding_hw[0], ceil_mode, 1, padding_end[0]),
            out_size(w, extent[1], stride_hw[1], padding_hw[1], ceil_mode, 1, padding_end[1]),
        )

    out: Shape
    kept: Pair = (0, 0)  # a slice's channels
    if kind in ("conv", "fc") and (out_channels is None or out_channels < 1):
        raise GraphError(name, "out_channels", "required: a positive integer")
    if kind in ("conv", "maxpool", "avgpool") and kernel is None:
        raise GraphError(name, "kernel", f"required for a {kind} layer")
    if kind == "conv":
        assert out_channels is not None
        if c % groups:
            raise GraphError(
                name, "groups", f"in channels {c} not divisible by groups {groups}", inputs[0]
            )
        if out_channels % groups:
            raise GraphError(
                name, "groups", f"out channels {out_channels} not divisible by groups {groups}"
            )
        ho, wo = window()
        out = (ho, wo, out_channels)
    elif kind == "fc":
        assert out_channels is not None
        out = (1, 1, out_channels)
    elif kind in ("maxpool", "avgpool"):
        ho, wo = window()
        out = (ho, wo, c)
    elif kind == "global_avgpool":
        out = (1, 1, c)
    elif kind == "add":
        for tensor, other in zip(inputs[1:], shapes[1:], strict=True):
            if other != in_shape:
                raise GraphError(
                    name,
                    "inputs",
                    f"operands differ in shape: {inputs[0]!r} is {list(in_shape)}, "
                    f"{tensor!r} is {list(other)}",
                    tensor,
                )
        out = in_shape
    elif kind == "mul":
        other = shapes[1]
        if other not in (in_shape, (1, 1, c)):
            raise GraphError(
                name,
                "inputs",
                f"{inputs[1]!r} is {list(other)}: a mul multiplies {inputs[0]!r} "
                f"({list(in_shape)}) by a tensor of its shape or by a gate [1, 1, {c}]",
                inputs[1],
            )
        out = in_shape
    elif kind == "concat":
        for tensor, other in zip(inputs[1:], shapes[1:], strict=True):
            if other[:2] != in_shape[:2]:
                raise GraphError(
                    name,
                    "inputs",
                    f"concat operands differ in height x width: {inputs[0]!r} is "
                    f"{in_shape[0]}x{in_shape[1]}, {tensor!r} is {other[0]}x{other[1]}",
                    tensor,
                )
        out = (h, w, sum(s[2] for s in shapes))
    elif kind == "upsample":
        if scale is None or scale < 1:
            raise GraphError(name, "scale", "required: a positive integer factor")
        if mode not in UPSAMPLE_MODES:
            raise GraphError(
                name, "mode", f"must be one of {', '.join(UPSAMPLE_MODES)}, got {mode!r}"
            )
        out = (h * scale, w * scale, c)
    elif kind == "flatten":
        out = (1, 1, h * w * c)
    elif kind == "slice":
        if channels is None:
            raise GraphError(name, "channels", "required: [start, stop] of the kept channels")
        bounds = [int(v) for v in channels]
        if len(bounds) != 2:
            raise GraphError(name, "channels", f"expected [start, stop], got {bounds}")
        start, stop = bounds
        if not 0 <= start < stop <= c:
            raise GraphError(
                name,
                "channels",
                f"[{start}, {stop}] is not a non-empty range within the input's {c} channels",
                inputs[0],
            )
        out = (h, w, stop - start)
        kept = (start, stop)
    elif kind == "shuffle":
        if groups < 2 or c % groups:
            raise GraphError(
                name,
                "groups",
                f"a shuffle needs 2 or more groups that divide its {c} channels, got {groups}",
                inputs[0],
            )
        out = in_shape
    else:  # activations, batchnorm, softmax keep the shape
        out = in_shape
    if kind == "relu6":
        low, high = 0.0, 6.0
    if kind == "clip" and low > high:
        raise GraphError(name, "low", f"clip bounds {low} > {high}")
    if shape is not None and tuple(shape) != out:
        raise GraphError(
            name,
            "out",
            f"declared shape {list(shape)} but its inputs give {list(out)}",
            inputs[0],
        )
    return Operator(
        name=name,
        kind=kind,  # type: ignore[arg-type]
        inputs=inputs,
        shape=out,
        out_channels=out_channels or 0,
        kernel=kernel_hw,
        stride=stride_hw,
        padding=padding_hw,
        padding_end=None if padding_end == padding_hw else padding_end,
        dilation=dilation_hw,
        groups=groups,
        ceil_mode=ceil_mode,
        count_include_pad=count_include_pad,
        scale=scale or 1,
        mode=mode if kind == "upsample" else "nearest",
        channels=kept,
        alpha=alpha,
        low=low,
        high=high,
        epsilon=epsilon,
        bias=bias and kind in BIASED_KINDS,
        in_shape=in_shape,
    )


@dataclass(frozen=True)
class Graph:
    """Operators in topological order over the network's input tensors.

    ``inputs``: (name, shape) of each input tensor (one for a model; a list of independent
    layers, as the flat ``network.yaml`` files before graphs, gives each layer its own).
    ``outputs``: the tensors the network returns (by default those no operator reads).
    Constructed only through checks: unique names, every input defined before it is read
    (so the order is topological and there is no cycle).
    """

    name: str
    inputs: tuple[tuple[str, Shape], ...]
    ops: tuple[Operator, ...]
    outputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        defined: set[str] = set()
        for tensor, _ in self.inputs:
            if tensor in defined:
                raise GraphError(tensor, "inputs", "duplicate network input name")
            defined.add(tensor)
        for op in self.ops:
            if op.name in defined:
                raise GraphError(op.name, "name", "duplicate layer or tensor name")
            for tensor in op.inputs:
                if tensor not in defined:
                    later = any(o.name == tensor for o in self.ops)
                    why = (
                        "is defined later: the graph has a cycle or is out of order"
                        if later
                        else "is not a layer of this network"
                    )
                    raise GraphError(op.name, "inputs", f"input {tensor!r} {why}")
            defined.add(op.name)
        if not self.outputs:
            read = {t for op in self.ops for t in op.inputs}
            outs = tuple(op.name for op in self.ops if op.name not in read)
            object.__setattr__(self, "outputs", outs)
        if len(set(self.outputs)) != len(self.outputs):
            raise GraphError(self.name, "outputs", "a tensor is listed twice")
        for tensor in self.outputs:
            if tensor not in defined:
                raise GraphError(tensor, "outputs", "not a tensor of this network")

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.inputs)

    def op(self, name: str) -> Operator:
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(f"no operator named {name!r} in network {self.name!r}")

    def shape(self, tensor: str) -> Shape:
        for name, shape in self.inputs:
            if name == tensor:
                return shape
        return self.op(tensor).shape

    def consumers(self) -> dict[str, tuple[str, ...]]:
        """Tensor name -> the operators that read it, in order."""
        readers: dict[str, list[str]] = {name: [] for name, _ in self.inputs}
        for op in self.ops:
            readers.setdefault(op.name, [])
            for tensor in op.inputs:
                readers[tensor].append(op.name)
        return {k: tuple(v) for k, v in readers.items()}

    def channel_gate(self, op: Operator) -> str | None:
        """The gate tensor of a mul by a channel gate (its second input, ``(1, 1, c)`` where
        the output is not), else None (``Operator``)."""
        if op.kind != "mul" or self.shape(op.inputs[1]) == op.shape:
            return None
        return op.inputs[1]

    @property
    def macs(self) -> int:
        """MACs of one image: the conv and fc operators', and a multiply per output word of
        a mul by a channel gate, which the lowering maps as a depthwise 1×1 conv (an
        independent count from the operator fields, not from the lowered layers)."""
        total = 0
        for op in self.ops:
            if op.kind == "conv":
                total += op.shape[0] * op.shape[1] * op.weight_words
            elif op.kind == "fc":
                total += op.weight_words
            elif self.channel_gate(op) is not None:
                total += op.shape[0] * op.shape[1] * op.shape[2]
        return total


def tensor_ranks(graph: Graph) -> dict[str, int]:
    """Each tensor's rank as an array with the batch, as ONNX has it: 2 (``N×K``) for an fc's
    or a flatten's output and for what an activation, softmax, batch norm, add, mul, concat or
    slice makes of such vectors alone; 4 (``N×C×H×W``) for the rest, the network inputs included."""
    ranks = {name: 4 for name in graph.input_names}
    keeps = ACTIVATION_KINDS | {"softmax", "batchnorm", "add", "mul", "concat", "slice"}
    for op in graph.ops:
        if op.kind in ("fc", "flatten"):
            ranks[op.name] = 2
        elif op.kind in keeps and all(ranks[t] == 2 for t in op.inputs):
            ranks[op.name] = 2
        else:
            ranks[op.name] = 4
    return ranks
