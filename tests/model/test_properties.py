"""Laws of the cost model that hold for every layer and mapping (hypothesis)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings

from autotune import Layer, Mapping, MappingError, Tile, analyze
from autotune.model import report
from autotune.model.analysis import compulsory_words
from tests.strategies import mapped_layers

SETTINGS = settings(max_examples=300, deadline=None)


@SETTINGS
@given(mapped_layers())
def test_macs_are_the_layers_for_every_algorithm_and_tiling(manticore, case):
    layer, mapping, batch, precision = case
    a = analyze(layer, mapping, manticore, precision, batch)
    assert a.macs == batch * layer.macs


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
    assert a.cycles >= a.macs / manticore.peak_macs_per_cycle(precision)
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
        and batch == 1
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
