"""Where an upsample's outputs read its input, along one axis: the interpolation modes.

An upsample by the integer ``scale`` maps output ``i`` (of ``n_in · scale``) to a source
coordinate in the input and reads the input there:

- ``nearest``: input ``i // scale`` (each input pixel becomes a ``scale × scale`` block);
- ``bilinear``: PyTorch's ``align_corners=False``, ONNX ``Resize`` mode ``linear`` with
  ``half_pixel`` (or ``pytorch_half_pixel``) coordinates: ``x = (i + 1/2) / scale − 1/2``,
  clamped to ``[0, n_in − 1]``, read between inputs ``⌊x⌋`` and ``⌊x⌋ + 1`` (the last one
  clamped) with weights ``1 − f`` and ``f``, ``f = x − ⌊x⌋``;
- ``bilinear_corners``: ``align_corners=True`` (ONNX ``align_corners``): ``x = i · (n_in −
  1) / (n_out − 1)``, so the corner pixels of input and output coincide.

A bilinear output pixel is the weighted sum of the 2 × 2 inputs around its source point
(separable: weights per row times weights per column). The coordinates are computed in exact
integer arithmetic, so tiling, executor and references agree on every tap.
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np

UpsampleMode = Literal["nearest", "bilinear", "bilinear_corners"]
#: Every mode, the default first.
UPSAMPLE_MODES: tuple[str, ...] = get_args(UpsampleMode)


def source_taps(
    mode: str, n_in: int, scale: int, outputs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(first, second, weight)`` for each output index in ``outputs``: the two inputs it
    reads and the weight of the second (the first's is ``1 − weight``). Nearest reads one
    input: ``second == first`` and weight 0."""
    i = np.asarray(outputs, dtype=np.int64)
    if mode == "nearest":
        first = i // scale
        return first, first, np.zeros(i.shape)
    if mode == "bilinear":
        # x = (2i + 1 - s) / (2s), clamped to [0, n_in - 1]
        num = np.clip(2 * i + 1 - scale, 0, 2 * scale * (n_in - 1))
        den = 2 * scale
    elif mode == "bilinear_corners":
        n_out = n_in * scale
        den = max(n_out - 1, 1)
        num = i * (n_in - 1)
    else:
        raise ValueError(f"unknown upsample mode {mode!r}")
    first = num // den
    weight = (num - first * den) / den
    second = np.minimum(first + 1, n_in - 1)
    return first, second, weight


def source_range(
    mode: str, n_in: int, scale: int, start: np.ndarray, stop: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Inputs ``[lo, hi)`` that outputs ``start … stop − 1`` read, for arrays of ranges: the
    sources are monotonic in the output index, so the first output's first input and the
    last one's second input bound them (that one even where its weight is 0: one row more,
    so that every tap a tile gathers is in it)."""
    lo, _, _ = source_taps(mode, n_in, scale, start)
    _, hi, _ = source_taps(mode, n_in, scale, np.asarray(stop) - 1)
    return lo, hi + 1
