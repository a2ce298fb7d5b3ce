"""The example networks as graphs, through autotune's loader and lowering: every operator
has a fate, the batch norms fold, the activations and residual adds fuse, the concats are
zero-copy, the flatten is a view, and the MACs are the published ones.

(``tests/test_example_networks.py`` checks the same files with PyYAML only.)
"""

from __future__ import annotations

import importlib.util
from collections import Counter

import pytest

from autotune import load_network
from tests.conftest import EXAMPLES, NETWORKS

#: network -> published MACs (sources in examples/make_networks.py and
#: tests/test_example_networks.py)
PUBLISHED = {
    "resnet50": 4.09e9,
    "vgg16": 15.47e9,
    "yolov3": 65.86e9 / 2,
    "mobilenetv2": 300e6,
    "googlenet": 1.50e9,
    "alexnet": 724e6,
    "mobilenetv3": 217e6,
}
#: network -> operators, {(operator kind, fate): count}, lowered layers by kind
EXPECTED = {
    "resnet50": (
        175,
        {
            ("conv", "layer"): 53,
            ("batchnorm", "folded"): 53,
            ("relu", "fused"): 49,
            ("add", "fused"): 16,
            ("maxpool", "layer"): 1,
            ("global_avgpool", "layer"): 1,
            ("flatten", "view"): 1,
            ("fc", "layer"): 1,
        },
        {"conv": 53, "maxpool": 1, "avgpool": 1, "fc": 1},
    ),
    "vgg16": (
        37,
        {
            ("conv", "layer"): 13,
            ("relu", "fused"): 15,
            ("maxpool", "layer"): 5,
            ("flatten", "view"): 1,
            ("fc", "layer"): 3,
        },
        {"conv": 13, "maxpool": 5, "fc": 3},
    ),
    "yolov3": (
        246,
        {
            ("conv", "layer"): 75,
            ("batchnorm", "folded"): 72,
            ("leaky_relu", "fused"): 72,
            # the shortcut adds the activated outputs: each fuses into the epilogue of the
            # conv before it, after the activation (activation_first)
            ("add", "fused"): 23,
            ("upsample", "layer"): 2,
            ("concat", "concat"): 2,
        },
        {"conv": 75, "upsample": 2},
    ),
    "mobilenetv2": (
        152,
        {
            ("conv", "layer"): 52,
            ("batchnorm", "folded"): 52,
            ("relu6", "fused"): 35,
            ("add", "fused"): 10,
            ("global_avgpool", "layer"): 1,
            ("flatten", "view"): 1,
            ("fc", "layer"): 1,
        },
        {"conv": 52, "avgpool": 1, "fc": 1},
    ),
    "googlenet": (
        196,
        {
            ("conv", "layer"): 57,
            ("batchnorm", "folded"): 57,
            ("relu", "fused"): 57,
            ("maxpool", "layer"): 13,
            ("concat", "concat"): 9,
            ("global_avgpool", "layer"): 1,
            ("flatten", "view"): 1,
            ("fc", "layer"): 1,
        },
        {"conv": 57, "maxpool": 13, "avgpool": 1, "fc": 1},
    ),
    "alexnet": (
        19,
        {
            ("conv", "layer"): 5,
            ("relu", "fused"): 7,
            ("maxpool", "layer"): 3,
            ("flatten", "view"): 1,
            ("fc", "layer"): 3,
        },
        {"conv": 5, "maxpool": 3, "fc": 3},
    ),
    "mobilenetv3": (
        186,
        {
            ("conv", "layer"): 62,
            ("batchnorm", "folded"): 46,
            ("hardswish", "fused"): 21,
            ("relu", "fused"): 19,
            ("add", "fused"): 10,
            ("global_avgpool", "layer"): 9,
            ("hardsigmoid", "fused"): 8,
            ("mul", "layer"): 8,
            ("flatten", "view"): 1,
            ("fc", "layer"): 2,
        },
        {"conv": 70, "avgpool": 9, "fc": 2},  # the squeeze-excitation muls: depthwise convs
    ),
}


def test_every_example_is_covered():
    assert sorted(NETWORKS) == sorted(EXPECTED) == sorted(p.stem for p in EXAMPLES.glob("*.yaml"))


def test_files_are_what_make_networks_writes():
    spec = importlib.util.spec_from_file_location("make_networks", EXAMPLES / "make_networks.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    built = {build.__name__: build() for build in script.BUILDERS}
    assert sorted(built) == sorted(EXPECTED)
    for name, net in built.items():
        assert (EXAMPLES / f"{name}.yaml").read_text() == net.render(), name
        assert abs(net.macs / PUBLISHED[name] - 1) < script.TOLERANCE
        assert net.macs == load_network(EXAMPLES / f"{name}.yaml").macs


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def example(request):
    return request.param, load_network(EXAMPLES / f"{request.param}.yaml")


def fates(net):
    kind = {op.name: op.kind for op in net.graph.ops}
    return {f.op: (kind[f.op], f.kind, f.into) for f in net.lowering.fates}


def test_loads_with_a_fate_for_every_operator(example):
    name, net = example
    operators, by_fate, _ = EXPECTED[name]
    assert net.name == name and net.batch == 1 and net.precision == "fp32"
    assert len(net.graph.ops) == operators
    assert [f.op for f in net.lowering.fates] == [op.name for op in net.graph.ops]
    assert Counter((k, f) for k, f, _ in fates(net).values()) == by_fate
    # no concat operand needed a copy: every step implements a graph operator
    assert all(step.op for step in net.lowering.steps)


def test_lowered_layers(example):
    name, net = example
    assert Counter(layer.kind for layer in net.layers) == EXPECTED[name][2]
    standing = {op for op, (_, fate, _) in fates(net).items() if fate == "layer"}
    assert [layer.name for layer in net.layers] == [
        op.name for op in net.graph.ops if op.name in standing
    ]


def test_macs_match_published(example):
    name, net = example
    assert net.macs == net.graph.macs
    assert abs(net.macs / PUBLISHED[name] - 1) < 0.01, (name, net.macs)


def test_fusions_land_in_their_producer(example):
    """Each folded batch norm and fused activation goes into the conv (or fc) that
    produces its input, and the epilogue says so."""
    _, net = example
    graph, steps = net.graph, {s.name: s for s in net.lowering.steps}
    for op in graph.ops:
        step = steps.get(op.name)
        if step is None:
            continue
        for absorbed in step.absorbed:
            kind = graph.op(absorbed).kind
            if kind == "batchnorm":
                assert step.layer.epilogue.bias
            elif kind == "add":
                assert step.layer.epilogue.residual and step.residual is not None
            else:
                assert step.layer.epilogue.activation is not None
    for layer in net.layers:
        if layer.kind in ("maxpool", "avgpool"):
            assert layer.epilogue.is_identity, layer.name


def test_resnet50_fusions():
    net = load_network(EXAMPLES / "resnet50.yaml")
    fate = fates(net)
    for op in net.graph.ops:
        if op.kind == "batchnorm":  # bn1 -> conv1, layerX.Y.bnK -> convK, downsample.1 -> .0
            conv = op.name.replace("bn", "conv").replace("downsample.1", "downsample.0")
            assert fate[op.name] == ("batchnorm", "folded", conv)
    adds = [op.name for op in net.graph.ops if op.kind == "add"]
    assert len(adds) == 16
    for add in adds:
        block = add.removesuffix(".add")
        into = fate[add][2]
        # the add joins the conv that runs last of its operands' producers: the
        # projection in a block's first unit, conv3 elsewhere; its relu follows it
        assert into == block + (".downsample.0" if block.endswith(".0") else ".conv3")
        assert fate[block + ".relu3"] == ("relu", "fused", into)
        epilogue = net.layer(into).epilogue
        assert epilogue.bias and epilogue.residual and epilogue.activation.kind == "relu"
    for name in ("maxpool", "avgpool", "fc"):
        assert fate[name][1] == "layer"
    fc = net.lowering.step("fc")
    assert fc.inputs[0].buffer == "avgpool" and fc.inputs[0].view == (1, 1, 2048)
    assert net.layer("fc").epilogue.is_identity  # torchvision: no softmax, no activation
    assert net.graph.outputs == ("fc",)


def test_yolov3_routes_are_zero_copy():
    net = load_network(EXAMPLES / "yolov3.yaml")
    low = net.lowering
    for route, first, second, c1 in [
        ("route_86", "upsample_85", "shortcut_61", 256),
        ("route_98", "upsample_97", "shortcut_36", 128),
    ]:
        written = {step.output.tensor: step.output for step in low.steps}
        a, b = written[first], written[second]  # shortcut_N: fused into the conv before it
        assert (a.buffer, a.offset) == (route, 0) and (b.buffer, b.offset) == (route, c1)
    for n in (84, 96):  # after a one-source route: reads the redirected tensor
        src = {84: "conv_79", 96: "conv_91"}[n]
        assert low.step(f"conv_{n}").inputs[0].buffer == low.step(src).output.buffer
    for n in (81, 93, 105):  # linear detection convs with a bias, the network outputs
        epilogue = net.layer(f"conv_{n}").epilogue
        assert epilogue.bias and not epilogue.residual and epilogue.activation is None
    assert net.graph.outputs == ("conv_81", "conv_93", "conv_105")
    leaky = {layer.epilogue.activation.alpha for layer in net.layers if layer.epilogue.activation}
    assert leaky == {0.1}


def test_googlenet_concats_are_zero_copy():
    net = load_network(EXAMPLES / "googlenet.yaml")
    low = net.lowering
    cats = [op for op in net.graph.ops if op.kind == "concat"]
    assert len(cats) == 9
    for cat in cats:
        p = cat.name.removesuffix("cat")
        offset = 0
        for branch in ("branch1", "branch2.1", "branch3.1", "branch4.1"):
            out = low.step(p + branch + ".conv").output
            assert (out.buffer, out.offset) == (cat.name, offset)
            offset += out.stored[2]
        assert offset == cat.shape[2]
    assert net.layer("maxpool1").ceil_mode and net.layer("maxpool1").h_out == 56


def test_mobilenetv2_residuals_fuse_into_the_projection():
    net = load_network(EXAMPLES / "mobilenetv2.yaml")
    fate = fates(net)
    adds = [op for op in net.graph.ops if op.kind == "add"]
    assert len(adds) == 10
    for add in adds:
        block = add.name.removesuffix(".add")
        assert fate[add.name] == ("add", "fused", block + ".conv.2")
        assert net.layer(block + ".conv.2").epilogue.residual
    clip = {
        (a.kind, a.low, a.high)
        for a in (layer.epilogue.activation for layer in net.layers)
        if a is not None
    }
    assert clip == {("clip", 0.0, 6.0)}


@pytest.mark.parametrize(
    "name, fc, volume",
    [("vgg16", "classifier.0", (7, 7, 512)), ("alexnet", "classifier.1", (6, 6, 256))],
)
def test_classifier_reads_the_flattened_volume(name, fc, volume):
    net = load_network(EXAMPLES / f"{name}.yaml")
    layer = net.layer(fc)
    assert (layer.h_in, layer.w_in, layer.c_in) == volume
    assert layer.epilogue.activation is not None and layer.epilogue.activation.kind == "relu"
    assert fates(net)["flatten"][1] == "view"
