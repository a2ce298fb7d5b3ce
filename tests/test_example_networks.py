"""Checks for the example network descriptions in examples/*.yaml.

Uses only PyYAML and the standard library (not the autotune package), so the
data files can be validated independently of the loader.  Published MAC
figures:

* resnet50    4.09e9  torchvision ResNet50_Weights.IMAGENET1K_V1 "4.09 GFLOPS"
                      (torchvision counts multiply-accumulates; the figure
                      includes the fc layer: conv 4.087e9 + fc 2.05e6).
* vgg16       15.47e9 torchvision VGG16_Weights.IMAGENET1K_V1 "15.47 GFLOPS".
* yolov3      32.93e9 darknet prints 65.86 BFLOPs for cfg/yolov3.cfg at 416,
                      which is 2 * MACs.
* mobilenetv2 300e6   Sandler et al. 2018 (~300M multiply-adds); torchvision
                      MobileNet_V2_Weights.IMAGENET1K_V1 "0.30 GFLOPS".
* alexnet     724e6   Sze et al., "Efficient Processing of Deep Neural
                      Networks: A Tutorial and Survey", 2017 (666M conv +
                      58.6M fc), original grouped two-GPU AlexNet.
"""

import pathlib

import pytest
import yaml

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"

TOP_KEYS = {"network", "batch", "precision", "layers"}
LAYER_KEYS = {
    "conv": {"name", "kind", "in", "out_channels", "kernel", "stride", "padding", "groups"},
    "fc": {"name", "kind", "in", "out_channels"},
}
REQUIRED_LAYER_KEYS = {"name", "kind", "in", "out_channels"}

# network -> (published MACs, expected number of conv layers, of fc layers)
EXPECTED = {
    "resnet50": (4.09e9, 53, 1),
    "vgg16": (15.47e9, 13, 3),
    "yolov3": (65.86e9 / 2, 75, 0),
    "mobilenetv2": (300e6, 52, 1),
    "alexnet": (724e6, 5, 3),
}
NETWORKS = sorted(EXPECTED)


def pair(v):
    if isinstance(v, int):
        return v, v
    assert isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v), v
    return v[0], v[1]


def out_shape(layer):
    if layer["kind"] == "fc":
        return (1, 1, layer["out_channels"])
    h, w, _ = layer["in"]
    kh, kw = pair(layer["kernel"])
    sh, sw = pair(layer.get("stride", 1))
    ph, pw = pair(layer.get("padding", 0))
    return ((h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1, layer["out_channels"])


def macs(layer):
    h, w, c = layer["in"]
    if layer["kind"] == "fc":
        return h * w * c * layer["out_channels"]
    kh, kw = pair(layer["kernel"])
    ho, wo, co = out_shape(layer)
    return ho * wo * co * (c // layer.get("groups", 1)) * kh * kw


def load(name):
    with open(EXAMPLES / (name + ".yaml")) as f:
        return yaml.safe_load(f)


def derived(shape):
    """Shapes a no-MAC layer (max pool, global avg pool) can make from `shape`."""
    h, w, c = shape
    out = {(h, w, c), (1, 1, c)}
    for hh, ww in [
        (h // 2, w // 2),
        ((h + 1) // 2, (w + 1) // 2),
        ((h - 3) // 2 + 1, (w - 3) // 2 + 1),
    ]:  # 2x2/2, 3x3/2 pad 1, 3x3/2 valid
        out.add((hh, ww, c))
    return out


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
    for layer in data["layers"]:
        assert layer.get("kind") in LAYER_KEYS, layer
        assert set(layer) <= LAYER_KEYS[layer["kind"]], layer
        assert REQUIRED_LAYER_KEYS <= set(layer), layer
        if layer["kind"] == "conv":
            assert "kernel" in layer, layer
        assert isinstance(layer["name"], str)
        assert isinstance(layer["in"], list) and len(layer["in"]) == 3
        assert all(isinstance(x, int) and x > 0 for x in layer["in"]), layer
        assert isinstance(layer["out_channels"], int) and layer["out_channels"] > 0
        g = layer.get("groups", 1)
        assert isinstance(g, int) and g >= 1
        assert layer["in"][2] % g == 0 and layer["out_channels"] % g == 0, layer
        assert all(x > 0 for x in out_shape(layer)), layer


def test_unique_names(net):
    _, data = net
    names = [lay["name"] for lay in data["layers"]]
    assert len(names) == len(set(names))


def test_layer_counts(net):
    name, data = net
    _, n_conv, n_fc = EXPECTED[name]
    kinds = [lay["kind"] for lay in data["layers"]]
    assert kinds.count("conv") == n_conv
    assert kinds.count("fc") == n_fc
    # fc layers (if any) come last
    assert kinds == ["conv"] * n_conv + ["fc"] * n_fc


def test_total_macs_match_published(net):
    name, data = net
    published = EXPECTED[name][0]
    total = sum(macs(lay) for lay in data["layers"])
    assert abs(total / published - 1) < 0.01, (name, total, published)


def test_yolov3_chain():
    """Each conv takes the previous conv's output (shortcuts keep the shape),
    except after the two route/upsample/route groups of yolov3.cfg."""
    layers = load("yolov3")["layers"]
    by_name = {lay["name"]: lay for lay in layers}

    def up_concat(upsampled, skip):
        h, w, c = out_shape(by_name[upsampled])
        skip = out_shape(by_name[skip])
        assert skip[:2] == (2 * h, 2 * w)
        return (2 * h, 2 * w, c + skip[2])

    special = {
        "conv_84": out_shape(by_name["conv_79"]),  # route -4 (layer 83)
        "conv_87": up_concat("conv_84", "conv_60"),  # upsample 85, route -1,61
        "conv_96": out_shape(by_name["conv_91"]),  # route -4 (layer 95)
        "conv_99": up_concat("conv_96", "conv_35"),  # upsample 97, route -1,36
    }
    assert layers[0]["in"] == [416, 416, 3]
    for prev, layer in zip(layers, layers[1:], strict=False):
        expected = special.get(layer["name"], out_shape(prev))
        assert tuple(layer["in"]) == expected, layer


@pytest.mark.parametrize("name", ["vgg16", "alexnet", "mobilenetv2"])
def test_sequential_networks_chain_strictly(name):
    layers = load(name)["layers"]
    for prev, layer in zip(layers, layers[1:], strict=False):
        assert tuple(layer["in"]) in derived(out_shape(prev)), layer


def test_resnet50_structure():
    layers = {lay["name"]: lay for lay in load("resnet50")["layers"]}
    block_in = (56, 56, 64)  # after conv1 + 3x3/2 maxpool
    assert out_shape(layers["conv1"]) == (112, 112, 64)
    for stage, blocks in enumerate([3, 4, 6, 3], start=1):
        width = 64 * 2 ** (stage - 1)
        for b in range(blocks):
            p = f"layer{stage}.{b}."
            c1, c2, c3 = layers[p + "conv1"], layers[p + "conv2"], layers[p + "conv3"]
            assert tuple(c1["in"]) == block_in
            assert c1["out_channels"] == c2["out_channels"] == width
            assert c1["kernel"] == 1 and c3["kernel"] == 1 and c2["kernel"] == 3
            assert tuple(c2["in"]) == out_shape(c1)
            assert tuple(c3["in"]) == out_shape(c2)
            # v1.5: the stride sits on the 3x3 conv
            assert c1.get("stride", 1) == 1 and c3.get("stride", 1) == 1
            assert c2.get("stride", 1) == (2 if stage > 1 and b == 0 else 1)
            if b == 0:
                d = layers[p + "downsample.0"]
                assert tuple(d["in"]) == block_in and out_shape(d) == out_shape(c3)
            else:
                assert p + "downsample.0" not in layers
            block_in = out_shape(c3)
    assert block_in == (7, 7, 2048)
    assert layers["fc"]["in"] == [1, 1, 2048] and layers["fc"]["out_channels"] == 1000


def test_yolov3_heads():
    layers = {lay["name"]: lay for lay in load("yolov3")["layers"]}
    assert out_shape(layers["conv_73"]) == (13, 13, 1024)  # last conv of Darknet-53
    assert "conv_74" not in layers  # cfg layer 74 is a shortcut
    # 1x1 convs before the upsamples, and the concat widths after the routes
    assert layers["conv_84"]["in"] == [13, 13, 512] and layers["conv_84"]["out_channels"] == 256
    assert layers["conv_87"]["in"] == [26, 26, 768]
    assert layers["conv_96"]["in"] == [26, 26, 256] and layers["conv_96"]["out_channels"] == 128
    assert layers["conv_99"]["in"] == [52, 52, 384]
    for name, hw in [("conv_81", 13), ("conv_93", 26), ("conv_105", 52)]:
        lay = layers[name]
        assert lay["out_channels"] == 255 and lay["kernel"] == 1 and lay["in"][:2] == [hw, hw]
    idx = sorted(int(n.split("_")[1]) for n in layers)
    assert idx[0] == 0 and idx[-1] == 105 and len(idx) == 75


def test_mobilenetv2_depthwise():
    layers = load("mobilenetv2")["layers"]
    dw = [lay for lay in layers if lay.get("groups", 1) > 1]
    assert len(dw) == 17
    for lay in dw:
        assert lay["groups"] == lay["in"][2] == lay["out_channels"] and lay["kernel"] == 3


def test_alexnet_conv_fc_split():
    layers = load("alexnet")["layers"]
    conv = sum(macs(lay) for lay in layers if lay["kind"] == "conv")
    fc = sum(macs(lay) for lay in layers if lay["kind"] == "fc")
    assert abs(conv / 666e6 - 1) < 0.01 and abs(fc / 58.6e6 - 1) < 0.01
    assert layers[-3]["in"] == [6, 6, 256]
