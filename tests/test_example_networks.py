"""Checks for the example network descriptions in examples/*.yaml.

Uses only PyYAML and the standard library (not the autotune package), so the data files
are validated independently of the loader: the shapes are propagated along ``inputs``
here.  Published MAC figures (conv + fc multiply-accumulates):

* resnet50    4.09e9  torchvision ResNet50_Weights.IMAGENET1K_V1 "4.09 GFLOPS"
                      (torchvision counts multiply-accumulates; the figure
                      includes the fc layer: conv 4.087e9 + fc 2.05e6).
* vgg16       15.47e9 torchvision VGG16_Weights.IMAGENET1K_V1 "15.47 GFLOPS".
* yolov3      32.93e9 darknet prints 65.86 BFLOPs for cfg/yolov3.cfg at 416,
                      which is 2 * MACs.
* mobilenetv2 300e6   Sandler et al. 2018 (~300M multiply-adds); torchvision
                      MobileNet_V2_Weights.IMAGENET1K_V1 "0.30 GFLOPS".
* googlenet   1.50e9  torchvision GoogLeNet_Weights.IMAGENET1K_V1 "1.50 GFLOPS".
* alexnet     724e6   Sze et al., "Efficient Processing of Deep Neural
                      Networks: A Tutorial and Survey", 2017 (666M conv +
                      58.6M fc), original grouped two-GPU AlexNet.
* mobilenetv3 217e6   torchvision MobileNet_V3_Large_Weights.IMAGENET1K_V1
                      "0.22 GFLOPS" (0.217); Howard et al. 2019: 219M
                      multiply-adds. Counted here with each squeeze-excitation
                      gate's multiply (mapped as a depthwise 1x1 conv).

The graph-level checks through autotune's loader and lowering are in
``tests/test_example_graphs.py``.
"""

import math
import pathlib
from collections import Counter

import pytest
import yaml

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"

TOP_KEYS = {"network", "batch", "precision", "layers"}
COMMON_KEYS = {"name", "kind", "inputs", "in", "out"}
LAYER_KEYS = {
    "conv": {"out_channels", "kernel", "stride", "padding", "groups", "bias"},
    "fc": {"out_channels", "bias"},
    "maxpool": {"kernel", "stride", "padding", "ceil_mode"},
    "global_avgpool": set(),
    "flatten": set(),
    "batchnorm": {"epsilon"},
    "relu": set(),
    "relu6": set(),
    "leaky_relu": {"alpha"},
    "hardswish": set(),
    "hardsigmoid": set(),
    "add": set(),
    "mul": set(),
    "concat": set(),
    "upsample": {"scale"},
}

# network -> (published MACs, operators of each kind)
EXPECTED = {
    "resnet50": (
        4.09e9,
        {
            "conv": 53,
            "batchnorm": 53,
            "relu": 49,
            "add": 16,
            "maxpool": 1,
            "global_avgpool": 1,
            "flatten": 1,
            "fc": 1,
        },
    ),
    "vgg16": (15.47e9, {"conv": 13, "relu": 15, "maxpool": 5, "flatten": 1, "fc": 3}),
    "yolov3": (
        65.86e9 / 2,
        {
            "conv": 75,
            "batchnorm": 72,
            "leaky_relu": 72,
            "add": 23,
            "upsample": 2,
            "concat": 2,
        },
    ),
    "mobilenetv2": (
        300e6,
        {
            "conv": 52,
            "batchnorm": 52,
            "relu6": 35,
            "add": 10,
            "global_avgpool": 1,
            "flatten": 1,
            "fc": 1,
        },
    ),
    "googlenet": (
        1.50e9,
        {
            "conv": 57,
            "batchnorm": 57,
            "relu": 57,
            "maxpool": 13,
            "concat": 9,
            "global_avgpool": 1,
            "flatten": 1,
            "fc": 1,
        },
    ),
    "alexnet": (724e6, {"conv": 5, "relu": 7, "maxpool": 3, "flatten": 1, "fc": 3}),
    "mobilenetv3": (
        217e6,
        {
            "conv": 62,
            "batchnorm": 46,
            "hardswish": 21,
            "relu": 19,
            "add": 10,
            "global_avgpool": 9,
            "hardsigmoid": 8,
            "mul": 8,
            "flatten": 1,
            "fc": 2,
        },
    ),
}
NETWORKS = sorted(EXPECTED)


def pair(v):
    if isinstance(v, int):
        return v, v
    assert isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v), v
    return v[0], v[1]


def extent(n, k, s, p, ceil_mode=False):
    span = n + 2 * p - k
    out = (math.ceil(span / s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:  # the last window starts in the input
        out -= 1
    return out


def load(name):
    with open(EXAMPLES / (name + ".yaml")) as f:
        return yaml.safe_load(f)


def propagate(layers):
    """name -> (input shapes, output shape, MACs), following ``inputs`` (default: the
    previous layer; the first layer reads its declared ``in``)."""
    result = {}
    previous = None
    for layer in layers:
        kind = layer["kind"]
        if "inputs" in layer:
            sources = layer["inputs"]
            assert all(s in result for s in sources), layer  # defined before use
            shapes = [result[s][1] for s in sources]
        elif previous is None:
            shapes = [tuple(layer["in"])]
        else:
            shapes = [result[previous][1]]
        h, w, c = shapes[0]
        macs = 0
        if kind == "conv":
            kh, kw = pair(layer["kernel"])
            sh, sw = pair(layer.get("stride", 1))
            ph, pw = pair(layer.get("padding", 0))
            g, co = layer.get("groups", 1), layer["out_channels"]
            assert c % g == 0 and co % g == 0, layer
            out = (extent(h, kh, sh, ph), extent(w, kw, sw, pw), co)
            macs = out[0] * out[1] * co * (c // g) * kh * kw
        elif kind == "fc":
            out = (1, 1, layer["out_channels"])
            macs = h * w * c * layer["out_channels"]
        elif kind == "maxpool":
            kh, kw = pair(layer["kernel"])
            sh, sw = pair(layer["stride"])
            ph, pw = pair(layer.get("padding", 0))
            ceil = layer.get("ceil_mode", False)
            out = (extent(h, kh, sh, ph, ceil), extent(w, kw, sw, pw, ceil), c)
        elif kind == "global_avgpool":
            out = (1, 1, c)
        elif kind == "flatten":
            out = (1, 1, h * w * c)
        elif kind == "add":
            assert len(shapes) == 2 and shapes[0] == shapes[1], layer
            out = shapes[0]
        elif kind == "mul":  # by a channel gate: a depthwise 1x1 conv, a MAC per output
            assert len(shapes) == 2 and shapes[1] == (1, 1, c), layer
            out = shapes[0]
            macs = h * w * c
        elif kind == "concat":
            assert len({s[:2] for s in shapes}) == 1, layer
            out = (h, w, sum(s[2] for s in shapes))
        elif kind == "upsample":
            out = (h * layer["scale"], w * layer["scale"], c)
        else:
            out = (h, w, c)
        assert all(x > 0 for x in out), layer
        if "in" in layer:
            assert len(shapes) == 1 and tuple(layer["in"]) == shapes[0], layer
        result[layer["name"]] = (shapes, out, macs)
        previous = layer["name"]
    return result


@pytest.fixture(params=NETWORKS)
def net(request):
    return request.param, load(request.param)


def test_all_files_present():
    assert sorted(p.stem for p in EXAMPLES.glob("*.yaml")) == NETWORKS


def test_keys_and_types(net):
    name, data = net
    assert set(data) == TOP_KEYS
    assert data["network"] == name
    assert data["batch"] == 1
    assert data["precision"] == "fp32"
    assert isinstance(data["layers"], list) and data["layers"]
    assert "in" in data["layers"][0] and "inputs" not in data["layers"][0]
    for layer in data["layers"]:
        kind = layer.get("kind")
        assert kind in LAYER_KEYS, layer
        assert set(layer) <= COMMON_KEYS | LAYER_KEYS[kind], layer
        assert isinstance(layer["name"], str) and layer["name"] != "input"
        if kind in ("conv", "fc"):
            assert isinstance(layer["out_channels"], int) and layer["out_channels"] > 0
            assert isinstance(layer["in"], list) and len(layer["in"]) == 3, layer
        if kind in ("conv", "maxpool"):
            assert "kernel" in layer, layer
        if kind in ("add", "concat"):
            assert len(layer["inputs"]) >= 2, layer
        g = layer.get("groups", 1)
        assert isinstance(g, int) and g >= 1


def test_unique_names(net):
    _, data = net
    names = [lay["name"] for lay in data["layers"]]
    assert len(names) == len(set(names))


def test_shapes_chain(net):
    """Every ``inputs`` names an earlier layer and every declared ``in`` is its
    producer's output (``propagate`` asserts both)."""
    _, data = net
    assert len(propagate(data["layers"])) == len(data["layers"])


def test_operator_counts(net):
    name, data = net
    assert Counter(lay["kind"] for lay in data["layers"]) == EXPECTED[name][1]


def test_every_tensor_is_read_but_the_outputs(net):
    name, data = net
    layers = data["layers"]
    read = set()
    for prev, layer in zip([None, *layers], layers, strict=False):
        read.update(layer.get("inputs", [prev["name"]] if prev else []))
    unread = [lay["name"] for lay in layers if lay["name"] not in read]
    expected = ["conv_81", "conv_93", "conv_105"] if name == "yolov3" else [layers[-1]["name"]]
    assert unread == expected


def test_total_macs_match_published(net):
    name, data = net
    published = EXPECTED[name][0]
    total = sum(macs for _, _, macs in propagate(data["layers"]).values())
    assert abs(total / published - 1) < 0.01, (name, total, published)


def test_resnet50_structure():
    layers = load("resnet50")["layers"]
    by_name = {lay["name"]: lay for lay in layers}
    shapes = propagate(layers)
    assert [lay["name"] for lay in layers[:4]] == ["conv1", "bn1", "relu", "maxpool"]
    assert shapes["conv1"][1] == (112, 112, 64) and shapes["maxpool"][1] == (56, 56, 64)
    block_in = "maxpool"
    for stage, blocks in enumerate([3, 4, 6, 3], start=1):
        width = 64 * 2 ** (stage - 1)
        for b in range(blocks):
            p = f"layer{stage}.{b}."
            c1, c2, c3 = by_name[p + "conv1"], by_name[p + "conv2"], by_name[p + "conv3"]
            assert shapes[p + "conv1"][0] == [shapes[block_in][1]]
            assert c1["out_channels"] == c2["out_channels"] == width
            assert c1["kernel"] == 1 and c3["kernel"] == 1 and c2["kernel"] == 3
            # v1.5: the stride sits on the 3x3 conv
            assert c1.get("stride", 1) == 1 and c3.get("stride", 1) == 1
            assert c2.get("stride", 1) == (2 if stage > 1 and b == 0 else 1)
            names = [p + n for n in ("bn1", "relu1", "bn2", "relu2", "bn3", "add", "relu3")]
            assert all(n in by_name for n in names)
            if b == 0:
                d = by_name[p + "downsample.0"]
                assert d["inputs"] == [block_in] and d["kernel"] == 1
                assert by_name[p + "add"]["inputs"] == [p + "bn3", p + "downsample.1"]
            else:
                assert p + "downsample.0" not in by_name
                assert by_name[p + "add"]["inputs"] == [p + "bn3", block_in]
            block_in = p + "relu3"
    assert shapes[block_in][1] == (7, 7, 2048)
    assert [lay["name"] for lay in layers[-3:]] == ["avgpool", "flatten", "fc"]
    assert by_name["fc"]["in"] == [1, 1, 2048] and by_name["fc"]["out_channels"] == 1000


def test_yolov3_routes_and_heads():
    layers = load("yolov3")["layers"]
    by_name = {lay["name"]: lay for lay in layers}
    shapes = propagate(layers)
    assert layers[0]["in"] == [416, 416, 3]
    assert shapes["conv_73"][1] == (13, 13, 1024)  # last conv of Darknet-53
    assert "conv_74" not in by_name and by_name["shortcut_74"]["inputs"] == [
        "leaky_73",
        "shortcut_71",
    ]
    # one-source routes 83 and 95 redirect the next conv's input
    assert by_name["conv_84"]["inputs"] == ["leaky_79"] and by_name["conv_84"]["in"] == [
        13,
        13,
        512,
    ]
    assert by_name["conv_96"]["inputs"] == ["leaky_91"] and by_name["conv_96"]["in"] == [
        26,
        26,
        256,
    ]
    assert by_name["route_86"]["inputs"] == ["upsample_85", "shortcut_61"]
    assert by_name["route_98"]["inputs"] == ["upsample_97", "shortcut_36"]
    assert by_name["conv_87"]["in"] == [26, 26, 768] and by_name["conv_99"]["in"] == [52, 52, 384]
    for name, hw in [("conv_81", 13), ("conv_93", 26), ("conv_105", 52)]:
        lay = by_name[name]
        assert lay["out_channels"] == 255 and lay["kernel"] == 1 and lay["in"][:2] == [hw, hw]
        n = int(name.split("_")[1])
        assert f"bn_{n}" not in by_name and f"leaky_{n}" not in by_name  # linear
    convs = sorted(int(n.split("_")[1]) for n in by_name if n.startswith("conv_"))
    assert convs[0] == 0 and convs[-1] == 105 and len(convs) == 75
    for n in convs:
        if n not in (81, 93, 105):
            assert by_name[f"leaky_{n}"]["alpha"] == 0.1
    for lay in layers:
        if lay["kind"] == "add":  # darknet shortcut from=-3
            n = int(lay["name"].split("_")[1])
            assert len(lay["inputs"]) == 2 and lay["inputs"][0] == f"leaky_{n - 1}"


def test_mobilenetv2_structure():
    layers = load("mobilenetv2")["layers"]
    shapes = propagate(layers)
    dw = [lay for lay in layers if lay.get("groups", 1) > 1]
    assert len(dw) == 17
    for lay in dw:
        assert lay["groups"] == lay["in"][2] == lay["out_channels"] and lay["kernel"] == 3
    for lay in layers:
        if lay["kind"] == "add":  # residual: stride 1 and in == out channels
            assert shapes[lay["inputs"][0]][1] == shapes[lay["inputs"][1]][1]
            assert lay["inputs"][1].endswith(".conv.3")
    assert shapes["features.18.2"][1] == (7, 7, 1280)
    assert [lay["name"] for lay in layers[-3:]] == ["avgpool", "flatten", "classifier.1"]


def test_googlenet_inception_blocks():
    layers = load("googlenet")["layers"]
    by_name = {lay["name"]: lay for lay in layers}
    shapes = propagate(layers)
    widths = {
        "3a": 256,
        "3b": 480,
        "4a": 512,
        "4b": 512,
        "4c": 512,
        "4d": 528,
        "4e": 832,
        "5a": 832,
        "5b": 1024,
    }
    for block, channels in widths.items():
        p = f"inception{block}."
        cat = by_name[p + "cat"]
        assert cat["kind"] == "concat" and len(cat["inputs"]) == 4
        assert cat["inputs"] == [
            p + "branch1.relu",
            p + "branch2.1.relu",
            p + "branch3.1.relu",
            p + "branch4.1.relu",
        ]
        assert shapes[p + "cat"][1][2] == channels
        pool = by_name[p + "branch4.0"]
        assert pool["kind"] == "maxpool" and pool["ceil_mode"] is True
    assert shapes["inception3a.cat"][1][:2] == (28, 28)
    assert shapes["inception5b.cat"][1] == (7, 7, 1024)


def test_alexnet_conv_fc_split():
    shapes = propagate(load("alexnet")["layers"])
    conv = sum(m for n, (_, _, m) in shapes.items() if n.startswith("features."))
    fc = sum(m for n, (_, _, m) in shapes.items() if n.startswith("classifier."))
    assert abs(conv / 666e6 - 1) < 0.01 and abs(fc / 58.6e6 - 1) < 0.01
    assert shapes["features.12"][1] == (6, 6, 256)
