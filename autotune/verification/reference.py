"""The reference: the whole layer at once, computed a different way from the executor.

The executor runs tiles of L1 data (an im2col of each clipped patch, strided window views,
running sums); the reference computes every kind straight from its definition on the whole
tensor:

- conv: pad the whole input once, ``sliding_window_view`` windows, contract channels and
  kernel with ``tensordot`` (``einsum`` per group); fc: the matrix product of the flattened
  input with the flattened filters;
- maxpool / avgpool: a loop over the kernel's taps, each tap one shifted view of the input
  with a mask of the output positions whose tap lies inside the input; a max skips the
  masked taps, an average divides by the taps it counts (inside the input; inside the
  padded input with ``count_include_pad``; never the ceil-mode overhang past it, as in ONNX
  and PyTorch);
- add: operand ``i`` is every ``n``-th channel from ``i`` (``x[:, i::n]``), summed;
- activation: the input itself; upsample: ``np.repeat`` along rows and columns;
- softmax: ``exp(x - max) / sum(exp(x - max))`` over the channels of each pixel;

A fused pair (``Layer.prologue``, ``Layer.expansion``) is its two layers (``Layer.unfused``)
one after the other, each with its own epilogue, the first's result kept in float64 (the
executor rounds it to the storage precision in L1: within the tolerance, ``check``).

then the epilogue: ``+ bias[c]``, ``+ residual``, the activation as ``Activation``'s
docstring defines it (the logistic function through ``tanh``, which the executor does not
use). Each is checked against naive loops on tiny shapes in the tests, and the pools and the
softmax against ONNX's reference evaluator.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from autotune.ir.layer import WEIGHTED_KINDS, Activation, Layer


def reference(
    layer: Layer,
    x: np.ndarray,
    w: np.ndarray | None = None,
    *,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    prologue_filter: np.ndarray | None = None,
    prologue_bias: np.ndarray | None = None,
    depthwise_filter: np.ndarray | None = None,
    expansion_bias: np.ndarray | None = None,
) -> np.ndarray:
    """``(batch, c_out, h_out, w_out)`` output of ``layer`` for input ``x``, filters ``w``
    (the kinds with weights only), and the epilogue's ``bias`` and ``residual`` (exactly when
    the epilogue reads them); a fused pair's depthwise weights ``prologue_filter``
    ``(c_in, 1, kh, kw)`` and bias ``prologue_bias`` ``(c_in,)``; a fused expansion's
    depthwise weights ``depthwise_filter`` ``(c_out, 1, kh, kw)`` and 1×1 bias
    ``expansion_bias`` ``(c_out,)`` (``w`` the 1×1's, ``bias`` the depthwise's).

    ``x`` is ``(batch, c_in, h_in, w_in)`` (an add's operands interleaved: channel
    ``g·n + i`` is channel ``g`` of operand ``i``), ``w`` is ``(c_out, c_in / groups, kh,
    kw)``, ``bias`` is ``(c_out,)``, ``residual`` is the output's shape; the result has their
    common dtype. Raises ``ValueError`` when an operand the layer reads is missing or one it
    does not read is given.

    Example:
        >>> import numpy as np
        >>> from autotune import Layer
        >>> fc = Layer.fc("fc", 1, 1, 3, 2)
        >>> reference(fc, np.ones((1, 3, 1, 1)), np.ones((2, 3, 1, 1))).ravel().tolist()
        [3.0, 3.0]
    """
    epilogue, prologue, expansion = layer.epilogue, layer.prologue, layer.expansion
    for name, given, needed in (
        ("weights", w, layer.kind in WEIGHTED_KINDS),
        ("bias", bias, epilogue.bias),
        ("residual", residual, epilogue.residual),
        ("prologue_filter", prologue_filter, prologue is not None),
        ("prologue_bias", prologue_bias, prologue is not None and prologue.bias),
        ("depthwise_filter", depthwise_filter, expansion is not None),
        ("expansion_bias", expansion_bias, expansion is not None and expansion.bias),
    ):
        if (given is not None) != needed:
            what = "needs" if needed else "has no"
            raise ValueError(f"layer {layer.name!r} ({layer.kind}) {what} {name}")
    z = body(layer, x, w, prologue_filter, prologue_bias, depthwise_filter, expansion_bias)
    return finish(layer, z, bias, residual)


def finish(
    layer: Layer, z: np.ndarray, bias: np.ndarray | None, residual: np.ndarray | None
) -> np.ndarray:
    """The epilogue on the operator's output ``z``: ``+ bias[c]``, ``+ residual``, the
    activation (each only when given or defined)."""
    if bias is not None:
        z = z + bias[None, :, None, None]
    act = layer.epilogue.activation
    if layer.epilogue.activation_first:
        assert act is not None and residual is not None
        return activation(act, z) + residual
    if residual is not None:
        z = z + residual
    return z if act is None else activation(act, z)


def body(
    layer: Layer,
    x: np.ndarray,
    w: np.ndarray | None = None,
    prologue_filter: np.ndarray | None = None,
    prologue_bias: np.ndarray | None = None,
    depthwise_filter: np.ndarray | None = None,
    expansion_bias: np.ndarray | None = None,
) -> np.ndarray:
    """The layer's operator alone, without its epilogue (see ``reference``); a fused pair's
    first layer with its own epilogue, then the second's operator."""
    if layer.expansion is not None:
        assert w is not None and depthwise_filter is not None, "a fused pair needs both weights"
        pointwise, depthwise = layer.unfused()
        y = finish(pointwise, convolution(pointwise, x, w), expansion_bias, None)
        return convolution(depthwise, y, depthwise_filter)
    if layer.prologue is not None:
        assert w is not None and prologue_filter is not None, "a fused pair needs both weights"
        depthwise, pointwise = layer.unfused()
        y = finish(depthwise, convolution(depthwise, x, prologue_filter), prologue_bias, None)
        return convolution(pointwise, y, w)
    kind = layer.kind
    if kind in WEIGHTED_KINDS:
        assert w is not None, "a layer with weights needs them"
        return convolution(layer, x, w)
    if kind in ("maxpool", "avgpool"):
        return pool(layer, x)
    if kind == "add":
        n = layer.operands
        return np.asarray(sum(x[:, i::n] for i in range(n)))
    if kind == "mul":
        n = layer.operands
        return np.asarray(np.prod([x[:, i::n] for i in range(n)], axis=0))
    if kind == "upsample":
        return upsample(x, layer.upscale, layer.upsample_mode)
    if kind == "softmax":
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return np.asarray(e / e.sum(axis=1, keepdims=True))
    return np.array(x)  # activation: its function is the epilogue's


def interpolation_matrix(mode: str, n_in: int, scale: int) -> np.ndarray:
    """``(n_in · scale, n_in)`` of a bilinear ``mode``: row ``i`` weighs the inputs output
    ``i`` reads, from the definitions in floating point (``autotune.ir.resample`` computes
    the same taps in integers, for the tiles): ``1 − f`` and ``f`` on the inputs around the
    source point ``x`` (half-pixel, or corners aligned), clamped to the input."""
    n_out = n_in * scale
    matrix = np.zeros((n_out, n_in))
    for i in range(n_out):
        if mode == "bilinear":
            x = (i + 0.5) / scale - 0.5
        else:  # bilinear_corners
            x = i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        x = min(max(x, 0.0), n_in - 1.0)
        left = math.floor(x)
        right = min(left + 1, n_in - 1)
        matrix[i, left] += 1.0 - (x - left)
        matrix[i, right] += x - left
    return matrix


def upsample(x: np.ndarray, scale: int, mode: str) -> np.ndarray:
    """``(n, c, h · scale, w · scale)``: ``x`` interpolated along both axes (nearest: each
    value repeated, exactly)."""
    if mode == "nearest":
        return np.repeat(np.repeat(x, scale, axis=2), scale, axis=3)
    rows = interpolation_matrix(mode, x.shape[2], scale)
    cols = interpolation_matrix(mode, x.shape[3], scale)
    return np.asarray(np.einsum("yh,nchw,xw->ncyx", rows, x, cols).astype(x.dtype))


def convolution(layer: Layer, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A conv or fc layer: windows of the padded input contracted with the filters."""
    batch = x.shape[0]
    if layer.kind == "fc":
        out = x.reshape(batch, -1) @ w.reshape(layer.c_out, -1).T
        return out.reshape(batch, layer.c_out, 1, 1)
    pads = ((0, 0), (0, 0), (layer.pad_h, layer.pad_end_h), (layer.pad_w, layer.pad_end_w))
    padded = np.pad(x, pads)
    windows = sliding_window_view(padded, (layer.span_h, layer.span_w), axis=(2, 3))
    windows = windows[:, :, :: layer.stride_h, :: layer.stride_w][
        :, :, : layer.h_out, : layer.w_out, :: layer.dilation_h, :: layer.dilation_w
    ]
    # windows: (batch, c_in, h_out, w_out, kh, kw)
    if layer.groups == 1:
        out = np.tensordot(windows, w, axes=([1, 4, 5], [1, 2, 3]))  # (b, h, w, c_out)
        return np.ascontiguousarray(out.transpose(0, 3, 1, 2))
    g = layer.groups
    win = windows.reshape(batch, g, layer.cin_per_group, *windows.shape[2:])
    wg = w.reshape(g, layer.cout_per_group, layer.cin_per_group, layer.kernel_h, layer.kernel_w)
    out = np.einsum("bgchwij,gocij->bgohw", win, wg, optimize=True)
    return out.reshape(batch, layer.c_out, layer.h_out, layer.w_out)


def _taps(n_out: int, stride: int, pad: int, k: int) -> np.ndarray:
    """Input index of tap ``k`` of every output along one axis (possibly outside the input)."""
    return np.arange(n_out) * stride - pad + k


def pool(layer: Layer, x: np.ndarray) -> np.ndarray:
    """A max or average pool, one kernel tap at a time over the whole output."""
    h_out, w_out = layer.h_out, layer.w_out
    maximum = layer.kind == "maxpool"
    shape = (*x.shape[:2], h_out, w_out)
    out = np.full(shape, -np.inf if maximum else 0.0, dtype=x.dtype)
    counted = np.zeros((h_out, w_out), dtype=np.int64)
    for ky in range(layer.kernel_h):
        rows = _taps(h_out, layer.stride_h, layer.pad_h, ky)
        for kx in range(layer.kernel_w):
            cols = _taps(w_out, layer.stride_w, layer.pad_w, kx)
            inside = ((rows >= 0) & (rows < layer.h_in))[:, None] & (
                (cols >= 0) & (cols < layer.w_in)
            )[None, :]
            tap = x[:, :, np.clip(rows, 0, layer.h_in - 1)][
                :, :, :, np.clip(cols, 0, layer.w_in - 1)
            ]
            if maximum:
                out = np.where(inside, np.maximum(out, tap), out)
                continue
            out = out + np.where(inside, tap, 0.0)
            if layer.count_include_pad:  # a tap in the padding counts, one past it does not
                ph, pw = layer.pad_h, layer.pad_w
                in_rows = (rows >= -ph) & (rows < layer.h_in + ph)
                in_cols = (cols >= -pw) & (cols < layer.w_in + pw)
                counted += in_rows[:, None] & in_cols[None, :]
            else:
                counted += inside
    if maximum:
        return out
    return np.asarray(out / counted)


def activation(act: Activation, z: np.ndarray) -> np.ndarray:
    """``act`` elementwise, as ``Activation``'s docstring defines it."""
    kind = act.kind
    if kind == "relu":
        return np.maximum(z, 0.0)
    if kind == "clip":
        return np.clip(z, act.low, act.high)
    if kind == "leaky_relu":
        return np.where(z < 0, act.alpha * z, z)
    sigmoid = 0.5 * (1.0 + np.tanh(0.5 * z))  # = 1 / (1 + exp(-z))
    if kind == "sigmoid":
        return sigmoid
    if kind == "silu":
        return z * sigmoid
    if kind == "hardsigmoid":
        return np.clip(z + 3.0, 0.0, 6.0) / 6.0
    if kind == "tanh":
        return np.tanh(z)
    if kind == "gelu":  # z·Φ(z), Φ from erf: Φ(z) = (1 + erf(z/√2))/2
        return z * 0.5 * (1.0 + np.vectorize(math.erf, otypes=[float])(z / math.sqrt(2.0)))
    return z * np.clip(z + 3.0, 0.0, 6.0) / 6.0  # hardswish
