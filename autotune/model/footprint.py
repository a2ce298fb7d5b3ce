"""L1 footprint of a mapping: words per buffer tile and bytes per allocated buffer.

The report's space complexities (Sec. 2.1.2, 2.2.2, 2.3.2, 3.1.2, 3.2.2) are the minimum
words per cluster: one output stack, one input depth slice (or batch of slices), one filter
slice, plus a forwarding buffer for Alg. 3. Here the same buffers are sized from the task
structure, so spatial tiles, multi-slice steps and batch tiles change them.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.ir.machine import Machine
from autotune.ir.mapping import Buffers
from autotune.tiling import TaskGrid

OPERANDS = ("input", "filter", "output", "share")


@dataclass(frozen=True)
class Footprint:
    """Per-operand tile words, buffering depth and allocated bytes in one cluster's L1."""

    tile_words: dict[str, int]
    depth: dict[str, int]
    allocated_bytes: dict[str, int]
    l1_bytes: int
    fits: bool
    reason: str | None

    def need_bytes(self, operand: str, word_bytes: int) -> int:
        return self.depth[operand] * self.tile_words[operand] * word_bytes


def tile_words(grid: TaskGrid) -> dict[str, int]:
    """Words of one tile of each operand, for the largest task of the grid."""
    layer, tile = grid.layer, grid.mapping.tile
    images = int(grid.batch_tiles.max())
    stack = int(grid.stacks.out_size.max())
    if grid.algorithm == "input_parallel":
        slices = int(grid.in_steps.max())
        spatial = layer.h_in * layer.w_in
        return {"input": images * slices * spatial, "filter": slices * spatial,
                "output": stack * images, "share": 0}
    in_patch = int(grid.rows.in_size.max()) * int(grid.cols.in_size.max())
    out_patch = int(grid.rows.out_size.max()) * int(grid.cols.out_size.max())
    input_tile = images * tile.in_c * in_patch
    return {
        "input": input_tile,
        "filter": min(tile.in_c, layer.cin_per_group) * layer.kernel_h * layer.kernel_w,
        "output": stack * out_patch * images,
        "share": input_tile if grid.algorithm == "output_stack_shared" else 0,
    }


def _align(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def footprint(grid: TaskGrid, machine: Machine, word_bytes: int) -> Footprint:
    """Allocate every buffer the mapping declares and check the sum against L1.

    A buffer with explicit bytes must hold ``depth`` tiles; one without is allocated exactly
    ``depth`` tiles. Every buffer is rounded up to the L1 bank width so that it starts on a
    bank word. The forwarding buffer of Alg. 3 is single (Sec. 2.3.2: one input slice).
    """
    words = tile_words(grid)
    buffers: Buffers = grid.mapping.buffers
    depth = {"input": buffers.input_depth, "filter": buffers.filter_depth,
             "output": buffers.output_depth, "share": 1}
    given = {"input": buffers.input_bytes, "filter": buffers.filter_bytes,
             "output": buffers.output_bytes, "share": buffers.share_bytes}
    allocated: dict[str, int] = {}
    reason = None
    for op in OPERANDS:
        need = depth[op] * words[op] * word_bytes
        if words[op] == 0:
            allocated[op] = 0
            continue
        if given[op] is None:
            allocated[op] = _align(need, machine.l1_bank_bytes)
        else:
            allocated[op] = _align(given[op], machine.l1_bank_bytes)
            if given[op] < need and reason is None:
                reason = (f"{op} buffer of {given[op]} B is smaller than {depth[op]} x "
                          f"{words[op] * word_bytes} B tiles")
    total = sum(allocated.values())
    if reason is None and total > machine.l1_bytes:
        parts = ", ".join(f"{op} {allocated[op]}" for op in OPERANDS if allocated[op])
        reason = f"buffers need {total} B > {machine.l1_bytes} B of L1 ({parts})"
    return Footprint(words, depth, allocated, total, reason is None, reason)
