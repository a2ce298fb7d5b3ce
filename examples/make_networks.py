"""Generate the example network description files in this directory.

Writes resnet50.yaml, vgg16.yaml, yolov3.yaml, mobilenetv2.yaml, googlenet.yaml,
alexnet.yaml and mobilenetv3.yaml: the FULL graph of each network at batch 1, fp32 -- every
operator of the inference network (conv, batch norm, activations, pools, residual adds, concats,
upsamples, flatten, fc) in the order the reference implementation runs them, with
``inputs`` wherever an operator does not read the previous one's output.  The
autotune lowering (``autotune/ir/lowering.py``) folds the batch norms into their convs,
fuses the activations and the residual adds into the convs' epilogues, makes the
concats zero-copy and the flatten a view; what is left are the layers tuned.

Training-only operators are omitted (dropout, GoogLeNet's auxiliary heads), and so are
the ones that are the identity at the input size used (the adaptive average pools of
VGG-16 and AlexNet).  ``in`` is written on the first layer (the network input) and on
every conv and fc layer (the loader checks it against the producer's output).

Sources of the layer definitions:

* ResNet-50 -- torchvision ``torchvision/models/resnet.py`` (``resnet50``, Bottleneck
  "v1.5": the stride-2 of the first block of layer2..layer4 sits on the 3x3 ``conv2``;
  1x1 ``downsample.0`` projection + ``downsample.1`` batch norm with the same stride).
  Stem conv1, bn1, relu, maxpool 3x3/2 pad 1; per block conv/bn/relu x2, conv3, bn3,
  (downsample), ``out += identity``, relu; avgpool (global), flatten, fc; no softmax
  (torchvision has none).  Names are torchvision module paths; the block's one ``relu``
  module, applied three times, is ``relu1``/``relu2``/``relu3`` and the add is ``add``.
  Published: torchvision model table, ResNet50_Weights.IMAGENET1K_V1, 4.09 GFLOPS
  (torchvision's "GFLOPS" are multiply-accumulates).
* VGG-16 -- Simonyan & Zisserman, config "D"; torchvision ``torchvision/models/vgg.py``
  (``vgg16``, cfg "D").  Names are torchvision module paths (``features.N``: conv, relu,
  maxpool 2x2/2; ``classifier.N``: fc, relu); the AdaptiveAvgPool2d((7, 7)) is the
  identity at 224x224 and is left out, as are the dropouts.  Published: torchvision
  VGG16_Weights.IMAGENET1K_V1, 15.47 GFLOPS (MACs).
* YOLOv3-416 -- darknet ``cfg/yolov3.cfg`` (pjreddie/darknet) run at 416x416.  Cfg layer
  N (index as darknet prints it, counting shortcut/yolo/route/upsample layers too) is
  ``conv_N`` + ``bn_N`` + ``leaky_N`` (batch_normalize=1, activation=leaky, slope 0.1),
  ``shortcut_N`` (add of layers N-1 and N-3), ``upsample_N`` (stride 2, nearest) or
  ``route_N`` (a concat of its two sources; the one-source routes 83 and 95 are no
  operator: the next conv reads their source through ``inputs``).  The three detection
  convs conv_81/93/105 are 1x1, 255 channels, linear, with a bias and no batch norm.
  The yolo layers 82/94/106 decode boxes
  and are not operators: they are left out, and the detection convs are the outputs.
  In darknet ``pad=1`` means padding = size // 2.  Published: darknet prints 65.86 BFLOPs
  (= 2 * MACs), i.e. 32.93 GMACs.
* MobileNetV2 1.0 -- Sandler et al. 2018; torchvision ``torchvision/models/mobilenetv2.py``.
  ``features.0``: conv/bn/relu6 (Conv2dNormActivation ``.0/.1/.2``); inverted residuals
  ``features.N.conv``: expand 1x1 (``0.0/0.1/0.2``, absent when t = 1), depthwise 3x3
  (``1.0/1.1/1.2``), linear 1x1 projection (``2``) and its batch norm (``3``), plus the
  residual ``features.N.add`` when the stride is 1 and in == out channels;
  ``features.18``: 1x1 conv 1280/bn/relu6; global average pool (``avgpool``),
  ``flatten``, ``classifier.1`` (fc 1000; the dropout is omitted).  Published: ~300M
  multiply-adds (paper, Table 4); torchvision MobileNet_V2_Weights.IMAGENET1K_V1 lists
  0.30 GFLOPS.
* GoogLeNet -- Szegedy et al. 2014 "Going deeper with convolutions", as torchvision
  ``torchvision/models/googlenet.py`` builds it (``googlenet``, the batch-norm variant
  whose weights torchvision ships): BasicConv2d = conv (no bias), bn (eps 0.001), relu;
  maxpools with ceil_mode=True; nine Inception blocks (3a, 3b, 4a..4e, 5a, 5b) of four
  branches concatenated on channels (``inceptionXY.cat``); branch3's second conv is 3x3
  as in torchvision (its source calls kernel_size=3 instead of 5 "a known bug",
  pytorch/vision#906); avgpool (global), flatten, fc.  Without the auxiliary heads (not
  run at inference), transform_input and the dropout.  Published: torchvision
  GoogLeNet_Weights.IMAGENET1K_V1, 1.50 GFLOPS (MACs).
* AlexNet -- the original two-GPU network (Krizhevsky et al. 2012, as in Caffe's
  bvlc_alexnet, with groups=2 on conv2/conv4/conv5), counted as in Sze et al., "Efficient
  Processing of Deep Neural Networks: A Tutorial and Survey" (Proc. IEEE 2017): 724M MACs
  (666M conv + 58.6M fc), input 227x227x3.  Names follow the torchvision ``alexnet``
  module positions (``features.0..12``: conv, relu, maxpool 3x3/2; ``classifier.1..6``:
  fc, relu); torchvision's own AlexNet is the later one-GPU variant with different
  channel counts, only the names are borrowed from it.  The local response
  normalisations after relu1 and relu2 of the original are omitted (no LRN kind), as are
  the dropouts.
* MobileNetV3-Large 1.0 -- Howard et al. 2019 "Searching for MobileNetV3", Table 1, as
  torchvision ``torchvision/models/mobilenetv3.py`` builds it (``mobilenet_v3_large``,
  ``_mobilenet_v3_conf``): ``features.0`` conv 3x3/2 16 + bn + hardswish; 15 inverted
  residuals ``features.N.block``: expand 1x1 (``0.0/0.1/0.2``, absent when the expansion
  equals the input), depthwise kxk (next index), squeeze-excitation when the table says so
  (``.avgpool``, ``.fc1`` 1x1 conv with bias, ``.activation`` relu, ``.fc2``,
  ``.scale_activation`` hardsigmoid, then ``.mul``: the block's features times the gate; squeeze
  channels ``_make_divisible(expanded // 4, 8)``), linear 1x1 projection and its bn,
  the residual ``features.N.add`` when stride 1 and in == out; ReLU in the first six
  blocks, hardswish after; batch norms eps 0.001; ``features.16`` 1x1 conv 960 + bn +
  hardswish; global average pool, flatten, ``classifier.0`` fc 1280 + hardswish,
  ``classifier.3`` fc 1000 (the dropout omitted).  Published: torchvision
  MobileNet_V3_Large_Weights.IMAGENET1K_V1, 0.22 GFLOPS (MACs: 0.217); the paper's
  Table 3 gives 219 M multiply-adds.

Each file is checked here: the MACs counted by this script (conv and fc, and a channel
gate's multiply, which autotune maps as a depthwise 1x1 conv) must be within
1 % of the published figure, and the file must load with
``autotune.io.network_yaml.load_network`` (the checkout's ``autotune``) with the same
MACs; one summary line per network is printed (operators, lowered layers by kind, MACs).

Run:  python examples/make_networks.py
"""

import math
import os
import sys
from collections import Counter

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
#: Relative tolerance of the MAC count against the published figure.
TOLERANCE = 0.01
ACTIVATIONS = {
    "relu",
    "relu6",
    "clip",
    "leaky_relu",
    "sigmoid",
    "silu",
    "hardswish",
    "hardsigmoid",
}


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def window_out(n, kernel, stride, padding, ceil_mode=False):
    """Output extent of a conv or pool along one axis (PyTorch/ONNX rule in ceil mode: the
    last window must start inside the input or its left padding)."""
    span = n + 2 * padding - kernel
    out = (math.ceil(span / stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= n + padding:
        out -= 1
    return out


class Net:
    """A network being written: its layers (dicts as in the file) and every tensor's
    shape, so that each operator's output shape and the MACs are known here."""

    def __init__(self, name, published_macs, comment, input_shape):
        self.name = name
        self.published = published_macs
        self.comment = comment
        self.layers = []
        self.shapes = {"input": tuple(input_shape)}
        self.last = "input"
        self.macs = 0

    def op(self, name, kind, inputs=None, **fields):
        """Append an operator reading ``inputs`` (default: the previous operator's output)
        with the given non-default ``fields``; return its name (the tensor it writes)."""
        sources = [self.last] if inputs is None else list(inputs)
        shapes = [self.shapes[s] for s in sources]
        h, w, c = shapes[0]
        if kind == "conv":
            kh, kw = _pair(fields["kernel"])
            sh, sw = _pair(fields.get("stride", 1))
            ph, pw = _pair(fields.get("padding", 0))
            groups = fields.get("groups", 1)
            co = fields["out_channels"]
            assert c % groups == 0 and co % groups == 0, name
            out = (window_out(h, kh, sh, ph), window_out(w, kw, sw, pw), co)
            self.macs += out[0] * out[1] * co * (c // groups) * kh * kw
        elif kind == "fc":
            out = (1, 1, fields["out_channels"])
            self.macs += h * w * c * fields["out_channels"]
        elif kind in ("maxpool", "avgpool"):
            kh, kw = _pair(fields["kernel"])
            sh, sw = _pair(fields.get("stride", 1))
            ph, pw = _pair(fields.get("padding", 0))
            ceil = fields.get("ceil_mode", False)
            out = (window_out(h, kh, sh, ph, ceil), window_out(w, kw, sw, pw, ceil), c)
        elif kind == "global_avgpool":
            out = (1, 1, c)
        elif kind == "flatten":
            out = (1, 1, h * w * c)
        elif kind == "add":
            assert len(set(shapes)) == 1 and len(shapes) >= 2, (name, shapes)
            out = shapes[0]
        elif kind == "mul":  # a feature map by one of its shape or by a channel gate
            assert len(shapes) == 2 and shapes[1] in (shapes[0], (1, 1, c)), (name, shapes)
            out = shapes[0]
            if shapes[1] != out:  # mapped as a depthwise 1x1 conv: a MAC per output word
                self.macs += h * w * c
        elif kind == "concat":
            assert len({s[:2] for s in shapes}) == 1 and len(shapes) >= 2, (name, shapes)
            out = (h, w, sum(s[2] for s in shapes))
        elif kind == "upsample":
            out = (h * fields["scale"], w * fields["scale"], c)
        else:
            assert kind in ACTIVATIONS | {"batchnorm", "softmax"}, kind
            out = (h, w, c)
        layer = {"name": name, "kind": kind}
        if sources != [self.last]:
            layer["inputs"] = sources
        if not self.layers or kind in ("conv", "fc"):
            assert len(sources) == 1, name
            layer["in"] = list(shapes[0])
        layer.update(fields)
        assert name not in self.shapes, name
        self.layers.append(layer)
        self.shapes[name] = out
        self.last = name
        return name

    # -- building blocks ---------------------------------------------------------------
    def conv(
        self, name, out_channels, kernel, stride=1, padding=0, groups=1, inputs=None, bias=False
    ):
        fields = {"out_channels": out_channels, "kernel": kernel}
        if stride != 1:
            fields["stride"] = stride
        if padding != 0:
            fields["padding"] = padding
        if groups != 1:
            fields["groups"] = groups
        if bias:
            fields["bias"] = True
        return self.op(name, "conv", inputs, **fields)

    def pool(self, name, kind, kernel, stride, padding=0, ceil_mode=False, inputs=None):
        fields = {"kernel": kernel, "stride": stride}
        if padding:
            fields["padding"] = padding
        if ceil_mode:
            fields["ceil_mode"] = True
        return self.op(name, kind, inputs, **fields)

    def shape(self, tensor=None):
        return self.shapes[self.last if tensor is None else tensor]

    # -- output ------------------------------------------------------------------------
    def render(self):
        def scalar(v):
            if isinstance(v, list):
                return "[" + ", ".join(scalar(x) for x in v) + "]"
            if isinstance(v, bool):
                return "true" if v else "false"
            return str(v)

        lines = ["# " + line if line else "#" for line in self.comment.strip().splitlines()]
        lines += ["network: " + self.name, "batch: 1", "precision: fp32", "layers:"]
        for layer in self.layers:
            body = ", ".join(f"{k}: {scalar(v)}" for k, v in layer.items())
            lines.append("  - {" + body + "}")
        return "\n".join(lines) + "\n"

    def write(self):
        assert abs(self.macs / self.published - 1) < TOLERANCE, (
            self.name,
            self.macs,
            self.published,
        )
        text = self.render()
        data = yaml.safe_load(text)
        assert data["layers"] == self.layers, self.name
        path = os.path.join(HERE, self.name + ".yaml")
        with open(path, "w") as f:
            f.write(text)
        return path


def resnet50():
    net = Net(
        "resnet50",
        4.09e9,
        """
torchvision resnet50 (v1.5: stride on the 3x3 conv2), 224x224, full graph: every conv,
batch norm, relu, the maxpool, the 16 residual adds, global average pool, flatten, fc.
Names are torchvision module paths (the block's relu applied 3 times: relu1/2/3).
Published 4.09 GMACs (torchvision '4.09 GFLOPS', ResNet50_Weights.IMAGENET1K_V1).
Generated by examples/make_networks.py (sources in its docstring).
""",
        [224, 224, 3],
    )
    net.conv("conv1", 64, 7, stride=2, padding=3)
    net.op("bn1", "batchnorm")
    net.op("relu", "relu")
    x = net.pool("maxpool", "maxpool", 3, 2, padding=1)
    assert net.shape() == (56, 56, 64)
    for stage, (width, blocks, stride) in enumerate(
        [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)], start=1
    ):
        for b in range(blocks):
            s = stride if b == 0 else 1
            p = f"layer{stage}.{b}."
            block_in = x
            net.conv(p + "conv1", width, 1)
            net.op(p + "bn1", "batchnorm")
            net.op(p + "relu1", "relu")
            net.conv(p + "conv2", width, 3, stride=s, padding=1)
            net.op(p + "bn2", "batchnorm")
            net.op(p + "relu2", "relu")
            net.conv(p + "conv3", width * 4, 1)
            y = net.op(p + "bn3", "batchnorm")
            identity = block_in
            if b == 0:
                net.conv(p + "downsample.0", width * 4, 1, stride=s, inputs=[block_in])
                identity = net.op(p + "downsample.1", "batchnorm")
            net.op(p + "add", "add", inputs=[y, identity])
            x = net.op(p + "relu3", "relu")
    assert net.shape() == (7, 7, 2048)
    net.op("avgpool", "global_avgpool")
    net.op("flatten", "flatten")
    net.op("fc", "fc", out_channels=1000)
    return net


def vgg16():
    net = Net(
        "vgg16",
        15.47e9,
        """
torchvision vgg16 (VGG config D), 224x224, full graph: 13 conv + relu, 5 maxpools 2x2/2,
flatten, 3 fc (2 with relu). The AdaptiveAvgPool2d((7, 7)) is the identity at 224x224
and the dropouts are inference no-ops: both left out. Names are torchvision module paths.
Published 15.47 GMACs (torchvision '15.47 GFLOPS', VGG16_Weights.IMAGENET1K_V1).
Generated by examples/make_networks.py (sources in its docstring).
""",
        [224, 224, 3],
    )
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    idx = 0  # torchvision features index: conv, relu (, maxpool)
    for v in cfg:
        if v == "M":
            net.pool(f"features.{idx}", "maxpool", 2, 2)
            idx += 1
        else:
            net.conv(f"features.{idx}", v, 3, padding=1)
            net.op(f"features.{idx + 1}", "relu")
            idx += 2
    assert net.shape() == (7, 7, 512)
    net.op("flatten", "flatten")
    net.op("classifier.0", "fc", out_channels=4096)
    net.op("classifier.1", "relu")
    net.op("classifier.3", "fc", out_channels=4096)
    net.op("classifier.4", "relu")
    net.op("classifier.6", "fc", out_channels=1000)
    return net


def yolov3():
    net = Net(
        "yolov3",
        65.86e9 / 2,
        """
darknet cfg/yolov3.cfg at 416x416, full graph. Cfg layer N is conv_N + bn_N + leaky_N
(leaky relu 0.1), shortcut_N (add of layers N-1 and N-3), upsample_N (x2) or route_N
(concat of two layers); the one-source routes 83 and 95 are no operator (conv_84 and
conv_96 read layers 79 and 91 through 'inputs'). The detection convs conv_81/93/105 are
linear (no batch norm, a bias of their own) and are the
network's outputs: the yolo layers 82/94/106 (box decoding) are not operators and are
left out. Published 65.86 BFLOPs = 2*MACs -> 32.93 GMACs.
Generated by examples/make_networks.py (sources in its docstring).
""",
        [416, 416, 3],
    )
    out = {}  # cfg layer index -> the tensor it outputs
    i = 0

    def conv(filters, size, stride=1, inputs=None):  # darknet pad=1 -> size // 2
        nonlocal i
        net.conv(f"conv_{i}", filters, size, stride=stride, padding=size // 2, inputs=inputs)
        net.op(f"bn_{i}", "batchnorm")
        out[i] = net.op(f"leaky_{i}", "leaky_relu", alpha=0.1)
        i += 1

    def detection(filters=255):  # linear, with bias, no batch norm
        nonlocal i
        out[i] = net.conv(f"conv_{i}", filters, 1, bias=True)
        i += 1

    def shortcut():  # from=-3, activation=linear
        nonlocal i
        out[i] = net.op(f"shortcut_{i}", "add", inputs=[out[i - 1], out[i - 3]])
        i += 1

    def yolo():  # not an operator
        nonlocal i
        i += 1

    def route(*sources):
        nonlocal i
        tensors = [out[s if s >= 0 else i + s] for s in sources]
        out[i] = tensors[0] if len(tensors) == 1 else net.op(f"route_{i}", "concat", tensors)
        i += 1
        return out[i - 1]

    def upsample():
        nonlocal i
        out[i] = net.op(f"upsample_{i}", "upsample", scale=2)
        i += 1

    # Darknet-53 backbone (52 convs, 23 shortcuts)
    conv(32, 3)
    for filters, repeats in [(64, 1), (128, 2), (256, 8), (512, 8), (1024, 4)]:
        conv(filters, 3, 2)  # downsample
        for _ in range(repeats):
            conv(filters // 2, 1)
            conv(filters, 3)
            shortcut()
    assert i == 75 and net.shape(out[36]) == (52, 52, 256) and net.shape(out[61]) == (26, 26, 512)

    # head 1 (13x13)
    for _ in range(3):
        conv(512, 1)
        conv(1024, 3)
    detection()  # conv_81 (after conv_79 1x1 512, conv_80 3x3 1024)
    yolo()  # 82
    src = route(-4)  # 83 -> 79
    conv(256, 1, inputs=[src])  # conv_84
    upsample()  # 85
    route(-1, 61)  # 86 -> 768 channels
    assert net.shape() == (26, 26, 768)
    # head 2 (26x26)
    for _ in range(3):
        conv(256, 1)
        conv(512, 3)
    detection()  # conv_93
    yolo()  # 94
    src = route(-4)  # 95 -> 91
    conv(128, 1, inputs=[src])  # conv_96
    upsample()  # 97
    route(-1, 36)  # 98 -> 384 channels
    assert net.shape() == (52, 52, 384)
    # head 3 (52x52)
    for _ in range(3):
        conv(128, 1)
        conv(256, 3)
    detection()  # conv_105
    yolo()  # 106
    assert i == 107
    return net


def mobilenetv2():
    net = Net(
        "mobilenetv2",
        300e6,
        """
torchvision mobilenet_v2 (width 1.0), 224x224, full graph: conv/bn/relu6 blocks, 17
inverted residuals (expand 1x1, depthwise 3x3, linear 1x1 projection; the residual add
when stride 1 and in == out channels), 1x1 conv 1280, global average pool, flatten,
fc 1000 (the dropout is omitted). Names are torchvision module paths.
Published ~300M multiply-adds (Sandler et al. Table 4; torchvision '0.30 GFLOPS').
Generated by examples/make_networks.py (sources in its docstring).
""",
        [224, 224, 3],
    )

    def conv_bn_relu6(prefix, out_channels, kernel, stride=1, groups=1):
        net.conv(prefix + ".0", out_channels, kernel, stride, kernel // 2, groups)
        net.op(prefix + ".1", "batchnorm")
        return net.op(prefix + ".2", "relu6")

    x = conv_bn_relu6("features.0", 32, 3, stride=2)
    idx = 1
    for t, c, n, s in [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ]:
        for b in range(n):
            stride = s if b == 0 else 1
            c_in = net.shape(x)[2]
            hidden = c_in * t
            p = f"features.{idx}.conv."
            m = 0
            if t != 1:
                conv_bn_relu6(p + "0", hidden, 1)
                m = 1
            conv_bn_relu6(p + str(m), hidden, 3, stride=stride, groups=hidden)
            net.conv(p + str(m + 1), c, 1)
            y = net.op(p + str(m + 2), "batchnorm")
            if stride == 1 and c_in == c:
                y = net.op(f"features.{idx}.add", "add", inputs=[x, y])
            x = y
            idx += 1
    assert idx == 18 and net.shape() == (7, 7, 320)
    conv_bn_relu6("features.18", 1280, 1)
    net.op("avgpool", "global_avgpool")
    net.op("flatten", "flatten")
    net.op("classifier.1", "fc", out_channels=1000)
    return net


def _make_divisible(v, divisor=8):
    """torchvision's ``_make_divisible``: round to a multiple, at most 10 % down."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def mobilenetv3():
    net = Net(
        "mobilenetv3",
        217e6,
        """
torchvision mobilenet_v3_large (width 1.0), 224x224, full graph: conv/bn/hardswish stem,
15 inverted residuals (expand 1x1, depthwise 3x3 or 5x5, squeeze-excitation in 8 of them:
global average pool, 1x1 conv, relu, 1x1 conv, hardsigmoid, times the features; linear 1x1
projection; the residual add when stride 1 and in == out), 1x1 conv 960, global average
pool, flatten, fc 1280 + hardswish, fc 1000 (the dropout is omitted). Batch norms eps
0.001. Names are torchvision module paths. Published 0.217 GMACs (torchvision
MobileNet_V3_Large_Weights.IMAGENET1K_V1, '0.22 GFLOPS'; the paper: 219M multiply-adds).
Generated by examples/make_networks.py (sources in its docstring).
""",
        [224, 224, 3],
    )

    def conv_bn(prefix, out_channels, kernel, stride=1, groups=1, act=None):
        net.conv(prefix + ".0", out_channels, kernel, stride, (kernel - 1) // 2, groups)
        y = net.op(prefix + ".1", "batchnorm", epsilon=0.001)
        return net.op(prefix + ".2", act) if act else y

    x = conv_bn("features.0", 16, 3, stride=2, act="hardswish")
    # (kernel, expanded, out, squeeze-excitation, activation, stride): the paper's Table 1
    for idx, (k, expanded, c, se, act, s) in enumerate(
        [
            (3, 16, 16, False, "relu", 1),
            (3, 64, 24, False, "relu", 2),
            (3, 72, 24, False, "relu", 1),
            (5, 72, 40, True, "relu", 2),
            (5, 120, 40, True, "relu", 1),
            (5, 120, 40, True, "relu", 1),
            (3, 240, 80, False, "hardswish", 2),
            (3, 200, 80, False, "hardswish", 1),
            (3, 184, 80, False, "hardswish", 1),
            (3, 184, 80, False, "hardswish", 1),
            (3, 480, 112, True, "hardswish", 1),
            (3, 672, 112, True, "hardswish", 1),
            (5, 672, 160, True, "hardswish", 2),
            (5, 960, 160, True, "hardswish", 1),
            (5, 960, 160, True, "hardswish", 1),
        ],
        start=1,
    ):
        c_in = net.shape(x)[2]
        p = f"features.{idx}.block."
        m = 0
        if expanded != c_in:
            conv_bn(p + "0", expanded, 1, act=act)
            m = 1
        y = conv_bn(p + str(m), expanded, k, stride=s, groups=expanded, act=act)
        if se:
            q = p + str(m + 1)
            net.op(q + ".avgpool", "global_avgpool")
            net.conv(q + ".fc1", _make_divisible(expanded // 4), 1, bias=True)
            net.op(q + ".activation", "relu")
            net.conv(q + ".fc2", expanded, 1, bias=True)
            gate = net.op(q + ".scale_activation", "hardsigmoid")
            net.op(q + ".mul", "mul", inputs=[y, gate])
            m += 1
        y = conv_bn(p + str(m + 1), c, 1)
        if s == 1 and c_in == c:
            y = net.op(f"features.{idx}.add", "add", inputs=[x, y])
        x = y
    assert net.shape() == (7, 7, 160)
    conv_bn("features.16", 960, 1, act="hardswish")
    net.op("avgpool", "global_avgpool")
    net.op("flatten", "flatten")
    net.op("classifier.0", "fc", out_channels=1280, bias=True)
    net.op("classifier.1", "hardswish")
    net.op("classifier.3", "fc", out_channels=1000, bias=True)
    return net


def googlenet():
    net = Net(
        "googlenet",
        1.50e9,
        """
GoogLeNet (Szegedy et al. 2014) as torchvision googlenet builds it, 224x224, full graph:
BasicConv2d = conv (no bias) + batchnorm (eps 0.001) + relu; maxpools with ceil_mode;
9 inception blocks of 4 branches (1x1 | 1x1, 3x3 | 1x1, 3x3 (torchvision's "known bug",
5x5 in the paper) | maxpool 3x3/1, 1x1) concatenated on channels; global average pool,
flatten, fc. Without the auxiliary heads (training only), transform_input and dropout.
Names are torchvision module paths. Published 1.50 GMACs (torchvision '1.50 GFLOPS',
GoogLeNet_Weights.IMAGENET1K_V1).
Generated by examples/make_networks.py (sources in its docstring).
""",
        [224, 224, 3],
    )

    def basic(prefix, out_channels, kernel, stride=1, padding=0, inputs=None):
        net.conv(prefix + ".conv", out_channels, kernel, stride, padding, inputs=inputs)
        net.op(prefix + ".bn", "batchnorm", epsilon=0.001)
        return net.op(prefix + ".relu", "relu")

    def inception(name, x, ch1, ch3red, ch3, ch5red, ch5, pool_proj):
        b1 = basic(name + ".branch1", ch1, 1, inputs=[x])
        basic(name + ".branch2.0", ch3red, 1, inputs=[x])
        b2 = basic(name + ".branch2.1", ch3, 3, padding=1)
        basic(name + ".branch3.0", ch5red, 1, inputs=[x])
        b3 = basic(name + ".branch3.1", ch5, 3, padding=1)  # 3x3 as torchvision
        net.pool(name + ".branch4.0", "maxpool", 3, 1, padding=1, ceil_mode=True, inputs=[x])
        b4 = basic(name + ".branch4.1", pool_proj, 1)
        return net.op(name + ".cat", "concat", [b1, b2, b3, b4])

    basic("conv1", 64, 7, stride=2, padding=3)
    net.pool("maxpool1", "maxpool", 3, 2, ceil_mode=True)
    basic("conv2", 64, 1)
    basic("conv3", 192, 3, padding=1)
    x = net.pool("maxpool2", "maxpool", 3, 2, ceil_mode=True)
    assert net.shape() == (28, 28, 192)
    x = inception("inception3a", x, 64, 96, 128, 16, 32, 32)
    x = inception("inception3b", x, 128, 128, 192, 32, 96, 64)
    x = net.pool("maxpool3", "maxpool", 3, 2, ceil_mode=True)
    x = inception("inception4a", x, 192, 96, 208, 16, 48, 64)
    x = inception("inception4b", x, 160, 112, 224, 24, 64, 64)
    x = inception("inception4c", x, 128, 128, 256, 24, 64, 64)
    x = inception("inception4d", x, 112, 144, 288, 32, 64, 64)
    x = inception("inception4e", x, 256, 160, 320, 32, 128, 128)
    assert net.shape() == (14, 14, 832)
    x = net.pool("maxpool4", "maxpool", 2, 2, ceil_mode=True)
    x = inception("inception5a", x, 256, 160, 320, 32, 128, 128)
    x = inception("inception5b", x, 384, 192, 384, 48, 128, 128)
    assert net.shape() == (7, 7, 1024)
    net.op("avgpool", "global_avgpool")
    net.op("flatten", "flatten")
    net.op("fc", "fc", out_channels=1000)
    return net


def alexnet():
    net = Net(
        "alexnet",
        724e6,
        """
original two-GPU AlexNet (grouped convs, 227x227) as counted in Sze et al. 2017 tutorial,
full graph: 5 conv + relu, 3 maxpools 3x3/2, flatten, 3 fc (2 with relu). The local
response normalisations after relu1 and relu2 are omitted (no LRN kind), as are the
dropouts and the AdaptiveAvgPool2d((6, 6)) (the identity here). Names follow the
torchvision alexnet module positions. Published 724M MACs (666M conv + 58.6M fc).
Generated by examples/make_networks.py (sources in its docstring).
""",
        [227, 227, 3],
    )
    net.conv("features.0", 96, 11, stride=4)  # 55x55x96
    net.op("features.1", "relu")
    net.pool("features.2", "maxpool", 3, 2)  # 27x27
    net.conv("features.3", 256, 5, padding=2, groups=2)
    net.op("features.4", "relu")
    net.pool("features.5", "maxpool", 3, 2)  # 13x13
    net.conv("features.6", 384, 3, padding=1)
    net.op("features.7", "relu")
    net.conv("features.8", 384, 3, padding=1, groups=2)
    net.op("features.9", "relu")
    net.conv("features.10", 256, 3, padding=1, groups=2)
    net.op("features.11", "relu")
    net.pool("features.12", "maxpool", 3, 2)
    assert net.shape() == (6, 6, 256)
    net.op("flatten", "flatten")
    net.op("classifier.1", "fc", out_channels=4096)
    net.op("classifier.2", "relu")
    net.op("classifier.4", "fc", out_channels=4096)
    net.op("classifier.5", "relu")
    net.op("classifier.6", "fc", out_channels=1000)
    return net


BUILDERS = (resnet50, vgg16, yolov3, mobilenetv2, googlenet, alexnet, mobilenetv3)


def summary(net, path):
    """Load the written file with autotune and return its one-line summary (checks that
    the loader agrees with this script on the operators and the MACs)."""
    from autotune.io.network_yaml import load_network

    loaded = load_network(path)
    assert len(loaded.graph.ops) == len(net.layers), net.name
    assert loaded.macs == net.macs, (net.name, loaded.macs, net.macs)
    kinds = Counter(layer.kind for layer in loaded.layers)
    by_kind = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
    off = 100 * (net.macs / net.published - 1)
    return (
        f"{net.name}: {len(net.layers)} operators, {len(loaded.layers)} lowered layers "
        f"({by_kind}), {net.macs / 1e9:.4f} GMACs ({off:+.2f} % of published "
        f"{net.published / 1e9:.4g})"
    )


def main():
    # the checkout's autotune, not another installed copy
    if os.path.isdir(os.path.join(ROOT, "autotune")):
        sys.path.insert(0, ROOT)
    for build in BUILDERS:
        net = build()
        path = net.write()
        print(path)
        print("  " + summary(net, path))


if __name__ == "__main__":
    main()
