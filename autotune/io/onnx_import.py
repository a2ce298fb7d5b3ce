"""ONNX import (the ``onnx`` extra): ``load_onnx`` keeps the Conv, Gemm and MatMul nodes as
layers; ``load_onnx_graph`` keeps the whole graph as ``autotune.ir.graph`` operators.

``load_onnx``:

- ``Conv`` (2-D, NCHW) becomes a conv layer: kernel from the weight's shape, ``group``,
  ``strides``, ``pads`` (``[top, left, bottom, right]``) or ``auto_pad``, ``dilations``.
- ``Gemm`` and ``MatMul`` whose weight is constant (an initializer, a ``Constant`` node or
  computed from them only) become fc layers. An fc fed through ``Flatten``/``Reshape`` from an
  ``N×C×H×W`` volume gets ``in = [H, W, C]`` (VGG fc6: ``[7, 7, 512]``), else ``[1, 1, K]``.
  A ``MatMul`` over ``N×…×R×K`` (several rows per image, e.g. NHWC pointwise) is the
  equivalent 1×1 conv over ``[…, R, K]``.
- Every other node (Relu, MaxPool, Add, a MatMul of two activations, ...) is skipped and
  listed in ``Network.skipped`` as ``"op_type name"``; nodes that only compute constants
  (``Constant``, a cast of a weight) are not listed.

``load_onnx_graph`` maps every node to an operator, consumes it, or refuses it (the op
table is ``_HANDLERS``; each handler says what it accepts):

- ``Conv`` -> conv (group, dilations; pads or auto_pad, equal on both sides or not);
- ``Gemm``, ``MatMul`` with a constant B -> fc (Gemm: transB, alpha, beta, C; MatMul: an
  ``N×K`` A); an ``Add`` of a constant right after a Conv/Gemm/MatMul -> its bias;
- ``Add``, ``Sum`` of activations -> add; ``Mul`` of two activations of one shape, or of a
  feature map and a channel gate ``N×C×1×1`` (squeeze-excitation) -> mul;
  ``BatchNormalization`` -> batchnorm (unfolded, also with training_mode=1); ``Add``,
  ``Sub``, ``Mul``, ``Div`` of an activation and a constant of one value per channel (or
  one value) -> batchnorm of that scale and shift (statistics 0 and 1, epsilon 0), merged
  into a batch norm it follows when it is that one's only reader (``affine``);
- ``Relu``, ``Sigmoid``, ``HardSwish``, ``Tanh``, ``LeakyRelu`` -> relu, sigmoid, hardswish,
  tanh, leaky_relu; ``PRelu`` with one slope (or all equal) -> leaky_relu of that slope;
  ``Gelu`` (exact) and PyTorch's GELU before opset 20, ``Mul(Mul(x, Add(Erf(Div(x, √2)),
  1)), 0.5)``, -> gelu (the chain is that operator);
  ``Clip`` (bounds as inputs or attributes) -> relu6 for [0, 6], relu for [0, inf), else
  clip; ``Mul(x, Sigmoid(x))`` -> silu, ``Mul(x, HardSigmoid(x))`` ->
  hardswish (the gate is part of that operator); ``HardSigmoid`` (alpha 1/6, beta 1/2, as
  PyTorch's) alone -> hardsigmoid;
- ``MaxPool``, ``AveragePool`` -> maxpool, avgpool; ``GlobalAveragePool``, ``ReduceMean``
  over H and W -> global_avgpool;
- ``Flatten``, ``Reshape``, ``Squeeze``, ``Unsqueeze`` -> flatten from ``N×C×H×W`` to
  ``N×K``, or a pass-through when each image keeps its (h, w, c);
- ``Concat`` on axis 1 -> concat; ``Slice`` of a channel range (axis 1, step 1; bounds may
  be computed from ``Shape``) and each output of a ``Split`` on axis 1 -> slice; the channel
  shuffle ``Reshape`` to ``N×g×C/g×H×W``, ``Transpose`` ``[0, 2, 1, 3, 4]``, ``Reshape`` back
  -> shuffle (a 5-D tensor anywhere else, or another ``Transpose``, is refused);
  ``Resize``/``Upsample`` nearest by an integer factor, or ``Resize`` bilinear (``linear``
  with half-pixel or aligned-corner coordinates) -> upsample; ``Softmax`` over the
  channels -> softmax;
- consumed: ``Identity``, ``Dropout``, ``Cast`` to the same type (pass-throughs);
  ``Constant`` and nodes on constants only (evaluated where an operator needs the value);
  ``Shape``, ``Size`` and nodes on them (shape computations);
- anything else is refused: ``unsupported ONNX op 'Einsum'``.

A ``Pad`` of zeros on the height and width is consumed into the padding of the ``Conv`` that
reads it (another reader is refused). A pool's asymmetric padding is refused except where
the extra padding at the bottom or right only adds the windows ceil mode adds: it is taken
as ceil mode (``_pool_padding``). Shapes
are per image as ``Graph`` has them; each operator's is checked against ONNX's inferred
shape. Symbolic batch: shape computations are evaluated at the import's batch (1).

Shapes come from the initializers and ``onnx.shape_inference``. The batch is the first graph
input's dim 0 when it is a number (else 1); the precision is fp64 when that input is double,
else fp32. Layer names are the node names (``op_type_index`` for unnamed nodes, made unique).
Parsing is read → check → infer shapes → build, within the input limits
(``autotune.io.limits``: file size and node count before the checker runs, every layer's
dimensions as it is built).
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from autotune.io.errors import InputError
from autotune.io.limits import (
    MAX_CHANNELS,
    MAX_ONNX_BYTES,
    MAX_ONNX_NODES,
    MAX_SPATIAL,
    check_batch,
    check_count,
    check_layer,
    check_name,
    read_bounded,
    too_large,
)
from autotune.ir.graph import (
    BIASED_KINDS,
    Graph,
    GraphError,
    Operator,
    Pair,
    Shape,
    make_operator,
)
from autotune.ir.layer import Layer, LayerError, out_size
from autotune.ir.network import Network

Dims = tuple[int | str | None, ...]  # int: known, str: symbolic, None: unknown

EXTRA_HINT = "reading .onnx files needs the onnx extra: pip install 'autotune[onnx]'"
# Ops that keep the elements and their order, only regrouping the dimensions.
_RESHAPING = frozenset({"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Dropout"})
# Layer's field names -> the ONNX input or attribute they come from.
_CONV_FIELDS = {
    "kernel": "W",
    "kernel_h": "W",
    "kernel_w": "W",
    "c_out": "W",
    "padding": "pads",
    "pad_h": "pads",
    "pad_w": "pads",
    "stride_h": "strides",
    "stride_w": "strides",
    "dilation_h": "dilations",
    "dilation_w": "dilations",
    "groups": "group",
    "c_in": "X",
    "h_in": "X",
    "w_in": "X",
}


def load_onnx(path: str | Path) -> Network:
    """Load an ONNX model's Conv, Gemm and MatMul nodes as a ``Network``.

    Raises ``InputError`` (one line naming the file, the node as the layer, and the field)
    for an unreadable or invalid file, or a node the format cannot express (dilation,
    asymmetric padding); raises it too when the ``onnx`` package is not installed.

    Example:
        >>> net = load_onnx("resnet50.onnx")          # doctest: +SKIP
        >>> len(net.layers), net.skipped[:2]          # doctest: +SKIP
        (54, ('Relu relu', 'MaxPool maxpool'))
    """
    path = Path(path)
    try:
        import onnx
    except ImportError:
        raise InputError(path, EXTRA_HINT) from None
    model = _read(onnx, path)
    return _GraphReader(onnx, model, str(path)).network(default_name=path.stem)


def unique_node_names(nodes: Any, path: str, taken: set[str]) -> list[str]:
    """The nodes' names (``op_type_index`` when unnamed; within the name limit), made unique
    among themselves and ``taken`` by a ``_2``, ``_3``, ... suffix."""
    used = set(taken)
    names = []
    for index, node in enumerate(nodes):
        check_name(node.name, path, layer=f"node #{index}")
        base = node.name or f"{node.op_type}_{index}"
        name, k = base, 2
        while name in used:
            name, k = f"{base}_{k}", k + 1
        used.add(name)
        names.append(name)
    return names


def _first_line(message: object) -> str:
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    return lines[0] if lines else "unknown error"


def _read(onnx: Any, path: Path) -> Any:
    """Parse, check and shape-infer the model; every failure is an ``InputError``."""
    model, _ = _parse(onnx, path)
    _check(onnx, path, str(path))  # by path: finds external data next to the file
    return _infer(onnx, model, path)


def _parse(onnx: Any, path: Path) -> tuple[Any, int]:
    """The model (external data not loaded) and the file's size, within the input limits:
    the file size before parsing, the node count before the checker."""
    data = read_bounded(path, MAX_ONNX_BYTES, "ONNX file", "MAX_ONNX_BYTES")
    try:
        model = onnx.load_model_from_string(data)
    except Exception:  # protobuf raises DecodeError and others for bytes that are no model
        raise InputError(path, "not an ONNX model (the file does not parse)") from None
    nodes = len(model.graph.node)
    if nodes > MAX_ONNX_NODES:
        message = too_large("number of nodes", nodes, MAX_ONNX_NODES, "MAX_ONNX_NODES")
        raise InputError(path, message, field="graph")
    return model, len(data)


def _check(onnx: Any, path: Path, model: Any) -> None:
    """The ONNX checker on ``model`` (a path, or a model whose data is all in memory)."""
    try:
        onnx.checker.check_model(model)
    except Exception as exc:  # ValidationError, or the checker failing on odd input
        raise InputError(path, f"not a valid ONNX model: {_first_line(exc)}") from None


def _infer(onnx: Any, model: Any, path: Path) -> Any:
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as exc:
        raise InputError(path, f"ONNX shape inference failed: {_first_line(exc)}") from None


def _dims(type_proto: Any) -> Dims | None:
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    return tuple(
        d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
        for d in type_proto.tensor_type.shape.dim
    )


def _known(dims: Dims) -> bool:
    return all(isinstance(d, int) for d in dims)


def _ints(dims: Dims) -> tuple[int, ...]:
    """``dims`` once ``_known`` has said they are all integers."""
    return tuple(d for d in dims if isinstance(d, int))


def _attributes(onnx: Any, node: Any) -> dict[str, Any]:
    """A node's attributes as Python values (strings decoded)."""
    values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in values.items()}


def _window_padding(
    attrs: dict[str, Any],
    size: tuple[int, int],
    extent: tuple[int, int],
    stride: tuple[int, int],
    fail: Callable[[str, str], Exception],
) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) of a Conv or a pool from ``pads`` or ``auto_pad``
    (``SAME_UPPER`` puts an odd pixel at the end, ``SAME_LOWER`` at the start; ``extent``:
    the window's span). ``fail(message, field)`` makes the error to raise."""
    auto = attrs.get("auto_pad", "NOTSET")
    if auto == "VALID":
        return 0, 0, 0, 0
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for n, k, s in zip(size, extent, stride, strict=True):
            total = max((math.ceil(n / s) - 1) * s + k - n, 0)
            small, large = total // 2, total - total // 2
            begin.append(small if auto == "SAME_UPPER" else large)
            end.append(large if auto == "SAME_UPPER" else small)
        return begin[0], begin[1], end[0], end[1]
    if auto != "NOTSET":
        raise fail(f"unknown auto_pad {auto!r}", "auto_pad")
    pads = [int(p) for p in attrs.get("pads", [0, 0, 0, 0])]
    if len(pads) != 4 or min(pads) < 0:
        raise fail(f"expected [top, left, bottom, right] >= 0, got {pads}", "pads")
    return pads[0], pads[1], pads[2], pads[3]


def _batch_and_precision(onnx: Any, inputs: list[Any]) -> tuple[int, str]:
    """The first input's dim 0 when it is a number (else 1); fp64 for a double input."""
    if not inputs:
        return 1, "fp32"
    first = inputs[0]
    dims = _dims(first.type) or ()
    batch = dims[0] if dims and isinstance(dims[0], int) and dims[0] > 0 else 1
    double = first.type.tensor_type.elem_type == onnx.TensorProto.DOUBLE
    return batch, "fp64" if double else "fp32"


class _GraphReader:
    """One pass over a shape-inferred graph: tensor shapes, constants, producers, layers."""

    def __init__(self, onnx: Any, model: Any, path: str) -> None:
        self.onnx = onnx
        self.graph = model.graph
        self.path = path
        g = self.graph
        self.shapes: dict[str, Dims | None] = {
            vi.name: _dims(vi.type) for vi in (*g.input, *g.value_info, *g.output)
        }
        self.consts: set[str] = set()
        for name, dims in [
            *((t.name, t.dims) for t in g.initializer),
            *((t.values.name, t.dims) for t in g.sparse_initializer),
        ]:
            self.consts.add(name)
            self.shapes[name] = tuple(dims)
        self.producers: dict[str, Any] = {out: node for node in g.node for out in node.output}
        self.names = self._unique_names()

    def _unique_names(self) -> list[str]:
        return unique_node_names(self.graph.node, self.path, set())

    def fail(self, message: str, layer: str | None = None, field: str | None = None) -> InputError:
        return InputError(self.path, message, layer=layer, field=field)

    # -- the network ----------------------------------------------------------------------
    def network(self, default_name: str) -> Network:
        layers: list[Layer] = []
        skipped: list[str] = []
        for node, name in zip(self.graph.node, self.names, strict=True):
            inputs = [i for i in node.input if i]
            if node.op_type == "Constant" or (inputs and all(i in self.consts for i in inputs)):
                self.consts.update(node.output)  # weight preprocessing, folded at load time
                self._constant_shape(node)
                continue
            layer = None
            if node.op_type == "Conv":
                layer = self.conv(node, name)
            elif node.op_type in ("Gemm", "MatMul"):
                layer = self.matmul(node, name)
            if layer is None:
                skipped.append(f"{node.op_type} {name}")
            else:
                layers.append(layer)
        if not layers:
            raise self.fail("no Conv, Gemm or MatMul node with a constant weight: nothing to tune")
        check_count(len(layers), self.path, field="graph")
        batch, precision = self._batch_and_precision()
        check_batch(batch, self.path, field="input")
        return Network(
            name=self.graph.name or default_name,
            layers=tuple(layers),
            batch=batch,
            precision=precision,
            source=self.path,
            skipped=tuple(skipped),
        )

    def _constant_shape(self, node: Any) -> None:
        if node.op_type == "Constant" and self.shapes.get(node.output[0]) is None:
            for attr in node.attribute:
                if attr.name == "value":
                    self.shapes[node.output[0]] = tuple(attr.t.dims)

    def _batch_and_precision(self) -> tuple[int, str]:
        return _batch_and_precision(
            self.onnx, [vi for vi in self.graph.input if vi.name not in self.consts]
        )

    # -- nodes ----------------------------------------------------------------------------
    def _attrs(self, node: Any) -> dict[str, Any]:
        return _attributes(self.onnx, node)

    def _shape(self, tensor: str, name: str, field: str) -> Dims:
        dims = self.shapes.get(tensor)
        if dims is None:
            raise self.fail(f"shape of {tensor!r} unknown after shape inference", name, field)
        return dims

    def conv(self, node: Any, name: str) -> Layer:
        attrs = self._attrs(node)
        x = self._shape(node.input[0], name, "X")
        w = self._shape(node.input[1], name, "W")
        if len(x) != 4 or len(w) != 4:
            raise self.fail(
                f"only 2-D convolutions (NCHW) are supported, input has rank {len(x)}", name, "X"
            )
        if not _known(x[1:]):
            raise self.fail(
                f"input shape {list(x)} has unknown channels, height or width "
                f"(export the model with a fixed input size)",
                name,
                "X",
            )
        if not _known(w):
            raise self.fail(f"weight shape {list(w)} unknown", name, "W")
        c, h, wd = _ints(x[1:])
        c_out, _, kh, kw = _ints(w)
        groups = attrs.get("group", 1)
        if "kernel_shape" in attrs and list(attrs["kernel_shape"]) != [kh, kw]:
            raise self.fail(
                f"{list(attrs['kernel_shape'])} differs from the weight's {[kh, kw]}",
                name,
                "kernel_shape",
            )
        dilations = list(attrs.get("dilations", [1, 1]))
        if len(dilations) != 2:
            raise self.fail(f"expected [h, w], got {dilations}", name, "dilations")
        dh, dw = dilations
        if c != w[1] * groups:
            raise self.fail(
                f"weight shape {list(w)} with group {groups} does not fit {c} input channels",
                name,
                "W",
            )
        strides = list(attrs.get("strides", [1, 1]))
        if len(strides) != 2:
            raise self.fail(f"expected [h, w], got {strides}", name, "strides")
        sh, sw = strides
        span = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
        ph, pw, pb, pr = _window_padding(
            attrs, (h, wd), span, (sh, sw), lambda message, field: self.fail(message, name, field)
        )
        try:
            layer = Layer(
                name,
                "conv",
                h,
                wd,
                c,
                c_out,
                kernel_h=kh,
                kernel_w=kw,
                stride_h=sh,
                stride_w=sw,
                pad_h=ph,
                pad_w=pw,
                groups=groups,
                dilation_h=dh,
                dilation_w=dw,
                pad_bottom=pb,
                pad_right=pr,
            )
            check_layer(layer)
            return layer
        except LayerError as exc:
            raise self.fail(exc.reason, name, _CONV_FIELDS.get(exc.field, exc.field)) from None

    def matmul(self, node: Any, name: str) -> Layer | None:
        """An fc (or pointwise conv) layer, or ``None`` when the weight is not constant."""
        a_name, b_name = node.input[0], node.input[1]
        if b_name not in self.consts:
            return None  # activation × activation (attention): not a layer
        attrs = self._attrs(node) if node.op_type == "Gemm" else {}
        b = self._shape(b_name, name, "B")
        if len(b) != 2 or not _known(b):
            return None  # a batched or vector product, not an fc weight
        rows, cols = _ints(b)
        k, n = (cols, rows) if attrs.get("transB", 0) else (rows, cols)
        a = self.shapes.get(a_name)
        transposed = bool(attrs.get("transA", 0))  # A is K×M: no spatial volume to recover
        if a and not transposed and isinstance(a[-1], int) and a[-1] != k:
            raise self.fail(f"weight shape {list(b)} does not fit input shape {list(a)}", name, "B")
        try:
            if transposed:
                layer = Layer.fc(name, 1, 1, k, n)
            elif a is None or len(a) <= 2:
                layer = Layer.fc(name, *self._fc_input(a_name, k), n)
            elif not _known(a[1:]):
                raise self.fail(f"input shape {list(a)} unknown", name, "A")
            elif math.prod(_ints(a[1:-1])) == 1:
                layer = Layer.fc(name, 1, 1, k, n)
            else:
                # Several rows per image, each times the weight: the 1×1 conv over the rows.
                *outer, last_rows = _ints(a[1:-1])
                layer = Layer(name, "conv", math.prod(outer), last_rows, k, n)
            check_layer(layer)
            return layer
        except LayerError as exc:
            raise self.fail(exc.reason, name, "B") from None

    def _fc_input(self, tensor: str, k: int) -> tuple[int, int, int]:
        """``[h, w, c]`` of the ``N×C×H×W`` volume flattened into ``tensor``, else [1, 1, k]."""
        batch = (self.shapes.get(tensor) or (None,))[0]
        while (node := self.producers.get(tensor)) is not None and node.op_type in _RESHAPING:
            tensor = node.input[0]
            dims = self.shapes.get(tensor)
            if dims is None:
                break
            producer = self.producers.get(tensor)
            if (
                len(dims) == 4
                and _known(dims[1:])
                and math.prod(_ints(dims[1:])) == k
                and (batch is None or dims[0] == batch)
                and (producer is None or producer.op_type != "Transpose")
            ):
                c, h, w = _ints(dims[1:])
                return h, w, c
        return 1, 1, k


# =============================================================================================
# load_onnx_graph: the whole graph, every node an operator, consumed, or refused
# =============================================================================================

#: Ops whose output is computed from tensor shapes only (their input's values are not read).
_SHAPE_OPS = frozenset({"Shape", "Size"})
#: Resize coordinate modes and rounding that repeat each pixel s×s times for an integer
#: factor s (the source coordinate lands strictly inside pixel ⌊x/s⌋, or floors onto it).
_EXACT_NEAREST = frozenset(
    {
        ("asymmetric", "floor"),
        ("tf_half_pixel_for_nn", "floor"),
        *(
            (mode, rounding)
            for mode in ("half_pixel", "pytorch_half_pixel", "half_pixel_symmetric")
            for rounding in ("round_prefer_floor", "round_prefer_ceil")
        ),
    }
)
#: ``GraphError`` fields (``make_operator``'s terms) -> the ONNX attribute or input they are.
ONNX_FIELDS = {
    "kernel": "kernel_shape",
    "padding": "pads",
    "stride": "strides",
    "dilation": "dilations",
    "groups": "group",
    "out_channels": "W",
    "scale": "scales",
    "low": "min",
    "high": "max",
    "out": "shape",
}
#: Resize's ``coordinate_transformation_mode`` -> the bilinear upsample it is (linear mode).
_LINEAR_COORDINATES = {
    "half_pixel": "bilinear",
    "pytorch_half_pixel": "bilinear",  # the same where the output has more than one pixel
    "align_corners": "bilinear_corners",
}
#: The ONNX input an operator's output size comes from, for a refusal over the input limits.
_OUT_FIELDS = {"conv": "W", "fc": "B", "upsample": "scales", "concat": "inputs"}
#: BatchNormalization's parameter inputs: (weights key, ONNX input name), from input 1 on.
_BN_PARAMS = (("scale", "scale"), ("bias", "B"), ("mean", "input_mean"), ("var", "input_var"))

Array = npt.NDArray[Any]


class ImportedNode(NamedTuple):
    """What became of one ONNX node, so that every node is accounted for.

    ``operator`` is the graph operator the node is, or is part of: its own name for a node
    mapped one to one; the SiLU's (HardSwish's) for a ``Sigmoid`` (``HardSigmoid``) fused
    with its ``Mul``; the Conv's or fc's for an ``Add`` of their bias; a ``Split``'s first
    slice (the slice of its output ``i`` > 0 is ``operator:i``); the channel shuffle's for the
    ``Reshape`` and ``Transpose`` before its last ``Reshape``. ``None`` when the node
    was consumed: constants and what is computed from them only (weight casts, transposes),
    shape computations, and the pass-throughs (``Identity``, ``Dropout``, a ``Cast`` to the
    same type, a reshape that keeps each image's shape) whose output is their input.
    """

    name: str
    op_type: str
    operator: str | None


@dataclass(frozen=True)
class OnnxGraph:
    """An ONNX model as a ``Graph`` of operators with the parameters the file holds.

    ``weights[operator][key]`` (dtype as stored): conv ``weight`` (c_out, c_in/groups, kh,
    kw) and ``bias`` (c_out,); fc ``weight`` (c_out, c_in) -- a ``Gemm``'s B after
    ``transB`` and times ``alpha``, a ``MatMul``'s B transposed -- and ``bias`` (c_out,) from
    ``Gemm``'s C (times ``beta``) or an ``Add`` that follows; batchnorm ``scale``, ``bias``,
    ``mean``, ``var`` (c,). Nothing is folded (batch norm stays an operator).
    ``nodes``: what became of each ONNX node, in topological order. ``output_names``: the
    name the model gives each of the graph's outputs (a graph tensor is named after its
    operator, the node; the model's outputs are named as tensors).
    """

    graph: Graph
    batch: int
    precision: str
    weights: dict[str, dict[str, Array]] = field(compare=False, repr=False)
    nodes: tuple[ImportedNode, ...] = ()
    source: str | None = None
    output_names: dict[str, str] = field(default_factory=dict, compare=False)


def load_onnx_graph(path: str | Path) -> OnnxGraph:
    """Load an ONNX model as a ``Graph`` with its weights: every node becomes an operator, is
    consumed (constants, shape computations, pass-throughs), or is refused.

    Supported patterns (the PyTorch legacy and dynamo exporters' ResNet, MobileNetV2 and
    YOLOv3): ``Conv`` (groups, dilations, symmetric pads), ``Gemm``, ``MatMul`` with a
    constant weight (+ an ``Add`` of its bias), ``BatchNormalization``, ``Relu``, ``Clip``,
    ``LeakyRelu``, ``Sigmoid``, ``HardSwish``, x·Sigmoid(x), x·HardSigmoid(x), ``MaxPool``,
    ``AveragePool``, ``GlobalAveragePool``, ``ReduceMean`` over H and W, ``Add``, ``Sum``,
    ``Concat`` over channels, ``Resize``/``Upsample`` nearest or bilinear by an integer factor,
    ``Flatten``/``Reshape``/``Squeeze``/``Unsqueeze`` to ``[N, K]``, ``Softmax`` over channels.

    Unlike ``load_onnx`` the file's node order need not be topological (the nodes are sorted
    first; a cycle is refused), and weights in an external data file are read (within
    ``MAX_ONNX_BYTES`` together with the file). Raises ``InputError``: one line naming the
    file, the node (as the layer) and the attribute or input at fault, or the op type for an
    unsupported op (``unsupported ONNX op 'Einsum'``).

    Example:
        >>> model = load_onnx_graph("resnet50.onnx")              # doctest: +SKIP
        >>> model.graph.macs, model.weights["conv1"]["weight"].shape  # doctest: +SKIP
        (4089184256, (64, 3, 7, 7))
    """
    path = Path(path)
    try:
        import onnx
    except ImportError:
        raise InputError(path, EXTRA_HINT) from None
    model, size = _parse(onnx, path)
    _load_external_data(onnx, model, path, size)
    _sort_nodes(model, path)
    _check(onnx, path, model)  # in memory: the order is now topological, the data loaded
    model = _infer(onnx, model, path)
    return _GraphImporter(onnx, model, str(path)).build(default_name=path.stem)


def _all_tensors(graph: Any) -> Iterator[Any]:
    """Every TensorProto of ``graph`` and its subgraphs (where external data may be named)."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _all_tensors(attr.g)
            for sub in attr.graphs:
                yield from _all_tensors(sub)


def _load_external_data(onnx: Any, model: Any, path: Path, file_bytes: int) -> None:
    """Read the weights stored beside the file into ``model``, refusing more than
    ``MAX_ONNX_BYTES`` with the file itself before reading any (the weights become arrays)."""
    from onnx import external_data_helper as ext

    tensors = [t for t in _all_tensors(model.graph) if ext.uses_external_data(t)]
    if not tensors:
        return
    total = file_bytes
    for tensor in tensors:
        info = ext.ExternalDataInfo(tensor)
        size = info.length or 0
        if not size:  # the rest of the file from the offset
            try:
                size = (path.parent / info.location).stat().st_size - (info.offset or 0)
            except OSError:
                size = 0  # the loader below names the missing file
        total += max(size, 0)
    if total > MAX_ONNX_BYTES:
        what = "ONNX model size with its external data"
        raise InputError(path, too_large(what, total, MAX_ONNX_BYTES, "MAX_ONNX_BYTES", " bytes"))
    try:
        ext.load_external_data_for_model(model, str(path.parent))
    except Exception as exc:  # a missing file, a location outside the directory, bad bounds
        raise InputError(path, f"not a valid ONNX model: {_first_line(exc)}") from None


def _sort_nodes(model: Any, path: Path) -> None:
    """Put the nodes in topological order, keeping the file's order where it already is one
    (ONNX requires it, but a hand-edited file may not have it); refuse a cycle."""
    nodes = list(model.graph.node)
    producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    needs = [{producer[t] for t in node.input if t in producer} for node in nodes]
    users: list[list[int]] = [[] for _ in nodes]
    for i, deps in enumerate(needs):
        for j in deps:
            users[j].append(i)
    waiting = [len(deps) for deps in needs]
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for user in users[i]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    if len(order) < len(nodes):
        # Every node left waits for another one left: walking back from any reaches a cycle.
        done = set(order)
        i = min(set(range(len(nodes))) - done)
        walked: set[int] = set()
        while i not in walked:
            walked.add(i)
            late = next(t for t in nodes[i].input if t in producer and producer[t] not in done)
            i = producer[late]
        node = nodes[i]
        late = next(t for t in node.input if t in producer and producer[t] not in done)
        raise InputError(
            path,
            f"the graph has a cycle: input {late!r} depends on this node's own output",
            layer=node.name or f"{node.op_type}_{i}",
            field="input",
        )
    if order != list(range(len(nodes))):
        model.graph.ClearField("node")
        model.graph.node.extend(nodes[i] for i in order)


def _per_image(dims: Dims | None) -> Shape | None:
    """``(h, w, c)`` of an ``N×C×H×W`` or ``N×K`` tensor (``(1, 1, K)``), when known."""
    if dims is None or len(dims) not in (2, 4) or not _known(dims[1:]):
        return None
    if len(dims) == 2:
        (k,) = _ints(dims[1:])
        return (1, 1, k)
    c, h, w = _ints(dims[1:])
    return (h, w, c)


class _GraphImporter:
    """One pass over a sorted, checked and shape-inferred model.

    ONNX tensors fall in three sets: activations (``tensor``: ONNX name -> the graph tensor,
    an operator's or input's name, with ``rank`` 2 or 4), constants (``const``: initializers
    and what is computed from constants only) and shape computations (``shape_only``: from
    ``Shape``/``Size`` of activations and constants). Constant values are evaluated lazily
    with ONNX's reference evaluator, only where an operator needs them (weights, axes,
    scales, clip bounds).
    """

    def __init__(self, onnx: Any, model: Any, path: str) -> None:
        self.onnx = onnx
        self.path = path
        g = self.g = model.graph
        self.opset = max(
            (o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=1
        )
        self.dims: dict[str, Dims | None] = {}
        self.elem: dict[str, int] = {}
        for vi in (*g.input, *g.value_info, *g.output):
            self.dims[vi.name] = _dims(vi.type)
            if vi.type.HasField("tensor_type"):
                self.elem[vi.name] = vi.type.tensor_type.elem_type
        if len(g.sparse_initializer):
            name = g.sparse_initializer[0].values.name
            raise self.fail("sparse initializers are not supported", name, "sparse_initializer")
        self.initializers = {t.name: t for t in g.initializer}
        for t in g.initializer:
            self.dims[t.name] = tuple(t.dims)
            self.elem[t.name] = t.data_type
        self.nodes = list(g.node)
        self.producer = {out: i for i, node in enumerate(self.nodes) for out in node.output if out}
        self.readers: dict[str, list[int]] = defaultdict(list)
        for i, node in enumerate(self.nodes):
            for t in node.input:
                if t:
                    self.readers[t].append(i)
        self.outputs = [vi.name for vi in g.output]
        self.inputs = [vi for vi in g.input if vi.name not in self.initializers]
        self.batch, self.precision = _batch_and_precision(onnx, self.inputs)
        first = self.dims.get(self.inputs[0].name) if self.inputs else None
        # the first input's symbolic batch: shape computations are evaluated at ``batch``
        self.batch_symbol = first[0] if first and isinstance(first[0], str) else None
        self.names = self._unique_names()
        self.const: set[str] = set(self.initializers)
        self.shape_only: set[str] = set()
        self.values: dict[str, Array | None] = {}
        self.tensor: dict[str, str] = {}
        self.rank: dict[str, int] = {}
        self.shapes: dict[str, Shape] = {}
        self.ops: list[Operator] = []
        self.by_name: dict[str, Operator] = {}
        self.weights: dict[str, dict[str, Array]] = {}
        # Mul node -> (kind, x, gate node) for x·Sigmoid(x) and x·HardSigmoid(x); gate nodes
        # read only by such Muls -> the first of them (they are part of its operator).
        self.fused: dict[int, tuple[str, str, int]] = {}
        self.absorbed: dict[int, int] = {}
        # a channel shuffle under way: the ONNX tensor of its 5-D Reshape (and of the
        # Transpose after it) -> (graph tensor shuffled, groups, transposed yet, nodes so far)
        self.grouped: dict[str, tuple[str, int, bool, tuple[int, ...]]] = {}
        #: a zero ``Pad``'s output -> (its graph input, [top, left, bottom, right]): only a
        #: Conv may read it, which takes the padding as its own (``pad``)
        self.padded: dict[str, tuple[str, tuple[int, int, int, int]]] = {}
        self.shuffles: dict[int, tuple[int, ...]] = {}  # its last Reshape -> the nodes before
        # ONNX tensor -> the batch norm it is the output of (``affine`` merges into it)
        self.affine_out: dict[str, str] = {}
        self.index = 0

    def _unique_names(self) -> list[str]:
        """Node names (``op_type_index`` when unnamed), unique among themselves and the
        graph inputs (operators and inputs share the graph's tensor names)."""
        return unique_node_names(self.nodes, self.path, {vi.name for vi in self.inputs})

    def fail(self, message: str, layer: str | None = None, field: str | None = None) -> InputError:
        return InputError(self.path, message, layer=layer, field=field)

    # -- the graph ------------------------------------------------------------------------
    def build(self, default_name: str) -> OnnxGraph:
        name = self.g.name or default_name
        check_name(name, self.path, field="network")
        inputs = tuple(self._graph_input(vi) for vi in self.inputs)
        self._find_fusions()
        fates: list[str | None] = []
        for index, node in enumerate(self.nodes):
            self.index = index
            fates.append(self._node(node, self.names[index]))
        for gate, mul in self.absorbed.items():
            fates[gate] = fates[mul]
        for tensor in self.outputs:
            if tensor in self.grouped:
                raise self.fail(
                    "a 5-D network output: a 5-D tensor is only supported inside a channel "
                    "shuffle (Reshape to N×g×C/g×H×W, Transpose [0, 2, 1, 3, 4], Reshape back)",
                    self.names[self.grouped[tensor][3][-1]],
                    "outputs",
                )
        for tensor in self.outputs:
            if tensor in self.padded:
                raise self.fail(
                    "a Pad's output is a network output: a Pad is only supported as the zero "
                    "padding of the Conv that reads it",
                    self.names[self.producer[tensor]],
                    "outputs",
                )
        for shuffle, parts in self.shuffles.items():
            for part in parts:
                fates[part] = fates[shuffle]
        if not self.ops:
            raise self.fail("no operator: the graph computes nothing from its inputs")
        check_count(len(self.ops), self.path, field="graph")
        outputs: list[str] = []
        output_names: dict[str, str] = {}
        for tensor in self.outputs:  # constants and dropped auxiliary outputs are no tensors
            mapped = self.tensor.get(tensor)
            if mapped is not None and mapped not in outputs:
                outputs.append(mapped)
                output_names[mapped] = tensor
        try:
            # a conv or fc with a bias (its own, or an Add of a constant after it) adds it in
            # its epilogue (a batch norm's "bias" is its shift, one of its weight vectors)
            ops = tuple(
                replace(op, bias=True)
                if op.kind in BIASED_KINDS and "bias" in self.weights.get(op.name, {})
                else op
                for op in self.ops
            )
            graph = Graph(name, inputs, ops, tuple(outputs))
        except GraphError as exc:
            raise self._graph_error(exc) from None
        check_batch(self.batch, self.path, field="input")
        nodes = tuple(
            ImportedNode(name, node.op_type, fate)
            for name, node, fate in zip(self.names, self.nodes, fates, strict=True)
        )
        return OnnxGraph(
            graph, self.batch, self.precision, self.weights, nodes, self.path, output_names
        )

    def _graph_input(self, vi: Any) -> tuple[str, Shape]:
        check_name(vi.name, self.path, layer=f"input {len(self.tensor)}", field="input")
        dims = self.dims.get(vi.name)
        if dims is None or len(dims) not in (2, 4):
            got = "unknown" if dims is None else f"{list(dims)}"
            raise self.fail(f"input shape {got} is not [N, C, H, W] or [N, K]", vi.name, "shape")
        shape = _per_image(dims)
        if shape is None or min(shape) < 1:
            raise self.fail(
                f"input shape {list(dims)} has unknown channels, height or width "
                f"(export the model with a fixed input size)",
                vi.name,
                "shape",
            )
        self._check_extent(shape, vi.name, "shape", channels=True)
        self.tensor[vi.name] = vi.name
        self.rank[vi.name] = len(dims)
        self.shapes[vi.name] = shape
        return vi.name, shape

    def _find_fusions(self) -> None:
        """Mul(x, Sigmoid(x)) is a SiLU, Mul(x, HardSigmoid(x)) with PyTorch's 1/6 and 1/2 a
        HardSwish; the gate is part of that operator when nothing else reads it. PyTorch's
        GELU as its exporters write it before opset 20 (``_gelu_chain``) is one operator."""
        for i, node in enumerate(self.nodes):
            chain = self._gelu_chain(node)
            if chain is not None:
                x, inner = chain
                self.fused[i] = ("gelu", x, inner[0])
                for j in inner:
                    self.absorbed[j] = i
        for i, node in enumerate(self.nodes):
            if node.op_type != "Mul" or len(node.input) != 2:
                continue
            a, b = node.input
            for x, gate in ((a, b), (b, a)):
                p = self.producer.get(gate)
                if p is None or list(self.nodes[p].input[:1]) != [x]:
                    continue
                kind = self._gate_kind(self.nodes[p])
                if kind is not None:
                    self.fused[i] = (kind, x, p)
                    break
        for mul, (_, _, gate) in sorted(self.fused.items()):
            out = self.nodes[gate].output[0]
            readers = self.readers[out]
            if gate not in self.absorbed and out not in self.outputs:
                if all(r in self.fused and self.fused[r][2] == gate for r in readers):
                    self.absorbed[gate] = mul

    def _constant(self, t: str) -> float | None:
        """The value of a one-value constant tensor (an initializer or a Constant's), else
        None."""
        p = self.producer.get(t)
        if t not in self.initializers and (p is None or self.nodes[p].op_type != "Constant"):
            return None
        value = self._value(t)
        return None if value is None or value.size != 1 else float(value.reshape(-1)[0])

    def _single(self, t: str) -> Any | None:
        """The node producing ``t`` when ``t`` has no other reader and is no output."""
        p = self.producer.get(t)
        if p is None or len(self.readers.get(t, ())) != 1 or t in self.outputs:
            return None
        return p

    def _gelu_chain(self, node: Any) -> tuple[str, list[int]] | None:
        """``Mul(Mul(x, Add(Erf(Div(x, √2)), 1)), 0.5)`` (PyTorch's ``nn.GELU()``; ``Mul(x,
        1/√2)`` for the Div, the operands of each Add and Mul in either order): ``x`` and the
        inner nodes (the Div first), or None."""
        if node.op_type != "Mul" or len(node.input) != 2:
            return None

        def near(t: str, value: float) -> bool:
            k = self._constant(t)
            return k is not None and math.isclose(k, value, rel_tol=1e-5)

        def split(n: Any, value: float) -> str | None:  # n = op(other, value), either order
            a, b = n.input
            return str(a) if near(b, value) else str(b) if near(a, value) else None

        inner_out = split(node, 0.5)
        m1 = None if inner_out is None else self._single(inner_out)
        if m1 is None or self.nodes[m1].op_type != "Mul":
            return None
        for x, added in (self.nodes[m1].input, reversed(self.nodes[m1].input)):
            add = self._single(added)
            if add is None or self.nodes[add].op_type != "Add":
                continue
            erf_out = split(self.nodes[add], 1.0)
            erf = None if erf_out is None else self._single(erf_out)
            if erf is None or self.nodes[erf].op_type != "Erf":
                continue
            scaled = self._single(self.nodes[erf].input[0])
            if scaled is None:
                continue
            op = self.nodes[scaled]
            if op.op_type == "Div":
                by_root2 = op.input[0] == x and near(op.input[1], math.sqrt(2.0))
            else:
                by_root2 = op.op_type == "Mul" and split(op, 1 / math.sqrt(2.0)) == x
            if by_root2:
                return str(x), [scaled, erf, add, m1]
        return None

    def _gate_kind(self, node: Any) -> str | None:
        if node.op_type == "Sigmoid":
            return "silu"
        if node.op_type == "HardSigmoid" and self._hard_sigmoid_slope(node)[2]:
            return "hardswish"
        return None

    def _node(self, node: Any, name: str) -> str | None:
        """The operator ``node`` becomes (its name), or ``None`` when it is consumed."""
        op_type = node.op_type
        if node.domain not in ("", "ai.onnx"):
            raise self.fail(f"unsupported ONNX op '{node.domain}.{op_type}'", name, op_type)
        inputs = [t for t in node.input if t]
        if op_type == "Constant" or (inputs and all(t in self.const for t in inputs)):
            self.const.update(t for t in node.output if t)
            return None
        if op_type in _SHAPE_OPS or (
            inputs and all(t in self.const or t in self.shape_only for t in inputs)
        ):
            self.shape_only.update(t for t in node.output if t)
            return None
        if self.index in self.absorbed:
            return None  # the Mul that reads it names the operator (``build``)
        handler = _HANDLERS.get(op_type)
        if handler is None:
            raise self.fail(f"unsupported ONNX op {op_type!r}", name, op_type)
        for extra in node.output[1:] if op_type != "Split" else ():  # indices, masks, ...
            if extra and self.readers.get(extra):
                raise self.fail(
                    f"output {extra!r} is read by another node: only the first output of "
                    f"{op_type} is supported",
                    name,
                    "outputs",
                )
        return handler(self, node, name)

    # -- inputs, constants, results --------------------------------------------------------
    def _act(self, node: Any, i: int, name: str, field: str) -> str:
        """The graph tensor of input ``i``, which must be an activation."""
        t = node.input[i] if i < len(node.input) else ""
        if t in self.tensor:
            return self.tensor[t]
        if not t:
            raise self.fail("missing input", name, field)
        if t in self.padded:
            raise self.fail(
                f"input {t!r} is a Pad's output: a Pad is only supported as the zero padding "
                f"of the Conv that reads it",
                name,
                field,
            )
        if t in self.grouped:
            raise self.fail(
                f"input {t!r} is a 5-D tensor: one is only supported inside a channel shuffle "
                f"(Reshape to N×g×C/g×H×W, Transpose [0, 2, 1, 3, 4], Reshape back)",
                name,
                field,
            )
        what = "a constant" if t in self.const else "computed from tensor shapes"
        raise self.fail(f"input {t!r} is {what}, not an activation", name, field)

    def _rank(self, node: Any, i: int = 0) -> int:
        return self.rank[node.input[i]]

    def _need_rank(self, node: Any, name: str, field: str, ranks: tuple[int, ...]) -> int:
        rank = self._rank(node)
        if rank not in ranks:
            want = " or ".join({2: "N×K", 4: "N×C×H×W"}[r] for r in ranks)
            raise self.fail(f"{node.op_type} over a rank-{rank} input: needs {want}", name, field)
        return rank

    def _param(self, node: Any, i: int, name: str, field: str) -> Array | None:
        """The value of constant input ``i`` (``None`` when absent)."""
        t = node.input[i] if i < len(node.input) else ""
        if not t:
            return None
        if t in self.const:
            value = self._value(t)
            if value is None:  # a Shape of a constant shape inference did not record
                raise self.fail(f"cannot evaluate constant input {t!r}", name, field)
            return value
        raise self.fail(
            f"input {t!r} must be a constant (an initializer or computed from them), "
            f"not computed from activations",
            name,
            field,
        )

    def _indices(self, node: Any, i: int, name: str, field: str) -> Array | None:
        """``_param``, also for a value computed from the shapes of activations (a Slice's
        ends from a ``Shape``), evaluated at the import's batch."""
        t = node.input[i] if i < len(node.input) else ""
        if t and t in self.shape_only:
            value = self._value(t)
            if value is None:
                raise self.fail(
                    f"input {t!r} depends on a dimension shape inference left unknown "
                    f"(export the model with a fixed input size)",
                    name,
                    field,
                )
            return value
        return self._param(node, i, name, field)

    def _required(self, node: Any, i: int, name: str, field: str) -> Array:
        value = self._param(node, i, name, field)
        if value is None:
            raise self.fail("missing input", name, field)
        return value

    def _value(self, tensor: str) -> Array | None:
        """The value of a constant or shape-computed tensor (``None`` when it depends on a
        dimension shape inference left unknown), evaluating what it needs once, in order."""
        if tensor in self.values:
            return self.values[tensor]
        if tensor in self.initializers:
            from onnx import numpy_helper

            value = numpy_helper.to_array(self.initializers[tensor])
            self.values[tensor] = value
            return value
        todo: set[int] = set()
        stack, seen = [tensor], {tensor}
        while stack:  # no recursion: a chain of constant nodes may be long
            t = stack.pop()
            if t in self.values or t in self.initializers or t not in self.producer:
                continue
            i = self.producer[t]
            if i in todo:
                continue
            todo.add(i)
            node = self.nodes[i]
            if self._reads_dims(node):
                continue  # reads its input's dimensions, not its values
            for u in node.input:
                if u and u not in seen:
                    seen.add(u)
                    stack.append(u)
        for i in sorted(todo):
            self._evaluate(i)
        return self.values.get(tensor)

    def _imported_dims(self, t: str) -> Dims | None:
        """The dims of activation ``t`` from the operator it was imported as, where shape
        inference left them unknown (behind a ``Pad`` whose pads are computed, as timm's
        TensorFlow-style "same" padding writes them); None for a tensor not imported yet."""
        if t not in self.tensor or t not in self.rank:
            return None
        h, w, c = self.shapes[self.tensor[t]]
        rank = self.rank[t]
        if rank == 4:
            return (self.batch, c, h, w)
        if rank == 2:
            return (self.batch, h * w * c)
        return None

    def _reads_dims(self, node: Any) -> bool:
        """A Shape or Size of an activation: its value is its input's (inferred) dims."""
        return node.op_type in _SHAPE_OPS and node.input[0] not in self.const

    def _evaluate(self, i: int) -> None:
        node, name = self.nodes[i], self.names[i]
        outputs = [t for t in node.output if t]
        if self._reads_dims(node):
            dims = self.dims.get(node.input[0])
            if dims is not None and self.batch_symbol is not None:
                dims = tuple(self.batch if d == self.batch_symbol else d for d in dims)
            if not (dims is not None and _known(dims)):
                dims = self._imported_dims(node.input[0])
            known = dims is not None and _known(dims)
            value = None
            if known and dims is not None:
                if node.op_type == "Size":
                    value = np.array(math.prod(_ints(dims)), np.int64)
                else:
                    attrs = _attributes(self.onnx, node)
                    value = np.array(_ints(dims), np.int64)[
                        attrs.get("start", 0) : attrs.get("end")
                    ]
            self.values[outputs[0]] = value
            return
        feeds: dict[str, Array] = {}
        for u in node.input:
            if u:
                value = self._value(u) if u in self.initializers else self.values.get(u)
                if value is None:
                    self.values.update(dict.fromkeys(outputs))
                    return
                feeds[u] = value
        from onnx.reference import ReferenceEvaluator

        for t in outputs:
            dims = self.dims.get(t)
            if dims is not None and _known(dims):
                elem = self.elem.get(t)
                itemsize = self.onnx.helper.tensor_dtype_to_np_dtype(elem).itemsize if elem else 8
                size = math.prod(_ints(dims)) * itemsize
                if size > MAX_ONNX_BYTES:
                    what = "computed constant size"
                    message = too_large(what, size, MAX_ONNX_BYTES, "MAX_ONNX_BYTES", " bytes")
                    raise self.fail(message, name, node.op_type)
        try:
            evaluator = ReferenceEvaluator(node, opsets={"": self.opset})
            results = evaluator.run(None, feeds)
        except Exception as exc:
            raise self.fail(
                f"cannot evaluate this computation on constants: {_first_line(exc)}",
                name,
                node.op_type,
            ) from None
        for t, result in zip(node.output, results, strict=False):
            if t:
                self.values[t] = np.asarray(result)

    def _emit(
        self,
        node: Any,
        name: str,
        kind: str,
        inputs: list[str],
        *,
        rank: int,
        weights: dict[str, Array] | None = None,
        output: int = 0,
        **fields: Any,
    ) -> str:
        """Make the operator (its shape checked against ONNX's inferred one), define the
        node's output ``output`` (the first; a Split has several) as its tensor."""
        tensor = node.output[output]
        dims = self.dims.get(tensor)
        expected = _per_image(dims) if dims is not None and len(dims) == rank else None
        try:
            op = make_operator(name, kind, inputs, self.shapes, shape=expected, **fields)
        except GraphError as exc:
            raise self._graph_error(exc) from None
        self._check_extent(op.shape, name, _OUT_FIELDS.get(kind, "X"), channels=kind != "flatten")
        for what, pair, attr in (
            ("kernel", op.kernel, "kernel_shape"),
            ("stride", op.stride, "strides"),
        ):
            if max(pair) > MAX_SPATIAL:
                message = too_large(what, max(pair), MAX_SPATIAL, "MAX_SPATIAL")
                raise self.fail(message, name, attr)
        self.ops.append(op)
        self.by_name[name] = op
        self.shapes[name] = op.shape
        self.tensor[tensor] = name
        self.rank[tensor] = rank
        if weights:
            self.weights[name] = weights
        return name

    def _alias(self, node: Any, source: str, rank: int | None = None) -> None:
        """The node's output is its input ``source`` (an ONNX activation), maybe re-ranked."""
        self.tensor[node.output[0]] = self.tensor[source]
        self.rank[node.output[0]] = self.rank[source] if rank is None else rank

    def _check_extent(self, shape: Shape, layer: str, field: str, channels: bool) -> None:
        h, w, c = shape
        bounds = [
            ("height", h, MAX_SPATIAL, "MAX_SPATIAL"),
            ("width", w, MAX_SPATIAL, "MAX_SPATIAL"),
        ]
        if channels:
            bounds.append(("channels", c, MAX_CHANNELS, "MAX_CHANNELS"))
        for what, value, limit, constant in bounds:
            if value > limit:
                raise self.fail(too_large(what, value, limit, constant), layer, field)

    def _graph_error(self, exc: GraphError) -> InputError:
        return self.fail(exc.reason, exc.op, ONNX_FIELDS.get(exc.field, exc.field))

    def _pair(self, attrs: dict[str, Any], key: str, name: str) -> Pair:
        value = list(attrs.get(key, [1, 1]))
        if len(value) != 2 or min(value) < 1:
            raise self.fail(f"expected [h, w] of positive integers, got {value}", name, key)
        return int(value[0]), int(value[1])

    # -- node handlers (``_HANDLERS``) ------------------------------------------------------
    def conv(self, node: Any, name: str) -> str:
        before = self.padded.get(node.input[0])
        x = self._act(node, 0, name, "X") if before is None else before[0]
        self._need_rank(node, name, "X", (4,))
        w = self._required(node, 1, name, "W")
        if w.ndim != 4:
            raise self.fail(f"weight shape {list(w.shape)} is not c_out×c_in×kh×kw", name, "W")
        c_out, per_group, kh, kw = (int(d) for d in w.shape)
        attrs = _attributes(self.onnx, node)
        groups = int(attrs.get("group", 1))
        if "kernel_shape" in attrs and list(attrs["kernel_shape"]) != [kh, kw]:
            raise self.fail(
                f"{list(attrs['kernel_shape'])} differs from the weight's {[kh, kw]}",
                name,
                "kernel_shape",
            )
        h, wd, c = self.shapes[x]
        if groups < 1 or c != per_group * groups:
            raise self.fail(
                f"weight shape {list(w.shape)} with group {groups} does not fit {c} input channels",
                name,
                "W",
            )
        stride = self._pair(attrs, "strides", name)
        dilation = self._pair(attrs, "dilations", name)
        extent = ((kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1)
        if before is not None and attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            raise self.fail(
                f"auto_pad {attrs['auto_pad']} after a Pad: give the padding as pads",
                name,
                "auto_pad",
            )
        pads = _window_padding(
            attrs, (h, wd), extent, stride, lambda message, field: self.fail(message, name, field)
        )
        if before is not None:  # a zero Pad before the conv is more of its padding
            top, left, bottom, right = before[1]
            pads = (pads[0] + top, pads[1] + left, pads[2] + bottom, pads[3] + right)
        weights = {"weight": w}
        bias = self._param(node, 2, name, "B")
        if bias is not None:
            if bias.shape != (c_out,):
                raise self.fail(f"bias shape {list(bias.shape)} is not [{c_out}]", name, "B")
            weights["bias"] = bias
        return self._emit(
            node,
            name,
            "conv",
            [x],
            rank=4,
            weights=weights,
            out_channels=c_out,
            kernel=(kh, kw),
            stride=stride,
            padding=pads,
            dilation=dilation,
            groups=groups,
        )

    def _fc_input(self, node: Any, name: str) -> tuple[str, int]:
        """The fc's input tensor (an ``N×K`` activation) and K."""
        if node.input[1] in self.tensor:
            raise self.fail(
                f"a {node.op_type} of two activations (attention) is not supported: "
                f"the second operand must be a constant weight",
                name,
                "B",
            )
        a = self._act(node, 0, name, "A")
        rank = self._rank(node)
        if rank != 2:
            raise self.fail(
                f"a {node.op_type} over a rank-{rank} input multiplies along its last axis: "
                f"only [N, K] × [K, M] (an fc) is supported",
                name,
                "A",
            )
        return a, self.shapes[a][2]

    def gemm(self, node: Any, name: str) -> str:
        a, k = self._fc_input(node, name)
        attrs = _attributes(self.onnx, node)
        if attrs.get("transA", 0):
            raise self.fail("a transposed input (transA) is not an fc", name, "transA")
        b = self._required(node, 1, name, "B")
        if b.ndim != 2:
            raise self.fail(f"weight shape {list(b.shape)} is not 2-D", name, "B")
        w = b if attrs.get("transB", 0) else b.T
        if w.shape[1] != k:
            raise self.fail(f"weight shape {list(b.shape)} does not fit {k} inputs", name, "B")
        n = int(w.shape[0])
        alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
        if alpha != 1.0:
            w = (w * alpha).astype(b.dtype)
        weights = {"weight": np.ascontiguousarray(w)}
        c = self._param(node, 2, name, "C")
        if c is not None:
            if _broadcast(c.shape, (1, n)) != (1, n):
                raise self.fail(
                    f"bias shape {list(c.shape)} differs per image: [{n}], [1, {n}] or a "
                    f"scalar is an fc's bias",
                    name,
                    "C",
                )
            bias = np.broadcast_to(c, (1, n)).reshape(n)
            weights["bias"] = (bias * beta).astype(c.dtype) if beta != 1.0 else bias.copy()
        return self._emit(node, name, "fc", [a], rank=2, weights=weights, out_channels=n)

    def matmul(self, node: Any, name: str) -> str:
        a, k = self._fc_input(node, name)
        b = self._required(node, 1, name, "B")
        if b.ndim != 2 or b.shape[0] != k:
            raise self.fail(f"weight shape {list(b.shape)} does not fit {k} inputs", name, "B")
        weights = {"weight": np.ascontiguousarray(b.T)}
        n = int(b.shape[1])
        return self._emit(node, name, "fc", [a], rank=2, weights=weights, out_channels=n)

    def add(self, node: Any, name: str) -> str | None:
        a, b = node.input[0], node.input[1]
        if a in self.tensor and b in self.tensor:
            return self._sum(node, name)
        act, const = (a, b) if a in self.tensor else (b, a)
        if act in self.tensor and const in self.const:
            op = self._bias_target(act)
            if op is not None:
                value = self._required(node, list(node.input).index(const), name, "B")
                n = op.out_channels
                target = (1, n) if op.kind == "fc" else (1, n, 1, 1)
                if _broadcast(value.shape, target) == target:
                    self.weights[op.name]["bias"] = np.broadcast_to(value, target).reshape(n).copy()
                    self._alias(node, act)
                    return op.name
        return self.affine(node, name)

    def affine(self, node: Any, name: str) -> str:
        """Add, Sub, Mul or Div of an activation ``x`` and a constant ``k`` of one value per
        channel (or one value): ``x + k``, ``x − k``, ``k − x``, ``x·k``, ``x / k`` are a batch
        norm with statistics 0 and 1 (epsilon 0) and that scale and shift, which the lowering
        folds into a conv or fc before it. One that follows a batch norm read by it alone
        (another such node, or a real one) is merged into it: an input normalisation
        ``(x − mean) / std`` is one step, a ``Mul`` and ``Add`` after a conv (tf2onnx's batch
        norm) fold into it."""
        op_type = node.op_type
        a, b = node.input[0], node.input[1]
        act_first = a in self.tensor
        act, const = (a, b) if act_first else (b, a)
        if act not in self.tensor or const not in self.const:
            if act not in self.tensor:
                why = "needs an activation operand"
            elif const in self.tensor:
                why = "of two activations is not supported"
            else:
                why = f"by {const!r}, computed from tensor shapes, is not supported"
            raise self.fail(f"a {op_type} {why}", name, "B")
        if op_type == "Div" and not act_first:
            raise self.fail("a Div of a constant by an activation is not supported", name, "A")
        x = self.tensor[act]
        rank = self.rank[act]
        c = self.shapes[x][2]
        value = self._required(node, list(node.input).index(const), name, "B" if act_first else "A")
        target = (1, c) if rank == 2 else (1, c, 1, 1)
        if _broadcast(value.shape, target) != target:
            raise self.fail(
                f"a {op_type} by a constant of shape {list(value.shape)}: only one value per "
                f"channel ({list(target)}) or one value is supported",
                name,
                "B" if act_first else "A",
            )
        dtype = np.result_type(value.dtype, np.float32)
        k = np.broadcast_to(value, target).reshape(c).astype(dtype)
        ones, zeros = np.ones(c, dtype), np.zeros(c, dtype)
        if op_type == "Div" and not np.all(k):
            raise self.fail("a Div by a constant with a zero", name, "B")
        if op_type == "Add":
            scale, shift = ones, k
        elif op_type == "Sub":
            scale, shift = (ones, -k) if act_first else (-ones, k)
        else:  # Mul, Div
            scale, shift = (k if op_type == "Mul" else 1 / k), zeros
        before = self._merge_target(act)
        if before is not None:  # y = x·gamma + beta, then y·scale + shift
            params = self.weights[before.name]
            params["scale"] = params["scale"] * scale
            params["bias"] = params["bias"] * scale + shift
            self._alias(node, act)
            self.affine_out[node.output[0]] = before.name
            return before.name
        weights = {"scale": scale, "bias": shift, "mean": zeros, "var": ones}
        self.affine_out[node.output[0]] = name
        return self._emit(node, name, "batchnorm", [x], rank=rank, weights=weights, epsilon=0.0)

    def _merge_target(self, act: str) -> Operator | None:
        """The batch norm whose output ``act`` is (``self.affine_out``: its node's, or a node's
        merged into it), when this node is the tensor's only reader."""
        if act not in self.affine_out or self.readers[act] != [self.index] or act in self.outputs:
            return None
        return self.by_name[self.affine_out[act]]

    def _bias_target(self, act: str) -> Operator | None:
        """The Conv or fc whose output ``act`` is, when an Add of a constant may be its bias."""
        p = self.producer.get(act)
        if p is None or self.nodes[p].output[0] != act or self.tensor[act] != self.names[p]:
            return None
        op = self.by_name[self.names[p]]
        if op.kind not in BIASED_KINDS or "bias" in self.weights[op.name]:
            return None
        if self.readers[act] != [self.index] or act in self.outputs:
            return None
        return op

    def _operands(self, node: Any, name: str, count: int) -> tuple[list[str], int]:
        """The graph tensors of the node's first ``count`` inputs, activations of one rank
        (ONNX broadcasting across ranks is not supported), and that rank."""
        tensors = [self._act(node, i, name, "inputs") for i in range(count)]
        ranks = {self._rank(node, i) for i in range(count)}
        if len(ranks) > 1:
            raise self.fail(
                f"operands of ranks {sorted(ranks)}: broadcasting is not supported", name, "inputs"
            )
        return tensors, ranks.pop()

    def _sum(self, node: Any, name: str) -> str | None:
        tensors, rank = self._operands(node, name, len(node.input))
        if len(tensors) == 1:
            self._alias(node, node.input[0])
            return None
        return self._emit(node, name, "add", tensors, rank=rank)

    def mul(self, node: Any, name: str) -> str:
        pattern = self.fused.get(self.index)
        if pattern is None:
            return self._product(node, name)
        kind, x, _ = pattern
        if x not in self.tensor:
            raise self.fail(f"input {x!r} is not an activation", name, "A")
        return self._emit(node, name, kind, [self.tensor[x]], rank=self.rank[x])

    def _product(self, node: Any, name: str) -> str:
        """A Mul of two activations: of one shape, or a feature map by a channel gate
        ``N×C×1×1`` (squeeze-excitation), which becomes the second operand; of an activation
        and a constant: ``affine``."""
        if any(t not in self.tensor for t in node.input[:2]):
            return self.affine(node, name)
        tensors, rank = self._operands(node, name, 2)
        a, b = (math.prod(self.shapes[t]) for t in tensors)
        if a < b:
            tensors.reverse()  # the feature map first, a gate (or what is refused) second
        return self._emit(node, name, "mul", tensors, rank=rank)

    def _hard_sigmoid_slope(self, node: Any) -> tuple[float, float, bool]:
        """A HardSigmoid's alpha and beta, and whether they are PyTorch's (1/6, 1/2)."""
        attrs = _attributes(self.onnx, node)
        alpha, beta = attrs.get("alpha", 0.2), attrs.get("beta", 0.5)
        return alpha, beta, math.isclose(alpha, 1 / 6, rel_tol=1e-6) and math.isclose(beta, 0.5)

    def hard_sigmoid(self, node: Any, name: str) -> str:
        alpha, beta, pytorch = self._hard_sigmoid_slope(node)
        if not pytorch:
            raise self.fail(
                f"HardSigmoid with alpha {alpha:g}, beta {beta:g}: only PyTorch's "
                f"(alpha 1/6, beta 1/2) is supported",
                name,
                "alpha",
            )
        x = self._act(node, 0, name, "X")
        return self._emit(node, name, "hardsigmoid", [x], rank=self._rank(node))

    def activation(self, node: Any, name: str) -> str:
        kind = {"Relu": "relu", "Sigmoid": "sigmoid", "HardSwish": "hardswish", "Tanh": "tanh"}[
            node.op_type
        ]
        return self._emit(node, name, kind, [self._act(node, 0, name, "X")], rank=self._rank(node))

    def gelu(self, node: Any, name: str) -> str:
        """ONNX's ``Gelu`` (opset 20) with the exact erf form; the tanh approximation is
        refused."""
        approximate = _attributes(self.onnx, node).get("approximate", "none")
        if approximate != "none":
            raise self.fail(
                f"a Gelu with approximate={approximate!r} is not supported: only the exact "
                f"(erf) form",
                name,
                "approximate",
            )
        x = self._act(node, 0, name, "X")
        return self._emit(node, name, "gelu", [x], rank=self._rank(node))

    def prelu(self, node: Any, name: str) -> str:
        """A PReLU with one slope (PyTorch's ``nn.PReLU()``, or one per channel all equal)
        is a leaky ReLU of that slope; different slopes per channel are refused."""
        x = self._act(node, 0, name, "X")
        slope = self._required(node, 1, name, "slope").astype(np.float64).reshape(-1)
        if slope.size == 0 or not np.all(slope == slope[0]):
            raise self.fail(
                f"a PRelu with {slope.size} different slopes (one per channel) is not "
                f"supported: only one slope for all channels (a leaky ReLU)",
                name,
                "slope",
            )
        alpha = float(slope[0])
        return self._emit(node, name, "leaky_relu", [x], rank=self._rank(node), alpha=alpha)

    def pad(self, node: Any, name: str) -> None:
        """A ``Pad`` with zeros on the height and width only: the padding of the Conv that
        reads it (``conv``); any other reader is refused there (``_act``)."""
        x = self._act(node, 0, name, "data")
        self._need_rank(node, name, "data", (4,))
        attrs = _attributes(self.onnx, node)
        mode = attrs.get("mode", "constant")
        if mode != "constant":
            raise self.fail(
                f"a Pad in mode {mode!r} is not supported: only zeros (constant)", name, "mode"
            )
        if self.opset < 11:
            pads = [int(p) for p in attrs.get("pads", [])]
            value = float(attrs.get("value", 0.0))
        else:
            given = self._indices(node, 1, name, "pads")  # timm's "same" computes them
            if given is None:
                raise self.fail("missing input", name, "pads")
            pads = [int(p) for p in given.reshape(-1)]
            constant = self._param(node, 2, name, "constant_value")
            value = (
                0.0 if constant is None or constant.size == 0 else float(constant.reshape(-1)[0])
            )
            axes = self._param(node, 3, name, "axes")
            if axes is not None:  # pads of those axes only: their starts, then their ends
                listed = [int(a) % 4 for a in axes.reshape(-1)]
                full = [0] * 8
                for k, axis in enumerate(listed):
                    full[axis], full[axis + 4] = pads[k], pads[k + len(listed)]
                pads = full
        if value != 0.0:
            raise self.fail(
                f"padding with {value}: only zeros are supported", name, "constant_value"
            )
        if len(pads) != 8 or min(pads) < 0 or any(pads[i] for i in (0, 1, 4, 5)):
            raise self.fail(
                f"pads {pads}: only non-negative padding of the height and width is supported",
                name,
                "pads",
            )
        self.padded[node.output[0]] = (x, (pads[2], pads[3], pads[6], pads[7]))
        self.rank[node.output[0]] = 4
        return None

    def leaky_relu(self, node: Any, name: str) -> str:
        alpha = float(_attributes(self.onnx, node).get("alpha", 0.01))
        x = self._act(node, 0, name, "X")
        return self._emit(node, name, "leaky_relu", [x], rank=self._rank(node), alpha=alpha)

    def clip(self, node: Any, name: str) -> str:
        x = self._act(node, 0, name, "X")
        bounds = []
        for i, key, default in ((1, "min", -math.inf), (2, "max", math.inf)):
            if self.opset < 11:
                bounds.append(float(_attributes(self.onnx, node).get(key, default)))
                continue
            value = self._param(node, i, name, key)
            if value is None:
                bounds.append(default)
            elif value.size != 1:
                raise self.fail(f"expected a scalar, got shape {list(value.shape)}", name, key)
            else:
                bounds.append(float(value.reshape(())))
        low, high = bounds
        rank = self._rank(node)
        if low == 0 and high == 6:
            return self._emit(node, name, "relu6", [x], rank=rank)
        if low == 0 and high == math.inf:
            return self._emit(node, name, "relu", [x], rank=rank)
        return self._emit(node, name, "clip", [x], rank=rank, low=low, high=high)

    def softmax(self, node: Any, name: str) -> str:
        x = self._act(node, 0, name, "input")
        rank = self._need_rank(node, name, "input", (2, 4))
        axis = int(_attributes(self.onnx, node).get("axis", 1 if self.opset < 13 else -1))
        h, w, _ = self.shapes[x]
        # before opset 13 the axis splits the tensor in two, the softmax runs over the rest
        channels = axis % rank == 1 and (rank == 2 or self.opset >= 13 or h == w == 1)
        if not -rank <= axis < rank or not channels:
            raise self.fail(
                f"a softmax over axis {axis} of a rank-{rank} tensor (opset {self.opset}): "
                f"only over the channels is supported",
                name,
                "axis",
            )
        return self._emit(node, name, "softmax", [x], rank=rank)

    def batchnorm(self, node: Any, name: str) -> str:
        x = self._act(node, 0, name, "X")
        rank = self._need_rank(node, name, "X", (2, 4))
        attrs = _attributes(self.onnx, node)
        if attrs.get("spatial", 1) != 1:
            raise self.fail(
                "per-activation statistics (spatial=0) are not supported", name, "spatial"
            )
        c = self.shapes[x][2]
        weights = {}
        for i, (key, field_name) in enumerate(_BN_PARAMS, start=1):
            value = self._required(node, i, name, field_name)
            if value.shape != (c,):
                raise self.fail(f"shape {list(value.shape)} is not [{c}]", name, field_name)
            weights[key] = value
        epsilon = float(attrs.get("epsilon", 1e-5))
        self.affine_out[node.output[0]] = name
        return self._emit(node, name, "batchnorm", [x], rank=rank, weights=weights, epsilon=epsilon)

    def pool(self, node: Any, name: str) -> str:
        kind = "maxpool" if node.op_type == "MaxPool" else "avgpool"
        x = self._act(node, 0, name, "X")
        self._need_rank(node, name, "X", (4,))
        attrs = _attributes(self.onnx, node)
        kernel = [int(k) for k in attrs.get("kernel_shape", [])]
        if len(kernel) != 2:
            raise self.fail(f"expected [h, w], got {kernel}", name, "kernel_shape")
        stride = self._pair(attrs, "strides", name)
        if self._pair(attrs, "dilations", name) != (1, 1):
            raise self.fail("dilated pooling is not supported", name, "dilations")
        ceil = bool(attrs.get("ceil_mode", 0))
        include = kind == "avgpool" and bool(attrs.get("count_include_pad", 0))
        h, w, _ = self.shapes[x]
        window = (kernel[0], kernel[1])
        pads = _window_padding(
            attrs, (h, w), window, stride, lambda message, field: self.fail(message, name, field)
        )
        padding, ceil = self._pool_padding(node, name, attrs, pads, window, stride, ceil, include)
        return self._emit(
            node,
            name,
            kind,
            [x],
            rank=4,
            kernel=kernel,
            stride=stride,
            padding=padding,
            ceil_mode=ceil,
            count_include_pad=include,
        )

    def _pool_padding(
        self,
        node: Any,
        name: str,
        attrs: dict[str, Any],
        pads: tuple[int, int, int, int],
        kernel: Pair,
        stride: Pair,
        ceil: bool,
        include: bool,
    ) -> tuple[Pair, bool]:
        """Symmetric padding and ceil mode equal to ``pads``: extra padding at the bottom or
        right only adds windows that ceil mode adds too (the windows start at the same
        places; what they cover beyond the input is -inf, or not counted, either way)."""
        top, left, bottom, right = pads
        if (top, left) == (bottom, right):
            return (top, left), ceil
        h, w, _ = self.shapes[self.tensor[node.input[0]]]
        dims = self.dims.get(node.output[0])
        if dims is not None and len(dims) == 4 and _known(dims[2:]):
            want = _ints(dims[2:])
        else:
            want = tuple(
                out_size(n + end - begin, k, s, begin, ceil, 1)
                for n, k, s, begin, end in zip(
                    (h, w), kernel, stride, (top, left), (bottom, right), strict=True
                )
            )
        if bottom >= top and right >= left and not include:
            for mode in (ceil, True):
                got = tuple(
                    out_size(n, k, s, p, mode, 1)
                    for n, k, s, p in zip((h, w), kernel, stride, (top, left), strict=True)
                )
                if got == want:
                    return (top, left), mode
        raise self.fail(
            f"asymmetric padding {list(pads)} ([top, left, bottom, right]) is not supported: "
            f"pooling takes it only where it equals padding {[top, left]} on both sides with "
            f"or without ceil mode (and count_include_pad=0)",
            name,
            "auto_pad" if "auto_pad" in attrs else "pads",
        )

    def global_avgpool(self, node: Any, name: str) -> str:
        x = self._act(node, 0, name, "X")
        self._need_rank(node, name, "X", (4,))
        return self._emit(node, name, "global_avgpool", [x], rank=4)

    def reduce_mean(self, node: Any, name: str) -> str | None:
        x = self._act(node, 0, name, "data")
        rank = self._rank(node)
        attrs = _attributes(self.onnx, node)
        if self.opset >= 18:
            value = self._param(node, 1, name, "axes")
            axes = None if value is None or value.size == 0 else [int(a) for a in value.reshape(-1)]
        else:
            axes = attrs.get("axes")
        if axes is None and self.opset >= 18 and attrs.get("noop_with_empty_axes", 0):
            self._alias(node, node.input[0])
            return None
        if axes is None:
            raise self.fail("a mean over all axes (the batch too) is not supported", name, "axes")
        if rank != 4 or sorted(a % rank for a in axes) != [2, 3] or min(axes) < -rank:
            raise self.fail(
                f"a mean over axes {list(axes)} of a rank-{rank} tensor: only over the height "
                f"and width ([2, 3], global average pooling) is supported",
                name,
                "axes",
            )
        keep = bool(attrs.get("keepdims", 1))
        return self._emit(node, name, "global_avgpool", [x], rank=4 if keep else 2)

    def flatten(self, node: Any, name: str) -> str | None:
        x = self._act(node, 0, name, "input")
        rank = self._rank(node)
        axis = int(_attributes(self.onnx, node).get("axis", 1))
        if not -rank <= axis <= rank or axis % rank != 1:
            raise self.fail(
                f"a flatten at axis {axis} of a rank-{rank} tensor: only axis 1 (each image "
                f"to a vector) is supported",
                name,
                "axis",
            )
        if rank == 2:
            self._alias(node, node.input[0])
            return None
        return self._emit(node, name, "flatten", [x], rank=2)

    def reshape(self, node: Any, name: str) -> str | None:
        """Reshape, Squeeze, Unsqueeze: a flatten of each image to ``[N, C·H·W]``, or a view
        that keeps each image's (h, w, c) (``[N, C]`` <-> ``[N, C, 1, 1]``); or the first
        Reshape of a channel shuffle (to ``N×g×C/g×H×W``, recorded in ``grouped``) or its last
        (``_shuffle_end``)."""
        if node.input[0] in self.grouped:
            return self._shuffle_end(node, name)
        x = self._act(node, 0, name, "data")
        rank = self._rank(node)
        shape = self.shapes[x]
        words = math.prod(shape)
        before = self.dims.get(node.input[0])
        after = self.dims.get(node.output[0])
        if after is None and before is not None and node.op_type != "Reshape":
            after = self._squeezed(node, name, before)
        after = _complete(after, before, words)
        self.dims[node.output[0]] = after
        if after is not None and len(after) == 2 and rank == 4:
            batch = before[0] if before else None
            if after[1] == words or (batch is not None and after[0] == batch):
                return self._emit(node, name, "flatten", [x], rank=2)
        if after is not None and len(after) in (2, 4) and _per_image(after) == shape:
            self._alias(node, node.input[0], rank=len(after))
            return None
        if after is not None and len(after) == 5 and rank == 4 and node.op_type == "Reshape":
            h, w, c = shape
            if _known(after[1:]) and _ints(after[1:])[2:] == (h, w):
                groups, size = _ints(after[1:3])
                if groups * size == c:  # N×g×(C/g)×H×W: a channel shuffle starts
                    self.grouped[node.output[0]] = (x, groups, False, (self.index,))
                    self.rank[node.output[0]] = 5
                    return None
        shown = "an unknown shape" if after is None else str(list(after))
        raise self.fail(
            f"{node.op_type} of a tensor of {rank} dimensions with (h, w, c) = {list(shape)} to "
            f"{shown}: only a flatten to [N, C·H·W] or a reshape that keeps each image's "
            f"height, width and channels is supported",
            name,
            "shape" if node.op_type == "Reshape" else "axes",
        )

    def transpose(self, node: Any, name: str) -> None:
        """The Transpose of a channel shuffle: the two group axes of its 5-D Reshape swapped."""
        source = self.grouped.get(node.input[0])
        perm = list(_attributes(self.onnx, node).get("perm", []))
        if source is None or source[2] or perm != [0, 2, 1, 3, 4]:
            raise self.fail(
                f"a Transpose (perm {perm}) is only supported inside a channel shuffle: "
                f"Reshape to N×g×C/g×H×W, Transpose [0, 2, 1, 3, 4], Reshape back",
                name,
                "perm",
            )
        x, groups, _, parts = source
        self.grouped[node.output[0]] = (x, groups, True, (*parts, self.index))
        self.rank[node.output[0]] = 5
        return None

    def _shuffle_end(self, node: Any, name: str) -> str:
        """The Reshape back to ``N×C×H×W`` that completes a channel shuffle."""
        x, groups, transposed, parts = self.grouped[node.input[0]]
        h, w, c = self.shapes[x]
        after = self.dims.get(node.output[0])
        if not transposed or after is None or len(after) != 4 or _per_image(after) != (h, w, c):
            raise self.fail(
                f"a Reshape of a 5-D tensor to {'an unknown shape' if after is None else after}: "
                f"only a channel shuffle (Reshape to N×g×C/g×H×W, Transpose [0, 2, 1, 3, 4], "
                f"Reshape back to N×C×H×W) is supported",
                name,
                "shape",
            )
        self.shuffles[self.index] = parts
        return self._emit(node, name, "shuffle", [x], rank=4, groups=groups)

    def slice(self, node: Any, name: str) -> str | None:
        """Slice of a range of channels (axis 1, step 1) -> slice; of every element -> the
        input itself. Other axes or steps are refused."""
        x = self._act(node, 0, name, "data")
        rank = self._need_rank(node, name, "data", (2, 4))
        if self.opset >= 10:
            starts, ends, axes, steps = (
                self._indices(node, i, name, field)
                for i, field in enumerate(("starts", "ends", "axes", "steps"), start=1)
            )
            if starts is None or ends is None:
                raise self.fail("missing input", name, "starts" if starts is None else "ends")
            starts, ends = starts.reshape(-1), ends.reshape(-1)
        else:
            attrs = _attributes(self.onnx, node)
            starts = np.array(attrs.get("starts", []))
            ends = np.array(attrs.get("ends", []))
            axes = np.array(attrs["axes"]) if "axes" in attrs else None
            steps = None
        axes_list = list(range(len(starts))) if axes is None else [int(a) for a in axes.reshape(-1)]
        steps_list = [1] * len(starts) if steps is None else [int(v) for v in steps.reshape(-1)]
        if not len(starts) == len(ends) == len(axes_list) == len(steps_list):
            raise self.fail("starts, ends, axes and steps differ in length", name, "starts")
        h, w, c = self.shapes[x]
        sizes = [self.batch, c, h, w] if rank == 4 else [self.batch, c]
        channels = (0, c)
        for axis, start, end, step in zip(axes_list, starts, ends, steps_list, strict=True):
            if not -rank <= axis < rank:
                raise self.fail(f"axis {axis} out of range for rank {rank}", name, "axes")
            axis %= rank
            size = sizes[axis]
            first, stop = (
                min(max(int(v) + size if v < 0 else int(v), 0), size) for v in (start, end)
            )
            if step == 1 and (first, stop) == (0, size):
                continue  # every element along this axis
            if axis != 1 or step != 1:
                raise self.fail(
                    f"a Slice along axis {axis} with step {step}: only a range of channels "
                    f"(axis 1, step 1) is supported",
                    name,
                    "axes" if axis != 1 else "steps",
                )
            channels = (first, stop)
        if channels == (0, c):
            self._alias(node, node.input[0])
            return None
        return self._emit(node, name, "slice", [x], rank=rank, channels=channels)

    def split(self, node: Any, name: str) -> str:
        """Split along the channels (axis 1) -> one slice per output, named ``name:i`` after
        the first (``name``)."""
        x = self._act(node, 0, name, "input")
        rank = self._need_rank(node, name, "input", (2, 4))
        attrs = _attributes(self.onnx, node)
        axis = int(attrs.get("axis", 0))
        if not -rank <= axis < rank or axis % rank != 1:
            raise self.fail(
                f"a Split along axis {axis}: only along the channels (axis 1) is supported",
                name,
                "axis",
            )
        c = self.shapes[x][2]
        count = len(node.output)
        value = self._indices(node, 1, name, "split") if self.opset >= 13 else None
        if value is not None:
            sizes = [int(v) for v in value.reshape(-1)]
        elif "split" in attrs:
            sizes = [int(v) for v in attrs["split"]]
        else:  # equal parts, the last smaller when they do not divide (opset 18)
            part = -(-c // count)
            sizes = [min(part, c - i * part) for i in range(count)]
        if len(sizes) != count or min(sizes) < 1 or sum(sizes) != c:
            raise self.fail(
                f"split {sizes} into {count} outputs does not cover the {c} channels",
                name,
                "split",
            )
        taken = set(self.names) | set(self.by_name) | {vi.name for vi in self.inputs}
        first = ""
        start = 0
        for i, (tensor, size) in enumerate(zip(node.output, sizes, strict=True)):
            part_name = name if i == 0 else f"{name}:{i}"
            while i and part_name in taken:
                part_name += "_"
            taken.add(part_name)
            if tensor:
                out = self._emit(
                    node,
                    part_name,
                    "slice",
                    [x],
                    rank=rank,
                    output=i,
                    channels=(start, start + size),
                )
                first = first or out
            start += size
        return first or name

    def _squeezed(self, node: Any, name: str, before: Dims) -> Dims | None:
        """The output dims of a Squeeze or Unsqueeze over ``before`` (where shape inference
        gave none: its input had an unknown dimension), from the constant axes."""
        if self.opset >= 13:
            value = self._param(node, 1, name, "axes")
            axes = None if value is None else [int(a) for a in value.reshape(-1)]
        else:
            axes = _attributes(self.onnx, node).get("axes")
        if axes is None:
            return None  # Squeeze of every 1: it may drop a batch of 1, refused by the caller
        dims = list(before)
        if node.op_type == "Squeeze":
            drop = {a % len(dims) for a in axes}
            return tuple(d for i, d in enumerate(dims) if i not in drop)
        rank = len(dims) + len(axes)
        for axis in sorted(a % rank for a in axes):
            dims.insert(axis, 1)
        return tuple(dims)

    def concat(self, node: Any, name: str) -> str | None:
        tensors = [self._act(node, i, name, "inputs") for i in range(len(node.input))]
        ranks = {self._rank(node, i) for i in range(len(node.input))}
        rank = max(ranks)
        axis = int(_attributes(self.onnx, node).get("axis", 1))
        if len(ranks) > 1 or not -rank <= axis < rank or axis % rank != 1:
            raise self.fail(
                f"a concat along axis {axis} of rank-{sorted(ranks)} tensors: only along the "
                f"channels (axis 1) is supported",
                name,
                "axis",
            )
        if len(tensors) == 1:
            self._alias(node, node.input[0])
            return None
        return self._emit(node, name, "concat", tensors, rank=rank)

    def resize(self, node: Any, name: str) -> str | None:
        """Resize and Upsample by one integer factor for height and width (from ``scales``,
        ``sizes`` or the inferred output shape): nearest-neighbour with a coordinate mode that
        repeats each pixel (``_EXACT_NEAREST``), or (Resize-11 and later) ``linear`` with
        ``half_pixel`` or ``pytorch_half_pixel`` coordinates (PyTorch's bilinear,
        ``align_corners=False``) or ``align_corners`` (``autotune.ir.resample``)."""
        x = self._act(node, 0, name, "X")
        self._need_rank(node, name, "X", (4,))
        attrs = _attributes(self.onnx, node)
        mode = attrs.get("mode", "nearest")
        modern = node.op_type == "Resize" and self.opset >= 11
        coords = str(attrs.get("coordinate_transformation_mode", "half_pixel"))
        if mode == "linear" and modern:
            interpolation = _LINEAR_COORDINATES.get(coords)
            if interpolation is None:
                raise self.fail(
                    f"linear with {coords} coordinates is not supported (half_pixel, "
                    f"pytorch_half_pixel, align_corners are)",
                    name,
                    "coordinate_transformation_mode",
                )
        elif mode != "nearest":
            raise self.fail(
                f"mode {mode!r}: only nearest-neighbour upsampling and bilinear (Resize-11 and "
                f"later) by an integer factor are supported",
                name,
                "mode",
            )
        else:
            interpolation = "nearest"
        if modern:
            rounding = attrs.get("nearest_mode", "round_prefer_floor")
            if mode == "nearest" and (coords, rounding) not in _EXACT_NEAREST:
                raise self.fail(
                    f"{coords} with nearest_mode {rounding} does not repeat each pixel: not an "
                    f"upsample",
                    name,
                    "coordinate_transformation_mode",
                )
            scales_at, sizes_at = 2, 3
        else:  # Resize-10 and Upsample: asymmetric coordinates, rounded down
            scales_at, sizes_at = 1, 0
        scale = self._resize_factor(node, name, attrs, scales_at, sizes_at)
        if scale == 1:
            self._alias(node, node.input[0])
            return None
        return self._emit(node, name, "upsample", [x], rank=4, scale=scale, mode=interpolation)

    def _resize_factor(
        self, node: Any, name: str, attrs: dict[str, Any], scales_at: int, sizes_at: int
    ) -> int:
        h, w, c = self.shapes[self.tensor[node.input[0]]]
        axes = [int(a) % 4 for a in attrs.get("axes", [0, 1, 2, 3])]
        candidates: list[tuple[str, list[float]]] = []
        if "scales" in attrs:  # Upsample-7
            candidates.append(("scales", [float(s) for s in attrs["scales"]]))
        for at, key in ((scales_at, "scales"), (sizes_at, "sizes")):
            t = node.input[at] if at and at < len(node.input) else ""
            if not t:
                continue
            if t in self.tensor:
                raise self.fail(f"input {t!r} must be a constant", name, key)
            value = self._value(t)
            if value is not None and value.size:
                full = [1.0] * 4 if key == "scales" else [1.0, float(c), float(h), float(w)]
                for axis, v in zip(axes, value.reshape(-1).tolist(), strict=False):
                    full[axis] = float(v)
                if key == "sizes":
                    full = [1.0, full[1] / c, full[2] / h, full[3] / w]
                candidates.append((key, full))
        dims = self.dims.get(node.output[0])
        if dims is not None and len(dims) == 4 and _known(dims[1:]):
            oc, oh, ow = _ints(dims[1:])
            candidates.append(("scales", [1.0, oc / c, oh / h, ow / w]))
        if not candidates:
            raise self.fail(
                "the upsampling factor is unknown (no constant scales or sizes, and shape "
                "inference gives no output shape)",
                name,
                "scales",
            )
        key, factors = candidates[0]
        _, fc, fh, fw = factors
        if fc != 1 or fh != fw or fh < 1 or not fh.is_integer():
            raise self.fail(
                f"factors {[round(f, 6) for f in factors]} per axis (N, C, H, W): only one "
                f"integer factor for height and width is supported",
                name,
                key,
            )
        return int(fh)

    def identity(self, node: Any, name: str) -> None:
        self._act(node, 0, name, "input")
        if node.op_type == "Dropout":
            mode = self._param(node, 2, name, "training_mode")
            if mode is not None and bool(mode.reshape(-1)[0]):
                raise self.fail(
                    "dropout in training mode is not an inference graph", name, "training_mode"
                )
        self._alias(node, node.input[0])
        return None

    def cast(self, node: Any, name: str) -> None:
        self._act(node, 0, name, "input")
        to = int(_attributes(self.onnx, node).get("to", 0))
        source = self.elem.get(node.input[0])
        if source != to:
            names = self.onnx.TensorProto.DataType
            shown = names.Name(source) if source else "an unknown type"
            raise self.fail(
                f"a Cast of an activation from {shown} to {names.Name(to)} is not supported",
                name,
                "to",
            )
        self._alias(node, node.input[0])
        return None


def _complete(after: Dims | None, before: Dims | None, words: int) -> Dims | None:
    """``after`` with its one unknown per-image dimension solved from the element count, when
    its dim 0 is the batch of ``before`` (shape inference leaves ``-1`` unknown next to a
    symbolic batch: ``[N, unk__0]`` for ``x.view(x.size(0), -1)``)."""
    if after is None or before is None or not before or after[:1] != before[:1]:
        return after
    if after[0] is None:
        return after
    unknown = [i for i, d in enumerate(after[1:], start=1) if not isinstance(d, int)]
    known = math.prod(_ints(after[1:]))
    if len(unknown) != 1 or known == 0 or words % known:
        return after
    return tuple(words // known if i == unknown[0] else d for i, d in enumerate(after))


def _broadcast(shape: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, ...] | None:
    """``np.broadcast_shapes(shape, target)``, or ``None`` when they do not broadcast."""
    try:
        return tuple(np.broadcast_shapes(shape, target))
    except ValueError:
        return None


_Handler = Callable[[_GraphImporter, Any, str], "str | None"]
#: ONNX op type -> the handler that maps it (to an operator, or consumed as an alias).
_HANDLERS: dict[str, _Handler] = {
    "Conv": _GraphImporter.conv,
    "Gemm": _GraphImporter.gemm,
    "MatMul": _GraphImporter.matmul,
    "Add": _GraphImporter.add,
    "Sum": _GraphImporter._sum,
    "Mul": _GraphImporter.mul,
    "Sub": _GraphImporter.affine,
    "Div": _GraphImporter.affine,
    "Relu": _GraphImporter.activation,
    "Sigmoid": _GraphImporter.activation,
    "HardSwish": _GraphImporter.activation,
    "Tanh": _GraphImporter.activation,
    "HardSigmoid": _GraphImporter.hard_sigmoid,
    "LeakyRelu": _GraphImporter.leaky_relu,
    "PRelu": _GraphImporter.prelu,
    "Gelu": _GraphImporter.gelu,
    "Pad": _GraphImporter.pad,
    "Clip": _GraphImporter.clip,
    "Softmax": _GraphImporter.softmax,
    "BatchNormalization": _GraphImporter.batchnorm,
    "MaxPool": _GraphImporter.pool,
    "AveragePool": _GraphImporter.pool,
    "GlobalAveragePool": _GraphImporter.global_avgpool,
    "ReduceMean": _GraphImporter.reduce_mean,
    "Flatten": _GraphImporter.flatten,
    "Reshape": _GraphImporter.reshape,
    "Squeeze": _GraphImporter.reshape,
    "Unsqueeze": _GraphImporter.reshape,
    "Concat": _GraphImporter.concat,
    "Slice": _GraphImporter.slice,
    "Split": _GraphImporter.split,
    "Transpose": _GraphImporter.transpose,
    "Resize": _GraphImporter.resize,
    "Upsample": _GraphImporter.resize,
    "Identity": _GraphImporter.identity,
    "Dropout": _GraphImporter.identity,
    "Cast": _GraphImporter.cast,
}
