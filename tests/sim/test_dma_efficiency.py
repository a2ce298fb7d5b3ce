"""Block-size dependent DMA efficiency (swDNN, seed 004 Sec. III-D, Table II) in the
simulator and the model: laws for every mapping, and constructed cases with known runs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings

from autotune import Buffers, Layer, Machine, Mapping, Tile, analyze, simulate
from autotune.tiling import dma_efficiency, input_runs, output_runs, task_grid
from tests.sim.machines import with_dma_efficiency, without_dma_efficiency
from tests.strategies import mapped_layers

SETTINGS = settings(max_examples=60, deadline=None)


@pytest.fixture(scope="module")
def tabled(manticore) -> Machine:
    return with_dma_efficiency(manticore)


@pytest.fixture(scope="module")
def sw() -> Machine:
    return Machine.preset("sw26010-cg")


def test_vectorised_efficiency_is_the_machines_step_function(sw, manticore):
    sizes = [1, 31, 32, 33, 100, 576, 600, 4095, 4096, 10**6]
    for write in (False, True):
        got = dma_efficiency(sw, np.asarray(sizes), write)
        assert got.tolist() == [sw.dma_efficiency(s, write) for s in sizes]
    assert dma_efficiency(manticore, np.asarray(sizes)).tolist() == [1.0] * len(sizes)


def test_runs_follow_the_layout():
    layer = Layer("c", "conv", 10, 12, 8, 4, 3, 3, pad_h=1, pad_w=1)
    assert [int(v) for v in input_runs(layer, 10, 12, 3)] == [360, 1]  # whole slices
    assert [int(v) for v in input_runs(layer, 4, 12, 3)] == [48, 3]  # whole rows
    assert [int(v) for v in input_runs(layer, 4, 5, 3)] == [5, 12]  # row pieces
    assert [int(v) for v in output_runs(layer, 10, 12, 4)] == [480, 1]


def _fitting(case, machine):
    layer, mapping, batch, precision = case
    a = analyze(layer, mapping, machine, precision, batch)
    assume(a.fits and a.tasks <= 3000)
    return layer, mapping, batch, precision, a


@SETTINGS
@given(mapped_layers())
def test_efficiency_slows_time_not_bytes(manticore, tabled, case):
    """Model and simulator: the same bytes as without tables (to the byte), never faster
    than the physical bounds with the best efficiency the tables list."""
    layer, mapping, batch, precision, a = _fitting(case, tabled)
    plain = analyze(layer, mapping, manticore, precision, batch)
    assert a.offchip_bytes == plain.offchip_bytes and a.l1_bytes == plain.l1_bytes
    assert a.cycles >= plain.cycles and a.memory_cycles >= plain.memory_cycles
    r = simulate(layer, mapping, tabled, precision, batch)
    assert r.hbm_load_bytes == a.offchip_load_words * a.word_bytes
    assert r.hbm_store_bytes == a.offchip_store_words * a.word_bytes
    best_read = max(f for _, f in tabled.dma_read_efficiency)
    best_write = max(f for _, f in tabled.dma_write_efficiency)
    bound = (
        r.hbm_load_bytes / best_read + r.hbm_store_bytes / best_write
    ) / tabled.hbm_bytes_per_cycle
    assert r.cycles >= bound * (1 - 1e-9)
    assert r.cycles >= r.ops / tabled.peak_macs_per_cycle(precision)


def test_tables_of_ones_change_nothing(manticore, tabled):
    ones = tuple((size, 1.0) for size, _ in tabled.dma_read_efficiency)
    import dataclasses

    flat = dataclasses.replace(manticore, dma_read_efficiency=ones, dma_write_efficiency=ones)
    layer = Layer("c", "conv", 28, 28, 64, 64, 3, 3, pad_h=1, pad_w=1)
    mapping = Mapping("output_stack", delta_o=16, tile=Tile(out_h=7, out_w=10, in_c=2))
    for machine in (flat,):
        a, b = (
            analyze(layer, mapping, machine, "fp32", 2),
            analyze(layer, mapping, manticore, "fp32", 2),
        )
        assert a.cycles == b.cycles and a.memory_cycles == b.memory_cycles
        assert (
            simulate(layer, mapping, machine, "fp32", 2).cycles
            == simulate(layer, mapping, manticore, "fp32", 2).cycles
        )


@pytest.mark.parametrize("out_w, in_run, out_run", [(None, 2048, 2048), (4, 32, 32)])
def test_memory_bound_stream_runs_at_the_tables_bandwidth(sw, out_w, in_run, out_run):
    """A 1x1 layer streaming its input (8 MAC per word: memory-bound on the CG) in bands of
    4 whole rows (runs of 4 x 64 x 8 B per slice) or 4 x 4 tiles (runs of one 32 B row):
    the model's memory time is each operand's bytes over the table's efficiency for its
    runs, and the simulator agrees with the model within 10%."""
    layer = Layer("c", "conv", 64, 64, 64, 8)
    mapping = Mapping(
        "output_stack",
        delta_o=8,
        tile=Tile(out_h=4, out_w=out_w, in_c=1),
        buffers=Buffers(input_depth=2, filter_depth=2, output_depth=1),
    )
    grid = task_grid(layer, mapping, 2)
    assert int(input_runs(layer, grid.rows.in_size[0], grid.cols.in_size[0], 1)[0]) * 8 == in_run
    assert (
        int(output_runs(layer, grid.rows.out_size[0], grid.cols.out_size[0], 8)[0]) * 8 == out_run
    )
    a = analyze(layer, mapping, sw, "fp64", 2)
    plain = without_dma_efficiency(sw)
    filter_run = 8  # a filter tile per step: in_c = 1 slice x 1x1 of one output
    expected = (
        a.input_load_words * 8 / sw.dma_efficiency(in_run)
        + a.filter_load_words * 8 / sw.dma_efficiency(filter_run)
        + a.offchip_store_words * 8 / sw.dma_efficiency(out_run, write=True)
    ) / sw.hbm_bytes_per_cycle
    assert a.bound == "memory"
    assert a.memory_cycles == pytest.approx(expected, rel=1e-3)
    assert a.offchip_bytes == analyze(layer, mapping, plain, "fp64", 2).offchip_bytes
    r = simulate(layer, mapping, sw, "fp64", 2)
    assert r.hbm_bytes == a.offchip_bytes
    assert r.cycles >= expected
    assert r.cycles == pytest.approx(a.cycles, rel=0.10)
    assert r.cycles > simulate(layer, mapping, plain, "fp64", 2).cycles
