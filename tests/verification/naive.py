"""The slowest, most obvious convolution: Python loops over every output and every tap.

Used on tiny shapes only, to cross-check the reference and the executor.
"""

from __future__ import annotations

import numpy as np

from autotune import Layer


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
                                iy = oy * layer.stride_h - layer.pad_h + ky
                                ix = ox * layer.stride_w - layer.pad_w + kx
                                if 0 <= iy < layer.h_in and 0 <= ix < layer.w_in:
                                    total += float(x[b, group * cin + c, iy, ix]) * float(
                                        w[o, c, ky, kx]
                                    )
                    out[b, o, oy, ox] = total
    return out
