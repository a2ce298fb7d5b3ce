"""Chiplet splits (autotune/chiplets.py): every output word computed exactly once, part 0 the
largest, what crosses the die-to-die links, and single-chiplet machines refusing splits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune import Layer, Machine, Mapping, MappingError, analyze, simulate, verify
from autotune.chiplets import SPLITS, balanced, coverage, link_bytes, part_mapping, split_parts
from tests.strategies import layers


@settings(max_examples=60, deadline=None)
@given(
    layer=layers(),
    batch=st.integers(1, 5),
    chiplets=st.integers(2, 5),
    split=st.sampled_from(SPLITS),
    wb=st.sampled_from([4, 8]),
)
def test_parts_cover_the_output_once(layer, batch, chiplets, split, wb):
    parts = split_parts(layer, split, chiplets, batch, wb)
    assert (coverage(layer, parts, batch) == 1).all()
    assert 1 <= len(parts) <= chiplets
    assert sum(p.batch * p.layer.macs for p in parts) == batch * layer.macs
    first = parts[0]
    for p in parts:
        assert p.batch * p.layer.macs <= first.batch * first.layer.macs  # part 0 is largest
        assert p.layer.h_out == p.out_rows[1] - p.out_rows[0]
        assert p.layer.c_out == p.out_channels[1] - p.out_channels[0]
        assert p.layer.c_in == p.in_channels[1] - p.in_channels[0]
        assert p.layer.h_in == p.in_rows[1] - p.in_rows[0]
        # the part's mapping is the solved mapping's, made to apply to a smaller part
        m = Mapping("output_stack", delta_o=first.layer.c_out, batch_tile=first.batch)
        if layer.kind == "conv":
            assert part_mapping(m, p).delta_o <= p.layer.c_out
    remote = sum(link_bytes(parts).values())
    if split in ("none", "images") or (split == "output_channels" and layer.groups > 1):
        assert remote == 0
    if split == "output_channels" and layer.groups == 1:
        # each chiplet reads the input channels its siblings hold
        image = batch * layer.h_in * layer.w_in * wb
        held = balanced(layer.c_in, chiplets)
        assert remote == sum(
            (layer.c_in - (held[i][1] - held[i][0]) if i < len(held) else layer.c_in) * image
            for i in range(len(parts))
        )


def test_spatial_halo_of_a_3x3_band_is_one_row_per_neighbour():
    conv = Layer("c", "conv", 16, 10, 3, 4, 3, 3, pad_h=1, pad_w=1)
    parts = split_parts(conv, "spatial", 4, batch=2, word_bytes=4)
    row = 2 * 10 * 3 * 4
    assert [p.remote for p in parts] == [{1: row}, {0: row, 2: row}, {1: row, 3: row}, {2: row}]
    assert [p.layer.h_in for p in parts] == [6, 6, 6, 6]  # 4 rows + halo, padding explicit


def test_images_split_with_batch_one_idles_the_other_chiplets():
    conv = Layer("c", "conv", 8, 8, 4, 4, 3, 3, pad_h=1, pad_w=1)
    parts = split_parts(conv, "images", 4, batch=1)
    assert len(parts) == 1 and parts[0].layer == conv


def test_single_chiplet_machines_refuse_a_split(manticore):
    conv = Layer("c", "conv", 8, 8, 4, 4, 3, 3, pad_h=1, pad_w=1)
    mapping = Mapping("output_stack", delta_o=4, chiplet_split="images")
    for stage in (analyze, simulate, verify):
        with pytest.raises(MappingError, match="needs a package"):
            stage(conv, mapping, manticore, "fp32", 2)
    with pytest.raises(ValueError, match="unknown chiplet_split"):
        Mapping("output_stack", chiplet_split="diagonal")
    assert Machine.preset("manticore-package").chiplets == 4
