"""Laws of the cost model that hold for every layer (of every kind) and mapping
(hypothesis)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import example, given, settings

from autotune import Layer, Mapping, MappingError, Tile, analyze
from autotune.ir.layer import Activation, Epilogue, Expansion, Prologue
from autotune.ir.precision import word_bytes
from autotune.model import report
from autotune.model.analysis import compulsory_words
from autotune.search.space import algorithms_for, in_c_values, minimal_mapping
from autotune.tiling import declared_buffers, task_grid
from tests.kinds import BIAS_RESIDUAL_RELU, REALISTIC
from tests.strategies import mapped_layers

SETTINGS = settings(max_examples=300, deadline=None)


@SETTINGS
@given(mapped_layers())
def test_macs_are_the_layers_for_every_algorithm_and_tiling(manticore, case):
    layer, mapping, batch, precision = case
    a = analyze(layer, mapping, manticore, precision, batch)
    assert a.macs == batch * layer.macs
    assert a.ops == batch * layer.ops >= a.macs
    assert a.flops == 2 * a.macs + (a.ops - a.macs)


@SETTINGS
@given(mapped_layers())
def test_weightless_layers_load_no_filters_and_residuals_are_read_once(manticore, case):
    layer, mapping, batch, precision = case
    a = analyze(layer, mapping, manticore, precision, batch)
    if layer.weight_words == 0:
        assert a.filter_load_words == 0
        assert a.buffer_tile_words["filter"] == a.buffer_bytes["filter"] == 0
    else:
        assert a.filter_load_words >= layer.weight_words
    assert a.residual_load_words == batch * layer.residual_words
    if layer.epilogue.residual:
        # one tile of the output's size, buffered as deep as the output
        assert a.buffer_tile_words["residual"] == a.buffer_tile_words["output"]
        assert a.buffer_bytes["residual"] == a.buffer_bytes["output"] or (
            mapping.buffers.output_bytes is not None
        )
    else:
        assert a.buffer_tile_words["residual"] == a.buffer_bytes["residual"] == 0


#: A fused pair under Alg. 3 (EfficientNet-Lite0's second block): its forwarding buffer holds
#: the band alone, not the depthwise result beside it in the input slot.
FUSED_SHARED = (
    Layer(
        "pwl",
        "conv",
        112,
        112,
        96,
        24,
        3,
        3,
        2,
        2,
        pad_bottom=1,
        pad_right=1,
        prologue=Prologue(bias=True, activation=Activation("clip")),
    ),
    Mapping("output_stack_shared", delta_o=12, share_group=4, tile=Tile(out_h=7, out_w=14, in_c=2)),
    1,
    "fp32",
)

#: A fused expansion under Alg. 3 with a residual (MobileNetV2's third block, widened): its
#: output slot holds the accumulator over the band beside the tile, its residual the tile,
#: its filter slot the stack's depthwise weights (9 x 12 words > 2 slices).
EXPANSION_SHARED = (
    Layer(
        "dw",
        "conv",
        56,
        56,
        24,
        144,
        3,
        3,
        pad_h=1,
        pad_w=1,
        epilogue=Epilogue(bias=True, residual=True),
        expansion=Expansion(bias=True, activation=Activation("clip")),
    ),
    Mapping("output_stack_shared", delta_o=12, share_group=4, tile=Tile(out_h=14, in_c=2)),
    1,
    "fp32",
)


@SETTINGS
@example(case=FUSED_SHARED)
@example(case=EXPANSION_SHARED)
@given(mapped_layers())
def test_the_model_allocates_the_buffers_the_mapping_declares(manticore, case):
    """The model's buffers are those ``tiling`` declares, which the simulator and the
    executor allocate: every operand's tile and allocated bytes."""
    layer, mapping, batch, precision = case
    a = analyze(layer, mapping, manticore, precision, batch)
    wb = word_bytes(precision)
    declared = declared_buffers(task_grid(layer, mapping, batch, manticore), wb, 8)
    for op, nbytes in declared.allocated_bytes.items():
        assert a.buffer_bytes[op] == nbytes, op
        assert a.buffer_tile_words[op] * wb == declared.tile_bytes[op], op


@SETTINGS
@given(mapped_layers())
def test_footprint_within_l1_when_it_fits(manticore, case):
    layer, mapping, batch, precision = case
    a = analyze(layer, mapping, manticore, precision, batch)
    assert a.fits == (a.l1_bytes <= manticore.l1_bytes)
    assert a.fits == (a.reason is None)
    assert a.l1_bytes == sum(a.buffer_bytes.values())


@SETTINGS
@given(mapped_layers())
def test_traffic_at_least_compulsory(manticore, case):
    layer, mapping, batch, precision = case
    a = analyze(layer, mapping, manticore, precision, batch)
    loads, stores = compulsory_words(layer, batch)
    assert a.offchip_load_words >= loads
    assert a.offchip_store_words == stores
    assert a.intercluster_words >= 0


@SETTINGS
@given(mapped_layers())
def test_cycles_at_least_the_physical_bounds(manticore, case):
    layer, mapping, batch, precision = case
    a = analyze(layer, mapping, manticore, precision, batch)
    assert (
        a.cycles
        >= a.ops / manticore.peak_macs_per_cycle(precision)
        >= a.compute_cycles * (manticore.fpu_utilization - 1e-9)
    )
    assert a.cycles >= a.offchip_bytes / manticore.hbm_bytes_per_cycle
    assert a.bound in ("compute", "memory", "latency")
    assert a.tasks >= 1 and a.waves >= 1


@SETTINGS
@given(mapped_layers())
def test_untiled_square_layers_match_the_report_equations(manticore, case):
    layer, mapping, batch, precision = case
    square = (
        layer.h_in == layer.w_in
        and layer.kernel_h == layer.kernel_w
        and layer.groups == 1
        and layer.prologue is None  # the report has no fused pairs
        and batch == 1
        and layer.kind in ("conv", "fc")  # the report's layers: with filters,
        and not layer.epilogue.residual  # no operand but the input
    )
    untiled = mapping.tile.out_h is None and mapping.tile.out_w is None
    if not (square and untiled) or mapping.algorithm == "output_stack_shared":
        return
    a = analyze(layer, mapping, manticore, precision, batch)
    if mapping.algorithm == "output_stack" and layer.pad_h == 0 and layer.stride_h == 1:
        # Eq. (7) with W_I the loaded extent (no padding rows to skip).
        assert a.offchip_load_words == report.eq7_load_words(
            layer.h_in, layer.kernel_h, layer.c_in, layer.c_out, mapping.delta_o
        )
    if mapping.algorithm == "input_parallel":
        assert a.offchip_load_words == report.eq12_load_words(
            layer.h_in, layer.c_in, layer.c_out, mapping.delta_o, 1
        )
        active = min(math.ceil(layer.c_in / mapping.tile.in_c), manticore.clusters)
        assert a.intercluster_words == report.reduction_words(active, layer.c_out, 1)


def test_input_parallel_refuses_convolutions(manticore):
    conv = Layer("c", "conv", 8, 8, 4, 4, 3, 3)
    with pytest.raises(MappingError, match="fully-connected"):
        analyze(conv, Mapping("input_parallel"), manticore)


def test_shared_refuses_grouped_convolutions(manticore):
    conv = Layer("c", "conv", 8, 8, 4, 4, 3, 3, groups=2)
    with pytest.raises(MappingError, match="groups"):
        analyze(conv, Mapping("output_stack_shared", share_group=4), manticore)


def test_stack_spanning_part_of_a_group_is_refused(manticore):
    conv = Layer("c", "conv", 8, 8, 8, 8, 3, 3, groups=2)
    with pytest.raises(MappingError, match="spans groups"):
        analyze(conv, Mapping("output_stack", delta_o=6), manticore)


def test_spatial_tiles_reload_the_halo(manticore):
    conv = Layer("c", "conv", 32, 32, 16, 16, 3, 3, pad_h=1, pad_w=1)
    whole = analyze(conv, Mapping("output_stack", delta_o=16), manticore)
    bands = analyze(conv, Mapping("output_stack", delta_o=16, tile=Tile(out_h=8)), manticore)
    assert whole.tasks == 1 and bands.tasks == 4
    # 4 bands of 8 rows load 9, 10, 10, 9 input rows: 38 instead of 32.
    assert bands.input_load_words == whole.input_load_words * 38 // 32


def test_fp_precision_must_be_supported(manticore):
    conv = Layer("c", "conv", 8, 8, 4, 4, 3, 3)
    with pytest.raises(ValueError, match="does not compute 'fp16'"):
        analyze(conv, Mapping("output_stack"), manticore, "fp16")


@pytest.mark.parametrize("kind", sorted(REALISTIC))
def test_weightless_layers_are_memory_bound(manticore, kind):
    """The compute floor counts FPU operations (a pool's taps, an add's adds, ...): layers
    without weights do little work per word they move, so main memory bounds them."""
    layer = REALISTIC[kind]
    mapping = minimal_mapping(layer).with_(tile=Tile(in_c=min(in_c_values(layer))))
    a = analyze(layer, mapping, manticore, "fp32", 2)
    assert a.fits and a.macs == 0 and a.ops == 2 * layer.ops > 0
    assert 0 < a.compute_cycles < a.memory_cycles
    assert a.bound in ("memory", "latency")
    assert a.ccr == 0 and a.flop_per_byte == a.ops / a.offchip_bytes


def test_an_epilogue_costs_its_operations_and_its_residual(manticore):
    conv = Layer("c", "conv", 28, 28, 128, 128, 3, 3, pad_h=1, pad_w=1)
    fused = dataclasses.replace(conv, epilogue=BIAS_RESIDUAL_RELU)
    mapping = Mapping("output_stack", delta_o=16, tile=Tile(out_h=7, in_c=8))
    plain, full = (analyze(layer, mapping, manticore) for layer in (conv, fused))
    assert full.macs == plain.macs and full.ops == plain.ops + 3 * conv.output_words
    assert full.offchip_load_words == plain.offchip_load_words + conv.output_words
    assert full.buffer_bytes["residual"] == full.buffer_bytes["output"] > 0
    assert full.l1_bytes == plain.l1_bytes + full.buffer_bytes["residual"]
    assert full.cycles > plain.cycles and full.energy_pj > plain.energy_pj


def test_softmax_keeps_its_channels_in_one_task_and_step(manticore):
    softmax = REALISTIC["softmax"]
    for mapping in (
        Mapping("output_stack", delta_o=500, tile=Tile(in_c=1000)),
        Mapping("output_stack", delta_o=1000, tile=Tile(in_c=512)),
    ):
        with pytest.raises(MappingError, match="softmax"):
            analyze(softmax, mapping, manticore)
    a = analyze(softmax, Mapping("output_stack", delta_o=1000, tile=Tile(in_c=1000)), manticore)
    assert a.fits and a.tasks == 1


def test_input_parallel_is_for_fully_connected_layers_only(manticore):
    pool = REALISTIC["avgpool"]
    assert algorithms_for(pool) == ["output_stack"]  # depthwise: no Alg. 3 either
    with pytest.raises(MappingError, match="fully-connected"):
        analyze(pool, Mapping("input_parallel", delta_o=2048), manticore)
