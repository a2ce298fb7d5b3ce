"""Verifying a chiplet split: every part executed on its slices, the output assembled and
compared with the whole layer's reference; missing or doubled parts are rejected."""

from __future__ import annotations

import pytest

from autotune import Layer, Mapping, verify
from autotune.chiplets import SPLITS, split_parts
from autotune.chiplets.verification import drop_part, duplicate_part, verify_package
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
