"""A graph written as an ONNX model (the ``onnx`` extra): the network with its weights in the
form onnxruntime and other tools run, so that results can be compared outside autotune.

Each operator becomes the ONNX operator of the same meaning, opset 17, NCHW, float32:
conv ``Conv``; fc ``Gemm`` (``transB``; a ``Flatten`` first when its input is a volume);
batchnorm ``BatchNormalization``; pools ``MaxPool`` / ``AveragePool`` (``ceil_mode``,
``count_include_pad``) and ``GlobalAveragePool``; add ``Sum``; mul ``Mul``; concat
``Concat`` (axis 1); slice ``Slice`` (axis 1); shuffle ``Reshape`` to N×g×C/g×H×W,
``Transpose`` [0, 2, 1, 3, 4], ``Reshape`` back (as PyTorch exports ShuffleNet's); upsample
``Resize`` (nearest, integer scales); flatten ``Flatten``;
softmax ``Softmax`` (axis 1); relu, leaky relu, sigmoid, hardswish, hardsigmoid, tanh as
themselves; relu6/clip ``Clip``; silu ``x · Sigmoid(x)``; gelu ``x · (1 + Erf(x / √2)) ·
0.5``. ``load_onnx_graph`` reads such a
file back to the same graph.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from autotune.files import write_atomic
from autotune.io.errors import InputError
from autotune.ir.graph import Graph, Operator, tensor_ranks

OPSET = 17
#: A Slice's constant inputs, in order.
_SLICE = ("starts", "ends", "axes")
EXTRA_HINT = "writing .onnx files needs the onnx extra: pip install 'autotune[onnx]'"


def save_onnx(
    graph: Graph,
    weights: Mapping[str, Mapping[str, np.ndarray]],
    path: str | Path,
    batch: int = 1,
) -> None:
    """Write ``graph`` with ``weights`` (by operator and role, ``graphs.weights``' layout)
    as an ONNX model at ``path`` (atomically)."""
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        raise InputError(path, EXTRA_HINT) from None
    nodes: list[Any] = []
    initializers: list[Any] = []
    rank = tensor_ranks(graph)

    def const(name: str, value: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op_type: str, inputs: list[str], output: str, name: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op_type, inputs, [output], name=name, **attrs))
        return output

    for op in graph.ops:
        params = {k: np.asarray(v, np.float32) for k, v in weights.get(op.name, {}).items()}
        args = list(op.inputs)
        # an operator of volumes reads a vector (an fc's output) as N×C×1×1; so does a mul of
        # a volume by a gate, or a concat of a vector and a volume
        if rank[op.name] == 4 and op.kind not in ("fc", "flatten"):
            args = [_volume(a, rank, graph, node, const) for a in args]
        _emit(op, args, params, node, const)
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, c, h, w])
        for name, (h, w, c) in graph.inputs
    ]
    outputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, _dims(graph, name, rank, batch))
        for name in graph.outputs
    ]
    model = helper.make_model(
        helper.make_graph(nodes, graph.name, inputs, outputs, initializers),
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="autotune",
    )
    onnx.checker.check_model(model)
    write_atomic(path, model.SerializeToString())


def _dims(graph: Graph, tensor: str, rank: dict[str, int], batch: int) -> list[int]:
    h, w, c = graph.shape(tensor)
    return [batch, c, h, w] if rank[tensor] == 4 else [batch, h * w * c]


def _volume(tensor: str, rank: dict[str, int], graph: Graph, node: Any, const: Any) -> str:
    """``tensor`` as NCHW: a 2-D tensor (an fc's output) reshaped to ``(N, c, 1, 1)``."""
    out = f"{tensor}.nchw"
    if rank[tensor] == 4 or out in rank:  # a volume, or a vector another reader reshaped
        return tensor if rank[tensor] == 4 else out
    shape = const(f"{tensor}.as_volume", np.array([0, -1, 1, 1], np.int64))
    node("Reshape", [tensor, shape], out, out)
    rank[out] = 4
    return out


def _emit(
    op: Operator, args: list[str], params: Mapping[str, np.ndarray], node: Any, const: Any
) -> None:
    name, kind = op.name, op.kind
    if kind == "conv":
        inputs = [args[0], const(f"{name}.weight", params["weight"])]
        if op.bias:
            inputs.append(const(f"{name}.bias", params["bias"]))
        ph, pw = op.padding
        pb, pr = op.padding_bottom_right
        node(
            "Conv",
            inputs,
            name,
            name,
            kernel_shape=list(op.kernel),
            strides=list(op.stride),
            pads=[ph, pw, pb, pr],
            dilations=list(op.dilation),
            group=op.groups,
        )
    elif kind == "fc":
        flat = node("Flatten", [args[0]], f"{name}.flat", f"{name}.flat", axis=1)
        inputs = [flat, const(f"{name}.weight", params["weight"])]
        if op.bias:
            inputs.append(const(f"{name}.bias", params["bias"]))
        node("Gemm", inputs, name, name, transB=1)
    elif kind == "batchnorm":
        roles = ("scale", "bias", "mean", "var")
        node(
            "BatchNormalization",
            [args[0], *(const(f"{name}.{r}", params[r]) for r in roles)],
            name,
            name,
            epsilon=op.epsilon,
        )
    elif kind in ("maxpool", "avgpool"):
        ph, pw = op.padding
        attrs: dict[str, Any] = dict(
            kernel_shape=list(op.kernel),
            strides=list(op.stride),
            pads=[ph, pw, ph, pw],
            ceil_mode=int(op.ceil_mode),
        )
        if kind == "avgpool":
            attrs["count_include_pad"] = int(op.count_include_pad)
        node("MaxPool" if kind == "maxpool" else "AveragePool", args, name, name, **attrs)
    elif kind == "global_avgpool":
        node("GlobalAveragePool", args, name, name)
    elif kind == "add":
        node("Sum", args, name, name)
    elif kind == "mul":  # of one shape, or by a channel gate N×C×1×1 (ONNX broadcasts it)
        node("Mul", args, name, name)
    elif kind == "concat":
        node("Concat", args, name, name, axis=1)
    elif kind == "upsample":
        scales = const(f"{name}.scales", np.array([1, 1, op.scale, op.scale], np.float32))
        if op.mode == "nearest":
            node("Resize", [args[0], "", scales], name, name, mode="nearest")
        else:
            coords = "half_pixel" if op.mode == "bilinear" else "align_corners"
            node(
                "Resize",
                [args[0], "", scales],
                name,
                name,
                mode="linear",
                coordinate_transformation_mode=coords,
            )
    elif kind == "slice":
        bounds = [np.array([v], np.int64) for v in (*op.channels, 1)]
        starts, ends, axes = (const(f"{name}.{r}", v) for r, v in zip(_SLICE, bounds, strict=True))
        node("Slice", [args[0], starts, ends, axes], name, name)
    elif kind == "shuffle":  # 0: the batch as it comes (Reshape's allowzero=0)
        h, w, c = op.shape
        five = const(f"{name}.dims5", np.array([0, op.groups, c // op.groups, h, w], np.int64))
        grouped = node("Reshape", [args[0], five], f"{name}.grouped", f"{name}.grouped")
        swapped = node("Transpose", [grouped], f"{name}.t", f"{name}.t", perm=[0, 2, 1, 3, 4])
        back = const(f"{name}.dims4", np.array([-1, c, h, w], np.int64))
        node("Reshape", [swapped, back], name, name)
    elif kind == "flatten":
        node("Flatten", args, name, name, axis=1)
    elif kind == "softmax":
        node("Softmax", args, name, name, axis=1)
    elif kind in ("relu6", "clip"):
        low = const(f"{name}.min", np.array(op.low, np.float32))
        high = const(f"{name}.max", np.array(op.high, np.float32))
        node("Clip", [args[0], low, high], name, name)
    elif kind == "leaky_relu":
        node("LeakyRelu", args, name, name, alpha=op.alpha)
    elif kind == "hardsigmoid":
        node("HardSigmoid", args, name, name, alpha=1 / 6, beta=0.5)
    elif kind == "silu":
        gate = node("Sigmoid", args, f"{name}.gate", f"{name}.gate")
        node("Mul", [args[0], gate], name, name)
    elif kind == "gelu":  # as PyTorch writes it before opset 20 (which has Gelu)
        root2 = const(f"{name}.sqrt2", np.array(math.sqrt(2.0), np.float32))
        one = const(f"{name}.one", np.array(1.0, np.float32))
        half = const(f"{name}.half", np.array(0.5, np.float32))
        scaled = node("Div", [args[0], root2], f"{name}.div", f"{name}.div")
        erf = node("Erf", [scaled], f"{name}.erf", f"{name}.erf")
        plus = node("Add", [erf, one], f"{name}.add", f"{name}.add")
        times = node("Mul", [args[0], plus], f"{name}.mul", f"{name}.mul")
        node("Mul", [times, half], name, name)
    else:
        node(
            {"relu": "Relu", "sigmoid": "Sigmoid", "hardswish": "HardSwish", "tanh": "Tanh"}[kind],
            args,
            name,
            name,
        )
