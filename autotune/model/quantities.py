"""The quantities of a mapping that the cost formula reads, taken from ``tiling``.

For one mapping they come from its ``TaskGrid``; for the search they come from per-axis
tables built by calling the same ``tiling`` functions once per candidate value, so a
candidate's quantities are exactly those of the mapping it decodes to.
"""

from __future__ import annotations

from autotune.ir.layer import Layer
from autotune.model.formulas import ALGORITHM_CODES
from autotune.tiling import SpatialAxis, Stacks, TaskGrid, chunks


def stack_quantities(stacks: Stacks) -> dict[str, int]:
    return {"n_s": stacks.count, "s_max": int(stacks.out_size.max()),
            "s_in_sum": int(stacks.in_size.sum()), "in_max": int(stacks.in_size.max())}


def spatial_quantities(rows: SpatialAxis, cols: SpatialAxis) -> dict[str, int]:
    return {"n_sp": rows.count * cols.count,
            "out_px_max": int(rows.out_size.max()) * int(cols.out_size.max()),
            "in_px_max": int(rows.in_size.max()) * int(cols.in_size.max()),
            "in_px_sum": int(rows.in_size.sum()) * int(cols.in_size.sum())}


def batch_quantities(batch: int, batch_tile: int) -> dict[str, int]:
    tiles = chunks(batch, batch_tile)
    return {"n_b": len(tiles), "b_max": int(tiles.max())}


def in_step_quantities(layer: Layer, in_c: int) -> dict[str, int]:
    return {"tc": in_c, "tc_f": min(in_c, layer.cin_per_group), "nk": -(-layer.c_in // in_c)}


def grid_quantities(grid: TaskGrid) -> dict[str, int]:
    m = grid.mapping
    q = {"alg": ALGORITHM_CODES[m.algorithm], "g": m.share_group,
         "d_in": m.buffers.input_depth, "d_f": m.buffers.filter_depth,
         "d_out": m.buffers.output_depth, "mc": int(m.multicast)}
    q.update(stack_quantities(grid.stacks))
    q.update(spatial_quantities(grid.rows, grid.cols))
    q.update(batch_quantities(grid.batch, m.batch_tile))
    q.update(in_step_quantities(grid.layer, m.tile.in_c))
    return q
