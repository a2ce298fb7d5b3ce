"""Runs with more agent items than ``ITEM_BUDGET`` merge each agent's middle tasks into
chunks (``sim.program``): a chunk must take what its tasks take one by one, within the
fluid model's averaging of the demand inside it."""

from __future__ import annotations

import dataclasses

import pytest

import autotune.sim.program as program
from autotune import Layer, Machine, simulate
from autotune.ir.placement import HBM_ONLY
from autotune.search.exhaustive import ranking
from autotune.search.space import DEEP_FILTER, search_space


def _merged_and_exact(layer: Layer, batch: int, monkeypatch) -> list[tuple[int, int]]:
    machine = Machine.preset("manticore")
    space = search_space(layer, machine, batch)
    # the best mappings with two-tile filter buffers: many small tasks per cluster (the deep
    # filter buffer's best ones run few)
    space = dataclasses.replace(space, filter_buffers=space.filter_buffers[:DEEP_FILTER])
    best = ranking(space, machine, "fp32", "latency", 8, placement=HBM_ONLY)
    pairs = []
    for candidate in best:
        if not candidate.index:
            continue
        mapping = space.decode(candidate.index)
        merged = simulate(layer, mapping, machine, "fp32", batch).cycles
        monkeypatch.setattr(program, "ITEM_BUDGET", 10**7)
        exact = simulate(layer, mapping, machine, "fp32", batch).cycles
        monkeypatch.undo()
        pairs.append((merged, exact))
    return pairs


def test_a_chunk_of_latency_bound_tasks_waits_for_each_tasks_first_tiles(monkeypatch):
    """EfficientNet-B0's squeeze-excitation fc2 (48 -> 1152 on one pixel): its best mapping
    with two-tile filter buffers runs 1152 one-channel tasks, nine per cluster, each waiting
    for the first tiles the task before loaded beside it (a round trip of the HBM). Merged,
    the middle tasks took only their blocking parts' time: 0.79 of the exact run."""
    layer = Layer("fc2", "conv", 1, 1, 48, 1152)
    pairs = _merged_and_exact(layer, 1, monkeypatch)
    chunked = [(m, e) for m, e in pairs if m != e]
    assert chunked, "no candidate was merged: the test no longer covers chunks"
    for merged, exact in chunked:
        assert merged / exact == pytest.approx(1.0, abs=0.06), (merged, exact)
