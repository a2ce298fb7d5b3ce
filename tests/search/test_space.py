"""Every conv/fc layer of the five example networks, and a realistic layer of every other
kind, has a mapping that fits L1."""

from __future__ import annotations

import pytest

from autotune import analyze, load_network
from autotune.search import exhaustive
from autotune.search.space import (
    chunk_sizes,
    delta_o_values,
    fits,
    hand_choice,
    minimal_mapping,
    search_space,
)
from tests.conftest import EXAMPLES, NETWORKS
from tests.kinds import REALISTIC


def test_chunk_sizes_reach_every_chunk_count_with_the_smallest_chunks():
    for n in (1, 7, 64, 1000):
        sizes = chunk_sizes(n)
        counts = {-(-n // s) for s in sizes}
        # every achievable number of chunks is reached, each by its smallest chunk size
        assert counts == {-(-n // size) for size in range(1, n + 1)}
        assert len(counts) == len(sizes) and sizes[0] == 1 and sizes[-1] == n


def test_delta_o_values_for_groups():
    from autotune import Layer

    dw = Layer("dw", "conv", 8, 8, 32, 32, 3, 3, pad_h=1, pad_w=1, groups=32)
    assert delta_o_values(dw) == chunk_sizes(32)  # whole groups of 1 output channel


@pytest.mark.parametrize("name", NETWORKS)
@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_every_layer_has_a_fitting_mapping(manticore, name, precision):
    net = load_network(EXAMPLES / f"{name}.yaml")
    for layer in net.layers:
        assert fits(layer, minimal_mapping(layer), manticore, precision, net.batch), layer.name
        choice = hand_choice(layer, manticore, precision, net.batch)
        a = analyze(layer, choice, manticore, precision, net.batch)
        assert a.fits and a.l1_bytes <= manticore.l1_bytes, layer.name
        assert a.macs == layer.macs * net.batch


def test_large_slices_force_spatial_tiles(manticore):
    # A 224x224 fp32 depth slice is 196 KiB: only spatial tiling makes ResNet-50 conv1 fit.
    net = load_network(EXAMPLES / "resnet50.yaml")
    conv1 = net.layers[0]
    choice = hand_choice(conv1, manticore, "fp32")
    assert choice.tile.out_h is not None
    a = analyze(conv1, choice, manticore, "fp32")
    assert a.tasks > 1 and a.fits


@pytest.mark.parametrize("kind", sorted(REALISTIC))
def test_every_kind_has_fitting_candidates(manticore, kind):
    """Realistic layers without weights: the search space offers only what applies to them
    (output stacks; a softmax's channels in one stack and step) and some of it fits, as do
    the reference mappings; the optimum is not compute-bound (their FPU operations are few
    per word moved)."""
    layer = REALISTIC[kind]
    space = search_space(layer, manticore, 2)
    assert "input_parallel" not in space.algorithms
    if kind == "softmax":
        assert space.delta_o == (layer.c_out,) and space.in_c == (layer.c_in,)
    best = exhaustive.search(space, manticore, "fp32", "latency")
    assert best is not None and best.feasible > 0
    a = analyze(layer, space.decode(best.index), manticore, "fp32", 2)
    assert a.fits and a.cycles == best.values["cycles"]
    assert a.filter_load_words == 0 and a.compute_cycles < a.memory_cycles
    assert a.bound != "compute"
    assert fits(layer, minimal_mapping(layer), manticore, "fp32", 2)
    assert analyze(layer, hand_choice(layer, manticore, "fp32", 2), manticore, "fp32", 2).fits
