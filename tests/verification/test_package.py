"""Verifying a chiplet split: every part executed on its slices, the output assembled and
compared with the whole layer's reference; missing or doubled parts are rejected."""

from __future__ import annotations

import numpy as np
import pytest

from autotune import Layer, Mapping, verify
from autotune.chiplets import SPLITS, execute_layer, split_parts
from autotune.chiplets.verification import drop_part, duplicate_part, verify_package
from autotune.ir.layer import Activation, Epilogue, Expansion
from autotune.verification.check import random_inputs
from autotune.verification.reference import reference
from tests.package_machine import small_package

PACKAGE = small_package(chiplets=3)
LAYERS = [
    Layer("strided", "conv", 13, 11, 6, 10, 3, 3, stride_h=2, pad_h=1, pad_w=1),
    Layer("grouped", "conv", 9, 9, 8, 8, 3, 3, pad_h=1, pad_w=1, groups=4),
    Layer("big_kernel", "conv", 10, 7, 3, 5, 5, 3, pad_h=2, pad_w=1),
    Layer.fc("fc", 2, 2, 12, 7),
]


def _mapping(layer: Layer, split: str) -> Mapping:
    if layer.kind == "fc":
        return Mapping(
            "input_parallel", delta_o=3, batch_tile=2, tile=_tile(4), chiplet_split=split
        )
    # a softmax keeps all its channels in one stack and step (tiling)
    if layer.kind == "softmax":
        tile = _tile(layer.c_in)
        return Mapping(
            "output_stack", delta_o=layer.c_out, batch_tile=2, tile=tile, chiplet_split=split
        )
    return Mapping("output_stack", delta_o=2, batch_tile=2, chiplet_split=split)


def _tile(in_c):
    from autotune import Tile

    return Tile(in_c=in_c)


@pytest.mark.parametrize("layer", LAYERS, ids=lambda la: la.name)
@pytest.mark.parametrize("split", SPLITS)
def test_every_split_verifies(layer, split):
    v = verify(layer, _mapping(layer, split), PACKAGE, "fp32", batch=4, seed=3)
    assert v.ok, v.errors
    assert v.macs == 4 * layer.macs


@pytest.mark.parametrize(
    "fault, reason",
    [(drop_part, "no chiplet computes"), (duplicate_part, "several chiplets compute")],
)
@pytest.mark.parametrize("split", ["output_channels", "spatial", "images"])
def test_missing_or_doubled_parts_are_rejected(fault, reason, split):
    layer = LAYERS[0]
    mapping = _mapping(layer, split)
    parts = fault(split_parts(layer, split, PACKAGE.chiplets, 4))
    v = verify_package(layer, mapping, PACKAGE, "fp32", 4, parts=parts)
    assert not v.ok and any(reason in e for e in v.errors), v.errors


def test_a_part_reading_the_wrong_rows_is_rejected():
    from dataclasses import replace

    layer = LAYERS[0]
    parts = list(split_parts(layer, "spatial", PACKAGE.chiplets, 2))
    r0, r1 = parts[1].in_rows
    parts[1] = replace(parts[1], in_rows=(r0 + 1, r1 + 1))  # one row too low
    v = verify_package(layer, _mapping(layer, "spatial"), PACKAGE, "fp32", 2, parts=tuple(parts))
    assert not v.ok and "numerical mismatch" in v.errors[0]


# -- the kinds beyond conv/fc and the epilogue on a package ----------------------------------

EPILOGUE = Epilogue(bias=True, residual=True, activation=Activation("silu"))
KINDS = [
    Layer("conv_epilogue", "conv", 9, 7, 4, 6, 3, 3, pad_h=1, pad_w=1, epilogue=EPILOGUE),
    Layer("depthwise_epilogue", "conv", 9, 9, 6, 6, 3, 3, 2, 2, 1, 1, groups=6,
          epilogue=EPILOGUE),
    Layer("maxpool", "maxpool", 9, 8, 6, 6, 3, 3, 2, 2, 1, 1, groups=6, ceil_mode=True),
    Layer("avgpool", "avgpool", 9, 8, 6, 6, 3, 3, 2, 2, 1, 1, groups=6),
    Layer("add", "add", 6, 5, 12, 6, groups=6,
          epilogue=Epilogue(residual=True, activation=Activation("relu"))),
    Layer("upsample", "upsample", 4, 5, 6, 6, groups=6, upscale=2),
    Layer("softmax", "softmax", 5, 4, 6, 6, epilogue=Epilogue(residual=True)),
]  # fmt: skip

#: The splits ``chiplets.split`` defines correctly for each kind (the others: a band's explicit
#: zero padding rows are not a max pool's or an uncounted average's padding, a ceil-mode
#: band misses its overhang, an upsample's band reads other rows, a softmax's channels
#: cannot be divided); the split belongs to the cost model's side, which is to refuse them.
KEEPS = {
    "conv_epilogue": SPLITS,
    "depthwise_epilogue": SPLITS,
    "add": SPLITS,
    "softmax": ("none", "images", "spatial"),
}


@pytest.mark.parametrize("layer", KINDS, ids=lambda la: la.name)
@pytest.mark.parametrize("split", SPLITS)
def test_every_kind_verifies_on_a_package(layer, split):
    if split not in KEEPS.get(layer.name, ("none", "images", "output_channels")):
        pytest.skip(f"the {split} split of {layer.kind} is not yet defined for its kind")
    v = verify(layer, _mapping(layer, split), PACKAGE, "fp32", batch=4, seed=3)
    assert v.ok, v.errors
    assert ("epilogue" in v.bytes_moved) == (layer.epilogue.bias or layer.epilogue.residual)


def test_execute_layer_on_a_package_equals_the_reference():
    """The entry point for running a network: a split layer's parts run on their chiplets
    on the operands given, the output assembled."""
    layer = KINDS[0]
    data = random_inputs(layer, 4, "fp64", seed=1)
    operands = dict(bias=data["bias"], residual=data["residual"])
    expected = reference(layer, data["input"], data["filter"], **operands)
    for split in SPLITS:
        out = execute_layer(
            layer,
            _mapping(layer, split),
            PACKAGE,
            data["input"],
            data["filter"],
            precision="fp64",
            **operands,
        )
        np.testing.assert_allclose(out, expected, rtol=0, atol=1e-12, err_msg=split)


#: Fused expansions (``Layer.expansion``) whose padding a band must not expand: stride 1 and
#: 2, the 1x1's bias and a clip above 0, so that an expanded zero row would show.
EXPANSIONS = [
    Layer(
        f"expand_s{stride}",
        "conv",
        11,
        7,
        3,
        4,
        3,
        3,
        stride,
        stride,
        1,
        1,
        epilogue=Epilogue(bias=True),
        expansion=Expansion(bias=True, activation=Activation("clip", low=0.25, high=1.0)),
    )
    for stride in (1, 2)
]


@pytest.mark.parametrize("layer", EXPANSIONS, ids=lambda la: la.name)
@pytest.mark.parametrize("split", SPLITS)
def test_a_fused_expansion_verifies_on_a_package(layer, split):
    """A band keeps its share of the padding (an edge band pads, the others do not)."""
    v = verify(layer, _mapping(layer, split), PACKAGE, "fp32", batch=4, seed=5)
    assert v.ok, v.errors
    if split == "spatial":
        parts = split_parts(layer, split, PACKAGE.chiplets, 4)
        assert parts[0].layer.pad_h == 1 and parts[-1].layer.pad_end_h == 1
        assert all(p.layer.pad_h == 0 for p in parts[1:])
        assert all(p.layer.pad_end_h == 0 for p in parts[:-1])
