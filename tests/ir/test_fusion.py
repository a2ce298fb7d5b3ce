"""Depthwise fusion of a lowering (``autotune.ir.fusion``)."""

from __future__ import annotations

import pytest

from autotune import load_network
from autotune.ir.fusion import fusable, fuse_depthwise, fused_steps, fusion_problem
from autotune.ir.graph import GraphError
from tests.conftest import EXAMPLES


@pytest.fixture(scope="module")
def mobilenetv2():
    return load_network(EXAMPLES / "mobilenetv2.yaml")


def test_mobilenetv2_has_a_fusable_pair_per_depthwise(mobilenetv2):
    lowering = mobilenetv2.lowering
    pairs = fusable(lowering)
    depthwise = [s for s in lowering.steps if s.layer.groups > 1 and s.layer.kind == "conv"]
    assert len(pairs) == len(depthwise) == 17
    assert fusion_problem(lowering, 0) == "it has no step before it"


def test_a_fused_step_is_its_two_steps(mobilenetv2):
    lowering = mobilenetv2.lowering
    pairs = fusable(lowering)
    fused = fuse_depthwise(lowering, pairs)
    assert fused_steps(fused) == pairs
    assert len(fused.steps) == len(lowering.steps) - len(pairs)
    assert len(fused.buffers) == len(lowering.buffers) - len(pairs)
    for name in pairs:
        step = fused.step(name)
        index = [s.name for s in lowering.steps].index(name)
        dw, pw = lowering.steps[index - 1], lowering.steps[index]
        assert step.prologue == dw and step.inputs == dw.inputs and step.output == pw.output
        depthwise, pointwise = step.layer.unfused()
        assert depthwise.shape_key() == dw.layer.shape_key()
        assert pointwise.shape_key() == pw.layer.shape_key()
        assert step.layer.macs == dw.layer.macs + pw.layer.macs
        assert step.layer.weight_words == dw.layer.weight_words + pw.layer.weight_words
        # every operator of the depthwise step is now the fused step's
        for fate in fused.fates:
            if fate.op == dw.op or fate.op in dw.absorbed:
                assert (fate.kind, fate.into) == ("fused", name)


def test_fusing_only_some_pairs_keeps_the_others(mobilenetv2):
    lowering = mobilenetv2.lowering
    first = fusable(lowering)[:1]
    fused = fuse_depthwise(lowering, first)
    assert fused_steps(fused) == first
    assert fusable(fused) == fusable(lowering)[1:]
    assert fuse_depthwise(lowering, ()) is lowering


@pytest.mark.parametrize(
    "name, reason",
    [
        ("features.0.0", "it has no step before it"),
        ("features.2.conv.0.0", "is not a depthwise conv"),
        ("nowhere", "is not a step of the network"),
    ],
)
def test_a_pair_that_cannot_fuse_is_refused_by_name(mobilenetv2, name, reason):
    with pytest.raises(GraphError, match=reason) as error:
        fuse_depthwise(mobilenetv2.lowering, [name])
    assert error.value.op == name and error.value.field == "fused"
