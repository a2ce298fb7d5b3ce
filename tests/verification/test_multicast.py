"""Multicast schedules (MPPA3, seed 003 Sec. IV) execute correctly and move exactly the
off-chip bytes the cost model counts."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import assume, given, settings

from autotune import Layer, Machine, Mapping, Tile, analyze
from autotune.tiling import MappingError
from autotune.verification.build import build_program
from autotune.verification.check import verify_program
from autotune.verification.program import Multicast
from tests.strategies import multicast_mapped_layers


def multicast_machine() -> Machine:
    """MPPA3 (5 clusters, DMA multicast) given an fp32 rate so the fp32 executor runs it."""
    mppa3 = Machine.preset("mppa3")
    return dataclasses.replace(mppa3, macs_per_cycle_per_core={"fp16": 16, "fp32": 8})


@settings(max_examples=40, deadline=None)
@given(multicast_mapped_layers())
def test_multicast_programs_verify_and_move_the_models_bytes(case):
    layer, mapping, batch, _ = case
    machine = multicast_machine()
    a = analyze(layer, mapping, machine, "fp32", batch)
    assume(a.fits and a.tasks <= 400 and a.macs <= 2_000_000)
    v = verify_program(build_program(layer, mapping, machine, "fp32", batch))
    assert v.ok, v.errors
    assert v.bytes_moved["load"] == a.offchip_load_words * a.word_bytes
    assert v.bytes_moved["store"] == a.offchip_store_words * a.word_bytes
    assert v.bytes_moved["intercluster"] == 0


def test_kann_channel_split_reads_the_input_once_and_multicasts_it():
    layer = Layer("c", "conv", 6, 6, 8, 10, 3, 3, pad_h=1, pad_w=1)
    machine = multicast_machine()
    mapping = Mapping("output_stack", delta_o=2, multicast=True)  # 5 stacks, one wave
    program = build_program(layer, mapping, machine, "fp32")
    casts = [op for op in program.ops if isinstance(op, Multicast)]
    assert casts and all(op.src.tensor == "input" and len(op.targets) == 5 for op in casts)
    v = verify_program(program)
    assert v.ok and v.bytes_moved["load"] == (6 * 6 * 8 + layer.weight_words) * 4
    assert v.bytes_moved["multicast_extra"] == 4 * 6 * 6 * 8 * 4


def test_multicast_needs_a_machine_that_multicasts(manticore):
    layer = Layer("c", "conv", 6, 6, 8, 10, 3, 3, pad_h=1, pad_w=1)
    mapping = Mapping("output_stack", delta_o=2, multicast=True)
    with pytest.raises(MappingError, match="no DMA multicast"):
        build_program(layer, mapping, manticore, "fp32")
    with pytest.raises(ValueError, match="output_stack only"):
        Mapping("output_stack_shared", share_group=4, multicast=True)
    program = build_program(layer, mapping, multicast_machine(), "fp32")
    refused = verify_program(dataclasses.replace(program, multicast=False))
    assert not refused.ok and "no DMA multicast" in refused.errors[0]


def test_grouped_layers_multicast_filters_only():
    layer = Layer("g", "conv", 8, 8, 8, 8, 3, 3, pad_h=1, pad_w=1, groups=2)
    machine = multicast_machine()
    mapping = Mapping("output_stack", delta_o=8, tile=Tile(out_h=2), multicast=True)
    program = build_program(layer, mapping, machine, "fp32")
    casts = [op for op in program.ops if isinstance(op, Multicast)]
    assert casts and all(op.src.tensor == "filter" for op in casts)
    v = verify_program(program)
    a = analyze(layer, mapping, machine, "fp32")
    assert v.ok and v.bytes_moved["load"] == a.offchip_load_words * 4
