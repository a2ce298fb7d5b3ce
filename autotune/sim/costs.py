"""Per task: the DMA transfers of each operand and the uncontended time of each program part.

A task's program (report Alg. 1-3 generalised) is: a *prologue* that loads the first input
tile and the first filter tile and waits for them; a *stream* in which the remaining tiles
are loaded while the cores compute (or in turn with them, for single buffers); a *store* of
the output tile. Fully-connected tasks (Alg. 4/5) load their input batch and then stream one
filter tile per output channel.

Layer kinds (``ir.layer``): the cores execute ``ops_per_output`` FPU operations per output
word (a conv's MACs, a pool's taps, an add's adds, ..., plus the epilogue's) at the sustained
MAC rate: ASSUMPTION, each operation takes one MAC slot of an FPU. The kinds without weights
load no filters. An epilogue's residual operand is one more read per task: the region of
its output tile, shaped like the store (runs, 2D transfers) but read; ``program`` places it
before the store.

The stream is costed in steady state, as ``S`` identical average steps (exact totals; the
ragged last step is spread evenly), not step by step: its uncontended duration is the
largest of these bounds, each the cycle time of one loop of the program's dependency graph:

* the cores: compute plus every load a single buffer serialises with it;
* the DMA engine: a setup per transfer plus one cycle per bus beat (short runs of a strided
  transfer still occupy whole beats, so small and strided transfers are slower);
* each double-buffered stream: a tile's round trip (setup, latency, beats) divided by the
  tiles its buffer can hold in flight beyond the one in use (Little's law, report Sec.
  2.1.2); filter tiles also wait behind the input tile issued before them in the engine.

Main memory: where the machine gives measured block-size efficiencies (swDNN, seed 004 Sec.
III-D, Table II: 4 GB/s with 32 B blocks, 32 GB/s with 4 KB, of 36 GB/s), each transfer's
``hbm`` is its payload divided by the efficiency of its runs (``tiling.dma_efficiency``):
the network charges that much of the memory's bandwidth, while byte counters stay payload.

Contention is not here: ``engine`` shares the network between the flows these parts become.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.ir.machine import Machine
from autotune.tiling import (
    TaskGrid,
    dma_efficiency,
    filter_runs,
    input_runs,
    input_transfers,
    output_runs,
    output_transfers,
)


@dataclass(frozen=True)
class Transfers:
    """Totals of one operand's DMA transfers in each task (arrays over tasks)."""

    bytes: np.ndarray  # payload
    beats: np.ndarray  # bus beats: cycles of the port at full width
    count: np.ndarray  # transfers, each paying the setup
    tiles: np.ndarray  # buffer tiles (each waits one round trip)
    hbm: np.ndarray  # main-memory occupancy: payload / DMA efficiency of its runs
    #: payload of the first tile, where it is a whole one and the average is not (a filter
    #: stream whose last step is short); None: the average
    first: np.ndarray | None = None
    #: transfers of the first tile (an input step of partial rows: one per slice and image);
    #: None: the average
    first_count: np.ndarray | None = None

    def hbm_per_byte(self) -> np.ndarray:
        """Main-memory bytes of bandwidth one payload byte occupies (1 without a table)."""
        return np.where(self.bytes > 0, self.hbm / np.maximum(self.bytes, 1), 1.0)

    def engine_per_tile(self, setup: int) -> np.ndarray:
        """Cycles the DMA engine spends on one average tile."""
        return (self.count * setup + self.beats) / self.tiles

    def bytes_per_tile(self) -> np.ndarray:
        return self.bytes / self.tiles

    def first_tile_bytes(self) -> np.ndarray:
        """Payload of the first tile (``first``, or the average)."""
        return self.bytes_per_tile() if self.first is None else self.first

    def beats_of(self, nbytes: np.ndarray) -> np.ndarray:
        """Bus beats of ``nbytes`` of these transfers, at their average beats per byte."""
        return self.beats / np.maximum(self.bytes, 1) * nbytes

    def first_engine(self, setup: int, first: np.ndarray) -> np.ndarray:
        """Cycles the DMA engine spends on a first tile of ``first`` bytes: its transfers'
        set-ups (not scaled with its bytes: a whole step of whole rows is one transfer like
        a short one) and its beats (``beats_of``)."""
        count = self.count / self.tiles if self.first_count is None else self.first_count
        return count * setup + self.beats_of(first)


@dataclass(frozen=True)
class TaskCosts:
    """Everything the programs need per task, as arrays over the grid's tasks."""

    compute: np.ndarray  # cycles of the cores at the sustained MAC rate
    macs: np.ndarray
    ops: np.ndarray  # FPU operations (one MAC slot each)
    input: Transfers
    filter: Transfers
    output: Transfers  # stores (output_stack); zero for input_parallel tasks
    residual: Transfers  # the epilogue's residual tile (output_stack); zero without one


def _beats(nbytes: np.ndarray | int, width: int) -> np.ndarray:
    return -(-np.asarray(nbytes, dtype=np.int64) // width)


def _none(like: np.ndarray) -> Transfers:
    """No transfers (one empty tile per task, so that per-tile figures stay defined)."""
    zero = np.zeros_like(like)
    return Transfers(zero, zero, zero, np.ones_like(like), zero)


def task_costs(grid: TaskGrid, machine: Machine, precision: str, wb: int) -> TaskCosts:
    """DMA transfer totals and compute cycles of every task of ``grid``."""
    rate = machine.cluster_macs_per_cycle(precision) * machine.fpu_utilization
    if grid.algorithm == "input_parallel":
        return _fc_costs(grid, machine, rate, wb)
    return _conv_costs(grid, machine, rate, wb)


def _conv_costs(grid: TaskGrid, machine: Machine, rate: float, wb: int) -> TaskCosts:
    """Output-stack tasks: input bands per step, filter slices per output channel, a store.

    Runs follow the layout of ``tiling`` (``input_runs``, ``filter_runs``, ``output_runs``):
    a band of whole rows is one contiguous run per slice (the whole volume is one run when
    the band is the whole slice); a band of partial rows is one 2D transfer per slice with
    one run per row. Each run occupies main memory for ``bytes / dma_efficiency(run)``.
    """
    layer, in_c, width = grid.layer, grid.mapping.tile.in_c, machine.dma_bytes_per_cycle
    _, ri, ci, _, _ = grid.task_index
    images, out_ch, in_ch = grid.task_images, grid.task_out_channels, grid.task_in_channels
    rows_in, cols_in = grid.rows.in_size[ri], grid.cols.in_size[ci]
    rows_out, cols_out = grid.rows.out_size[ri], grid.cols.out_size[ci]
    steps = -(-in_ch // in_c)
    last = in_ch - (steps - 1) * in_c  # slices of the ragged last step
    pix_in = rows_in * cols_in

    # Runs and transfers of the input, per image, over all steps (full steps, the last one).
    run_full, n_full = input_runs(layer, rows_in, cols_in, in_c)
    run_last, n_last = input_runs(layer, rows_in, cols_in, last)
    run_beats = (steps - 1) * n_full * _beats(run_full * wb, width) + n_last * _beats(
        run_last * wb, width
    )
    hbm_in = (steps - 1) * in_c * pix_in * wb / dma_efficiency(
        machine, run_full * wb
    ) + last * pix_in * wb / dma_efficiency(machine, run_last * wb)
    count = input_transfers(layer, rows_in, cols_in, images, steps, in_ch)
    first_count = input_transfers(layer, rows_in, cols_in, images, 1, np.minimum(in_c, in_ch))
    inputs = Transfers(
        images * in_ch * pix_in * wb,
        images * run_beats,
        count,
        steps,
        images * hbm_in,
        first_count=first_count,
    )

    filters = _filter_transfers(grid, machine, wb) if layer.weight_words else _none(images)

    out_run, out_runs = output_runs(layer, rows_out, cols_out, out_ch)
    pix_out = rows_out * cols_out
    out_bytes = images * out_ch * pix_out * wb

    def tile_transfers(write: bool) -> Transfers:
        """The output tile's region moved once: the store, or the residual read."""
        return Transfers(
            out_bytes,
            images * out_runs * _beats(out_run * wb, width),
            output_transfers(layer, rows_out, cols_out, images, out_ch),
            np.ones_like(images),
            out_bytes / dma_efficiency(machine, out_run * wb, write=write),
        )

    outputs = tile_transfers(True)
    residual = tile_transfers(False) if layer.epilogue.residual else _none(images)
    words = images * out_ch * pix_out
    ops = words * layer.ops_per_output
    macs = words * (layer.cin_per_group * layer.filter_pixels if layer.weight_words else 0)
    if layer.expansion is not None:
        # the depthwise's taps over the tile's outputs, the fused 1x1 over its input band
        expanded = images * out_ch * pix_in
        ops = ops + expanded * layer.expansion_ops
        macs = words * layer.expansion_pixels + expanded * layer.c_in
    if layer.prologue is not None:
        # the fused depthwise over the tile's outputs and every input channel of the stack
        result = images * in_ch * pix_out
        ops = ops + result * layer.prologue_ops
        macs = macs + result * layer.prologue_pixels
    return TaskCosts(ops / rate, macs, ops, inputs, filters, outputs, residual)


def _filter_transfers(grid: TaskGrid, machine: Machine, wb: int) -> Transfers:
    """Output-stack tasks' filter slices: one tile ``F[:, :, d_i:d_i+in_c, d_o]`` per output
    channel and step (one run each); with a fused depthwise, its weights of each step's
    ``in_c`` channels too (one run each: ``in_c x k x k`` contiguous words); with a fused
    1x1 before a depthwise, the depthwise's weights of the stack once (one run: ``out_ch x k
    x k`` contiguous words)."""
    layer, width = grid.layer, machine.dma_bytes_per_cycle
    out_ch = grid.task_out_channels
    k2 = layer.filter_pixels
    cpg = layer.cin_per_group
    f_slices = min(grid.mapping.tile.in_c, cpg)
    per_out = -(-cpg // f_slices)  # filter tiles per output channel
    f_last = cpg - (per_out - 1) * f_slices
    f_run, f_run_last = filter_runs(layer, f_slices) * wb, filter_runs(layer, f_last) * wb
    f_beats = (per_out - 1) * _beats(f_run, width) + _beats(f_run_last, width)
    f_hbm = (per_out - 1) * f_run / dma_efficiency(machine, f_run) + f_run_last / dma_efficiency(
        machine, f_run_last
    )
    n_f = out_ch * per_out
    # the first step's tiles are whole ones (``f_slices``), only the last step's may be short
    whole = np.full(np.shape(out_ch), float(f_run))
    pointwise = Transfers(out_ch * cpg * k2 * wb, out_ch * f_beats, n_f, n_f, out_ch * f_hbm, whole)
    if layer.expansion is not None:
        run = out_ch * layer.expansion_pixels * wb
        return Transfers(
            pointwise.bytes + run,
            pointwise.beats + _beats(run, width),
            pointwise.count + 1,
            pointwise.tiles + 1,
            pointwise.hbm + run / dma_efficiency(machine, run),
            whole,  # the 1x1's slice: the depthwise's weights come after the last step
        )
    if layer.prologue is None:
        return pointwise
    in_ch, in_c = grid.task_in_channels, grid.mapping.tile.in_c
    steps = -(-in_ch // in_c)
    last = in_ch - (steps - 1) * in_c
    d_run, d_last = in_c * layer.prologue_pixels * wb, last * layer.prologue_pixels * wb
    return Transfers(
        pointwise.bytes + in_ch * layer.prologue_pixels * wb,
        pointwise.beats + (steps - 1) * _beats(d_run, width) + _beats(d_last, width),
        pointwise.count + steps,
        pointwise.tiles + steps,
        pointwise.hbm
        + (steps - 1) * d_run / dma_efficiency(machine, d_run)
        + d_last / dma_efficiency(machine, d_last),
    )


def _fc_costs(grid: TaskGrid, machine: Machine, rate: float, wb: int) -> TaskCosts:
    """Input-parallel tasks (Alg. 4/5): the input batch of ``in_c`` slices (one 2D transfer,
    one run per image), then one filter tile ``F[:, :, d_i:d_i+in_c, d_o]`` per output."""
    layer, width = grid.layer, machine.dma_bytes_per_cycle
    pixels = layer.h_in * layer.w_in
    images, out_ch, slices = grid.task_images, grid.task_out_channels, grid.task_in_channels
    ones = np.ones_like(images)
    run = input_runs(layer, layer.h_in, layer.w_in, slices)[0] * wb
    f_run = filter_runs(layer, slices) * wb
    inputs = Transfers(
        images * run,
        images * _beats(run, width),
        ones,
        ones,
        images * run / dma_efficiency(machine, run),
    )
    filters = Transfers(
        out_ch * f_run,
        out_ch * _beats(f_run, width),
        out_ch,
        out_ch,
        out_ch * f_run / dma_efficiency(machine, f_run),
    )
    macs = images * slices * pixels * out_ch
    # The epilogue (and its residual read) is the reduction root's (``program``).
    return TaskCosts(macs / rate, macs, macs, inputs, filters, _none(images), _none(images))


def stream_own(
    compute: np.ndarray,
    in_tiles: np.ndarray,
    in_unit: np.ndarray,
    in_engine: np.ndarray,
    in_window: np.ndarray,
    f_tiles: np.ndarray,
    f_unit: np.ndarray,
    f_engine: np.ndarray,
    f_window: np.ndarray,
    lead: np.ndarray | None = None,
    in_latency: float = 0.0,
    f_latency: float = 0.0,
) -> np.ndarray:
    """Uncontended cycles of a stream: ``compute`` while loading ``in_tiles`` input tiles and
    ``f_tiles`` filter tiles.

    ``*_unit`` is one tile's round trip (setup, latency, beats), ``*_engine`` the engine
    cycles of one tile, ``*_window`` the tiles in flight (0: single buffer, serialised).
    Where ``lead`` (tasks with a prologue of their own), the first window of each chain was
    requested with the first tiles (Alg. 1 issues ``DmaLoad(I[d_i + 1])`` before
    ``DmaWait(I[d_i])``): its ``*_latency`` passed beside the prologue's.
    """
    engine = in_tiles * in_engine + f_tiles * f_engine
    in_double, f_double = in_window > 0, f_window > 0
    cores = (
        compute
        + np.where(in_double, 0.0, in_tiles * in_unit)
        + np.where(f_double, 0.0, f_tiles * f_unit)
    )
    lead = np.zeros_like(in_tiles, dtype=float) if lead is None else lead
    in_early = lead * np.minimum(in_tiles, in_window) * in_latency
    f_early = lead * np.minimum(f_tiles, f_window) * f_latency
    in_chain = np.where(
        in_double, (in_tiles * in_unit - in_early) / np.where(in_double, in_window, 1), 0.0
    )
    f_chain = np.where(
        f_double,
        (f_tiles * f_unit + in_tiles * in_engine - f_early) / np.where(f_double, f_window, 1),
        0.0,
    )
    return np.maximum(np.maximum(cores, engine), np.maximum(in_chain, f_chain))
