"""Deliberately broken schedules: each must be rejected, with a reason that says why."""

from __future__ import annotations

import pytest

from autotune import Layer, Mapping, Tile
from autotune.verification import faults
from autotune.verification.build import build_program
from autotune.verification.check import verify_program

STRIDED = Layer("strided", "conv", 9, 8, 3, 5, 3, 3, 2, 2, 1, 1)  # 5 outputs: remainder of 1
FC = Layer.fc("fc", 2, 2, 24, 10)
SHARED = Layer("shared", "conv", 6, 6, 8, 12, 3, 3, pad_h=1, pad_w=1)  # 8 slices, 4 stacks
REPORT = Layer("report", "conv", 32, 32, 128, 128, 3, 3, pad_h=1, pad_w=1)

PROGRAMS = {
    "bands": lambda m: build_program(
        STRIDED, Mapping("output_stack", delta_o=2, tile=Tile(out_h=2)), m
    ),
    "fc": lambda m: build_program(
        FC, Mapping("input_parallel", delta_o=4, batch_tile=2, tile=Tile(in_c=4)), m, batch=2
    ),
    "shared": lambda m: build_program(
        SHARED, Mapping("output_stack_shared", delta_o=3, share_group=4), m
    ),
    "report": lambda m: build_program(REPORT, Mapping.from_report(2, delta_o=24), m),
    # KaNN's spatial splitting: one stack, 3 row bands in one wave, filters multicast
    "multicast": lambda m: build_program(
        SHARED,
        Mapping("output_stack", delta_o=12, tile=Tile(out_h=2), multicast=True),
        multicast_machine(),
    ),
}


def multicast_machine():
    """MPPA3 (5 clusters, DMA multicast) given an fp32 rate so the fp32 executor runs it."""
    import dataclasses

    from autotune import Machine

    mppa3 = Machine.preset("mppa3")
    return dataclasses.replace(mppa3, macs_per_cycle_per_core={"fp16": 16, "fp32": 8})


# fault, program it breaks, words the reason must contain
CASES = [
    (
        "overflow_l1",
        "report",
        [
            "Alloc on cluster 0",
            "allocating buffer 'output' of 196608 B",
            "overflows the 131072 B of L1",
        ],
    ),
    (
        "drop_halo_row",
        "bands",
        [
            "Conv on cluster 0",
            "stride (2, 2) needs input images 0:1, rows 0:4",
            "holds input[0:1, 0:1, 0:3, 0:8]",
            "missing rows 3:4",
        ],
    ),
    ("skip_remainder_stack", "bands", ["output words were never stored", "channels 4:5"]),
    ("skip_remainder_stack", "fc", ["output words were never stored", "channels 8:10"]),
    (
        "drop_reduction_step",
        "fc",
        [
            "Store on cluster 0",
            "of the 96 (output channel, input channel) pairs",
            "a skipped input step or reduction step",
        ],
    ),
    (
        "wrong_stride",
        "bands",
        [
            "with stride (1, 1) needs input images 0:1, rows 0:3, columns 0:5",
            "buffer 'input' holds input[0:1, 0:1, 0:4, 0:8]",
        ],
    ),
    (
        "forward_from_predecessor",
        "shared",
        [
            "Copy on cluster 0",
            "reads input[0:1, 1:2",
            "from buffer 'share' of cluster 3",
            "which holds input[0:1, 3:4",
            "never loaded this slice",
        ],
    ),
    ("skip_input_load", "bands", ["buffer 'input' of cluster 0 holds nothing"]),
    ("skip_input_load", "report", ["buffer 'input' of cluster 0 holds nothing"]),
    ("skip_input_step", "report", ["with 3048 of the 3072", "missing"]),
    ("skip_input_step", "fc", ["missing: a skipped input step"]),
    (
        "drop_multicast_receiver",
        "multicast",
        ["Conv on cluster 2", "buffer 'filter' of cluster 2 holds nothing"],
    ),
]


@pytest.fixture(scope="module")
def programs():
    from autotune import Machine

    machine = Machine.preset("manticore")
    return {name: build(machine) for name, build in PROGRAMS.items()}


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_unbroken_programs_verify(programs, name):
    v = verify_program(programs[name])
    assert v.ok, v.errors


@pytest.mark.parametrize("fault, program, words", CASES, ids=[f"{f}-{p}" for f, p, _ in CASES])
def test_broken_schedule_is_rejected_with_its_reason(programs, fault, program, words):
    v = verify_program(faults.FAULTS[fault](programs[program]))
    assert not v.ok and len(v.errors) == 1
    for word in words:
        assert word in v.errors[0], v.errors[0]


def test_every_fault_is_exercised():
    assert {fault for fault, _, _ in CASES} == set(faults.FAULTS)


@pytest.mark.parametrize(
    "fault, program",
    [
        ("drop_halo_row", "report"),
        ("skip_remainder_stack", "shared"),
        ("drop_reduction_step", "bands"),
        ("wrong_stride", "fc"),
        ("forward_from_predecessor", "report"),
        ("drop_multicast_receiver", "report"),
    ],
)
def test_a_fault_with_nothing_to_break_says_so(programs, fault, program):
    with pytest.raises(ValueError):
        faults.FAULTS[fault](programs[program])
