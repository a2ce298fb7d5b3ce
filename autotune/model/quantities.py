"""The quantities of a mapping that the cost formula reads, taken from ``tiling``.

For one mapping they come from its ``TaskGrid``; for the search they come from per-axis
tables built by calling the same ``tiling`` functions once per candidate value, so a
candidate's quantities are exactly those of the mapping it decodes to.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.model.formulas import ALGORITHM_CODES, SCALE
from autotune.tiling import (
    SpatialAxis,
    Stacks,
    TaskGrid,
    chunks,
    dma_efficiency,
    filter_runs,
    input_runs,
    input_transfers,
    output_runs,
)


def largest_count(sizes: npt.NDArray[np.int64]) -> int:
    """How many chunks of an axis have its largest size."""
    return int(np.count_nonzero(sizes == sizes.max()))


def mean_share(sizes: npt.NDArray[np.int64]) -> int:
    """SCALE x an axis's mean chunk over its largest, rounded up."""
    return -(-int(sizes.sum()) * SCALE // (len(sizes) * int(sizes.max())))


def stack_quantities(stacks: Stacks) -> dict[str, int]:
    """The output stacks: how many, the largest's output channels and how many stacks have
    them, the input channels they read (summed over stacks: each reads its own; the
    largest's)."""
    return {
        "stacks": stacks.count,
        "stack_out_channels_max": int(stacks.out_size.max()),
        "stacks_largest": largest_count(stacks.out_size),
        "stack_mean_share": mean_share(stacks.out_size),
        "stack_in_channels_sum": int(stacks.in_size.sum()),
        "stack_in_channels_max": int(stacks.in_size.max()),
    }


def spatial_quantities(rows: SpatialAxis, cols: SpatialAxis, layer: Layer) -> dict[str, int]:
    """The spatial tiles: how many, the largest's output and input pixels (input with its
    halo), the input pixels summed over all tiles (halos loaded once per tile), how many
    tiles are the largest in output and in input on both axes (an edge tile's band loses
    the padding's rows; the last tile may be short), and the smallest tile's output and
    input pixels over the tiles' mean (x SCALE, rounded down), of all and of the first row,
    whether the first tile is as large as the largest in output and in input,
    whether the largest's input band and output tile are of partial rows (one 2D transfer
    per slice: ``tiling.input_transfers``, ``output_transfers``), and the last tile's output
    pixels over the largest's."""
    tiles = rows.count * cols.count
    in_sum = int(rows.in_size.sum()) * int(cols.in_size.sum())
    in_min = int(rows.in_size.min()) * int(cols.in_size.min())
    out_min = int(rows.out_size.min()) * int(cols.out_size.min())
    out_sum = int(rows.out_size.sum()) * int(cols.out_size.sum())
    # the first row of tiles' smallest (the first slots of a wave in order)
    in_first = int(rows.in_size[0]) * int(cols.in_size.min())
    out_first = int(rows.out_size[0]) * int(cols.out_size.min())
    return {
        "spatial_tiles": tiles,
        "tiles_out_largest": largest_count(rows.out_size) * largest_count(cols.out_size),
        "tiles_in_largest": largest_count(rows.in_size) * largest_count(cols.in_size),
        "tile_out_min_share": out_min * tiles * SCALE // out_sum,
        "tile_in_min_share": in_min * tiles * SCALE // in_sum,
        "tile_out_first_min_share": out_first * tiles * SCALE // out_sum,
        "tile_in_first_min_share": in_first * tiles * SCALE // in_sum,
        "tile_first_largest_out": int(
            rows.out_size[0] == rows.out_size.max() and cols.out_size[0] == cols.out_size.max()
        ),
        "tile_first_largest_in": int(
            rows.in_size[0] == rows.in_size.max() and cols.in_size[0] == cols.in_size.max()
        ),
        "tile_out_mean_share": mean_share(rows.out_size) * mean_share(cols.out_size) // SCALE,
        "tile_in_mean_share": mean_share(rows.in_size) * mean_share(cols.in_size) // SCALE,
        "tile_out_pixels_max": int(rows.out_size.max()) * int(cols.out_size.max()),
        "tile_in_pixels_max": int(rows.in_size.max()) * int(cols.in_size.max()),
        "tile_in_pixels_sum": int(rows.in_size.sum()) * int(cols.in_size.sum()),
        "input_partial_rows": int(int(cols.in_size.max()) < layer.w_in),
        "output_partial_rows": int(int(cols.out_size.max()) < layer.w_out),
        # the last tile's (the last row's, the last column's: the last tasks in order)
        "tile_out_last_share": int(rows.out_size[-1])
        * int(cols.out_size[-1])
        * SCALE
        // (int(rows.out_size.max()) * int(cols.out_size.max())),
    }


def batch_quantities(batch: int, batch_tile: int) -> dict[str, int]:
    """The batch tiles: how many, the images of the largest and how many have them, their
    mean's and the last one's images over the largest's."""
    tiles = chunks(batch, batch_tile)
    return {
        "batch_tiles": len(tiles),
        "batch_tile_images_max": int(tiles.max()),
        "batch_tiles_largest": largest_count(tiles),
        "batch_mean_share": mean_share(tiles),
        "batch_last_share": int(tiles[-1]) * SCALE // int(tiles.max()),
    }


def in_step_quantities(layer: Layer, in_c: int) -> dict[str, int]:
    """A step's ``in_c`` input channels, the filter slices per output channel a step loads
    (no more than a group has) and the filter tiles per output channel that makes, and the
    steps over all input channels (``input_parallel``: the tasks of a phase)."""
    slices = min(in_c, layer.cin_per_group)
    return {
        "step_in_channels": in_c,
        "step_filter_channels": slices,
        "filter_steps": -(-layer.cin_per_group // slices),
        "in_steps": -(-layer.c_in // in_c),
    }


# -- main-memory runs and the DMA efficiency they reach (seed 004, Table II) ------------------
# The formula costs the largest task (full tiles), so the runs are those of the largest tile
# of each operand, in the layout ``tiling`` defines (the simulator reads the same functions
# per task).


def input_run_words(layer: Layer, rows_in: int, cols_in: int, in_c: int) -> int:
    """Words per contiguous run of a full input step: ``in_c`` slices of the largest band."""
    return int(input_runs(layer, rows_in, cols_in, in_c)[0])


def filter_run_words(layer: Layer, in_c: int) -> int:
    """Words per run of a full filter tile (``min(in_c, cin/groups)`` slices of one output)."""
    return int(filter_runs(layer, min(in_c, layer.cin_per_group)))


def output_run_words(layer: Layer, rows_out: int, cols_out: int, channels: int) -> int:
    """Words per run of the largest output tile's store (``channels`` = the largest stack)."""
    return int(output_runs(layer, rows_out, cols_out, channels)[0])


def inverse_efficiency(
    machine: Machine, run_bytes: npt.NDArray[np.int64] | int, write: bool = False
) -> npt.NDArray[np.int64]:
    """``SCALE / dma_efficiency`` rounded up: main-memory time per byte in fixed point;
    exactly ``SCALE`` on a machine without efficiency tables."""
    eff = dma_efficiency(machine, run_bytes, write)
    return np.ceil(SCALE / eff - 1e-9).astype(np.int64)


def input_step_runs(layer: Layer, rows_in: int, cols_in: int, in_c: int) -> tuple[int, int, int]:
    """(runs, 2D transfers, 2D transfers shared by the images) of one image's full input
    step: ``in_c`` slices of the largest band, in the layout ``tiling`` defines. A band of
    the whole slice is one transfer for all the images of a step (they are a stride apart):
    it is the shared one, and the image has none of its own."""
    runs = int(input_runs(layer, rows_in, cols_in, in_c)[1])
    one = int(input_transfers(layer, rows_in, cols_in, 1, 1, in_c))
    two = int(input_transfers(layer, rows_in, cols_in, 2, 1, in_c))
    shared = 2 * one - two  # the transfers that do not grow with the images
    return runs, one - shared, shared


def output_engine_scaled(
    machine: Machine,
    layer: Layer,
    rows_out: npt.NDArray[np.int64] | int,
    cols_out: npt.NDArray[np.int64] | int,
    wb: int,
) -> npt.NDArray[np.int64]:
    """The DMA engine's cycles per byte (x SCALE) of an output tile of ``rows_out x
    cols_out`` (the store's or the residual read's), per output slice of an image: a tile of
    partial rows is one 2D transfer per slice (a set-up) of ``rows_out`` runs, each a whole
    number of bus beats; a band of whole rows is one run per slice and one transfer for all
    of them (its set-up is the store's one, ``formulas.lone_tile_cycles``). Per byte, so
    that the tile's cycles are its bytes times one table indexed by its spatial tile."""
    rows = np.asarray(rows_out, dtype=np.int64)
    cols = np.asarray(cols_out, dtype=np.int64)
    width = machine.dma_bytes_per_cycle
    partial = cols < layer.w_out
    row_beats = -(-(cols * wb) // width)
    band_beats = -(-(rows * cols * wb) // width)
    cycles = np.where(partial, machine.dma_setup_cycles + rows * row_beats, band_beats)
    return np.asarray(-(-(cycles * SCALE) // (rows * cols * wb)), dtype=np.int64)


def dma_overhead_cycles(
    machine: Machine,
    run_words: npt.NDArray[np.int64] | int,
    runs: npt.NDArray[np.int64] | int,
    transfers: npt.NDArray[np.int64] | int,
    wb: int,
) -> npt.NDArray[np.int64]:
    """DMA engine cycles of ``transfers`` 2D transfers of ``runs`` runs of ``run_words`` words
    beyond their payload at the port's full width: a set-up per transfer, and the idle part
    of each run's last bus beat (a run shorter than a beat, e.g. a 7-word row of a 2D band,
    still occupies a whole beat: the next run is not contiguous)."""
    width = machine.dma_bytes_per_cycle
    run_bytes = np.asarray(run_words, dtype=np.int64) * wb
    runs = np.asarray(runs, dtype=np.int64)
    beats = runs * -(-run_bytes // width)
    return np.asarray(
        np.asarray(transfers, dtype=np.int64) * machine.dma_setup_cycles
        + beats
        - -(-(runs * run_bytes) // width),
        dtype=np.int64,
    )


def idle_beat_scaled(
    machine: Machine, run_words: npt.NDArray[np.int64] | int, wb: int
) -> npt.NDArray[np.int64]:
    """SCALE x the idle part of the last bus beat of one run of ``run_words`` words, in DMA
    engine cycles: a run moves whole beats, so a filter tile of fewer bytes than a beat (a
    1x1 conv's tile of two input channels: 8 of 64 bytes) still takes the engine a whole
    cycle beside its set-up, while its payload at the port counts an eighth of one."""
    width = machine.dma_bytes_per_cycle
    run_bytes = np.asarray(run_words, dtype=np.int64) * wb
    idle = -(-run_bytes // width) * width - run_bytes
    return np.asarray(-(-(idle * SCALE) // width), dtype=np.int64)


def efficiency_quantities(grid: TaskGrid, machine: Machine, wb: int) -> dict[str, int]:
    """Inverse DMA efficiency (x SCALE) of the input, filter and output transfers and of the
    residual read (the output's runs, read), and the DMA engine's overhead cycles of one
    image's input step (``dma_overhead_cycles``), the idle end of a filter tile's last beat
    (``idle_beat_scaled``) and the engine's pace on an output tile (``output_engine_scaled``)."""
    layer, in_c = grid.layer, grid.mapping.tile.in_c
    rows, cols = grid.rows, grid.cols
    output_words = output_run_words(
        layer, int(rows.out_size.max()), int(cols.out_size.max()), int(grid.stacks.out_size.max())
    )
    runs = {
        "input_inverse_efficiency": (
            input_run_words(layer, int(rows.in_size.max()), int(cols.in_size.max()), in_c),
            False,
        ),
        "filter_inverse_efficiency": (filter_run_words(layer, in_c), False),
        "output_inverse_efficiency": (output_words, True),
        "residual_inverse_efficiency": (output_words, False),
    }
    q = {
        name: int(inverse_efficiency(machine, words * wb, write))
        for name, (words, write) in runs.items()
    }
    rows_in, cols_in = int(rows.in_size.max()), int(cols.in_size.max())
    count, transfers, shared = input_step_runs(layer, rows_in, cols_in, in_c)
    q["input_step_dma_overhead"] = int(
        dma_overhead_cycles(machine, runs["input_inverse_efficiency"][0], count, transfers, wb)
    )
    q["input_step_setup_cycles"] = shared * machine.dma_setup_cycles
    q["filter_tile_idle_scaled"] = int(
        idle_beat_scaled(machine, runs["filter_inverse_efficiency"][0], wb)
    )
    q["output_engine_scaled"] = int(
        output_engine_scaled(machine, layer, int(rows.out_size.max()), int(cols.out_size.max()), wb)
    )
    return q


def grid_quantities(grid: TaskGrid, machine: Machine, wb: int) -> dict[str, int]:
    """Every quantity the formula reads (``formulas.Quantities``) for one mapping."""
    m = grid.mapping
    q = {
        "algorithm": ALGORITHM_CODES[m.algorithm],
        "share_group": m.share_group,
        "input_buffer_depth": m.buffers.input_depth,
        "filter_buffer_depth": m.buffers.filter_depth,
        # explicit bytes are the override's (``footprint.buffer_override``)
        "filter_bytes_given": 0,
        "output_buffer_depth": m.buffers.output_depth,
        "multicast": int(m.multicast),
    }
    q.update(stack_quantities(grid.stacks))
    q.update(spatial_quantities(grid.rows, grid.cols, grid.layer))
    q.update(batch_quantities(grid.batch, m.batch_tile))
    q.update(in_step_quantities(grid.layer, m.tile.in_c))
    q.update(efficiency_quantities(grid, machine, wb))
    return q
