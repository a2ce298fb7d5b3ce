"""Generate the example network description files in this directory.

Writes resnet50.yaml, vgg16.yaml, yolov3.yaml, mobilenetv2.yaml and
alexnet.yaml (conv and fully-connected layers only, batch 1, fp32).
Uses only the standard library and PyYAML (PyYAML is used solely to
check that each written file parses back to the same data).

Sources of the layer definitions:

* ResNet-50 -- torchvision ``torchvision/models/resnet.py``
  (``resnet50``, Bottleneck "v1.5": the stride-2 of the first block of
  layer2..layer4 sits on the 3x3 ``conv2``; 1x1 ``downsample.0``
  projection with the same stride).  Layer names are torchvision module
  paths.  Published: torchvision model table, ResNet50_Weights.IMAGENET1K_V1,
  4.09 GFLOPS (torchvision's "GFLOPS" are multiply-accumulates).
* VGG-16 -- Simonyan & Zisserman, config "D"; torchvision
  ``torchvision/models/vgg.py`` (``vgg16``, cfg "D").  Names are
  torchvision module paths (``features.N``, ``classifier.N``).
  Published: torchvision VGG16_Weights.IMAGENET1K_V1, 15.47 GFLOPS (MACs).
* YOLOv3-416 -- darknet ``cfg/yolov3.cfg`` (pjreddie/darknet) run at
  416x416.  Names are ``conv_<cfg layer index>`` (index as darknet prints
  it, counting shortcut/yolo/route/upsample layers too).  In darknet
  ``pad=1`` means padding = size // 2, so 1x1 convs have padding 0 and
  3x3 convs padding 1.  Published: darknet prints 65.86 BFLOPs
  (= 2 * MACs), i.e. 32.93 GMACs.
* MobileNetV2 1.0 -- Sandler et al. 2018; torchvision
  ``torchvision/models/mobilenetv2.py``.  Names are torchvision module
  paths (``features.0.0``, ``features.N.conv.M[.0]``, ``features.18.0``,
  ``classifier.1``).  Published: ~300M multiply-adds (paper, Table 4);
  torchvision MobileNet_V2_Weights.IMAGENET1K_V1 lists 0.30 GFLOPS.
* AlexNet -- the original two-GPU network (Krizhevsky et al. 2012, as in
  Caffe's bvlc_alexnet, with groups=2 on conv2/conv4/conv5), counted as in
  Sze et al., "Efficient Processing of Deep Neural Networks: A Tutorial
  and Survey" (Proc. IEEE 2017): 724M MACs (666M conv + 58.6M fc), input
  227x227x3.  Names follow the torchvision ``alexnet`` module positions
  (``features.0/3/6/8/10``, ``classifier.1/4/6``); torchvision's own
  AlexNet is the later one-GPU variant with different channel counts,
  only the names are borrowed from it.

Run:  python examples/make_networks.py
"""

import os

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv_out(shape, out_channels, kernel, stride=1, padding=0):
    h, w, _ = shape
    kh, kw = _pair(kernel)
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    return [(h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1, out_channels]


def pool_out(shape, kernel, stride, padding=0):
    """Spatial output of a max/avg pool (floor mode)."""
    h, w, c = shape
    return [(h + 2 * padding - kernel) // stride + 1, (w + 2 * padding - kernel) // stride + 1, c]


class Net:
    def __init__(self, name, comment):
        self.name = name
        self.comment = comment
        self.layers = []

    def conv(self, name, shape, out_channels, kernel, stride=1, padding=0, groups=1):
        """Append a conv layer fed with `shape`; return its output shape."""
        assert shape[2] % groups == 0 and out_channels % groups == 0, name
        layer = {
            "name": name,
            "kind": "conv",
            "in": list(shape),
            "out_channels": out_channels,
            "kernel": kernel,
        }
        if stride != 1:
            layer["stride"] = stride
        if padding != 0:
            layer["padding"] = padding
        if groups != 1:
            layer["groups"] = groups
        self.layers.append(layer)
        return conv_out(shape, out_channels, kernel, stride, padding)

    def fc(self, name, shape, out_channels):
        self.layers.append(
            {"name": name, "kind": "fc", "in": list(shape), "out_channels": out_channels}
        )
        return [1, 1, out_channels]

    def render(self):
        def scalar(v):
            if isinstance(v, list):
                return "[" + ", ".join(str(x) for x in v) + "]"
            return str(v)

        lines = [
            "# " + self.comment,
            "network: " + self.name,
            "batch: 1",
            "precision: fp32",
            "layers:",
        ]
        for layer in self.layers:
            body = ", ".join(f"{k}: {scalar(v)}" for k, v in layer.items())
            lines.append("  - {" + body + "}")
        return "\n".join(lines) + "\n"

    def write(self):
        text = self.render()
        data = yaml.safe_load(text)
        assert data["layers"] == self.layers, self.name
        names = [lay["name"] for lay in self.layers]
        assert len(names) == len(set(names)), self.name
        path = os.path.join(HERE, self.name + ".yaml")
        with open(path, "w") as f:
            f.write(text)
        return path


def resnet50():
    net = Net(
        "resnet50",
        "torchvision resnet50 (v1.5, stride on 3x3 conv2), 224x224; "
        "published 4.09 GMACs (torchvision '4.09 GFLOPS', IMAGENET1K_V1)",
    )
    x = net.conv("conv1", [224, 224, 3], 64, 7, stride=2, padding=3)  # 112x112
    x = pool_out(x, 3, 2, 1)  # maxpool -> 56x56
    for stage, (width, blocks, stride) in enumerate(
        [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)], start=1
    ):
        out = width * 4
        for b in range(blocks):
            s = stride if b == 0 else 1
            p = f"layer{stage}.{b}."
            block_in = x
            y = net.conv(p + "conv1", block_in, width, 1)
            y = net.conv(p + "conv2", y, width, 3, stride=s, padding=1)
            y = net.conv(p + "conv3", y, out, 1)
            if b == 0:
                d = net.conv(p + "downsample.0", block_in, out, 1, stride=s)
                assert d == y
            x = y
    x = [1, 1, x[2]]  # global avgpool
    net.fc("fc", x, 1000)
    return net


def vgg16():
    net = Net(
        "vgg16",
        "torchvision vgg16 (VGG config D), 224x224; "
        "published 15.47 GMACs (torchvision '15.47 GFLOPS', IMAGENET1K_V1)",
    )
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    x = [224, 224, 3]
    idx = 0  # torchvision features index: conv, relu (, maxpool)
    for v in cfg:
        if v == "M":
            x = pool_out(x, 2, 2)
            idx += 1
        else:
            x = net.conv(f"features.{idx}", x, v, 3, padding=1)
            idx += 2
    assert x == [7, 7, 512]  # AdaptiveAvgPool2d((7, 7)) is the identity here
    x = net.fc("classifier.0", x, 4096)
    x = net.fc("classifier.3", x, 4096)
    net.fc("classifier.6", x, 1000)
    return net


def yolov3():
    net = Net(
        "yolov3",
        "darknet cfg/yolov3.cfg at 416x416 (conv_N = cfg layer index N); "
        "published 65.86 BFLOPs = 2*MACs -> 32.93 GMACs",
    )
    shapes = {}  # cfg layer index -> output shape
    i = 0
    x = [416, 416, 3]

    def conv(filters, size, stride=1):
        nonlocal i, x
        x = net.conv(
            f"conv_{i}", x, filters, size, stride=stride, padding=size // 2
        )  # darknet pad=1 -> size/2
        shapes[i] = x
        i += 1

    def other(shape):  # shortcut / yolo / route / upsample: no MACs
        nonlocal i, x
        x = shape
        shapes[i] = x
        i += 1

    # Darknet-53 backbone (52 convs)
    conv(32, 3)
    for filters, repeats in [(64, 1), (128, 2), (256, 8), (512, 8), (1024, 4)]:
        conv(filters, 3, 2)  # downsample
        for _ in range(repeats):
            conv(filters // 2, 1)
            conv(filters, 3)
            other(x)  # shortcut from=-3
    assert i == 75 and shapes[36] == [52, 52, 256] and shapes[61] == [26, 26, 512]

    # head 1 (13x13)
    for _ in range(3):
        conv(512, 1)
        conv(1024, 3)
    conv(255, 1)  # conv_81, linear, with bias
    other(x)  # 82 yolo
    other(shapes[79])  # 83 route -4
    conv(256, 1)  # conv_84
    other([x[0] * 2, x[1] * 2, x[2]])  # 85 upsample
    other([x[0], x[1], x[2] + shapes[61][2]])  # 86 route -1, 61 -> 768
    assert x == [26, 26, 768]
    # head 2 (26x26)
    for _ in range(3):
        conv(256, 1)
        conv(512, 3)
    conv(255, 1)  # conv_93
    other(x)  # 94 yolo
    other(shapes[91])  # 95 route -4
    conv(128, 1)  # conv_96
    other([x[0] * 2, x[1] * 2, x[2]])  # 97 upsample
    other([x[0], x[1], x[2] + shapes[36][2]])  # 98 route -1, 36 -> 384
    assert x == [52, 52, 384]
    # head 3 (52x52)
    for _ in range(3):
        conv(128, 1)
        conv(256, 3)
    conv(255, 1)  # conv_105
    other(x)  # 106 yolo
    assert i == 107
    return net


def mobilenetv2():
    net = Net(
        "mobilenetv2",
        "torchvision mobilenet_v2 (width 1.0), 224x224; published ~300M "
        "multiply-adds (Sandler et al. Table 4; torchvision '0.30 GFLOPS')",
    )
    x = net.conv("features.0.0", [224, 224, 3], 32, 3, stride=2, padding=1)
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
            hidden = x[2] * t
            p = f"features.{idx}.conv."
            if t != 1:
                y = net.conv(p + "0.0", x, hidden, 1)
                y = net.conv(p + "1.0", y, hidden, 3, stride=stride, padding=1, groups=hidden)
                y = net.conv(p + "2", y, c, 1)
            else:
                y = net.conv(p + "0.0", x, hidden, 3, stride=stride, padding=1, groups=hidden)
                y = net.conv(p + "1", y, c, 1)
            x = y
            idx += 1
    assert idx == 18 and x == [7, 7, 320]
    x = net.conv("features.18.0", x, 1280, 1)
    net.fc("classifier.1", [1, 1, x[2]], 1000)  # after global avgpool
    return net


def alexnet():
    net = Net(
        "alexnet",
        "original two-GPU AlexNet (grouped convs, 227x227) as counted in Sze et al. "
        "2017 tutorial; published 724M MACs (666M conv + 58.6M fc)",
    )
    x = net.conv("features.0", [227, 227, 3], 96, 11, stride=4)  # 55x55x96
    x = pool_out(x, 3, 2)  # 27x27
    x = net.conv("features.3", x, 256, 5, padding=2, groups=2)  # 27x27x256
    x = pool_out(x, 3, 2)  # 13x13
    x = net.conv("features.6", x, 384, 3, padding=1)
    x = net.conv("features.8", x, 384, 3, padding=1, groups=2)
    x = net.conv("features.10", x, 256, 3, padding=1, groups=2)
    x = pool_out(x, 3, 2)  # 6x6x256
    assert x == [6, 6, 256]
    x = net.fc("classifier.1", x, 4096)
    x = net.fc("classifier.4", x, 4096)
    net.fc("classifier.6", x, 1000)
    return net


def main():
    for build in (resnet50, vgg16, yolov3, mobilenetv2, alexnet):
        print(build().write())


if __name__ == "__main__":
    main()
