"""The L1 buffers a mapping declares: what one tile of each operand is, and how many bytes
each buffer gets. The simulator needs them for two things: to refuse a program the machine
cannot hold, and to know how much data each stream may keep in flight (Little's law: the
bytes a buffer holds beyond the tile being computed on are what hides the DMA latency,
report Sec. 2.1.2).

What a mapping declares is defined once, from the task grid, in ``tiling.declared_buffers``
(not taken from the cost model, so that the simulator stays an independent check of it: a
test asserts that both agree on what fits); this module checks it against the machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.ir.machine import Machine
from autotune.tiling import OPERANDS, TaskGrid, declared_buffers


class CapacityError(ValueError):
    """The mapping's buffers do not fit L1, or a buffer is smaller than the tiles it must hold."""


@dataclass(frozen=True)
class L1Plan:
    """Bytes of one tile (the largest task's) and of each allocated buffer, and its depth."""

    tile_bytes: dict[str, int]
    allocated_bytes: dict[str, int]
    depth: dict[str, int]

    @property
    def total_bytes(self) -> int:
        return sum(self.allocated_bytes.values())

    def spare_tiles(self, operand: str, tile_bytes: np.ndarray) -> np.ndarray:
        """Tiles of ``tile_bytes`` a stream can have in flight while one is computed on.

        A double buffer of exactly two tiles gives 1; the report's 16 KiB buffer for small
        filter slices gives hundreds. Single buffers give 0 (their loads serialise). The
        tile computed on may be the largest (a whole step), so the bytes in flight are the
        buffer's beyond that one; tiles of the average size (``tile_bytes``, shorter when
        the last step is) fit them more often, as the model's Little's law has it in bytes.
        """
        tile = np.maximum(np.asarray(tile_bytes, dtype=float), 1.0)
        if self.depth[operand] < 2:
            return np.zeros_like(tile)
        in_flight = self.allocated_bytes[operand] - max(self.tile_bytes[operand], 1)
        return np.maximum(1.0, in_flight / tile)


def plan_l1(grid: TaskGrid, machine: Machine, word_bytes: int) -> L1Plan:
    """The buffers the mapping declares (``tiling.declared_buffers``), checked: raise
    ``CapacityError`` if a buffer with explicit bytes cannot hold its ``depth`` tiles or the
    buffers together exceed L1."""
    declared = declared_buffers(grid, word_bytes, machine.l1_bank_bytes)
    for op in OPERANDS:
        need, given = declared.depth[op] * declared.tile_bytes[op], declared.given_bytes[op]
        if declared.tile_bytes[op] and given is not None and given < need:
            raise CapacityError(
                f"{op} buffer of {given} B cannot hold {declared.depth[op]} "
                f"tile(s) of {declared.tile_bytes[op]} B"
            )
    plan = L1Plan(dict(declared.tile_bytes), dict(declared.allocated_bytes), dict(declared.depth))
    if plan.total_bytes > machine.l1_bytes:
        raise CapacityError(f"buffers need {plan.total_bytes} B but L1 has {machine.l1_bytes} B")
    return plan
