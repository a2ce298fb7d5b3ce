"""The integer program's optimum is the exhaustive optimum of the same cost model."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune import Layer, Machine, Network, analyze
from autotune.api import solve_network
from autotune.ir.options import TuneOptions
from autotune.ir.placement import HBM_ONLY, placements
from autotune.report.validation.swdnn import BATCH, MACHINE, PRECISION, swdnn_layer
from autotune.search.exhaustive import search as exhaustive_search
from autotune.search.ilp.model import build, count_candidates, solve
from autotune.search.solve import InfeasibleError, solve_layer
from autotune.search.space import search_space
from tests.kinds import BIAS_RESIDUAL_RELU, REALISTIC
from tests.strategies import conv_layers, fc_layers, kind_layers, with_epilogues


def small_layers():
    # tiny, non-square, strided, grouped and fc layers, plus a few large ones; epilogues and
    # the kinds without weights
    return st.one_of(
        conv_layers(max_hw=24, max_c=48),
        fc_layers(max_c=256),
        st.sampled_from(
            [
                Layer("big", "conv", 56, 56, 64, 64, 3, 3, pad_h=1, pad_w=1),
                Layer.fc("huge_fc", 7, 7, 512, 4096),
                Layer("wide", "conv", 13, 208, 8, 16, 3, 3, 2, 2, 1, 1),
            ]
        ),
        with_epilogues(st.one_of(conv_layers(max_hw=16, max_c=32), fc_layers(max_c=128))),
        kind_layers(max_hw=20, max_c=32),
    )


#: Every placement of a layer's streams; half the draws keep everything in HBM.
PLACEMENTS = st.one_of(st.just(HBM_ONLY), st.sampled_from(placements(True, True)))


# (12 examples: the file runs on one CI worker, whose 15-minute budget this test set; each
# example proves a CP-SAT optimum and enumerates the space)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layer=small_layers(),
    batch=st.sampled_from([1, 1, 2, 3]),
    precision=st.sampled_from(["fp32", "fp64"]),
    objective=st.sampled_from(["latency", "latency", "traffic", "energy"]),
    placement=PLACEMENTS,
)
def test_ilp_optimum_equals_exhaustive(manticore, layer, batch, precision, objective, placement):
    """For every placement of the layer's streams (HBM or the chiplet's L2)."""
    space = search_space(layer, manticore, batch)
    best = exhaustive_search(space, manticore, precision, objective, placement=placement)
    result = solve(space, manticore, precision, objective, placement=placement)
    assert result.status == "OPTIMAL"
    assert result.candidates == best.candidates
    assert result.index == best.index  # same mapping: same lexicographic tie-breaks
    for key in ("cycles", "offchip_bytes", "l2_bytes", "l1", "energy"):
        assert result.values[key] == best.values[key]
    # the decoded mapping, analysed on its own, has exactly those costs
    mapping = space.decode(best.index)
    a = analyze(layer, mapping, manticore, precision, batch, placement=placement)
    assert a.fits and a.cycles == best.values["cycles"]
    assert a.offchip_bytes == best.values["offchip_bytes"]
    assert a.l2_bytes == best.values["l2_bytes"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layer=st.one_of(
        conv_layers(max_hw=20, max_c=40),
        fc_layers(max_c=200),
        with_epilogues(conv_layers(max_hw=12, max_c=24)),
        kind_layers(max_hw=16, max_c=24),
    ),
    batch=st.sampled_from([1, 2, 3]),
    precision=st.sampled_from(["fp32", "fp64"]),
    objective=st.sampled_from(["latency", "latency", "traffic"]),
    placement=PLACEMENTS,
)
def test_ilp_optimum_equals_exhaustive_with_dma_efficiency(
    layer, batch, precision, objective, placement
):
    """The same law with the inverse DMA efficiencies active (SW26010's measured tables,
    seed 004 Table II: two-variable tables read with element constraints). The core group
    is given a made-up L2 so that transfers mixing an HBM part (slowed by the efficiency)
    and an L2 part (not) are built too."""
    sw = Machine.preset("sw26010-cg")
    sw = dataclasses.replace(
        sw,
        l2_bytes=1 << 20,
        l2_bytes_per_cycle=sw.hbm_bytes_per_cycle,
        l2_latency_cycles=sw.hbm_latency_cycles // 2,
    )
    space = search_space(layer, sw, batch)
    best = exhaustive_search(space, sw, precision, objective, placement=placement)
    if best is None or not best.index:
        return  # nothing fits the 64 KB LDM
    result = solve(space, sw, precision, objective, placement=placement)
    assert result.status == "OPTIMAL"
    assert result.index == best.index
    for key in ("cycles", "offchip_bytes", "l2_bytes", "l1", "memory_occupancy_scaled"):
        assert result.values[key] == best.values[key]
    a = analyze(layer, space.decode(best.index), sw, precision, batch, placement=placement)
    assert a.fits and a.cycles == best.values["cycles"]
    assert a.offchip_bytes == best.values["offchip_bytes"]
    assert a.l2_bytes == best.values["l2_bytes"]


def test_optimum_beats_every_report_mapping(manticore):
    layer = Layer("typical", "conv", 32, 32, 128, 128, 3, 3, pad_h=1, pad_w=1)
    best = solve_layer(layer, manticore, "fp32")
    from autotune.search.space import iter_report_mappings

    for mapping in iter_report_mappings(layer):
        a = analyze(layer, mapping, manticore, "fp32")
        if a.fits:
            assert best.analysis.cycles <= a.cycles


def test_same_input_same_result(manticore):
    layer = Layer("c", "conv", 28, 28, 128, 128, 3, 3, pad_h=1, pad_w=1)
    first = solve_layer(layer, manticore, "fp32", options=TuneOptions(seed=3))
    second = solve_layer(layer, manticore, "fp32", options=TuneOptions(seed=3))
    assert first.mapping == second.mapping
    assert first.search.status == "OPTIMAL" and first.search.gap == 0.0


@pytest.mark.parametrize("search", ["ilp", "exhaustive"])
def test_infeasible_layer_names_layer_and_smallest_footprint(manticore, search):
    tiny = dataclasses.replace(manticore, l1_bytes=64)
    layer = Layer("needs_more", "conv", 8, 8, 4, 4, 3, 3, pad_h=1, pad_w=1)
    with pytest.raises(InfeasibleError) as info:
        solve_layer(layer, tiny, "fp32", options=TuneOptions(search=search))
    message = str(info.value)
    assert "'needs_more'" in message and "64 B" in message
    smallest = info.value.smallest
    assert smallest is not None and smallest > 64
    assert f"{smallest} B" in message


def test_report_fields(manticore):
    sol = solve_layer(
        Layer.fc("fc", 1, 1, 256, 100), manticore, "fp32", options=TuneOptions(search="exhaustive")
    )
    r = sol.search
    assert r.mode == "exhaustive" and r.status == "OPTIMAL" and r.wall_s >= 0
    assert r.candidates == count_candidates(search_space(sol.layer, manticore, 1))
    assert r.value == sol.analysis.cycles


def test_traffic_objective_moves_no_more_bytes(manticore):
    layer = Layer("c", "conv", 14, 14, 256, 256, 3, 3, pad_h=1, pad_w=1)
    fast = solve_layer(layer, manticore, "fp32", options=TuneOptions(objective="latency"))
    lean = solve_layer(layer, manticore, "fp32", options=TuneOptions(objective="traffic"))
    assert lean.analysis.offchip_bytes <= fast.analysis.offchip_bytes
    assert lean.analysis.cycles >= fast.analysis.cycles


def test_network_solves_identical_shapes_once(manticore):
    a = Layer("a", "conv", 14, 14, 32, 32, 3, 3, pad_h=1, pad_w=1)
    b = dataclasses.replace(a, name="b")
    net = Network("n", (a, b, Layer.fc("fc", 1, 1, 32, 10)))
    seen = []
    sols = solve_network(net, manticore, progress=seen.append, options=TuneOptions(processes=1))
    assert [s.layer.name for s in sols] == ["a", "b", "fc"]
    assert seen == ["a", "fc"]
    assert sols[1].search.shared_with == "a" and sols[1].mapping == sols[0].mapping
    assert sols[1].analysis.layer == "b"


def test_network_results_do_not_depend_on_processes(manticore):
    layers = tuple(
        Layer(f"c{i}", "conv", 10 + i, 10, 16, 16 * (i + 1), 3, 3, pad_h=1, pad_w=1)
        for i in range(3)
    )
    net = Network("n", layers)
    serial = solve_network(net, manticore, options=TuneOptions(processes=1))
    parallel = solve_network(net, manticore, options=TuneOptions(processes=2))
    assert [s.mapping for s in serial] == [s.mapping for s in parallel]


def test_energy_objective_uses_the_machine_energies(manticore):
    assert manticore.energy_pj["hbm_byte"] > manticore.energy_pj["noc_byte"] > 0
    layer = Layer("c", "conv", 28, 28, 128, 128, 3, 3, pad_h=1, pad_w=1)
    fast = solve_layer(layer, manticore, "fp32", options=TuneOptions(objective="latency"))
    frugal = solve_layer(layer, manticore, "fp32", options=TuneOptions(objective="energy"))
    assert frugal.analysis.energy_pj <= fast.analysis.energy_pj
    e = manticore.energy_pj
    a = frugal.analysis
    expected = (
        layer.macs * e["mac_fp32"]
        + a.offchip_words * round(e["hbm_byte"] * 4)  # whole pJ per word
        + a.intercluster_words * round(e["noc_byte"] * 4)
        + a.cycles * e["static_per_cycle"]  # 2 W at 1 GHz: 2000 pJ per cycle
    )
    assert e["static_per_cycle"] == pytest.approx(2000.0)
    assert a.energy_pj == pytest.approx(expected, abs=1.0)

    # every cycle the frugal schedule takes beyond the fast one is paid for by bytes it saves
    def dynamic(a):
        return a.energy_pj - a.cycles * e["static_per_cycle"]

    extra = frugal.analysis.cycles - fast.analysis.cycles
    assert extra * e["static_per_cycle"] <= dynamic(fast.analysis) - dynamic(frugal.analysis) + 1e-6


def multicast_machines():
    """MPPA3 (5 clusters, one-level NoC, DMA multicast, an L2 of the clusters' shares of
    local memory), a copy with a small L1, where capacity forces spatial tiles and multicast
    waves of several tiles, and a copy with a two-level tree (links below the root)."""
    from autotune import Machine

    mppa3 = Machine.preset("mppa3")
    noc = mppa3.levels[0]
    two_levels = (
        dataclasses.replace(noc, name="pair", fanout=2, uplink_bytes_per_cycle=24.0),
        dataclasses.replace(noc, fanout=3),
    )
    return st.sampled_from(
        [
            mppa3,
            dataclasses.replace(mppa3, l1_bytes=48 * 1024),
            dataclasses.replace(mppa3, l1_bytes=48 * 1024, levels=two_levels),
        ]
    )


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    machine=multicast_machines(),
    layer=small_layers(),
    batch=st.sampled_from([1, 1, 2, 3]),
    objective=st.sampled_from(["latency", "latency", "traffic", "energy"]),
    placement=PLACEMENTS,
)
def test_ilp_optimum_equals_exhaustive_with_multicast(machine, layer, batch, objective, placement):
    """For every placement: multicast waves read from the HBM or the L2."""
    assert machine.has_l2
    space = search_space(layer, machine, batch)
    # a fused depthwise and 1x1 pair does not multicast (``tiling.task_grid``)
    assert space.multicast == ((False, True) if layer.prologue is None else (False,))
    best = exhaustive_search(space, machine, "fp16", objective, placement=placement)
    result = solve(space, machine, "fp16", objective, placement=placement)
    assert result.status == "OPTIMAL"
    assert result.candidates == best.candidates
    assert result.index == best.index
    for key in ("cycles", "offchip_bytes", "l2_bytes", "l1", "energy"):
        assert result.values[key] == best.values[key]
    mapping = space.decode(best.index)
    a = analyze(layer, mapping, machine, "fp16", batch, placement=placement)
    assert a.fits and a.cycles == best.values["cycles"]
    assert a.offchip_bytes == best.values["offchip_bytes"]
    assert a.l2_bytes == best.values["l2_bytes"]


def test_multicast_is_only_offered_where_the_machine_multicasts(manticore):
    layer = Layer("c", "conv", 14, 14, 32, 32, 3, 3, pad_h=1, pad_w=1)
    assert search_space(layer, manticore, 1).multicast == (False,)


@pytest.mark.parametrize(
    "layer",
    [
        REALISTIC["maxpool"],
        REALISTIC["softmax"],
        dataclasses.replace(
            Layer("c", "conv", 14, 14, 64, 64, 3, 3, pad_h=1, pad_w=1),
            epilogue=BIAS_RESIDUAL_RELU,
        ),
        dataclasses.replace(Layer.fc("fc", 1, 1, 512, 256), epilogue=BIAS_RESIDUAL_RELU),
    ],
    ids=lambda layer: f"{layer.kind}{'+epilogue' if not layer.epilogue.is_identity else ''}",
)
def test_ilp_optimum_equals_exhaustive_for_realistic_kinds(manticore, layer):
    space = search_space(layer, manticore, 2)
    best = exhaustive_search(space, manticore, "fp32", "latency")
    result = solve(space, manticore, "fp32", "latency")
    assert result.status == "OPTIMAL" and result.index == best.index
    assert result.values["cycles"] == best.values["cycles"]
    a = analyze(layer, space.decode(best.index), manticore, "fp32", 2)
    assert a.fits and a.cycles == best.values["cycles"] and a.ops == 2 * layer.ops


def test_the_largest_presets_layers_give_a_valid_model():
    """CP-SAT refuses a model whose variable domains sum beyond 64 bits (before solving it):
    the integer program of swDNN's largest Table III layer at batch 128 on the SW26010 preset
    must stay within, as a product of two times (bounded by different candidates) did not."""
    machine = Machine.preset(MACHINE)
    space = search_space(swdnn_layer(256, 256), machine, BATCH)
    assert build(space, machine, PRECISION).cpm.validate() == ""
