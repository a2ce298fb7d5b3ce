"""The parameters of a graph's operators, and the weights of the layers they lower to.

A graph's parameters are keyed by operator name, then by role, in ONNX's layouts: a conv's
``weight`` ``(c_out, c_in / groups, kh, kw)`` and ``bias`` ``(c_out,)``; an fc's ``weight``
``(c_out, h·w·c)`` over its input volume flattened in NCHW order, and ``bias``; a batch
norm's ``scale``, ``bias``, ``mean``, ``var``. ``seeded_weights`` draws them when a file has
none. ``step_weights`` gives what each lowered layer's executor needs: the filters (a folded
batch norm's scale multiplied in, an fc's as a kernel over its input volume) and the bias.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from autotune.ir.graph import Graph, Operator
from autotune.ir.lowering import Step

Array = np.ndarray
Weights = Mapping[str, Mapping[str, Array]]


class WeightsError(ValueError):
    """Parameters missing or of the wrong shape; names the operator and the role."""


def shapes_of(op: Operator) -> dict[str, tuple[int, ...]]:
    """The parameter arrays ``op`` has, with their shapes."""
    c = op.shape[2]
    if op.kind == "conv":
        cin = op.in_channels // op.groups
        out: dict[str, tuple[int, ...]] = {
            "weight": (op.out_channels, cin, op.kernel[0], op.kernel[1])
        }
        return out | ({"bias": (op.out_channels,)} if op.bias else {})
    if op.kind == "fc":
        out = {"weight": (op.out_channels, op.in_words)}
        return out | ({"bias": (op.out_channels,)} if op.bias else {})
    if op.kind == "batchnorm":
        return {"scale": (c,), "bias": (c,), "mean": (c,), "var": (c,)}
    return {}


def seeded_weights(
    graph: Graph, seed: int = 0, dtype: type = np.float64
) -> dict[str, dict[str, Array]]:
    """Random parameters for every operator that has some, reproducible from ``seed``:
    filters scaled by 1/sqrt(fan-in) so activations stay of order one through deep
    networks, batch-norm statistics near the identity."""
    rng = np.random.default_rng(seed)
    weights: dict[str, dict[str, Array]] = {}
    for op in graph.ops:
        shapes = shapes_of(op)
        if not shapes:
            continue
        params: dict[str, Array] = {}
        for role, shape in shapes.items():
            if role == "weight":
                fan_in = math.prod(shape[1:])
                value = rng.standard_normal(shape) / math.sqrt(fan_in)
            elif role in ("scale", "var"):
                value = rng.uniform(0.5, 1.5, shape)
            else:  # bias, mean
                value = 0.1 * rng.standard_normal(shape)
            params[role] = value.astype(dtype)
        weights[op.name] = params
    return weights


def check_weights(graph: Graph, weights: Weights) -> None:
    """Every parameter present with its shape (``WeightsError`` naming the first that is
    not); arrays of other operators or roles are refused too, so a typo does not pass."""
    for op in graph.ops:
        expected = shapes_of(op)
        given = weights.get(op.name, {})
        for role, shape in expected.items():
            if role not in given:
                raise WeightsError(f"operator {op.name!r}: weights {role!r} missing")
            if tuple(np.shape(given[role])) != shape:
                raise WeightsError(
                    f"operator {op.name!r}: weights {role!r} have shape "
                    f"{list(np.shape(given[role]))}, expected {list(shape)}"
                )
        extra = sorted(set(given) - set(expected))
        if extra:
            raise WeightsError(f"operator {op.name!r}: unexpected weights {extra[0]!r}")
    known = {op.name for op in graph.ops}
    unknown = sorted(set(weights) - known)
    if unknown:
        raise WeightsError(f"weights for {unknown[0]!r}, which is not an operator")


def step_weights(step: Step, graph: Graph, weights: Weights) -> tuple[Array | None, Array | None]:
    """(filters, bias) of a lowered layer: the conv's or fc's own, with a folded batch norm
    applied (scale s = γ/√(σ²+ε) multiplies the filters of each output channel; the bias
    becomes s·(b − μ) + β); a standing batch norm is the depthwise 1×1 filter s with that
    bias. None where the layer has no filters or no bias."""
    if not step.op:
        return None, None  # a concat copy
    op = graph.op(step.op)
    layer = step.layer
    filters: Array | None = None
    bias: Array | None = None
    if op.kind in ("conv", "fc"):
        filters = np.asarray(weights[op.name]["weight"])
        if op.kind == "fc":
            filters = filters.reshape(layer.c_out, layer.c_in, layer.kernel_h, layer.kernel_w)
        if op.bias:
            bias = np.asarray(weights[op.name]["bias"])
    for name in step.absorbed:
        absorbed = graph.op(name)
        if absorbed.kind != "batchnorm":
            continue
        scale, shift = _affine(absorbed, weights)
        assert filters is not None
        filters = filters * scale.reshape(-1, 1, 1, 1)
        bias = shift if bias is None else scale * bias + shift
    if op.kind == "batchnorm":
        scale, shift = _affine(op, weights)
        filters = scale.reshape(-1, 1, 1, 1)
        bias = shift
    if layer.epilogue.bias and bias is None:
        bias = np.zeros(layer.c_out)
    return filters, bias


def _affine(op: Operator, weights: Weights) -> tuple[Array, Array]:
    """A batch norm as y = s·x + t per channel."""
    p = weights[op.name]
    scale = np.asarray(p["scale"]) / np.sqrt(np.asarray(p["var"]) + op.epsilon)
    return scale, np.asarray(p["bias"]) - scale * np.asarray(p["mean"])
