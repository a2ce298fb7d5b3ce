"""``verify``: the report's algorithms, random legal mappings, L1 overflow, tolerances."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autotune
from autotune import Layer, Mapping, MappingError, Tile, analyze, load_network, verify
from autotune.search.space import fits, hand_choice
from autotune.tiling import col_axis, output_stacks, row_axis
from autotune.verification.check import compare, tolerance
from tests.conftest import EXAMPLES
from tests.strategies import conv_layers, fc_layers, mappings

CONV = Layer("conv", "conv", 10, 10, 12, 20, 3, 3, pad_h=1, pad_w=1)
STRIDED = Layer("strided", "conv", 11, 9, 6, 10, 3, 3, 2, 2, 1, 1)
FC = Layer.fc("fc", 2, 2, 40, 30)


def test_verify_is_the_public_function():
    assert autotune.verify is verify and "verify" in autotune.__all__
    assert "Verification" in autotune.__all__


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
@pytest.mark.parametrize(
    "layer, mapping, batch",
    [
        (CONV, Mapping.from_report(1), 1),
        (CONV, Mapping.from_report(2, delta_o=8), 1),  # remainder stack of 4
        (STRIDED, Mapping.from_report(2, delta_o=4, tile=Tile(out_h=2, out_w=3, in_c=2)), 2),
        (CONV, Mapping.from_report(3, delta_o=3), 1),  # 7 stacks, group of 16
        (CONV, Mapping.from_report(3, delta_o=2, share_group=4, tile=Tile(out_h=4)), 1),
        (FC, Mapping.from_report(4, delta_o=30, batch_tile=3), 3),
        (FC, Mapping.from_report(5, delta_o=7, batch_tile=2), 3),  # batch remainder of 1
    ],
)
def test_report_algorithms_verify(manticore, layer, mapping, batch, precision):
    v = verify(layer, mapping, manticore, precision, batch)
    assert v.ok, v.errors
    assert v.max_rel_error <= v.tolerance and v.max_abs_error < 1e-3
    assert v.macs == batch * layer.macs
    assert v.op_counts["Store"] >= 1 and v.bytes_moved["store"] > 0


def test_shared_stacks_forward_slices_within_their_quadrant(manticore):
    """Alg. 3: one member per share group reads from main memory, the others forward."""
    v = verify(CONV, Mapping.from_report(3, delta_o=5), manticore)  # 4 stacks, 12 slices
    slice_bytes = CONV.h_in * CONV.w_in * 4
    assert v.ok, v.errors
    assert v.bytes_moved["intercluster"] == 3 * 11 * slice_bytes  # 3 members x 11 rounds
    filter_bytes = CONV.weight_words * 4
    assert v.bytes_moved["load"] == (12 + 3) * slice_bytes + filter_bytes  # + first slices


def test_a_mapping_that_overflows_l1_is_reported_not_raised(manticore):
    layer = Layer("c", "conv", 32, 32, 128, 128, 3, 3, pad_h=1, pad_w=1)
    assert verify(layer, Mapping.from_report(2, delta_o=24), manticore).ok  # report: <= 24
    v = verify(layer, Mapping.from_report(2, delta_o=25), manticore)
    assert not v.ok and math.isnan(v.max_abs_error)
    assert "allocating buffer 'output'" in v.errors[0]
    assert "overflows the 131072 B of L1" in v.errors[0]


def test_a_mapping_that_does_not_apply_raises(manticore):
    with pytest.raises(MappingError):
        verify(CONV, Mapping.from_report(5), manticore)


def test_a_full_size_resnet_layer_verifies(manticore):
    layer = load_network(EXAMPLES / "resnet50.yaml").layer("layer4.0.conv2")
    v = verify(layer, hand_choice(layer, manticore, "fp32"), manticore)
    assert v.ok and v.max_rel_error < v.tolerance / 10, v


def test_tolerance_follows_precision_and_reduction_length():
    short, long = Layer.fc("a", 1, 1, 15, 1), Layer.fc("b", 1, 1, 1023, 1)
    assert tolerance(long, "fp32") == pytest.approx(8 * tolerance(short, "fp32"))
    assert tolerance(short, "fp64") < tolerance(short, "fp32") * 1e-8
    assert tolerance(long, "fp32") < 1 / 1023  # a dropped average product stays visible


def test_compare_reports_the_worst_output():
    exact = np.ones((1, 2, 3, 3))
    scale = np.full_like(exact, 4.0)
    out = exact.copy()
    out[0, 1, 2, 0] += 1e-3
    assert compare(out, exact, scale, 1e-3)[2] == []
    max_abs, max_rel, errors = compare(out, exact, scale, 1e-4)
    assert max_abs == pytest.approx(1e-3) and max_rel == pytest.approx(2.5e-4)
    assert (
        "numerical mismatch in 1 of 18 outputs: at image 0, channel 1, row 2, column 0" in errors[0]
    )
    out[0, 0, 0, 0] = np.nan
    assert compare(out, exact, scale, 1.0)[2]


# -- random legal mappings -------------------------------------------------------------------


@st.composite
def small_cases(draw):
    layer = draw(st.one_of(conv_layers(max_hw=10, max_c=12), fc_layers(max_c=40)))
    batch = draw(st.integers(1, 3))
    return (layer, draw(mappings(layer, batch)), batch, draw(st.sampled_from(["fp32", "fp64"])))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_cases())
def test_random_legal_mappings_verify_on_a_large_l1(manticore, case):
    """With 4 MiB of L1 almost every random mapping fits; each must verify, and move
    exactly the words the cost model counts (Alg. 3 may split them differently: its first
    slices come from main memory where the model counts them as forwarded)."""
    layer, mapping, batch, precision = case
    big = dataclasses.replace(manticore, l1_bytes=4 << 20)
    v = verify(layer, mapping, big, precision, batch)
    if not fits(layer, mapping, big, precision, batch):
        assert not v.ok
        return
    assert v.ok, (layer, mapping, batch, v.errors)
    a = analyze(layer, mapping, big, precision, batch)
    wb = a.word_bytes
    # the layer's MACs; a fused depthwise is computed again by every stack of a tile, a
    # fused expansion over every tile's input band (halos twice, skipped pixels never)
    stacks = output_stacks(layer, mapping.delta_o).count
    again = (stacks - 1) * batch * layer.prologue_result_words * layer.prologue_pixels
    if layer.expansion is not None:
        rows, cols = row_axis(layer, mapping.tile.out_h), col_axis(layer, mapping.tile.out_w)
        bands = int(rows.in_size.sum()) * int(cols.in_size.sum())
        again = batch * layer.c_out * layer.c_in * bands - batch * layer.expansion_result_words * (
            layer.c_in
        )
    assert v.macs == a.macs + again
    assert v.bytes_moved["store"] == a.offchip_store_words * wb
    moved = v.bytes_moved["load"] + v.bytes_moved["intercluster"]
    assert moved == (a.offchip_load_words + a.intercluster_words) * wb
    if mapping.algorithm != "output_stack_shared":
        assert v.bytes_moved["load"] == a.offchip_load_words * wb


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_cases())
def test_on_manticore_a_mapping_verifies_exactly_when_it_fits(manticore, case):
    layer, mapping, batch, precision = case
    v = verify(layer, mapping, manticore, precision, batch)
    assert v.ok == fits(layer, mapping, manticore, precision, batch), v.errors
