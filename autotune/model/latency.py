"""A first latency estimate: tasks in waves over the clusters, each task as fast as its
compute, its share of the off-chip bandwidth, and its exposed DMA latency allow.

This is the analytical model the integer program optimises; the tile-level simulator
(``autotune.sim``) is the more faithful check. Assumptions, each a deliberate simplification:

* Tasks run in waves of ``C`` clusters in schedule order (``tiling.TaskGrid``); a wave lasts
  as long as its slowest task (remainder stacks and ragged tiles show up here).
* A cluster's off-chip rate in a wave is the smallest of its DMA port, its fair share of HBM
  and of every uplink above it, and Little's law for the bytes its buffers keep in flight
  (``in_flight / round-trip latency``; report Sec. 2.1.2 sizes buffers by exactly this).
* Double-buffered streams overlap compute; single-buffered ones serialise with it and expose
  the round-trip latency at every load. Each task exposes one latency to start, and one to
  store unless its output is double buffered.
* ``input_parallel`` phases end with the tree reduction of Sec. 3.1.3 and one store.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.ir.machine import Machine
from autotune.model.footprint import Footprint
from autotune.model.traffic import Traffic, task_loads
from autotune.tiling import TaskGrid


@dataclass(frozen=True)
class LatencyEstimate:
    cycles: int
    compute_cycles: float     # MACs at the machine's sustained rate (peak x FPU utilisation)
    memory_cycles: float      # off-chip bytes at the HBM bandwidth
    reduction_cycles: float   # tree reductions (input_parallel)
    waves: int
    bound: str                # "compute", "memory" or "latency"


def task_macs(grid: TaskGrid) -> np.ndarray:
    layer = grid.layer
    if grid.algorithm == "input_parallel":
        return (grid.task_images * grid.task_in_channels * layer.h_in * layer.w_in
                * grid.task_out_channels)
    return (grid.task_images * grid.task_out_channels * grid.task_out_pixels
            * layer.cin_per_group * layer.kernel_h * layer.kernel_w)


def _offchip_rate(machine: Machine, active: np.ndarray) -> np.ndarray:
    """Bytes/cycle one cluster gets from main memory when ``active`` clusters stream."""
    rate = np.minimum(float(machine.dma_bytes_per_cycle),
                      machine.hbm_bytes_per_cycle / active)
    below = 1
    for level in machine.levels:
        below *= level.fanout
        rate = np.minimum(rate, level.uplink_bytes_per_cycle / np.minimum(active, below))
    return rate


def reduction_cycles(machine: Machine, active: int, stack_bytes: float) -> float:
    """Tree reduction of ``active`` private outputs of ``stack_bytes`` (report Sec. 3.1.3).

    At each level, pairs of subtrees combine in ceil(log2(fanout)) steps; a step moves one
    partial output over that level's links and pays that level's round-trip latency.
    """
    cycles, nodes = 0.0, active
    for level in machine.levels:
        if nodes <= 1:
            break
        width = min(level.fanout, nodes)
        steps = int(np.ceil(np.log2(width)))
        link = min(machine.dma_bytes_per_cycle, level.uplink_bytes_per_cycle)
        cycles += steps * (level.latency_cycles + stack_bytes / link)
        nodes = -(-nodes // level.fanout)
    return cycles


def estimate(grid: TaskGrid, fp: Footprint, moved: Traffic, machine: Machine,
             precision: str, word_bytes: int) -> LatencyEstimate:
    clusters = machine.clusters
    inputs, filters, stores, steps = task_loads(grid)
    members = grid.share_members()
    offchip_in = inputs / members * word_bytes
    forwarded = inputs * (members - 1) / members * word_bytes
    filter_bytes = filters * word_bytes
    store_bytes = stores * word_bytes
    macs = task_macs(grid)
    cluster_rate = machine.cluster_macs_per_cycle(precision) * machine.fpu_utilization
    compute = macs / cluster_rate

    # Waves: tasks of a phase occupy cluster slots in order; a wave is C consecutive slots.
    phase, slot = grid.task_phase, grid.task_slot
    wave_in_phase = slot // clusters
    n_waves_per_phase = np.zeros(grid.n_phases, dtype=np.int64)
    np.maximum.at(n_waves_per_phase, phase, wave_in_phase + 1)
    wave_offset = np.concatenate([[0], np.cumsum(n_waves_per_phase)[:-1]])
    wave = wave_offset[phase] + wave_in_phase
    n_waves = int(n_waves_per_phase.sum())
    active = np.bincount(wave, minlength=n_waves)[wave]
    rate = _offchip_rate(machine, active)

    # Little's law: double-buffered streams keep (allocated - one tile) bytes in flight.
    in_flight = 0.0
    single_bytes = np.zeros_like(compute)
    single_loads = np.zeros_like(compute)
    double_bytes = np.zeros_like(compute)
    for op, stream, loads in (("input", offchip_in, steps),
                              ("filter", filter_bytes, steps * grid.task_out_channels)):
        if fp.depth[op] >= 2:
            in_flight += fp.allocated_bytes[op] - fp.tile_words[op] * word_bytes
            double_bytes = double_bytes + stream
        else:
            single_bytes = single_bytes + stream
            single_loads = single_loads + loads
    latency = machine.hbm_latency_cycles
    if in_flight > 0:
        rate_double = np.minimum(rate, in_flight / latency)
    else:
        rate_double = rate
    transfers = steps + steps * grid.task_out_channels + 1
    dma_double = (double_bytes / rate_double + forwarded / machine.dma_bytes_per_cycle
                  + transfers * machine.dma_setup_cycles)
    dma_single = single_bytes / rate + single_loads * latency
    body = np.maximum(compute, dma_double) + dma_single
    if fp.depth["output"] >= 2:
        store = store_bytes / rate * (wave == n_waves - 1)   # hidden behind the next task
    else:
        store = np.where(store_bytes > 0, latency + store_bytes / rate, 0.0)
    task_time = latency + body + store

    wave_time = np.zeros(n_waves)
    np.maximum.at(wave_time, wave, task_time)
    total = float(wave_time.sum())

    reduce_total = 0.0
    if grid.algorithm == "input_parallel":
        active_clusters = min(len(grid.in_steps), clusters)
        for b_images in grid.batch_tiles:
            for stack in grid.stacks.out_size:
                stack_bytes = float(stack * b_images * word_bytes)
                reduce_total += (reduction_cycles(machine, active_clusters, stack_bytes)
                                 + latency + stack_bytes / machine.dma_bytes_per_cycle)
        total += reduce_total

    compute_ideal = float(macs.sum()) / (cluster_rate * clusters)
    offchip = (moved.load_words + moved.store_words) * word_bytes
    memory_ideal = offchip / machine.hbm_bytes_per_cycle
    cycles = max(total, compute_ideal, memory_ideal)
    if max(compute_ideal, memory_ideal) < 0.5 * cycles:
        bound = "latency"
    else:
        bound = "compute" if compute_ideal >= memory_ideal else "memory"
    return LatencyEstimate(int(np.ceil(cycles)), compute_ideal, memory_ideal, reduce_total,
                           n_waves, bound)
