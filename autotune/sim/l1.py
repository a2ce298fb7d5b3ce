"""The L1 buffers a mapping declares: what one tile of each operand is, and how many bytes
each buffer gets. The simulator needs them for two things: to refuse a program the machine
cannot hold, and to know how much data each stream may keep in flight (Little's law: the
bytes a buffer holds beyond the tile being computed on are what hides the DMA latency,
report Sec. 2.1.2).

Computed here from the task grid, not taken from the cost model, so that the simulator stays
an independent check of it (a test asserts that both agree on what fits).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.ir.machine import Machine
from autotune.tiling import TaskGrid

OPERANDS = ("input", "filter", "output", "share")


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
        filter slices gives hundreds. Single buffers give 0 (their loads serialise).
        """
        tile = np.maximum(np.asarray(tile_bytes, dtype=float), 1.0)
        if self.depth[operand] < 2:
            return np.zeros_like(tile)
        return np.maximum(1.0, (self.allocated_bytes[operand] - tile) / tile)


def _tile_words(grid: TaskGrid) -> dict[str, int]:
    """Words of the largest tile of each operand: what a buffer of depth 1 must hold."""
    layer, tile = grid.layer, grid.mapping.tile
    images = int(grid.batch_tiles.max())
    out_stack = int(grid.stacks.out_size.max())
    if grid.algorithm == "input_parallel":
        slices, pixels = int(grid.in_steps.max()), layer.h_in * layer.w_in
        return dict(
            input=images * slices * pixels,
            filter=slices * pixels,
            output=out_stack * images,
            share=0,
        )
    rows_in, cols_in = int(grid.rows.in_size.max()), int(grid.cols.in_size.max())
    rows_out, cols_out = int(grid.rows.out_size.max()), int(grid.cols.out_size.max())
    band = images * tile.in_c * rows_in * cols_in
    return dict(
        input=band,
        filter=min(tile.in_c, layer.cin_per_group) * layer.kernel_h * layer.kernel_w,
        output=out_stack * rows_out * cols_out * images,
        share=band if grid.algorithm == "output_stack_shared" else 0,
    )


def plan_l1(grid: TaskGrid, machine: Machine, word_bytes: int) -> L1Plan:
    """Allocate the buffers as ``Buffers`` documents; raise ``CapacityError`` if impossible.

    A buffer without explicit bytes gets ``depth`` tiles; one with explicit bytes must hold
    ``depth`` tiles. The forwarding buffer of Alg. 3 holds one input tile. Each buffer starts
    on an L1 bank word, so sizes round up to the bank width.
    """
    b = grid.mapping.buffers
    tiles = {op: n * word_bytes for op, n in _tile_words(grid).items()}
    depth = dict(input=b.input_depth, filter=b.filter_depth, output=b.output_depth, share=1)
    given = dict(
        input=b.input_bytes, filter=b.filter_bytes, output=b.output_bytes, share=b.share_bytes
    )
    bank = machine.l1_bank_bytes
    allocated = {}
    for op in OPERANDS:
        need, size = depth[op] * tiles[op], given[op]
        if tiles[op] == 0:
            allocated[op] = 0
            continue
        if size is None:
            size = need
        elif size < need:
            raise CapacityError(
                f"{op} buffer of {size} B cannot hold {depth[op]} tile(s) of {tiles[op]} B"
            )
        allocated[op] = -(-size // bank) * bank
    plan = L1Plan(tiles, allocated, depth)
    if plan.total_bytes > machine.l1_bytes:
        raise CapacityError(f"buffers need {plan.total_bytes} B but L1 has {machine.l1_bytes} B")
    return plan
