"""A network whose depthwise and 1x1 pairs are fused runs end to end as the graph says."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from autotune import TuneOptions
from autotune.api import solve_network
from autotune.graphs.execute import verify_network
from autotune.graphs.weights import seeded_weights
from autotune.io.network_yaml import parse_network
from autotune.ir.fusion import fusable, fuse_depthwise

#: Two inverted-residual blocks: a stride-2 depthwise with its batch norm and ReLU6 before a
#: 1x1, and one without an activation whose 1x1 adds a residual.
MOBILE_BLOCKS = """\
network: mobile
batch: 2
layers:
  - {name: stem, kind: conv, in: [11, 10, 3], out_channels: 8, kernel: 3, padding: 1}
  - {name: stem_bn, kind: batchnorm}
  - {name: stem_act, kind: relu6}
  - {name: expand, kind: conv, out_channels: 16, kernel: 1}
  - {name: expand_act, kind: relu6}
  - {name: dw, kind: conv, out_channels: 16, kernel: 3, stride: 2, padding: 1, groups: 16}
  - {name: dw_bn, kind: batchnorm}
  - {name: dw_act, kind: relu6}
  - {name: project, kind: conv, out_channels: 8, kernel: 1}
  - {name: project_bn, kind: batchnorm}
  - {name: dw2, kind: conv, out_channels: 8, kernel: 3, padding: 1, groups: 8, bias: true}
  - {name: pw2, kind: conv, out_channels: 8, kernel: 1}
  - {name: add, kind: add, inputs: [pw2, project_bn]}
"""


#: The pairs fused, and the layers that run: the depthwise and 1x1 pairs, or the expansion
#: and its depthwise (a stride-2 depthwise with padding) with the second depthwise pair.
FUSIONS = {
    ("project", "pw2"): ["stem", "expand", "project", "pw2"],
    ("dw", "pw2"): ["stem", "dw", "project", "pw2"],
}


@pytest.fixture(scope="module", params=list(FUSIONS), ids=["depthwise", "expansion"])
def fused_network(request):
    net = parse_network(yaml.safe_load(MOBILE_BLOCKS), "<test>")
    assert net.lowering is not None
    assert fusable(net.lowering) == ("dw", "project", "pw2")
    lowering = fuse_depthwise(net.lowering, request.param)
    return dataclasses.replace(net, layers=lowering.layers, lowering=lowering)


def test_fused_pairs_match_the_graph(fused_network, manticore):
    net = fused_network
    assert [layer.name for layer in net.layers] in FUSIONS.values()
    sols = solve_network(net, manticore, options=TuneOptions(processes=1))
    mappings = {s.layer.name: s.mapping for s in sols}
    assert net.graph is not None
    checked = verify_network(net, mappings, manticore, weights=seeded_weights(net.graph))
    assert checked.ok, [c for c in checked.tensors if not c.ok]
    # the inner tensors exist nowhere: only the stored ones are compared
    stored = {"stem_act", "expand_act", "dw_act", "project_bn", "add"}
    inner = {"dw_act"} if net.layers[1].name == "expand" else {"expand_act"}
    assert {c.tensor for c in checked.tensors} == stored - inner
