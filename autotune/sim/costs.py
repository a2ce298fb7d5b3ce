"""Per task: the DMA transfers of each operand and the uncontended time of each program part.

A task's program (report Alg. 1-3 generalised) is: a *prologue* that loads the first input
tile and the first filter tile and waits for them; a *stream* in which the remaining tiles
are loaded while the cores compute (or in turn with them, for single buffers); a *store* of
the output tile. Fully-connected tasks (Alg. 4/5) load their input batch and then stream one
filter tile per output channel.

The stream is costed in steady state, as ``S`` identical average steps (exact totals; the
ragged last step is spread evenly), not step by step: its uncontended duration is the
largest of these bounds, each the cycle time of one loop of the program's dependency graph:

* the cores: compute plus every load a single buffer serialises with it;
* the DMA engine: a setup per transfer plus one cycle per bus beat (short runs of a strided
  transfer still occupy whole beats, so small and strided transfers are slower: the effect
  swDNN measures, seed 004 Table II);
* each double-buffered stream: a tile's round trip (setup, latency, beats) divided by the
  tiles its buffer can hold in flight beyond the one in use (Little's law, report Sec.
  2.1.2); filter tiles also wait behind the input tile issued before them in the engine.

Contention is not here: ``engine`` shares the network between the flows these parts become.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.ir.machine import Machine
from autotune.tiling import TaskGrid


@dataclass(frozen=True)
class Transfers:
    """Totals of one operand's DMA transfers in each task (arrays over tasks)."""

    bytes: np.ndarray     # payload
    beats: np.ndarray     # bus beats: cycles of the port at full width
    count: np.ndarray     # transfers, each paying the setup
    tiles: np.ndarray     # buffer tiles (each waits one round trip)

    def engine_per_tile(self, setup: int) -> np.ndarray:
        """Cycles the DMA engine spends on one average tile."""
        return (self.count * setup + self.beats) / self.tiles

    def bytes_per_tile(self) -> np.ndarray:
        return self.bytes / self.tiles


@dataclass(frozen=True)
class TaskCosts:
    """Everything the programs need per task, as arrays over the grid's tasks."""

    compute: np.ndarray          # cycles of the cores at the sustained MAC rate
    macs: np.ndarray
    input: Transfers
    filter: Transfers
    output: Transfers            # stores (output_stack); zero for input_parallel tasks


def _beats(nbytes: np.ndarray | int, width: int) -> np.ndarray:
    return -(-np.asarray(nbytes, dtype=np.int64) // width)


def task_costs(grid: TaskGrid, machine: Machine, precision: str, wb: int) -> TaskCosts:
    """DMA transfer totals and compute cycles of every task of ``grid``."""
    rate = machine.cluster_macs_per_cycle(precision) * machine.fpu_utilization
    if grid.algorithm == "input_parallel":
        return _fc_costs(grid, machine.dma_bytes_per_cycle, rate, wb)
    return _conv_costs(grid, machine.dma_bytes_per_cycle, rate, wb)


def _conv_costs(grid: TaskGrid, width: int, rate: float, wb: int) -> TaskCosts:
    """Output-stack tasks: input bands per step, filter slices per output channel, a store.

    Layouts follow the report's indexing (innermost first): a depth slice is row-major and
    slices are consecutive, filters are ``F[x, y, d_i, d_o]``, the output is ``O[x, y, d_o]``,
    images outermost. A band of whole rows is one contiguous run per slice (the whole
    volume is one run when the band is the whole slice); a band of partial rows is one 2D
    transfer per slice with one run per row.
    """
    layer, in_c = grid.layer, grid.mapping.tile.in_c
    _, ri, ci, _, _ = grid.task_index
    images, out_ch, in_ch = grid.task_images, grid.task_out_channels, grid.task_in_channels
    rows_in, cols_in = grid.rows.in_size[ri], grid.cols.in_size[ci]
    rows_out, cols_out = grid.rows.out_size[ri], grid.cols.out_size[ci]
    steps = -(-in_ch // in_c)
    last = in_ch - (steps - 1) * in_c                  # slices of the ragged last step
    pix_in = rows_in * cols_in

    whole_rows, whole_slice = cols_in == layer.w_in, (cols_in == layer.w_in) & (
        rows_in == layer.h_in)
    # Runs and transfers of the input, per image, over all steps.
    run_beats = np.where(
        whole_slice,
        ((steps - 1) * _beats(in_c * pix_in * wb, width) + _beats(last * pix_in * wb, width)),
        np.where(whole_rows, in_ch * _beats(pix_in * wb, width),
                 in_ch * rows_in * _beats(cols_in * wb, width)))
    count = np.where(whole_rows, steps, in_ch)
    inputs = Transfers(images * in_ch * pix_in * wb, images * run_beats, images * count, steps)

    k2 = layer.kernel_h * layer.kernel_w
    cpg = layer.cin_per_group
    f_slices = min(in_c, cpg)
    per_out = -(-cpg // f_slices)                        # filter tiles per output channel
    f_last = cpg - (per_out - 1) * f_slices
    f_beats = (per_out - 1) * _beats(f_slices * k2 * wb, width) + _beats(f_last * k2 * wb, width)
    n_f = out_ch * per_out
    filters = Transfers(out_ch * cpg * k2 * wb, out_ch * f_beats, n_f, n_f)

    out_whole_rows = cols_out == layer.w_out
    out_whole = out_whole_rows & (rows_out == layer.h_out)
    pix_out = rows_out * cols_out
    out_beats = np.where(out_whole, _beats(out_ch * pix_out * wb, width),
                         np.where(out_whole_rows, out_ch * _beats(pix_out * wb, width),
                                  out_ch * rows_out * _beats(cols_out * wb, width)))
    outputs = Transfers(images * out_ch * pix_out * wb, images * out_beats,
                        images * np.where(out_whole_rows, 1, out_ch), np.ones_like(images))

    macs = images * out_ch * pix_out * cpg * k2
    return TaskCosts(macs / rate, macs, inputs, filters, outputs)


def _fc_costs(grid: TaskGrid, width: int, rate: float, wb: int) -> TaskCosts:
    """Input-parallel tasks (Alg. 4/5): the input batch of ``in_c`` slices (one 2D transfer,
    one run per image), then one filter tile ``F[:, :, d_i:d_i+in_c, d_o]`` per output."""
    layer = grid.layer
    pixels = layer.h_in * layer.w_in
    images, out_ch, slices = grid.task_images, grid.task_out_channels, grid.task_in_channels
    ones = np.ones_like(images)
    run = slices * pixels * wb
    inputs = Transfers(images * run, images * _beats(run, width), ones, ones)
    filters = Transfers(out_ch * run, out_ch * _beats(run, width), out_ch, out_ch)
    zero = np.zeros_like(images)
    macs = images * slices * pixels * out_ch
    return TaskCosts(macs / rate, macs, inputs, filters, Transfers(zero, zero, zero, ones))


def stream_own(compute: np.ndarray, in_tiles: np.ndarray, in_unit: np.ndarray,
               in_engine: np.ndarray, in_window: np.ndarray, f_tiles: np.ndarray,
               f_unit: np.ndarray, f_engine: np.ndarray, f_window: np.ndarray) -> np.ndarray:
    """Uncontended cycles of a stream: ``compute`` while loading ``in_tiles`` input tiles and
    ``f_tiles`` filter tiles.

    ``*_unit`` is one tile's round trip (setup, latency, beats), ``*_engine`` the engine
    cycles of one tile, ``*_window`` the tiles in flight (0: single buffer, serialised).
    """
    engine = in_tiles * in_engine + f_tiles * f_engine
    in_double, f_double = in_window > 0, f_window > 0
    cores = (compute + np.where(in_double, 0.0, in_tiles * in_unit)
             + np.where(f_double, 0.0, f_tiles * f_unit))
    in_chain = np.where(in_double, in_tiles * in_unit / np.where(in_double, in_window, 1), 0.0)
    f_chain = np.where(f_double, (f_tiles * f_unit + in_tiles * in_engine)
                       / np.where(f_double, f_window, 1), 0.0)
    return np.maximum(np.maximum(cores, engine), np.maximum(in_chain, f_chain))
