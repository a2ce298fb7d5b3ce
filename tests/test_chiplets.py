"""Chiplet splits (autotune/chiplets.py): every output word computed exactly once, part 0 the
largest, what crosses the die-to-die links, single-chiplet machines refusing splits, and the
splits of every layer kind."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune import Layer, Machine, Mapping, MappingError, analyze, simulate, verify
from autotune.chiplets import (
    SPLITS,
    balanced,
    coverage,
    link_bytes,
    part_mapping,
    solve_layer,
    split_parts,
)
from autotune.ir.options import TuneOptions
from tests.kinds import REALISTIC
from tests.strategies import kind_layers, layers


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


@settings(max_examples=60, deadline=None)
@given(
    layer=kind_layers(),
    batch=st.integers(1, 5),
    chiplets=st.integers(2, 5),
    split=st.sampled_from(SPLITS),
)
def test_parts_of_every_kind_are_valid_sub_layers(layer, batch, chiplets, split):
    """A split of a layer without weights is one of valid sub-layers of its kind that cover
    the output once, or is refused: a softmax's channels, a pool's band whose padding rows
    would not be zeros."""
    try:
        parts = split_parts(layer, split, chiplets, batch)
    except MappingError as error:
        assert (split, layer.kind) == ("output_channels", "softmax") or (
            split == "spatial" and layer.kind in ("maxpool", "avgpool")
        ), error
        return
    assert (coverage(layer, parts, batch) == 1).all()
    assert sum(p.batch * p.layer.ops for p in parts) == batch * layer.ops
    for p in parts:
        assert p.layer.kind == layer.kind and p.layer.epilogue == layer.epilogue
        assert p.layer.h_out == p.out_rows[1] - p.out_rows[0]
        assert p.layer.c_out == p.out_channels[1] - p.out_channels[0]
        assert p.layer.c_in == p.in_channels[1] - p.in_channels[0]
        assert p.layer.h_in == p.in_rows[1] - p.in_rows[0]
    if layer.kind == "upsample" or split != "spatial":
        assert sum(link_bytes(parts).values()) == 0  # each chiplet holds what it reads


def test_an_upsample_is_split_by_bands_of_input_rows():
    up = REALISTIC["upsample"]  # 13 input rows, 26 output rows
    parts = split_parts(up, "spatial", 4, batch=1)
    assert [p.in_rows for p in parts] == [(0, 4), (4, 7), (7, 10), (10, 13)]
    assert [p.out_rows for p in parts] == [(0, 8), (8, 14), (14, 20), (20, 26)]


@pytest.mark.parametrize("kind", sorted(REALISTIC))
def test_package_solves_every_kind(kind):
    """On the package: the best split of each kind (a softmax never splits its channels, a
    padded max pool never its rows) and every part simulated."""
    package = Machine.preset("manticore-package")
    layer = REALISTIC[kind]
    sol = solve_layer(layer, package, "fp32", 2, options=TuneOptions(search="exhaustive"))
    assert sol.analysis.fits and sol.analysis.ops == 2 * layer.ops
    if kind == "softmax":
        assert sol.mapping.chiplet_split != "output_channels"
    for split in SPLITS:
        mapping = sol.mapping.with_(chiplet_split=split)
        try:
            a = analyze(layer, mapping, package, "fp32", 2)
        except MappingError:
            assert (kind, split) in (("softmax", "output_channels"), ("maxpool", "spatial"))
            continue
        if a.fits:
            r = simulate(layer, mapping, package, "fp32", 2)
            assert r.hbm_bytes == a.offchip_bytes and r.ops == a.ops
