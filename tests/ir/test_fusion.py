"""Depthwise fusion of a lowering (``autotune.ir.fusion``)."""

from __future__ import annotations

import pytest
import yaml

from autotune import load_network
from autotune.io.graph_json import fused_steps_of, graph_record
from autotune.io.network_yaml import parse_network
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


#: DenseNet's pre-activation: a batch norm that follows an activation cannot fold into the
#: conv before it, so it is a step of its own (a depthwise 1x1), fusable into the 1x1 after.
PRE_ACTIVATION = """\
network: dense
layers:
  - {name: stem, kind: conv, in: [8, 8, 3], out_channels: 8, kernel: 3, padding: 1}
  - {name: stem_act, kind: relu}
  - {name: norm, kind: batchnorm}
  - {name: norm_act, kind: relu}
  - {name: conv1, kind: conv, out_channels: 16, kernel: 1}
"""


def test_a_fused_batch_norm_is_read_back_from_the_graph_record():
    net = parse_network(yaml.safe_load(PRE_ACTIVATION), "<test>")
    assert net.lowering is not None and net.graph is not None
    assert fusable(net.lowering) == ("conv1",)
    lowering = fuse_depthwise(net.lowering, ("conv1",))
    record = graph_record(net.graph, lowering)
    # the absorbed step's operator is a batch norm, not a conv
    fates = {op.name: (op.kind, op.fate, op.into) for op in record.operators}
    assert fates["norm"] == ("batchnorm", "fused", "conv1")
    assert fused_steps_of(record) == ("conv1",)
    # and the network the file describes is the fused one (what ``verify`` compares with)
    assert fuse_depthwise(net.lowering, fused_steps_of(record)).layers == lowering.layers
