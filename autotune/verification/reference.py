"""The reference: the whole layer at once, computed a different way from the executor.

The executor convolves tiles of L1 data with an im2col of each clipped patch; the reference
pads the whole input once and takes ``sliding_window_view`` windows over it, then contracts
channels and kernel with ``tensordot`` (``einsum`` per group for grouped convolutions). An fc
layer is the matrix product of the flattened input with the flattened filters. Both are
checked against a naive loop implementation on tiny shapes in the tests.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from autotune.ir.layer import Layer


def reference(layer: Layer, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``(batch, c_out, h_out, w_out)`` output of ``layer`` for input ``x`` and filters ``w``.

    ``x`` is ``(batch, c_in, h_in, w_in)``, ``w`` is ``(c_out, c_in / groups, kh, kw)``;
    the result has their common dtype.

    Example:
        >>> import numpy as np
        >>> from autotune import Layer
        >>> fc = Layer.fc("fc", 1, 1, 3, 2)
        >>> reference(fc, np.ones((1, 3, 1, 1)), np.ones((2, 3, 1, 1))).ravel().tolist()
        [3.0, 3.0]
    """
    batch = x.shape[0]
    if layer.kind == "fc":
        out = x.reshape(batch, -1) @ w.reshape(layer.c_out, -1).T
        return out.reshape(batch, layer.c_out, 1, 1)
    padded = np.pad(x, ((0, 0), (0, 0), (layer.pad_h, layer.pad_h), (layer.pad_w, layer.pad_w)))
    windows = sliding_window_view(padded, (layer.kernel_h, layer.kernel_w), axis=(2, 3))
    windows = windows[:, :, :: layer.stride_h, :: layer.stride_w][
        :, :, : layer.h_out, : layer.w_out
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
