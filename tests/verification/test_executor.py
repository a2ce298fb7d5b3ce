"""The executor's memory model: allocation, explicit copies, and each precondition."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autotune import Buffers, Layer, Machine, Mapping, Tile
from autotune.ir.layer import Activation, Expansion
from autotune.verification.build import build_program
from autotune.verification.check import random_inputs
from autotune.verification.executor import AllocationError, ScheduleError, execute
from autotune.verification.program import (
    Alloc,
    Conv,
    Depthwise,
    Load,
    Reduce,
    Region,
    Store,
    Zero,
)

CONV = Layer("c", "conv", 6, 6, 2, 4, 3, 3, pad_h=1, pad_w=1)
FC = Layer.fc("fc", 1, 2, 8, 4)


@pytest.fixture
def program(manticore):
    return build_program(CONV, Mapping("output_stack", delta_o=2, tile=Tile(out_h=3)), manticore)


@pytest.fixture
def fc_program(manticore):
    return build_program(FC, Mapping("input_parallel", delta_o=4, tile=Tile(in_c=2)), manticore)


def run(program):
    return execute(program, random_inputs(program.layer, program.batch, program.precision))


def first(program, kind, **match):
    return next(
        i
        for i, op in enumerate(program.ops)
        if isinstance(op, kind) and all(getattr(op, k) == v for k, v in match.items())
    )


def mutate(program, index, **changes):
    ops = list(program.ops)
    ops[index] = dataclasses.replace(ops[index], **changes)
    return program.replace_ops(ops)


def rejected(program, *words):
    with pytest.raises(ScheduleError) as caught:
        run(program)
    for word in words:
        assert word in str(caught.value), str(caught.value)
    return caught.value


def test_program_lists_each_clusters_operations_in_order(program):
    clusters = {op.cluster for op in program.ops}
    # One wave of fewer tasks than clusters: task t on the machine's t-th cluster of a wave,
    # spread over the quadrants (``Machine.wave_order``).
    assert sorted(clusters) == sorted(Machine.preset("manticore").wave_order()[: len(clusters)])
    merged = sorted((i for c in clusters for i, op in enumerate(program.ops) if op.cluster == c))
    assert merged == list(range(len(program.ops)))
    for c in clusters:
        ops = program.on_cluster(c)
        assert isinstance(ops[0], Alloc) and isinstance(ops[-1], Store)


def test_outputs_are_copies_and_inputs_are_left_alone(program):
    data = random_inputs(CONV, 1, "fp32")
    before = {k: v.copy() for k, v in data.items()}
    out = execute(program, data)
    for name in data:
        np.testing.assert_array_equal(data[name], before[name])
        assert not np.shares_memory(out.output, data[name])
    assert out.stats.op_counts == program.op_counts()
    assert out.stats.store_bytes == out.output.size * 4


def test_allocation_past_l1_fails(program):
    index = first(program, Alloc, buffer="output")
    error = rejected(mutate(program, index, nbytes=program.l1_bytes), "overflows the")
    assert isinstance(error, AllocationError) and error.index == index


def test_a_buffer_is_allocated_once(program):
    ops = list(program.ops)
    ops.insert(1, ops[0])
    rejected(program.replace_ops(ops), "already allocated")


def test_load_into_a_buffer_never_allocated(program):
    rejected(mutate(program, first(program, Load), cluster=program.clusters - 1), "never allocated")


def test_load_outside_the_tensor(program):
    index = first(program, Load)
    src = program.ops[index].src
    moved = Region("input", src.box[:2] + ((5, 8),) + src.box[3:])
    rejected(mutate(program, index, src=moved), "lies outside input of shape")


def test_load_larger_than_its_buffer(program):
    index = first(program, Load)
    rejected(mutate(program, index, offset=10_000), "does not fit in buffer 'input'")


def test_conv_with_the_wrong_filters(program):
    index = first(program, Load)
    f = next(
        i
        for i in range(index, len(program.ops))
        if isinstance(program.ops[i], Load) and program.ops[i].src.tensor == "filter"
    )
    box = program.ops[f].src.box
    wrong = Region("filter", ((2, 4),) + box[1:])
    rejected(
        mutate(program, f, src=wrong), "block needs filter[0:1, 0:1, 0:3, 0:3]", "holds filter[2:4"
    )


def test_conv_into_channels_outside_its_accumulator(program):
    index = first(program, Conv)
    rejected(mutate(program, index, out_channels=(2, 4)), "into output channels 2:4")


def test_conv_mixing_groups(manticore):
    grouped = Layer("g", "conv", 4, 4, 4, 4, 1, 1, groups=2)
    mapping = Mapping(
        "output_stack", delta_o=4, tile=Tile(in_c=4), buffers=Buffers(filter_bytes=1024)
    )
    program = build_program(grouped, mapping, manticore)
    index = first(program, Conv, groups=2)
    rejected(mutate(program, index, groups=1), "are not the same 1 group(s)")


def test_store_twice(program):
    ops = list(program.ops)
    ops.append(ops[first(program, Store)])
    rejected(program.replace_ops(ops), "already stored")


def test_store_before_accumulating(program):
    ops = list(program.ops)
    index = first(program, Store)
    ops.insert(first(program, Conv), ops.pop(index))
    rejected(program.replace_ops(ops), "with 0 of the 4", "missing")


def test_reduction_counted_twice(fc_program):
    ops = list(fc_program.ops)
    index = first(fc_program, Reduce)
    ops.insert(index, ops[index])
    rejected(fc_program.replace_ops(ops), "too many: something was accumulated twice")


def test_reduction_with_itself(fc_program):
    index = first(fc_program, Reduce)
    rejected(mutate(fc_program, index, src_cluster=fc_program.ops[index].cluster), "with itself")


def test_inputs_of_the_wrong_shape(program):
    data = random_inputs(CONV, 2, "fp32")
    with pytest.raises(ValueError, match="input has shape"):
        execute(program, data)


# -- a fused 1x1 and depthwise (Layer.expansion) ------------------------------------------

EXPANDED = Layer(
    "x", "conv", 6, 6, 3, 4, 3, 3, 2, 2, 1, 1, expansion=Expansion(True, Activation("relu"))
)


@pytest.fixture
def expanded(manticore):
    mapping = Mapping("output_stack", delta_o=2, tile=Tile(out_h=2, in_c=1))
    return build_program(EXPANDED, mapping, manticore)


def test_a_fused_expansion_runs(expanded):
    assert run(expanded).output.shape == (1, 4, 3, 3)


def test_a_depthwise_before_its_expansion_is_summed_is_refused(expanded):
    # drop the task's last 1x1 block: its accumulator misses an input channel
    index = first(expanded, Depthwise) - 2
    assert isinstance(expanded.ops[index], Conv)
    ops = list(expanded.ops)
    del ops[index - 1 : index + 1]  # its filter load and its block
    rejected(expanded.replace_ops(ops), "pairs summed in")


def test_a_depthwise_over_the_wrong_rows_is_refused(expanded):
    index = first(expanded, Depthwise)
    op = expanded.ops[index]
    images, channels, rows, cols = op.result.box
    moved = Region("output", (images, channels, (rows[0] + 1, rows[1] + 1), cols))
    rejected(mutate(expanded, index, result=moved), "holds")


def test_an_expansion_block_into_the_output_tile_is_refused(expanded):
    index = first(expanded, Conv)
    zero = first(expanded, Zero)
    rejected(
        mutate(expanded, index, out_offset=expanded.ops[zero].offset),
        "not an accumulator of expansion",
    )
