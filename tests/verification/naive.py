"""The slowest, most obvious layers: Python loops over every output and every tap.

Used on tiny shapes only, to cross-check the reference and the executor.
"""

from __future__ import annotations

import math

import numpy as np

from autotune import Layer
from autotune.ir.layer import Activation


def naive_conv(layer: Layer, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``(batch, c_out, h_out, w_out)`` in float64, one multiply-add at a time."""
    batch = x.shape[0]
    out = np.zeros((batch, layer.c_out, layer.h_out, layer.w_out))
    cin, cout = layer.cin_per_group, layer.cout_per_group
    for b in range(batch):
        for o in range(layer.c_out):
            group = o // cout
            for oy in range(layer.h_out):
                for ox in range(layer.w_out):
                    total = 0.0
                    for c in range(cin):
                        for ky in range(layer.kernel_h):
                            for kx in range(layer.kernel_w):
                                iy = oy * layer.stride_h - layer.pad_h + ky * layer.dilation_h
                                ix = ox * layer.stride_w - layer.pad_w + kx * layer.dilation_w
                                if 0 <= iy < layer.h_in and 0 <= ix < layer.w_in:
                                    total += float(x[b, group * cin + c, iy, ix]) * float(
                                        w[o, c, ky, kx]
                                    )
                    out[b, o, oy, ox] = total
    return out


def naive_activation(act: Activation | None, z: float) -> float:
    """``Activation``'s docstring, one number at a time."""
    if act is None:
        return z
    if act.kind == "relu":
        return z if z > 0 else 0.0
    if act.kind == "clip":
        return min(max(z, act.low), act.high)
    if act.kind == "leaky_relu":
        return z if z >= 0 else act.alpha * z
    sigmoid = 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0
    if act.kind == "sigmoid":
        return sigmoid
    if act.kind == "silu":
        return z * sigmoid
    if act.kind == "hardsigmoid":
        return min(max(z + 3.0, 0.0), 6.0) / 6.0
    if act.kind == "tanh":
        return math.tanh(z)
    if act.kind == "gelu":
        return z * 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))
    return z * min(max(z + 3.0, 0.0), 6.0) / 6.0  # hardswish


def naive_body(layer: Layer, x: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    """Every kind from its definition (``autotune.ir.layer``), one output word at a time."""
    if layer.kind in ("conv", "fc"):
        assert w is not None
        return naive_conv(layer, x, w)
    batch = x.shape[0]
    out = np.zeros((batch, layer.c_out, layer.h_out, layer.w_out))
    for b in range(batch):
        for o in range(layer.c_out):
            for oy in range(layer.h_out):
                for ox in range(layer.w_out):
                    out[b, o, oy, ox] = _naive_word(layer, x[b], o, oy, ox)
    return out


def _naive_word(layer: Layer, x: np.ndarray, o: int, oy: int, ox: int) -> float:
    kind = layer.kind
    if kind in ("maxpool", "avgpool"):
        taps, counted = [], 0
        for ky in range(layer.kernel_h):
            for kx in range(layer.kernel_w):
                iy = oy * layer.stride_h - layer.pad_h + ky
                ix = ox * layer.stride_w - layer.pad_w + kx
                inside = 0 <= iy < layer.h_in and 0 <= ix < layer.w_in
                in_padded = (
                    -layer.pad_h <= iy < layer.h_in + layer.pad_h
                    and -layer.pad_w <= ix < layer.w_in + layer.pad_w
                )
                if inside:
                    taps.append(float(x[o, iy, ix]))
                if inside or (layer.count_include_pad and in_padded):
                    counted += 1
        return max(taps) if kind == "maxpool" else sum(taps) / counted
    if kind == "add":
        n = layer.c_in // layer.c_out
        return sum(float(x[o * n + i, oy, ox]) for i in range(n))
    if kind == "mul":
        n = layer.c_in // layer.c_out
        return math.prod(float(x[o * n + i, oy, ox]) for i in range(n))
    if kind == "upsample":
        if layer.upsample_mode == "nearest":
            return float(x[o, oy // layer.upscale, ox // layer.upscale])
        (y0, y1, fy), (x0, x1, fx) = (
            _naive_source(layer, i, n) for i, n in ((oy, layer.h_in), (ox, layer.w_in))
        )
        top = (1 - fx) * float(x[o, y0, x0]) + fx * float(x[o, y0, x1])
        bottom = (1 - fx) * float(x[o, y1, x0]) + fx * float(x[o, y1, x1])
        return (1 - fy) * top + fy * bottom
    if kind == "softmax":
        column = [float(v) for v in x[:, oy, ox]]
        top = max(column)
        return math.exp(column[o] - top) / sum(math.exp(v - top) for v in column)
    return float(x[o, oy, ox])  # activation: the epilogue applies the function


def _naive_source(layer: Layer, i: int, n_in: int) -> tuple[int, int, float]:
    """The two inputs a bilinear output ``i`` reads along one axis and the second's weight,
    as PyTorch's ``upsample_bilinear2d`` computes them."""
    s = layer.upscale
    if layer.upsample_mode == "bilinear":
        x = max((i + 0.5) / s - 0.5, 0.0)
    else:
        x = i * (n_in - 1) / (n_in * s - 1) if n_in * s > 1 else 0.0
    first = min(int(math.floor(x)), n_in - 1)
    return first, min(first + 1, n_in - 1), x - first


def naive_layer(
    layer: Layer,
    x: np.ndarray,
    w: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
) -> np.ndarray:
    """The layer with its epilogue: ``+ bias[c]``, ``+ residual``, the activation."""
    out = naive_body(layer, x, w)
    act = layer.epilogue.activation
    for b, o, oy, ox in np.ndindex(*out.shape):
        z = out[b, o, oy, ox]
        if bias is not None:
            z += float(bias[o])
        if residual is not None:
            z += float(residual[b, o, oy, ox])
        out[b, o, oy, ox] = naive_activation(act, z)
    return out
