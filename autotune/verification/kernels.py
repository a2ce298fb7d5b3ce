"""The arithmetic of one convolution block on data already in L1, vectorised over the tile.

This is what a cluster's cores compute (report ``Conv()`` / ``ElemMac()``), for a whole
block of output channels, images and pixels at once: an im2col of the (virtually padded)
patch followed by one matrix product per group. It runs in the precision of its operands,
so fp32 data accumulates in fp32 as on the machine.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided


def conv_block(
    x: np.ndarray,
    w: np.ndarray,
    groups: int,
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
) -> np.ndarray:
    """Convolve a patch with a block of filters.

    Args:
        x: ``(images, groups * cin, h, w)`` input patch (the loaded, clipped extent).
        w: ``(groups * cout, cin, kh, kw)`` filters, group-major.
        groups: independent groups in the block (1 for a dense block).
        stride: ``(sh, sw)``.
        pads: zeros to put around the patch, ``(top, bottom, left, right)``: the part of
            the tile's receptive field that lies in the layer's padding.

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
    oh, ow = (h - kh) // sh + 1, (wd - kw) // sw + 1
    if kh == kw == 1:
        cols = x[:, :, : (oh - 1) * sh + 1 : sh, : (ow - 1) * sw + 1 : sw]
    else:
        s0, s1, s2, s3 = x.strides
        cols = as_strided(
            x,
            (images, channels, kh, kw, oh, ow),
            (s0, s1, s2, s3, s2 * sh, s3 * sw),
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
