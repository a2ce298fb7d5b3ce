"""fp16 verification as FP16.32 (seed 003 Sec. II): fp16 operands, fp32 partial sums, fp16
outputs rounded at the store."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autotune import Layer, Machine, Mapping, Tile, verify
from autotune.search.space import hand_choice
from autotune.verification import faults
from autotune.verification.build import build_program
from autotune.verification.check import (
    compare,
    random_inputs,
    tolerance,
    verify_program,
)
from autotune.verification.executor import execute
from autotune.verification.reference import reference

LAYERS = [
    Layer("c", "conv", 12, 12, 8, 20, 3, 3, pad_h=1, pad_w=1),
    Layer("strided", "conv", 9, 8, 3, 5, 3, 3, 2, 2, 1, 1),
    Layer("grouped", "conv", 7, 7, 8, 8, 3, 3, pad_h=1, pad_w=1, groups=4),
    Layer.fc("fc", 2, 2, 64, 10),
]


@pytest.fixture(scope="module")
def mppa3() -> Machine:
    return Machine.preset("mppa3")


@pytest.fixture(scope="module")
def tiny(mppa3) -> Machine:
    """An fp16 machine with 16 KiB of L1 and one level of 4 clusters: tiles must be small,
    so outputs are accumulated across several input steps and reductions."""
    level = dataclasses.replace(mppa3.levels[0], fanout=4)
    return dataclasses.replace(mppa3, name="tiny-fp16", l1_bytes=16384, levels=(level,))


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: layer.name)
def test_hand_choice_verifies_in_fp16(mppa3, layer):
    v = verify(layer, hand_choice(layer, mppa3, "fp16", 2), mppa3, "fp16", batch=2)
    assert v.ok, v.errors
    assert v.precision == "fp16" and 0 < v.max_rel_error <= v.tolerance


@pytest.mark.parametrize(
    "layer, mapping",
    [
        (LAYERS[0], Mapping("output_stack", delta_o=4, tile=Tile(out_h=3, out_w=5, in_c=2))),
        (
            LAYERS[0],
            Mapping("output_stack_shared", delta_o=5, share_group=4, tile=Tile(out_h=4, in_c=1)),
        ),
        (LAYERS[3], Mapping("input_parallel", delta_o=5, batch_tile=1, tile=Tile(in_c=8))),
    ],
    ids=["steps", "shared", "reduction"],
)
def test_steps_forwarding_and_reductions_verify_in_fp16(tiny, layer, mapping):
    v = verify(layer, mapping, tiny, "fp16", batch=2)
    assert v.ok, v.errors
    assert v.bytes_moved["load"] > 0 and v.bytes_moved["load"] % 2 == 0


def test_partial_sums_are_fp32_and_the_output_is_rounded_once(tiny):
    """The output equals the fp32-accumulated result rounded to fp16, far closer than an
    fp16 accumulation would be: summing 64 input steps in fp16 would round 64 times."""
    layer = Layer.fc("fc", 1, 1, 512, 6)
    mapping = Mapping("input_parallel", delta_o=6, tile=Tile(in_c=8))
    program = build_program(layer, mapping, tiny, "fp16")
    data = random_inputs(layer, 1, "fp16", seed=3)
    out = execute(program, data).output
    assert out.dtype == np.float16
    x, w = (data[n].astype(np.float64) for n in ("input", "filter"))
    exact = reference(layer, x, w)
    assert np.all(np.abs(out - exact) <= 2.0**-11 * np.abs(exact) + 1e-5 * 512)
    steps = np.zeros_like(exact, dtype=np.float16)
    for k in range(0, 512, 8):  # the same sum in fp16 steps: what FP16.32 avoids
        part = reference(Layer.fc("step", 1, 1, 8, 6), x[:, k : k + 8], w[:, k : k + 8])
        steps = (steps + part.astype(np.float16)).astype(np.float16)
    assert np.abs(out - exact).max() < np.abs(steps - exact).max()


def test_tolerance_includes_one_fp16_rounding():
    layer = LAYERS[0]
    assert tolerance(layer, "fp16") == pytest.approx(
        10 * np.sqrt(8 * 9 + 1) * (2.0**-24 + 2.0**-53) + 2 * 2.0**-11
    )
    assert tolerance(layer, "fp16") > tolerance(layer, "fp32")


def test_a_skipped_input_step_is_caught_in_fp16(tiny):
    layer = Layer("c", "conv", 8, 8, 16, 4, 3, 3, pad_h=1, pad_w=1)
    program = build_program(
        layer, Mapping("output_stack", delta_o=4, tile=Tile(in_c=2)), tiny, "fp16"
    )
    assert verify_program(program).ok
    v = verify_program(faults.skip_input_step(program))
    assert not v.ok and "missing" in v.errors[0]


def test_the_fp16_tolerance_still_sees_a_missing_input_channel():
    """Numbers alone (without the executor's pair count) reject an output that lacks one
    of 16 input channels at fp16 tolerance."""
    layer = Layer("c", "conv", 8, 8, 16, 4, 3, 3, pad_h=1, pad_w=1)
    data = random_inputs(layer, 1, "fp16")
    x, w = (data[n].astype(np.float64) for n in ("input", "filter"))
    dropped = x.copy()
    dropped[:, 5] = 0.0
    wrong = reference(layer, dropped, w).astype(np.float16)
    scale = reference(layer, np.abs(x), np.abs(w))
    _, max_rel, errors = compare(wrong, reference(layer, x, w), scale, tolerance(layer, "fp16"))
    assert errors and max_rel > 10 * tolerance(layer, "fp16")
