"""ONNX import (the ``onnx`` extra): Conv, Gemm and MatMul nodes become layers.

- ``Conv`` (2-D, NCHW) becomes a conv layer: kernel from the weight's shape, ``group``,
  ``strides``, ``pads`` (``[top, left, bottom, right]``, equal on both sides of each axis) or
  ``auto_pad``; ``dilations`` other than 1 are refused.
- ``Gemm`` and ``MatMul`` whose weight is constant (an initializer, a ``Constant`` node or
  computed from them only) become fc layers. An fc fed through ``Flatten``/``Reshape`` from an
  ``N×C×H×W`` volume gets ``in = [H, W, C]`` (VGG fc6: ``[7, 7, 512]``), else ``[1, 1, K]``.
  A ``MatMul`` over ``N×…×R×K`` (several rows per image, e.g. NHWC pointwise) is the
  equivalent 1×1 conv over ``[…, R, K]``.
- Every other node (Relu, MaxPool, Add, a MatMul of two activations, ...) is skipped and
  listed in ``Network.skipped`` as ``"op_type name"``; nodes that only compute constants
  (``Constant``, a cast of a weight) are not listed.

Shapes come from the initializers and ``onnx.shape_inference``. The batch is the first graph
input's dim 0 when it is a number (else 1); the precision is fp64 when that input is double,
else fp32. Layer names are the node names (``op_type_index`` for unnamed nodes, made unique).
Parsing is read → check → infer shapes → build, within the input limits
(``autotune.io.limits``: file size and node count before the checker runs, every layer's
dimensions as it is built).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from autotune.io.errors import InputError
from autotune.io.limits import (
    MAX_ONNX_BYTES,
    MAX_ONNX_NODES,
    check_batch,
    check_count,
    check_layer,
    check_name,
    read_bounded,
    too_large,
)
from autotune.ir.layer import Layer, LayerError
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


def _first_line(message: object) -> str:
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    return lines[0] if lines else "unknown error"


def _read(onnx: Any, path: Path) -> Any:
    """Parse, check and shape-infer the model; every failure is an ``InputError``."""
    data = read_bounded(path, MAX_ONNX_BYTES, "ONNX file", "MAX_ONNX_BYTES")
    try:
        model = onnx.load_model_from_string(data)
    except Exception:  # protobuf raises DecodeError and others for bytes that are no model
        raise InputError(path, "not an ONNX model (the file does not parse)") from None
    nodes = len(model.graph.node)
    if nodes > MAX_ONNX_NODES:
        message = too_large("number of nodes", nodes, MAX_ONNX_NODES, "MAX_ONNX_NODES")
        raise InputError(path, message, field="graph")
    try:
        onnx.checker.check_model(str(path))  # by path: finds external data next to the file
    except Exception as exc:  # ValidationError, or the checker failing on odd input
        raise InputError(path, f"not a valid ONNX model: {_first_line(exc)}") from None
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
        used: set[str] = set()
        names = []
        for index, node in enumerate(self.graph.node):
            check_name(node.name, self.path, layer=f"node #{index}")
            base = node.name or f"{node.op_type}_{index}"
            name, k = base, 2
            while name in used:
                name, k = f"{base}_{k}", k + 1
            used.add(name)
            names.append(name)
        return names

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
        inputs = [vi for vi in self.graph.input if vi.name not in self.consts]
        if not inputs:
            return 1, "fp32"
        first = inputs[0]
        dims = _dims(first.type) or ()
        batch = dims[0] if dims and isinstance(dims[0], int) and dims[0] > 0 else 1
        double = first.type.tensor_type.elem_type == self.onnx.TensorProto.DOUBLE
        return batch, "fp64" if double else "fp32"

    # -- nodes ----------------------------------------------------------------------------
    def _attrs(self, node: Any) -> dict[str, Any]:
        values = {a.name: self.onnx.helper.get_attribute_value(a) for a in node.attribute}
        return {k: v.decode() if isinstance(v, bytes) else v for k, v in values.items()}

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
        if dilations != [1, 1]:
            raise self.fail(f"dilated convolution {dilations} is not supported", name, "dilations")
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
        ph, pw = self._conv_pads(attrs, name, (h, wd), (kh, kw), (sh, sw))
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
            )
            check_layer(layer)
            return layer
        except LayerError as exc:
            raise self.fail(exc.reason, name, _CONV_FIELDS.get(exc.field, exc.field)) from None

    def _conv_pads(
        self,
        attrs: dict[str, Any],
        name: str,
        size: tuple[int, int],
        kernel: tuple[int, int],
        stride: tuple[int, int],
    ) -> tuple[int, int]:
        """Symmetric (pad_h, pad_w) from ``pads`` or ``auto_pad``; refuses asymmetric ones."""
        auto = attrs.get("auto_pad", "NOTSET")
        if auto == "VALID":
            return 0, 0
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            pads = []
            for n, k, s in zip(size, kernel, stride, strict=True):
                total = max((math.ceil(n / s) - 1) * s + k - n, 0)
                if total % 2:
                    raise self.fail(
                        f"{auto} pads {total} for a {k}-wide kernel over {n} with "
                        f"stride {s}, unequal on both sides (not supported)",
                        name,
                        "auto_pad",
                    )
                pads.append(total // 2)
            return pads[0], pads[1]
        if auto != "NOTSET":
            raise self.fail(f"unknown auto_pad {auto!r}", name, "auto_pad")
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
        if len(pads) != 4:
            raise self.fail(f"expected [top, left, bottom, right], got {pads}", name, "pads")
        top, left, bottom, right = pads
        if top != bottom or left != right:
            raise self.fail(
                f"asymmetric padding {pads} ([top, left, bottom, right]) is not "
                f"supported: each axis must be padded equally on both sides",
                name,
                "pads",
            )
        return top, left

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
