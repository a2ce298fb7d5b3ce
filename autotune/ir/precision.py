"""Numeric precisions a layer can be computed in.

The report (seed 000, Sec. 1.2.2) counts data in *words*: one number of the layer's precision.
Word size is a property of the number format, not of the machine; which precisions a machine
can compute, and how fast, lives in the machine description (``macs_per_cycle_per_core``).
"""

from __future__ import annotations

from typing import Literal

Precision = Literal["fp64", "fp32", "fp16"]

#: Bytes per word. fp16 stores operands in 2 B (accumulation width is the machine's concern).
WORD_BYTES: dict[str, int] = {"fp64": 8, "fp32": 4, "fp16": 2}


def word_bytes(precision: str) -> int:
    """Bytes of one word of ``precision``; raises ``ValueError`` for an unknown name."""
    try:
        return WORD_BYTES[precision]
    except KeyError:
        known = ", ".join(sorted(WORD_BYTES))
        raise ValueError(f"unknown precision {precision!r} (known: {known})") from None
