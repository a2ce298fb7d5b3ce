"""The whole network computed directly from its graph: the reference end-to-end results
are compared with.

Independent of everything the tuner derives: it reads the operators as the user wrote them
(no folding, no fusion, no tiling, no lowering) and implements each from its definition with
plain numpy, in float64, on NCHW arrays. Conv windows come from
``sliding_window_view``; pools pad with -inf (max) or count the taps inside the input (avg,
unless ``count_include_pad``); ceil mode extends the last window past the padding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from autotune.graphs.weights import Array, Weights
from autotune.ir.graph import Graph, Operator
from autotune.verification.reference import upsample


def run_reference(graph: Graph, inputs: Mapping[str, Array], weights: Weights) -> dict[str, Array]:
    """Every tensor of the graph (network inputs included), NCHW, float64.

    ``inputs``: each network input as ``(batch, c, h, w)``.
    """
    tensors: dict[str, Array] = {
        name: np.asarray(inputs[name], dtype=np.float64) for name, _ in graph.inputs
    }
    for op in graph.ops:
        args = [tensors[t] for t in op.inputs]
        tensors[op.name] = _evaluate(op, args, weights.get(op.name, {}))
    return tensors


def _evaluate(op: Operator, args: list[Array], params: Mapping[str, Array]) -> Array:
    x = args[0]
    kind = op.kind
    if kind == "conv":
        out = _conv(x, np.asarray(params["weight"], np.float64), op)
        return out + _bias(params, op) if op.bias else out
    if kind == "fc":
        flat = x.reshape(x.shape[0], -1)
        out = flat @ np.asarray(params["weight"], np.float64).T
        if op.bias:
            out = out + np.asarray(params["bias"], np.float64)
        return out.reshape(x.shape[0], -1, 1, 1)
    if kind == "batchnorm":
        shape = (1, -1, 1, 1)
        mean = np.asarray(params["mean"], np.float64).reshape(shape)
        var = np.asarray(params["var"], np.float64).reshape(shape)
        gamma = np.asarray(params["scale"], np.float64).reshape(shape)
        beta = np.asarray(params["bias"], np.float64).reshape(shape)
        return (x - mean) / np.sqrt(var + op.epsilon) * gamma + beta
    if kind in ("maxpool", "avgpool"):
        return _pool(x, op)
    if kind == "global_avgpool":
        return x.mean(axis=(2, 3), keepdims=True)
    if kind == "add":
        return np.sum(args, axis=0)
    if kind == "mul":  # numpy broadcasts a gate (n, c, 1, 1) over the volume
        return args[0] * args[1]
    if kind == "concat":
        return np.concatenate(args, axis=1)
    if kind == "slice":
        start, stop = op.channels
        return x[:, start:stop]
    if kind == "shuffle":  # ONNX's Reshape to N×g×(C/g)×H×W, Transpose(0, 2, 1, 3, 4), back
        n, c, h, w = x.shape
        grouped = x.reshape(n, op.groups, c // op.groups, h, w)
        return grouped.transpose(0, 2, 1, 3, 4).reshape(n, c, h, w)
    if kind == "upsample":
        return upsample(x, op.scale, op.mode)
    if kind == "flatten":
        return x.reshape(x.shape[0], -1, 1, 1)
    if kind == "softmax":
        shifted = x - x.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        return e / e.sum(axis=1, keepdims=True)
    return activation(kind, x, op.alpha, op.low, op.high)


def activation(kind: str, x: Array, alpha: float, low: float, high: float) -> Array:
    """An elementwise function by its definition (ONNX's operators of the same names)."""
    if kind == "relu":
        return np.maximum(x, 0.0)
    if kind in ("relu6", "clip"):
        return np.clip(x, low, high)
    if kind == "leaky_relu":
        return np.where(x >= 0, x, alpha * x)
    if kind == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if kind == "silu":
        return x / (1.0 + np.exp(-x))
    if kind == "hardswish":
        return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0
    if kind == "hardsigmoid":
        return np.clip(x / 6.0 + 0.5, 0.0, 1.0)
    if kind == "gelu":  # z·Φ(z), Φ(z) = erfc(−z/√2)/2
        return x * 0.5 * np.vectorize(math.erfc, otypes=[float])(-x / math.sqrt(2.0))
    if kind == "tanh":  # from exponentials, not numpy's tanh that the executor uses
        e = np.exp(-2.0 * np.abs(x))
        return np.sign(x) * (1.0 - e) / (1.0 + e)
    raise ValueError(f"no reference for operator kind {kind!r}")


def _bias(params: Mapping[str, Array], op: Operator) -> Array:
    return np.asarray(params["bias"], np.float64).reshape(1, -1, 1, 1)


def _conv(x: Array, w: Array, op: Operator) -> Array:
    """Direct convolution: every output is the dot product of its window and its filter."""
    ph, pw = op.padding
    pb, pr = op.padding_bottom_right
    sh, sw = op.stride
    dh, dw = op.dilation
    kh, kw = (op.kernel[0] - 1) * dh + 1, (op.kernel[1] - 1) * dw + 1  # the window's extent
    padded = np.pad(x, ((0, 0), (0, 0), (ph, pb), (pw, pr)))
    windows = sliding_window_view(padded, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
    n, _, oh, ow = windows.shape[:4]
    groups = op.groups
    cin = x.shape[1] // groups
    cout = w.shape[0] // groups
    out = np.empty((n, w.shape[0], oh, ow))
    for g in range(groups):
        win = windows[:, g * cin : (g + 1) * cin]
        block = np.tensordot(win, w[g * cout : (g + 1) * cout], axes=([1, 4, 5], [1, 2, 3]))
        out[:, g * cout : (g + 1) * cout] = block.transpose(0, 3, 1, 2)
    return out[:, :, : op.shape[0], : op.shape[1]]


def _pool(x: Array, op: Operator) -> Array:
    """Max or average over each window; taps outside the input are skipped (max) or, for an
    average, not counted unless ``count_include_pad`` (then the taps in the padding count,
    never those past it in ceil mode)."""
    n, c, h, w = x.shape
    oh, ow, _ = op.shape
    kh, kw = op.kernel
    sh, sw = op.stride
    ph, pw = op.padding
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        top = i * sh - ph
        r0, r1 = max(top, 0), min(top + kh, h)
        rows_padded = min(top + kh, h + ph) - top
        for j in range(ow):
            left = j * sw - pw
            c0, c1 = max(left, 0), min(left + kw, w)
            window = x[:, :, r0:r1, c0:c1]
            if op.kind == "maxpool":
                out[:, :, i, j] = window.max(axis=(2, 3))
                continue
            if op.count_include_pad:
                cols_padded = min(left + kw, w + pw) - left
                count = rows_padded * cols_padded
            else:
                count = (r1 - r0) * (c1 - c0)
            out[:, :, i, j] = window.sum(axis=(2, 3)) / count
    return out
