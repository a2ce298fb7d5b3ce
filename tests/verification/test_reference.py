"""The reference and the executor against the naive loop convolution, on tiny shapes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune import Layer, Mapping, Tile
from autotune.ir.layer import Activation, Expansion, Prologue
from autotune.search.space import minimal_mapping
from autotune.verification.build import build_program
from autotune.verification.check import exact_and_scale, random_inputs, tolerance
from autotune.verification.executor import execute
from autotune.verification.reference import activation, reference
from tests.strategies import conv_layers, fc_layers
from tests.verification.naive import naive_conv

TINY = {
    "3x3 pad 1": Layer("a", "conv", 5, 5, 2, 3, 3, 3, pad_h=1, pad_w=1),
    "stride 2, 3x2 kernel, uneven pad": Layer("b", "conv", 7, 6, 3, 2, 3, 2, 2, 2, 1, 0),
    "stride 3 drops the last rows": Layer("c", "conv", 8, 8, 2, 2, 2, 2, 3, 3),
    "grouped": Layer("d", "conv", 5, 4, 4, 6, 3, 3, pad_h=1, pad_w=1, groups=2),
    "depthwise": Layer("e", "conv", 6, 6, 3, 3, 3, 3, 2, 2, 1, 1, groups=3),
    "1x1 stride 2": Layer("f", "conv", 6, 5, 4, 3, 1, 1, 2, 2),
    "fc over a volume": Layer.fc("g", 2, 3, 4, 5),
    "dilated 2x3, stride 2": Layer(
        "h", "conv", 9, 8, 2, 3, 3, 3, 2, 1, 2, 3, dilation_h=2, dilation_w=3
    ),
    "dilated depthwise": Layer(
        "i", "conv", 7, 7, 3, 3, 3, 3, pad_h=2, pad_w=2, groups=3, dilation_h=2, dilation_w=2
    ),
    "fused depthwise 3x3 stride 2 and 1x1": Layer(
        "j",
        "conv",
        7,
        6,
        3,
        4,
        3,
        3,
        2,
        2,
        1,
        1,
        pad_right=0,
        prologue=Prologue(bias=True, activation=Activation("clip", low=0.0, high=0.5)),
    ),
    # the expansion's bias and activation make the padding differ from the expansion of
    # zeros (act(bias) != 0): a band that expanded its padding would be caught
    "fused 1x1 and depthwise 3x3 stride 2": Layer(
        "k",
        "conv",
        7,
        6,
        3,
        5,
        3,
        3,
        2,
        2,
        1,
        1,
        pad_right=0,
        expansion=Expansion(bias=True, activation=Activation("clip", low=0.25, high=0.5)),
    ),
    "fused 1x1 and dilated depthwise": Layer(
        "l", "conv", 6, 7, 2, 3, 3, 2, pad_h=2, pad_w=1, dilation_h=2, expansion=Expansion()
    ),
}


def naive_layer(layer: Layer, data: dict[str, np.ndarray]) -> np.ndarray:
    """The naive loops of the layer (its operator, no epilogue); a fused pair's two convs
    one after the other (the first's bias and activation between them)."""
    if layer.expansion is not None:
        pointwise, depthwise = layer.unfused()
        y = naive_conv(pointwise, data["input"], data["filter"])
        if layer.expansion.bias:
            y = y + data["expansion_bias"][None, :, None, None]
        if layer.expansion.activation is not None:
            y = activation(layer.expansion.activation, y)
        return naive_conv(depthwise, y, data["depthwise_filter"])
    if layer.prologue is None:
        return naive_conv(layer, data["input"], data["filter"])
    depthwise, pointwise = layer.unfused()
    y = naive_conv(depthwise, data["input"], data["prologue_filter"])
    if layer.prologue.bias:
        y = y + data["prologue_bias"][None, :, None, None]
    if layer.prologue.activation is not None:
        y = activation(layer.prologue.activation, y)
    return naive_conv(pointwise, y, data["filter"])


def fused_operands(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``reference``'s keyword operands of a fused pair (none for other layers)."""
    names = ("prologue_filter", "prologue_bias", "depthwise_filter", "expansion_bias")
    return {name: data[name] for name in names if name in data}


@pytest.mark.parametrize("name", TINY)
def test_reference_equals_naive_loops(name):
    layer = TINY[name]
    data = random_inputs(layer, 2, "fp64", seed=1)
    expected = naive_layer(layer, data)
    np.testing.assert_allclose(
        reference(layer, data["input"], data["filter"], **fused_operands(data)),
        expected,
        rtol=0,
        atol=1e-12,
    )


@pytest.mark.parametrize("name", TINY)
def test_executor_equals_naive_loops(manticore, name):
    """One output pixel per task and one slice per step: every halo and padding case."""
    layer = TINY[name]
    data = random_inputs(layer, 2, "fp64", seed=2)
    out = execute(build_program(layer, minimal_mapping(layer), manticore, "fp64", 2), data)
    expected = naive_layer(layer, data)
    np.testing.assert_allclose(out.output, expected, rtol=0, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    layer=st.one_of(conv_layers(max_hw=6, max_c=4), fc_layers(max_c=6)),
    out_h=st.integers(1, 3),
    in_c=st.integers(1, 4),
    seed=st.integers(0, 9),
)
def test_reference_and_executor_equal_naive_on_random_tiny_layers(
    manticore, layer, out_h, in_c, seed
):
    data = random_inputs(layer, 1, "fp32", seed)
    wide = {name: a.astype(np.float64) for name, a in data.items()}
    expected = naive_layer(layer, wide)
    if not layer.fuses:
        scale = naive_conv(layer, np.abs(wide["input"]), np.abs(wide["filter"]))
    else:  # the first layer's scale carried through the second (``check.error_scale``)
        scale = exact_and_scale(layer, data, "fp32")[2]
    np.testing.assert_allclose(
        reference(layer, wide["input"], wide["filter"], **fused_operands(wide)),
        expected,
        rtol=0,
        atol=1e-12,
    )
    tile = Tile(out_h=min(out_h, layer.h_out), in_c=min(in_c, layer.cin_per_group))
    mapping = Mapping("output_stack", delta_o=layer.cout_per_group, tile=tile)
    out = execute(build_program(layer, mapping, manticore, "fp32"), data).output
    assert np.all(np.abs(out - expected) <= tolerance(layer, "fp32") * scale)
