"""The arithmetic of one block of a tile on data already in L1, vectorised over the tile.

This is what a cluster's cores compute (report ``Conv()`` / ``ElemMac()``), for a whole
block of output channels, images and pixels at once: for a convolution an im2col of the
(virtually padded) patch followed by one matrix product per group; for the kinds without
weights the same windows reduced by a max or a sum, a sum of operands, a gather or a running
softmax; and the epilogue's activation. It runs in the precision of its operands,
so fp32 data accumulates in fp32 as on the machine.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

#: erf elementwise, in float64 (numpy has none)
_ERF = np.vectorize(math.erf, otypes=[np.float64])


def conv_block(
    x: np.ndarray,
    w: np.ndarray,
    groups: int,
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
    dilation: tuple[int, int] = (1, 1),
) -> np.ndarray:
    """Convolve a patch with a block of filters.

    Args:
        x: ``(images, groups * cin, h, w)`` input patch (the loaded, clipped extent).
        w: ``(groups * cout, cin, kh, kw)`` filters, group-major.
        groups: independent groups in the block (1 for a dense block).
        stride: ``(sh, sw)``.
        pads: zeros to put around the patch, ``(top, bottom, left, right)``: the part of
            the tile's receptive field that lies in the layer's padding.
        dilation: ``(dh, dw)``, the distance between two taps of the kernel.

    Returns:
        ``(images, groups * cout, oh, ow)`` partial sums over the block's input channels.
    """
    top, bottom, left, right = pads
    if top or bottom or left or right:
        n, c, h, wd = x.shape
        padded = np.zeros((n, c, h + top + bottom, wd + left + right), dtype=x.dtype)
        padded[:, :, top : top + h, left : left + wd] = x
        x = padded
    images, channels, h, wd = x.shape
    out_c, cin, kh, kw = w.shape
    sh, sw = stride
    dh, dw = dilation
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    oh, ow = (h - span_h) // sh + 1, (wd - span_w) // sw + 1
    if kh == kw == 1:
        cols = x[:, :, : (oh - 1) * sh + 1 : sh, : (ow - 1) * sw + 1 : sw]
    elif oh == ow == 1:  # one window (an fc layer's tile): the patch's top-left corner
        cols = x[:, :, :span_h:dh, :span_w:dw]
    else:
        s0, s1, s2, s3 = x.strides
        cols = as_strided(
            x,
            (images, channels, kh, kw, oh, ow),
            (s0, s1, s2 * dh, s3 * dw, s2 * sh, s3 * sw),
            writeable=False,
        )
    k, p = cin * kh * kw, oh * ow
    if groups > 1:
        product = np.matmul(
            w.reshape(groups, out_c // groups, k), cols.reshape(images, groups, k, p)
        )
    elif images == 1:
        product = np.dot(w.reshape(out_c, k), cols.reshape(k, p))  # BLAS even when k == 1
    else:
        product = np.matmul(w.reshape(out_c, k), cols.reshape(images, k, p))
    return product.reshape(images, out_c, oh, ow)


# -- the kinds without weights -------------------------------------------------------------------
#
# Each function computes one block of a tile from the loaded patch, in the dtype of its
# operands (the executor passes the accumulation dtype). Windows are the same strided view
# of the (virtually padded) patch as the convolution's im2col, so a halo or stride mistake
# shows in every kind alike.


def _padded(x: np.ndarray, pads: tuple[int, int, int, int], fill: float) -> np.ndarray:
    top, bottom, left, right = pads
    if not (top or bottom or left or right):
        return x
    n, c, h, wd = x.shape
    out = np.full((n, c, h + top + bottom, wd + left + right), fill, dtype=x.dtype)
    out[:, :, top : top + h, left : left + wd] = x
    return out


def _windows(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int]) -> np.ndarray:
    """``(images, channels, oh, ow, kh, kw)`` read-only view of every window."""
    images, channels, h, wd = x.shape
    (kh, kw), (sh, sw) = kernel, stride
    oh, ow = (h - kh) // sh + 1, (wd - kw) // sw + 1
    s0, s1, s2, s3 = x.strides
    return as_strided(
        x,
        (images, channels, oh, ow, kh, kw),
        (s0, s1, s2 * sh, s3 * sw, s2, s3),
        writeable=False,
    )


def max_block(
    x: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
) -> np.ndarray:
    """Window maxima of a patch. Taps in the padding, and past the padded input in ceil
    mode (``pads`` covers both), are -inf: a max skips them (ONNX, PyTorch)."""
    return np.asarray(_windows(_padded(x, pads, -np.inf), kernel, stride).max(axis=(4, 5)))


def average_block(
    x: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
    divisor: np.ndarray,
) -> np.ndarray:
    """Window sums of a patch divided by ``divisor`` (``(oh, ow)``: the taps each output
    counts, which depend on where the window lies in the layer, so the caller gives them)."""
    sums = _windows(_padded(x, pads, 0.0), kernel, stride).sum(axis=(4, 5))
    return np.asarray(sums / divisor.astype(x.dtype))


def combine_operands(x: np.ndarray, groups: int, fold: np.ufunc) -> np.ndarray:
    """An add's or a mul's block: ``groups`` outputs, each its group's consecutive input
    channels (the interleaved operands, or a step's part of them) folded by ``fold``
    (``np.add``, ``np.multiply``)."""
    images, channels, h, wd = x.shape
    return np.asarray(fold.reduce(x.reshape(images, groups, channels // groups, h, wd), axis=2))


def nearest(x: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Nearest-neighbour upsampling of a patch: output (y, x) is patch (rows[y], cols[x])."""
    return np.asarray(x[:, :, rows][:, :, :, cols])


def bilinear(
    x: np.ndarray,
    rows: tuple[np.ndarray, np.ndarray, np.ndarray],
    cols: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> np.ndarray:
    """Bilinear upsampling of a patch: ``rows`` and ``cols`` are, per output row (column),
    the two patch rows it reads and the second one's weight; the columns are blended first,
    then the rows."""
    r0, r1, fy = rows
    c0, c1, fx = cols
    fx = fx.astype(x.dtype)
    fy = fy.astype(x.dtype)[:, None]
    top, bottom = x[:, :, r0], x[:, :, r1]
    top = top[..., c0] * (1 - fx) + top[..., c1] * fx
    bottom = bottom[..., c0] * (1 - fx) + bottom[..., c1] * fx
    return np.asarray(top * (1 - fy) + bottom * fy)


def softmax_step(
    acc: np.ndarray,
    peak: np.ndarray,
    total: np.ndarray,
    x: np.ndarray,
    step_part: slice,
    stack_part: slice,
) -> None:
    """Fold one step of input channels ``x`` (``(images, step, h, w)``) into a running
    softmax, in place (the online normaliser of Milakov and Gimelshein, 2018): ``peak`` is
    the largest input seen per pixel, ``total`` the sum of ``exp(input - peak)`` over every
    channel seen, ``acc`` the stack's ``exp(input - peak)`` so far. A new peak rescales what
    was summed before, so no exponent is positive (no overflow) and a stack of a few channels
    needs no second pass over the input. The step's channels ``step_part`` are the stack's
    ``stack_part`` (both empty when the step holds none of the stack's channels); the store
    divides by ``total``."""
    new_peak = np.maximum(peak, x.max(axis=1))
    rescale = np.exp(peak - new_peak)
    e = np.exp(x - new_peak[:, None])
    total *= rescale
    total += e.sum(axis=1)
    acc *= rescale[:, None]
    acc[:, stack_part] += e[:, step_part]
    peak[...] = new_peak


def activate(z: np.ndarray, kind: str, alpha: float, low: float, high: float) -> np.ndarray:
    """An epilogue's activation (``autotune.ir.layer.Activation``) in ``z``'s dtype.

    The logistic function is evaluated as ``exp(-|z|)``-based halves, so that no
    exponent overflows whatever the sign of ``z``.
    """
    if kind == "relu":
        return np.where(z > 0, z, 0).astype(z.dtype)
    if kind == "clip":
        return np.minimum(np.maximum(z, z.dtype.type(low)), z.dtype.type(high))
    if kind == "leaky_relu":
        return np.where(z >= 0, z, z * z.dtype.type(alpha)).astype(z.dtype)
    if kind in ("sigmoid", "silu"):
        e = np.exp(-np.abs(z))
        sig = np.where(z >= 0, 1 / (1 + e), e / (1 + e)).astype(z.dtype)
        return sig if kind == "sigmoid" else z * sig
    if kind == "hardswish":
        return np.where(z <= -3, 0, np.where(z >= 3, z, z * (z + 3) / 6)).astype(z.dtype)
    if kind == "hardsigmoid":
        return (np.minimum(np.maximum(z + 3, 0), 6) / 6).astype(z.dtype)
    if kind == "tanh":
        return np.tanh(z).astype(z.dtype)
    if kind == "gelu":
        wide = z.astype(np.float64)
        return (0.5 * wide * (1.0 + _ERF(wide / math.sqrt(2.0)))).astype(z.dtype)
    raise ValueError(f"unknown activation {kind!r}")
