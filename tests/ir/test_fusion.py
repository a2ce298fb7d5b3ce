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


def _pairs(lowering):
    """The fusable steps, split: 1x1s that absorb a depthwise, depthwises an expansion."""
    pairs = fusable(lowering)
    expansions = tuple(n for n in pairs if lowering.step(n).layer.groups > 1)
    return tuple(n for n in pairs if n not in expansions), expansions


def test_mobilenetv2_has_a_fusable_pair_per_depthwise(mobilenetv2):
    lowering = mobilenetv2.lowering
    projects, expansions = _pairs(lowering)
    depthwise = [s for s in lowering.steps if s.layer.groups > 1 and s.layer.kind == "conv"]
    assert len(projects) == len(depthwise) == 17
    # every block's depthwise but the first's follows its expansion 1x1
    assert expansions == tuple(s.name for s in depthwise[1:])
    assert fusion_problem(lowering, 0) == "it has no step before it"


@pytest.mark.parametrize("kind", ["projects", "expansions"])
def test_a_fused_step_is_its_two_steps(mobilenetv2, kind):
    lowering = mobilenetv2.lowering
    projects, expansions = _pairs(lowering)
    pairs = projects if kind == "projects" else expansions
    fused = fuse_depthwise(lowering, pairs)
    assert fused_steps(fused) == pairs
    assert len(fused.steps) == len(lowering.steps) - len(pairs)
    assert len(fused.buffers) == len(lowering.buffers) - len(pairs)
    for name in pairs:
        step = fused.step(name)
        index = [s.name for s in lowering.steps].index(name)
        first, second = lowering.steps[index - 1], lowering.steps[index]
        assert step.prologue == first and step.inputs == first.inputs
        assert step.output == second.output
        one, two = step.layer.unfused()
        assert one.shape_key() == first.layer.shape_key()
        assert two.shape_key() == second.layer.shape_key()
        assert step.layer.macs == first.layer.macs + second.layer.macs
        assert step.layer.ops == first.layer.ops + second.layer.ops
        assert step.layer.weight_words == first.layer.weight_words + second.layer.weight_words
        # every operator of the absorbed step is now the fused step's
        for fate in fused.fates:
            if fate.op == first.op or fate.op in first.absorbed:
                assert (fate.kind, fate.into) == ("fused", name)


def test_a_depthwise_joins_one_neighbour_not_both(mobilenetv2):
    lowering = mobilenetv2.lowering
    with pytest.raises(GraphError, match="is fused already"):
        fuse_depthwise(lowering, ["features.2.conv.1.0", "features.2.conv.2"])


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
