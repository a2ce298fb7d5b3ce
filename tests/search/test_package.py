"""Solving on a package: every chiplet split's largest part solved on one chiplet, plus the
die-to-die cost; the integer program and enumeration agree on the split and the mapping."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune import Layer
from autotune.chiplets import solve_layer
from autotune.ir.options import TuneOptions
from tests.package_machine import small_package
from tests.strategies import conv_layers, fc_layers, kind_layers

PACKAGE = small_package()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layer=st.one_of(
        conv_layers(max_hw=12, max_c=16), fc_layers(max_c=48), kind_layers(max_hw=12, max_c=16)
    ),
    batch=st.sampled_from([1, 2, 3]),
    objective=st.sampled_from(["latency", "latency", "traffic"]),
)
def test_package_ilp_equals_exhaustive(layer, batch, objective):
    ilp = solve_layer(layer, PACKAGE, "fp32", batch, options=TuneOptions(objective=objective))
    enumerated = solve_layer(
        layer, PACKAGE, "fp32", batch, options=TuneOptions(objective=objective, search="exhaustive")
    )
    assert ilp.mapping == enumerated.mapping  # same split, same inner mapping
    assert ilp.analysis == enumerated.analysis
    assert ilp.search.status == "OPTIMAL"
    # "none" is always a candidate: the package is never slower than one chiplet
    if objective == "latency":
        alone = solve_layer(layer, PACKAGE.chiplet(), "fp32", batch)
        assert ilp.analysis.cycles <= alone.analysis.cycles


def test_split_beats_one_chiplet_on_a_big_layer():
    conv = Layer("c", "conv", 28, 28, 32, 32, 3, 3, pad_h=1, pad_w=1)
    # A law of the package's model, not of the solver (the integer program's optimum equals
    # enumeration's: test_package_ilp_equals_exhaustive), so enumerated: 1 s, where CP-SAT's
    # proofs of the two optima took 140 s of CI. Batch 1: a spatial split wins.
    enumerate_all = TuneOptions(search="exhaustive")
    package = solve_layer(conv, PACKAGE, "fp32", 1, options=enumerate_all)
    alone = solve_layer(conv, PACKAGE.chiplet(), "fp32", 1, options=enumerate_all)
    assert package.mapping.chiplet_split != "none"
    assert package.analysis.cycles < alone.analysis.cycles
    assert package.analysis.macs == alone.analysis.macs == conv.macs


def test_single_chiplet_solution_has_no_split(manticore):
    conv = Layer("c", "conv", 14, 14, 16, 16, 3, 3, pad_h=1, pad_w=1)
    sol = solve_layer(conv, manticore, "fp32", 2)
    assert sol.mapping.chiplet_split == "none" and sol.analysis.d2d_bytes == 0
