"""Simulating a chiplet split: the laws of the single-chiplet simulator carry over (bytes
equal the model's to the byte) and the die-to-die stage-in is charged."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from autotune import Layer, Mapping, analyze, simulate
from autotune.chiplets import SPLITS, link_bytes, part_mapping, split_parts
from autotune.sim import CapacityError
from autotune.tiling import MappingError
from tests.package_machine import small_package
from tests.strategies import mapped_layers

PACKAGE = small_package()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mapped_layers(), split=st.sampled_from(SPLITS))
def test_package_bytes_equal_the_model(case, split):
    layer, mapping, batch, precision = case
    assume(mapping.share_group in (1, 4))  # the test chiplet has 8 clusters
    mapping = mapping.with_(chiplet_split=split)
    try:
        a = analyze(layer, mapping, PACKAGE, precision, batch)
        assume(a.fits)
        r = simulate(layer, mapping, PACKAGE, precision, batch)
    except (MappingError, CapacityError):
        assume(False)
    assert r.hbm_bytes == a.offchip_bytes
    assert r.intercluster_bytes == a.intercluster_bytes
    assert r.d2d_bytes == a.d2d_bytes
    assert r.macs == batch * layer.macs and r.ops == batch * layer.ops
    assert r.chiplet_split == split and r.chiplets == a.chiplets
    # the slowest chiplet: at least part 0 after its own stage-in
    parts = split_parts(layer, split, PACKAGE.chiplets, batch, a.word_bytes)
    first = simulate(
        parts[0].layer,
        part_mapping(mapping, parts[0]),
        PACKAGE.chiplet(),
        precision,
        parts[0].batch,
    )
    incoming = [b for (_, dst), b in link_bytes(parts).items() if dst == 0]
    stage = (
        PACKAGE.d2d_latency_cycles + max(incoming) / PACKAGE.d2d_bytes_per_cycle if incoming else 0
    )
    assert r.cycles >= first.cycles + math.ceil(stage - 1e-9)
    assert r.fpu_utilization <= PACKAGE.fpu_utilization + 1e-9
    assert sum(r.breakdown.as_dict().values()) == pytest.approx(r.cycles, rel=1e-6, abs=1)


def test_spatial_stage_in_is_the_halo_over_one_link():
    conv = Layer("c", "conv", 32, 16, 8, 8, 3, 3, pad_h=1, pad_w=1)
    mapping = Mapping("output_stack", delta_o=8, chiplet_split="spatial")
    r = simulate(conv, mapping, PACKAGE, "fp32", 1)
    row = 16 * 8 * 4  # one input row, all channels
    assert r.d2d_bytes == 2 * row  # one halo row each way
    assert r.d2d_cycles == PACKAGE.d2d_latency_cycles + math.ceil(row / PACKAGE.d2d_bytes_per_cycle)
    assert r.breakdown.as_dict()["d2d"] == pytest.approx(r.d2d_cycles, abs=1)
