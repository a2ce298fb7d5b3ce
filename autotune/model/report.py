"""The report's formulas exactly as printed (seed 000), for square layers and its fixed buffers.

These literal transcriptions are the reference the generalised model is tested against:
where both apply they must agree. Words, not bytes; MAC per word for CCRs.
Symbols: W_I, W_O input/output width and height, D_I, D_O depths, F filter size,
d_o the stack size ΔO, B the batch.
"""

from __future__ import annotations

import math


def alg1_min_words(w_i: int, w_o: int, f: int) -> int:
    """Sec. 2.1.2: one output slice, one input slice, one filter slice."""
    return w_o**2 + w_i**2 + f**2


def alg2_min_words(w_i: int, w_o: int, f: int, d_o: int) -> int:
    """Sec. 2.2.2: a stack of ``d_o`` output slices, one input slice, one filter slice."""
    return d_o * w_o**2 + w_i**2 + f**2


def alg4_min_words(w_i: int, d_o: int, b: int) -> int:
    """Sec. 3.1.2 (and 3.2.2 with ΔO for D_O): private output, input batch, filter slice."""
    return d_o * b + w_i**2 * (b + 1)


def eq1_ccr(w_i: int, w_o: int, f: int, d_i: int, d_o: int) -> float:
    """Eq. (1): Alg. 1 MACs over loads and stores."""
    return (w_i**2 * f**2 * d_i * d_o) / (d_o * d_i * (w_i**2 + f**2) + d_o * w_o**2)


def eq2_ccr(w_i: int, w_o: int, f: int, d_i: int) -> float:
    """Eq. (2): Eq. (1) with D_O cancelled."""
    return (d_i * w_i**2 * f**2) / (d_i * (w_i**2 + f**2) + w_o**2)


def eq7_load_words(w_i: int, f: int, d_i: int, d_o: int, delta_o: int) -> int:
    """Eq. (7): Alg. 2 words loaded: input slices once per stack, filters once."""
    return math.ceil(d_o / delta_o) * d_i * w_i**2 + d_o * d_i * f**2


def eq8_ccr(w_i: int, w_o: int, f: int, d_i: int, d_o: int, delta_o: int) -> float:
    """Eq. (8): Alg. 2 MACs over loads (Eq. 7) and stores."""
    macs = w_i**2 * f**2 * d_i * d_o
    return macs / (eq7_load_words(w_i, f, d_i, d_o, delta_o) + d_o * w_o**2)


def eq9_intercluster_words(w_i: int, d_i: int, d_o: int, delta_o: int) -> float:
    """Eq. (9): Alg. 3 words forwarded between the 16 clusters of an L2 quadrant."""
    return 15 / 16 * math.ceil(d_o / delta_o) * d_i * w_i**2


def eq10_load_words(w_i: int, f: int, d_i: int, d_o: int, delta_o: int) -> float:
    """Eq. (10): Alg. 3 words loaded from main memory."""
    return 1 / 16 * math.ceil(d_o / delta_o) * d_i * w_i**2 + d_o * d_i * f**2


def eq11_ccr(d_o: int, b: int) -> float:
    """Eq. (11): Alg. 4, MACs over loads."""
    return b * d_o / (b + d_o)


def eq12_load_words(w_i: int, d_i: int, d_o: int, delta_o: int, b: int) -> int:
    """Eq. (12)/(13): Alg. 5 words loaded: the input batch once per stack, filters once."""
    return math.ceil(d_o / delta_o) * d_i * b * w_i**2 + d_o * d_i * w_i**2


def eq14_ccr(d_o: int, delta_o: int, b: int) -> float:
    """Eq. (14): Alg. 5, MACs over loads."""
    return b * d_o / (math.ceil(d_o / delta_o) * b + d_o)


def reduction_words(clusters: int, d_o: int, b: int) -> int:
    """Sec. 3.1.3: tree reduction of private outputs, 127 · D_O · B words on 128 clusters."""
    return (clusters - 1) * d_o * b
