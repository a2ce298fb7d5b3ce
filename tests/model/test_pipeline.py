"""The streaming pipeline's prologue (report Sec. 2.1.2): buffers hide the loads of one
iteration behind the one before, so the first tiles of a task are paid before compute."""

from __future__ import annotations

from autotune import Buffers, Layer, Machine, Mapping, Tile
from autotune.model.formulas import consts, evaluate
from autotune.model.ops import NumpyOps, as_int
from autotune.model.quantities import grid_quantities
from autotune.tiling import task_grid


def figures(layer: Layer, mapping: Mapping, machine: Machine) -> dict[str, int]:
    grid = task_grid(layer, mapping, 1, machine)
    k = consts(layer, machine, "fp32", 4, 1)
    v = evaluate(NumpyOps(), grid_quantities(grid, machine, 4), k)
    return {name: as_int(value) for name, value in v.items()}


def test_one_step_task_pays_its_first_tiles_before_compute():
    machine = Machine.preset("manticore")
    layer = Layer("c", "conv", 14, 14, 256, 256, 1, 1)
    double = Buffers(input_depth=2, filter_depth=2, output_depth=2)
    one_step = Mapping("output_stack", delta_o=2, tile=Tile(in_c=256), buffers=double)
    v = figures(layer, one_step, machine)
    first_tile_bytes = 256 * 14 * 14 * 4 + 256 * 4  # the input step and one filter tile
    assert v["prologue_dma_cycles"] >= first_tile_bytes // machine.dma_bytes_per_cycle
    assert v["task_cycles"] >= (
        machine.hbm_latency_cycles + v["prologue_dma_cycles"] + v["compute_cycles"]
    )


def test_more_steps_shorten_the_prologue():
    machine = Machine.preset("manticore")
    layer = Layer("c", "conv", 14, 14, 256, 256, 1, 1)
    double = Buffers(input_depth=2, filter_depth=2, output_depth=2)
    one = figures(layer, Mapping("output_stack", 2, tile=Tile(in_c=256), buffers=double), machine)
    eight = figures(layer, Mapping("output_stack", 2, tile=Tile(in_c=32), buffers=double), machine)
    assert eight["prologue_dma_cycles"] * 4 < one["prologue_dma_cycles"]


def test_partial_row_bands_pay_a_setup_per_slice_and_a_beat_per_row():
    """A band of partial rows is one 2D transfer per slice, one run per row (``tiling``):
    the engine pays ``in_c`` set-ups and a whole beat for each 7-word row."""
    machine = Machine.preset("manticore")
    layer = Layer("c", "conv", 14, 14, 128, 128, 1, 1)
    mapping = Mapping("output_stack", 2, tile=Tile(out_h=7, out_w=7, in_c=128))
    grid = task_grid(layer, mapping, 1, machine)
    q = grid_quantities(grid, machine, 4)
    beats = 128 * 7 - -(-128 * 7 * 7 * 4 // machine.dma_bytes_per_cycle)
    assert q["input_step_dma_overhead"] == 128 * machine.dma_setup_cycles + beats
    whole = task_grid(layer, Mapping("output_stack", 2, tile=Tile(in_c=128)), 1, machine)
    # a band of the whole slice: one transfer for all the images of the step
    whole_q = grid_quantities(whole, machine, 4)
    assert whole_q["input_step_dma_overhead"] == 0
    assert whole_q["input_step_setup_cycles"] == machine.dma_setup_cycles
