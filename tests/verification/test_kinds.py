"""The kinds beyond conv/fc and the epilogue: reference, executor and schedule checks.

The reference and the executor are compared with naive loops (``naive``), the pools'
ceil-mode and padding semantics with values worked out by hand from PyTorch's definition,
and, where the ``onnx`` extra is installed, the reference with ONNX's reference evaluator.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from autotune import Layer, Machine, Mapping, Tile, analyze
from autotune.ir.layer import Activation, Epilogue
from autotune.search.space import fits, minimal_mapping
from autotune.verification import faults
from autotune.verification.build import build_program
from autotune.verification.check import (
    compare,
    exact_and_scale,
    random_inputs,
    reduction_length,
    tolerance,
    verify,
    verify_program,
)
from autotune.verification.executor import ScheduleError, execute, expected_shapes
from autotune.verification.program import (
    Alloc,
    Apply,
    Conv,
    Load,
    Program,
    Reduce,
    Region,
    Store,
    Zero,
)
from autotune.verification.reference import reference
from autotune.verification.run import execute_layer, interleave, layer_inputs
from tests.strategies import any_kind_layers, mappings
from tests.verification.naive import naive_layer

RELU = Epilogue(activation=Activation("relu"))


def dw(name: str, kind: str, h: int, w: int, c: int, k: int, s: int, p: int, **kw) -> Layer:
    """A depthwise window layer (pool) of a square kernel."""
    return Layer(name, kind, h, w, c, c, k, k, s, s, p, p, groups=c, **kw)  # type: ignore[arg-type]


TINY = {
    "maxpool 3x3 s2 pad 1": dw("a", "maxpool", 7, 6, 3, 3, 2, 1),
    "maxpool ceil mode overhang": dw("b", "maxpool", 6, 7, 2, 3, 2, 1, ceil_mode=True),
    "maxpool ceil mode stride 1": dw("c", "maxpool", 5, 5, 2, 2, 1, 1, ceil_mode=True),
    "avgpool without the padding": dw("d", "avgpool", 6, 5, 2, 3, 2, 1),
    "avgpool with the padding, ceil": dw(
        "e", "avgpool", 6, 7, 2, 3, 2, 1, ceil_mode=True, count_include_pad=True
    ),
    "avgpool without the padding, ceil": dw("f", "avgpool", 7, 6, 2, 3, 3, 1, ceil_mode=True),
    "global avgpool": dw("g", "avgpool", 4, 4, 5, 4, 1, 0),
    "add of three": Layer("h", "add", 3, 4, 6, 2, groups=2),
    "add + relu": Layer("i", "add", 3, 3, 8, 4, groups=4, epilogue=RELU),
    "mul of three + hardsigmoid": Layer(
        "s", "mul", 3, 4, 6, 2, groups=2,
        epilogue=Epilogue(activation=Activation("hardsigmoid")),
    ),
    "leaky relu": Layer(
        "j", "activation", 3, 3, 3, 3, groups=3,
        epilogue=Epilogue(activation=Activation("leaky_relu", alpha=0.2)),
    ),
    "hardswish + residual": Layer(
        "k", "activation", 3, 2, 2, 2, groups=2,
        epilogue=Epilogue(residual=True, activation=Activation("hardswish")),
    ),
    "upsample x2": Layer("l", "upsample", 3, 2, 2, 2, groups=2, upscale=2),
    "upsample x1 is a copy": Layer("m", "upsample", 3, 3, 2, 2, groups=2),
    "bilinear x2": Layer(
        "t", "upsample", 3, 4, 2, 2, groups=2, upscale=2, upsample_mode="bilinear"
    ),
    "bilinear x3, corners": Layer(
        "u", "upsample", 4, 3, 2, 2, groups=2, upscale=3, upsample_mode="bilinear_corners"
    ),
    "softmax": Layer("n", "softmax", 2, 3, 5, 5),
    "softmax + residual + clip": Layer(
        "o", "softmax", 2, 2, 4, 4,
        epilogue=Epilogue(residual=True, activation=Activation("clip", low=0.1, high=0.5)),
    ),
    "conv + bias + residual + silu": Layer(
        "p", "conv", 5, 5, 3, 4, 3, 3, pad_h=1, pad_w=1,
        epilogue=Epilogue(bias=True, residual=True, activation=Activation("silu")),
    ),
    "depthwise conv + bias + clip": Layer(
        "q", "conv", 5, 4, 3, 3, 3, 3, 2, 2, 1, 1, groups=3,
        epilogue=Epilogue(bias=True, activation=Activation("clip")),
    ),
    "fc + bias + sigmoid": dataclasses.replace(
        Layer.fc("r", 2, 2, 6, 5), epilogue=Epilogue(bias=True, activation=Activation("sigmoid"))
    ),
}  # fmt: skip


def operands(data: dict[str, np.ndarray]) -> dict[str, np.ndarray | None]:
    """``reference``'s keyword operands from ``random_inputs``'s names."""
    return dict(bias=data.get("bias"), residual=data.get("residual"))


@pytest.mark.parametrize("name", TINY)
def test_reference_equals_naive_loops(name):
    layer = TINY[name]
    data = random_inputs(layer, 2, "fp64", seed=1)
    x, w = data["input"], data.get("filter")
    expected = naive_layer(layer, x, w, data.get("bias"), data.get("residual"))
    got = reference(layer, x, w, **operands(data))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("tiles", ["one word per task", "stacks and steps"])
def test_executor_equals_naive_loops(manticore, name, tiles):
    """One output pixel of one channel per task, one slice per step (every halo, padding
    and overhang case); or stacks of two channels over row bands in steps of two slices."""
    layer = TINY[name]
    if tiles == "one word per task":
        mapping = minimal_mapping(layer)
    elif layer.kind == "fc":
        mapping = Mapping("input_parallel", delta_o=2, batch_tile=2, tile=Tile(in_c=4))
    elif layer.kind == "softmax":  # all channels in one stack and step (tiling), row bands
        mapping = Mapping("output_stack", delta_o=layer.c_out, tile=Tile(out_h=2, in_c=layer.c_in))
    else:
        delta_o = 2 if layer.kind != "conv" else 1
        in_c = min(2, layer.cin_per_group * max(1, delta_o // layer.cout_per_group))
        mapping = Mapping("output_stack", delta_o=delta_o, tile=Tile(out_h=2, in_c=in_c))
    data = random_inputs(layer, 2, "fp64", seed=2)
    out = execute(build_program(layer, mapping, manticore, "fp64", 2), data)
    expected = naive_layer(
        layer, data["input"], data.get("filter"), data.get("bias"), data.get("residual")
    )
    np.testing.assert_allclose(out.output, expected, rtol=0, atol=1e-12)


# -- semantics of the pools' padding and ceil mode --------------------------------------------


def test_average_divisors_follow_pytorch():
    """PyTorch's AvgPool2d: ``hend = min(hstart + k, H + pad)`` (the ceil-mode overhang past
    the padded input never counts), the padding counts only with count_include_pad. On a 4x4
    input of ones, kernel 3, stride 2, padding 1, ceil mode: 3x3 outputs whose windows start
    at -1, 1, 3; the last covers input row 3, padding row 4 and overhang row 5."""
    ones = np.ones((1, 1, 4, 4))
    excluded = dw("x", "avgpool", 4, 4, 1, 3, 2, 1, ceil_mode=True)
    included = dataclasses.replace(excluded, count_include_pad=True)
    assert excluded.h_out == 3
    np.testing.assert_array_equal(reference(excluded, ones), np.ones((1, 1, 3, 3)))
    # with the padding counted: rows counted 3, 3, 2 (1 pad + 2, 3, 1 + 1 pad), real 2, 3, 1
    counted, real = np.array([3, 3, 2]), np.array([2, 3, 1])
    expected = np.outer(real, real) / np.outer(counted, counted)
    np.testing.assert_allclose(reference(included, ones)[0, 0], expected, rtol=0, atol=1e-15)


def test_ceil_mode_pool_of_ones_with_overhang_and_no_padding():
    """``nn.AvgPool2d(2, 2, ceil_mode=True)(ones(3, 3))`` is all ones in PyTorch whether or
    not padding is counted (there is none: the overhang is not padding)."""
    for include in (False, True):
        pool = dw("x", "avgpool", 3, 3, 1, 2, 2, 0, ceil_mode=True, count_include_pad=include)
        np.testing.assert_array_equal(reference(pool, np.ones((1, 1, 3, 3))), np.ones((1, 1, 2, 2)))


def test_maxpool_skips_padding_taps():
    """Padding is -inf for a max: an input of negative numbers keeps its maxima."""
    pool = dw("x", "maxpool", 3, 3, 1, 3, 2, 1, ceil_mode=True)
    x = -1.0 - np.arange(9.0).reshape(1, 1, 3, 3)
    np.testing.assert_array_equal(reference(pool, x)[0, 0], [[-1.0, -2.0], [-4.0, -5.0]])


# -- the reference against ONNX's reference evaluator ----------------------------------------


def _onnx_run(op: str, x: np.ndarray, inputs: dict[str, np.ndarray] | None = None, **attrs):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    inputs = inputs or {}
    node = helper.make_node(op, ["x", *inputs], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, None)]
        + [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in inputs],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return ReferenceEvaluator(model).run(None, {"x": x, **inputs})[0]


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(["maxpool", "avgpool"]),
    k=st.integers(1, 4),
    s=st.integers(1, 3),
    p=st.integers(0, 3),
    h=st.integers(1, 7),
    include=st.booleans(),
    seed=st.integers(0, 9),
)
def test_pools_equal_onnx(kind, k, s, p, h, include, seed):
    """Floor mode only: ONNX's reference evaluator (1.14-1.17 at least) spreads ceil mode's
    extra padding over both sides, shifting the windows, which its own specification and
    PyTorch do not; ceil mode is checked against PyTorch's definition above."""
    p = min(p, k - 1)
    h = max(h, k - 2 * p)
    layer = dw("x", kind, h, h + 1, 2, k, s, p, count_include_pad=kind == "avgpool" and include)
    x = np.random.default_rng(seed).uniform(-1, 1, (1, 2, h, h + 1))
    attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p])
    if kind == "avgpool":
        attrs["count_include_pad"] = int(include)
    y = _onnx_run("MaxPool" if kind == "maxpool" else "AveragePool", x, **attrs)
    np.testing.assert_allclose(reference(layer, x), y, rtol=0, atol=1e-12)


def test_softmax_upsample_and_activations_equal_onnx():
    x = np.random.default_rng(0).uniform(-3, 3, (2, 5, 3, 4))
    softmax = Layer("s", "softmax", 3, 4, 5, 5)
    np.testing.assert_allclose(reference(softmax, x), _onnx_run("Softmax", x, axis=1), atol=1e-15)
    up = Layer("u", "upsample", 3, 4, 5, 5, groups=5, upscale=3)
    scales = {"scales": np.array([1, 1, 3, 3], dtype=np.float32)}
    nearest = _onnx_run(
        "Resize",
        x,
        {"roi": np.array([], dtype=np.float32), **scales},
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )
    np.testing.assert_array_equal(reference(up, x), nearest)
    for mode, coords in (("bilinear", "half_pixel"), ("bilinear_corners", "align_corners")):
        linear = _onnx_run(
            "Resize",
            x,
            {"roi": np.array([], dtype=np.float32), **scales},
            mode="linear",
            coordinate_transformation_mode=coords,
        )
        got = reference(dataclasses.replace(up, upsample_mode=mode), x)
        np.testing.assert_allclose(got, linear, rtol=0, atol=1e-12)
    for act, op, attrs in [
        (Activation("relu"), "Relu", {}),
        (Activation("leaky_relu", alpha=0.3), "LeakyRelu", {"alpha": 0.3}),
        (Activation("sigmoid"), "Sigmoid", {}),
        (Activation("hardswish"), "HardSwish", {}),
    ]:
        layer = Layer("a", "activation", 3, 4, 5, 5, groups=5, epilogue=Epilogue(activation=act))
        # ONNX takes HardSwish's 1/6 and 1/2 as float32 attributes: agreement to about 1e-7
        expected = _onnx_run(op, x, **attrs)
        np.testing.assert_allclose(reference(layer, x), expected, rtol=1e-6, atol=1e-7)


# -- random mappings: every kind, every epilogue ----------------------------------------------


@st.composite
def kind_cases(draw):
    layer = draw(any_kind_layers())
    batch = draw(st.integers(1, 3))
    return layer, draw(mappings(layer, batch)), batch, draw(st.sampled_from(["fp32", "fp64"]))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind_cases())
def test_every_kind_verifies_under_random_mappings_on_a_large_l1(manticore, case):
    """The executed schedule equals the reference (within the tolerance) for every kind and
    epilogue, and moves the words the cost model counts for the operator (the epilogue's
    operands are ``bytes_moved["epilogue"]``, read by the stores)."""
    layer, mapping, batch, precision = case
    big = dataclasses.replace(manticore, l1_bytes=4 << 20)
    v = verify(layer, mapping, big, precision, batch)
    if not fits(layer, mapping, big, precision, batch):
        assert not v.ok
        return
    assert v.ok, (layer, mapping, batch, v.errors)
    a = analyze(layer, mapping, big, precision, batch)
    wb = a.word_bytes
    assert v.macs == a.macs
    assert v.bytes_moved["store"] == a.offchip_store_words * wb
    epilogue = v.bytes_moved.get("epilogue", 0)
    assert bool(epilogue) == (layer.epilogue.bias or layer.epilogue.residual)
    if mapping.algorithm != "output_stack_shared":
        # the model counts the residual operand (read once per output word, as here) in its
        # loads, not the bias (c_out words per store, below 0.1 % of real layers' loads)
        residual = batch * layer.residual_words * wb
        assert v.bytes_moved["load"] - epilogue + residual == a.offchip_load_words * wb


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind_cases())
def test_every_kind_verifies_in_fp16(case):
    """FP16.32 (fp32 arithmetic, one rounding at the store) on an fp16 machine."""
    layer, mapping, batch, _ = case
    mppa3 = Machine.preset("mppa3")
    big = dataclasses.replace(mppa3, l1_bytes=4 << 20)
    mapping = (
        mapping.with_(share_group=1, algorithm="output_stack")
        if (mapping.algorithm == "output_stack_shared")
        else mapping
    )
    assume(fits(layer, mapping, big, "fp16", batch))
    v = verify(layer, mapping, big, "fp16", batch)
    assert v.ok, (layer, mapping, batch, v.errors)


# -- the epilogue: once, at the store, after every accumulation -------------------------------


def test_epilogue_after_the_tree_reduction(manticore):
    """An fc's partial outputs over 4 clusters are reduced before the bias and the
    activation: applying them per partial would add the bias 4 times."""
    layer = dataclasses.replace(
        Layer.fc("fc", 1, 2, 16, 6), epilogue=Epilogue(bias=True, activation=Activation("relu"))
    )
    mapping = Mapping("input_parallel", delta_o=6, tile=Tile(in_c=4))
    program = build_program(layer, mapping, manticore)
    assert program.op_counts()["Reduce"] == 3
    bias = np.full(6, 100.0, dtype=np.float32)
    x = np.zeros((1, 16, 1, 2), dtype=np.float32)
    run = execute_layer(layer, mapping, manticore, x, bias=bias)
    np.testing.assert_array_equal(run.output.ravel(), bias)
    assert verify_program(program).ok


def test_the_tolerance_sees_a_misplaced_epilogue():
    """Numbers alone tell a missing bias, a residual added twice, or the activation before
    the residual from the right output."""
    layer = Layer(
        "c", "conv", 6, 6, 8, 4, 3, 3, pad_h=1, pad_w=1,
        epilogue=Epilogue(bias=True, residual=True, activation=Activation("sigmoid")),
    )  # fmt: skip
    data = random_inputs(layer, 1, "fp32")
    z, exact, scale = exact_and_scale(layer, data, "fp32")
    x, w, b, r = (data[n].astype(np.float64) for n in ("input", "filter", "bias", "residual"))
    act = layer.epilogue.activation
    assert act is not None
    plain = dataclasses.replace(layer, epilogue=Epilogue(bias=True, residual=True))
    wrong = {
        "no bias": reference(layer, x, w, bias=0 * b, residual=r),
        "residual twice": reference(layer, x, w, bias=b, residual=2 * r),
        "activation first": reference(
            dataclasses.replace(layer, epilogue=Epilogue(bias=True, activation=act)), x, w, bias=b
        )
        + r,
        "no activation": reference(plain, x, w, bias=b, residual=r),
    }
    tol = tolerance(layer, "fp32")
    assert not compare(exact.astype(np.float32), exact, scale, tol)[2]
    for name, out in wrong.items():
        assert compare(out, exact, scale, tol)[2], name
    assert z.shape == exact.shape


def test_fp16_output_is_rounded_once(manticore):
    """Bias, residual and activation are computed on the fp32 partial sums and the result is
    rounded once: within half an fp16 ulp of the exact result (plus the fp32 sums' error)."""
    mppa3 = Machine.preset("mppa3")
    layer = Layer(
        "c", "conv", 6, 6, 16, 4, 3, 3, pad_h=1, pad_w=1,
        epilogue=Epilogue(bias=True, residual=True, activation=Activation("silu")),
    )  # fmt: skip
    mapping = Mapping("output_stack", delta_o=4, tile=Tile(out_h=3, in_c=4))
    data = random_inputs(layer, 1, "fp16", seed=5)
    out = execute(build_program(layer, mapping, mppa3, "fp16"), data).output
    assert out.dtype == np.float16
    _, exact, _ = exact_and_scale(layer, data, "fp16")
    assert np.all(np.abs(out - exact) <= 2.0**-11 * np.abs(exact) + 1e-5)


# -- the entry point -------------------------------------------------------------------------


def test_execute_layer_uses_the_operands_given(manticore):
    layer = TINY["conv + bias + residual + silu"]
    data = random_inputs(layer, 2, "fp64", seed=7)
    mapping = Mapping("output_stack", delta_o=2, tile=Tile(out_h=2, in_c=2))
    run = execute_layer(
        layer,
        mapping,
        manticore,
        data["input"],
        data["filter"],
        bias=data["bias"],
        residual=data["residual"],
        precision="fp64",
    )
    expected = reference(layer, data["input"], data["filter"], **operands(data))
    np.testing.assert_allclose(run.output, expected, rtol=0, atol=1e-12)
    assert run.output.shape == expected_shapes(layer, 2)["output"]


def test_execute_layer_draws_the_operands_not_given(manticore):
    """The weights, bias and residual not given are the seed's, as ``verify`` draws them."""
    layer = TINY["conv + bias + residual + silu"]
    x = np.ones((1, 3, 5, 5))
    drawn = layer_inputs(layer, 1, "fp64", seed=3, x=x)
    assert set(drawn) == {"input", "filter", "bias", "residual"}
    np.testing.assert_array_equal(drawn["input"], x)
    again = layer_inputs(layer, 1, "fp64", seed=3, x=2 * x)
    for name in ("filter", "bias", "residual"):
        np.testing.assert_array_equal(drawn[name], again[name])
    run = execute_layer(layer, minimal_mapping(layer), manticore, x, precision="fp64", seed=3)
    expected = reference(layer, x, drawn["filter"], bias=drawn["bias"], residual=drawn["residual"])
    np.testing.assert_allclose(run.output, expected, rtol=0, atol=1e-12)


def test_execute_layer_refuses_operands_the_layer_does_not_read(manticore):
    pool = TINY["maxpool 3x3 s2 pad 1"]
    x = np.zeros((1, 3, 7, 6))
    with pytest.raises(ValueError, match="reads no filter"):
        execute_layer(pool, minimal_mapping(pool), manticore, x, np.zeros((3, 1, 3, 3)))
    with pytest.raises(ValueError, match="reads no bias"):
        execute_layer(pool, minimal_mapping(pool), manticore, x, bias=np.zeros(3))
    with pytest.raises(ValueError, match="input has shape"):
        execute_layer(pool, minimal_mapping(pool), manticore, x[:, :2])
    with pytest.raises(ValueError, match="needs weights"):
        reference(TINY["fc + bias + sigmoid"], x)


def test_an_add_reads_its_operands_interleaved(manticore):
    layer = TINY["add of three"]
    rng = np.random.default_rng(0)
    parts = [rng.uniform(-1, 1, (2, 2, 3, 4)) for _ in range(3)]
    x = interleave(parts)
    assert x.shape == (2, 6, 3, 4)
    np.testing.assert_array_equal(x[:, 1::3], parts[1])
    run = execute_layer(layer, minimal_mapping(layer), manticore, x, precision="fp64")
    np.testing.assert_allclose(run.output, parts[0] + parts[1] + parts[2], rtol=0, atol=1e-15)


# -- the schedule checks hold for every kind ---------------------------------------------------


def test_reduction_length_counts_every_rounding():
    assert reduction_length(TINY["maxpool 3x3 s2 pad 1"]) == 0
    assert reduction_length(TINY["avgpool without the padding"]) == 10
    assert reduction_length(TINY["add of three"]) == 3
    assert reduction_length(TINY["add + relu"]) == 2 + 1
    assert reduction_length(TINY["softmax"]) == 2 * 5 + 10
    conv = TINY["conv + bias + residual + silu"]
    assert reduction_length(conv) == 3 * 9 + 1 + 1 + 11
    assert tolerance(dataclasses.replace(conv, epilogue=Epilogue()), "fp32") < tolerance(
        conv, "fp32"
    )


POOL = dw("pool", "maxpool", 9, 8, 4, 3, 2, 1)
ADD = Layer("add", "add", 4, 4, 12, 4, groups=4)
SOFTMAX = Layer("softmax", "softmax", 3, 3, 8, 8)


def test_a_pool_with_a_dropped_halo_row_is_rejected(manticore):
    program = build_program(POOL, Mapping("output_stack", delta_o=2, tile=Tile(out_h=2)), manticore)
    assert verify_program(program).ok
    v = verify_program(faults.drop_halo_row(program))
    assert not v.ok and "Apply on cluster 0" in v.errors[0] and "missing rows" in v.errors[0]
    v = verify_program(faults.wrong_stride(program))
    assert not v.ok and "with stride (1, 1) needs input" in v.errors[0]


def test_a_skipped_step_of_an_add_is_rejected(manticore):
    """An add in steps of one operand channel (a softmax has one step: ``tiling``)."""
    for layer, mapping in [
        (ADD, Mapping("output_stack", delta_o=2, tile=Tile(in_c=1))),
    ]:
        program = build_program(layer, mapping, manticore)
        assert verify_program(program).ok
        v = verify_program(faults.skip_input_step(program))
        assert not v.ok and "missing: a skipped input step" in v.errors[0], v.errors


def test_blocks_of_the_wrong_kind_are_rejected(manticore):
    pool = build_program(POOL, Mapping("output_stack", delta_o=4), manticore)
    index = next(i for i, op in enumerate(pool.ops) if isinstance(op, Apply))
    op = pool.ops[index]
    as_conv = Conv(
        op.cluster, op.in_buffer, op.in_offset, "filter", 0, op.out_buffer, op.out_offset,
        op.out_channels, op.in_channels, op.groups, op.stride,
    )  # fmt: skip
    ops = list(pool.ops)
    ops[index] = as_conv
    with pytest.raises(ScheduleError, match="has no weights: its blocks are Apply"):
        execute(pool.replace_ops(ops), random_inputs(POOL, 1, "fp32"))


def test_a_softmax_block_covers_its_whole_stack(manticore):
    program = build_program(
        SOFTMAX, Mapping("output_stack", delta_o=8, tile=Tile(in_c=8)), manticore
    )
    index = next(i for i, op in enumerate(program.ops) if isinstance(op, Apply))
    ops = list(program.ops)
    ops[index] = dataclasses.replace(ops[index], out_channels=(0, 2))
    with pytest.raises(ScheduleError, match="updates its whole stack 0:8"):
        execute(program.replace_ops(ops), random_inputs(SOFTMAX, 1, "fp32"))


def test_the_stores_read_the_epilogue_operands_of_their_region(manticore):
    """Bias words per store (its channels), residual words once each (batch tile 1)."""
    layer = dataclasses.replace(
        Layer("c", "conv", 6, 6, 4, 6, 3, 3, pad_h=1, pad_w=1),
        epilogue=Epilogue(bias=True, residual=True),
    )
    mapping = Mapping("output_stack", delta_o=4, tile=Tile(out_h=2))  # 3 bands x 2 stacks
    v = verify(layer, mapping, manticore, batch=2)
    assert v.ok, v.errors
    bias_words = 2 * 3 * (4 + 2)  # a store per image, band and stack
    assert v.bytes_moved["epilogue"] == 4 * (bias_words + 2 * layer.output_words)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind_cases())
def test_on_manticore_every_kind_verifies_exactly_when_it_fits(manticore, case):
    layer, mapping, batch, precision = case
    v = verify(layer, mapping, manticore, precision, batch)
    assert v.ok == fits(layer, mapping, manticore, precision, batch), v.errors


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind_cases())
def test_every_kind_verifies_with_multicast(case):
    """Waves of tasks reading each input band once (MPPA3, fp16); no filters to multicast
    for the kinds without weights."""
    layer, mapping, batch, _ = case
    mppa3 = dataclasses.replace(Machine.preset("mppa3"), l1_bytes=4 << 20)
    mapping = Mapping(
        "output_stack",
        delta_o=mapping.delta_o,
        batch_tile=mapping.batch_tile,
        tile=mapping.tile if mapping.algorithm != "input_parallel" else Tile(),
        buffers=mapping.buffers,
        multicast=True,
    )
    assume(fits(layer, mapping, mppa3, "fp16", batch))
    v = verify(layer, mapping, mppa3, "fp16", batch)
    assert v.ok, (layer, mapping, batch, v.errors)


def _split_over_two_clusters(layer: Layer, halves: list[tuple[int, int]]) -> Program:
    """A hand-written program: cluster k applies input channels ``halves[k]`` to the whole
    output (its private partial), cluster 0 reduces the two partials and stores. Not a
    mapping the tiling makes for these kinds (input_parallel is fc's), but a reduction must
    combine partials the kind's way: a max, or a softmax's running sums rescaled to one peak."""
    manticore = Machine.preset("manticore")
    out = Region("output", ((0, 1), (0, layer.c_out), (0, layer.h_out), (0, layer.w_out)))
    ops: list = []
    for cluster in (0, 1):
        ops += [Alloc(cluster, "input", 4096), Alloc(cluster, "output", 4096)]
        ops.append(Zero(cluster, "output", 0, out))
    for cluster, (c0, c1) in enumerate(halves):
        patch = Region("input", ((0, 1), (c0, c1), (0, layer.h_in), (0, layer.w_in)))
        ops.append(Load(cluster, patch, "input", 0))
        o0, o1 = (0, layer.c_out) if layer.kind == "softmax" else (c0, c1)
        ops.append(
            Apply(
                cluster,
                "input",
                0,
                "output",
                0,
                (o0, o1),
                (c0, c1),
                o1 - o0 if layer.groups > 1 else 1,
                (layer.stride_h, layer.stride_w),
            )
        )
    ops += [Reduce(0, 1, "output", 0, 0, out), Store(0, "output", 0, out)]
    return Program(
        layer, Mapping("output_stack"), 1, "fp32", 4, manticore.l1_bytes,
        manticore.l1_bank_bytes, manticore.clusters, tuple(ops),
    )  # fmt: skip


def test_reductions_combine_partials_the_kinds_way():
    softmax = Layer("s", "softmax", 2, 3, 8, 8, epilogue=Epilogue(residual=True))
    v = verify_program(_split_over_two_clusters(softmax, [(0, 5), (5, 8)]))
    assert v.ok and v.max_rel_error < v.tolerance, v.errors
    pool = dw("p", "maxpool", 4, 4, 4, 2, 2, 0)
    v = verify_program(_split_over_two_clusters(pool, [(0, 1), (1, 4)]))
    assert v.ok and v.max_abs_error == 0, v.errors
