"""Machines derived from the Manticore preset for the simulator's laws."""

from __future__ import annotations

import dataclasses

from autotune import Machine


def with_bandwidth(
    machine: Machine, *, hbm: float = 1.0, links: float = 1.0, dma: int = 1
) -> Machine:
    """``machine`` with its HBM, quadrant links and DMA port scaled by the given factors."""
    levels = tuple(
        dataclasses.replace(lv, uplink_bytes_per_cycle=lv.uplink_bytes_per_cycle * links)
        for lv in machine.levels
    )
    return dataclasses.replace(
        machine,
        hbm_bytes_per_cycle=machine.hbm_bytes_per_cycle * hbm,
        dma_bytes_per_cycle=machine.dma_bytes_per_cycle * dma,
        levels=levels,
    )


def with_fanout(machine: Machine, level: int, factor: int) -> Machine:
    """``machine`` with ``factor`` times the children per node at ``level`` (more clusters)."""
    levels = list(machine.levels)
    levels[level] = dataclasses.replace(levels[level], fanout=levels[level].fanout * factor)
    return dataclasses.replace(machine, levels=tuple(levels))


def with_dma_efficiency(machine: Machine, source: str = "sw26010-cg") -> Machine:
    """``machine`` with the measured DMA efficiency tables of preset ``source`` (swDNN, seed
    004 Table II): every main-memory transfer then reaches a fraction of the bandwidth that
    depends on its contiguous runs."""
    tables = Machine.preset(source)
    return dataclasses.replace(
        machine,
        dma_read_efficiency=tables.dma_read_efficiency,
        dma_write_efficiency=tables.dma_write_efficiency,
    )


def without_dma_efficiency(machine: Machine) -> Machine:
    return dataclasses.replace(machine, dma_read_efficiency=(), dma_write_efficiency=())
