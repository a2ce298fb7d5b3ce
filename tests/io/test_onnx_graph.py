"""``load_onnx_graph``: models built here with ``onnx.helper`` after the node patterns of the
PyTorch exporters (legacy and dynamo ResNet-50, MobileNetV2, YOLOv3), imported as a ``Graph``.

torch is not a dependency, so the exporters' output is mimicked node by node. Each model is
also run twice -- by ONNX's reference evaluator, and by a small numpy interpreter of the
imported graph and its weights (``execute``) -- and the outputs must agree: that checks the
operators' fields and the weights together, not only the shapes.
"""

from __future__ import annotations

import json
import math
import random
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from autotune import InputError
from autotune.cli.app import app
from autotune.graphs.weights import seeded_weights
from autotune.io.graph_json import graph_from_record, graph_record
from autotune.io.network_yaml import load_network
from autotune.io.onnx_export import save_onnx
from autotune.io.onnx_import import ImportedNode, OnnxGraph, load_onnx, load_onnx_graph
from autotune.ir.graph import Graph, GraphError
from autotune.ir.lowering import lower

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx.reference.op_run import OpRun  # noqa: E402

FLOAT = TensorProto.FLOAT


class Model:
    """An ONNX graph built node by node; weights are random (seeded) and kept by name."""

    def __init__(self, name: str = "net", opset: int = 17, seed: int = 0) -> None:
        self.name = name
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.inputs: list = []
        self.arrays: dict[str, np.ndarray] = {}

    def input(self, name: str, shape: list, elem: int = FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def const(self, name: str, value, positive: bool = False) -> str:
        """An initializer: ``value`` as given (an array), or random of that shape."""
        if isinstance(value, tuple):
            value = self.rng.standard_normal(value).astype(np.float32)
            value = np.abs(value) + 0.5 if positive else value
        array = np.asarray(value)
        self.arrays[name] = array
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str = "", outputs: int = 1, **attrs):
        """Add a node; returns its output (a list when ``outputs`` > 1)."""
        base = f"t{len(self.nodes)}"
        outs = [base] + [f"{base}_{k}" for k in range(1, outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs if outputs > 1 else base

    def conv(self, x, name, c_in, c_out, k, stride=1, pad=0, groups=1, bias=False, **attrs):
        inputs = [x, self.const(f"{name}.weight", (c_out, c_in // groups, k, k))]
        if bias:
            inputs.append(self.const(f"{name}.bias", (c_out,)))
        if "auto_pad" not in attrs:
            attrs.setdefault("pads", [pad] * 4)
        return self.op(
            "Conv", inputs, name, kernel_shape=[k, k], strides=[stride] * 2, group=groups, **attrs
        )

    def bn(self, x, name: str, c: int, **attrs) -> str:
        params = [
            self.const(f"{name}.weight", (c,)),
            self.const(f"{name}.bias", (c,)),
            self.const(f"{name}.running_mean", (c,)),
            self.const(f"{name}.running_var", (c,), positive=True),
        ]
        return self.op("BatchNormalization", [x, *params], name, epsilon=1e-5, **attrs)

    def model(self, *outputs: str):
        elem = self.inputs[0].type.tensor_type.elem_type
        graph = helper.make_graph(
            self.nodes,
            self.name,
            self.inputs,
            [helper.make_tensor_value_info(out, elem, None) for out in outputs],
            initializer=self.inits,
        )
        domains = sorted({n.domain for n in self.nodes} - {""})
        opsets = [helper.make_opsetid("", self.opset)]
        opsets += [helper.make_opsetid(d, 1) for d in domains]
        model = helper.make_model(graph, opset_imports=opsets)
        # The checker wants the outputs' shapes: infer them, and keep only those.
        model = onnx.shape_inference.infer_shapes(model)
        model.graph.ClearField("value_info")
        return model

    def save(self, path, *outputs: str) -> str:
        onnx.save(self.model(*outputs), path)
        return str(path)


# -- an independent numpy interpreter of the imported graph --------------------------------
def _conv(x, w, b, stride, pad, dilation, groups, end=None):
    n, _, h, wd = x.shape
    c_out, per_group, kh, kw = w.shape
    end = pad if end is None else end  # bottom, right
    x = np.pad(x, ((0, 0), (0, 0), (pad[0], end[0]), (pad[1], end[1])))
    ho = (h + pad[0] + end[0] - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    wo = (wd + pad[1] + end[1] - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    out = np.zeros((n, c_out, ho, wo), np.float64)
    per_out = c_out // groups
    for g in range(groups):
        xg = x[:, g * per_group : (g + 1) * per_group]
        wg = w[g * per_out : (g + 1) * per_out]
        for i in range(kh):
            for j in range(kw):
                r, c = i * dilation[0], j * dilation[1]
                patch = xg[:, :, r : r + stride[0] * (ho - 1) + 1 : stride[0]]
                patch = patch[:, :, :, c : c + stride[1] * (wo - 1) + 1 : stride[1]]
                out[:, g * per_out : (g + 1) * per_out] += np.einsum(
                    "nchw,oc->nohw", patch, wg[:, :, i, j]
                )
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def _pool(x, op):
    """Max or average pooling with the output size the operator says (ceil mode included)."""
    n, c, h, w = x.shape
    ho, wo, _ = op.shape
    (kh, kw), (sh, sw), (ph, pw) = op.kernel, op.stride, op.padding
    extra_h = max(0, (ho - 1) * sh + kh - h - 2 * ph)
    extra_w = max(0, (wo - 1) * sw + kw - w - 2 * pw)
    pads = ((0, 0), (0, 0), (ph, ph + extra_h), (pw, pw + extra_w))
    fill = -np.inf if op.kind == "maxpool" else 0.0
    padded = np.pad(x, pads, constant_values=fill)
    inside = np.pad(np.ones((h, w)), ((ph, ph), (pw, pw)), constant_values=op.count_include_pad)
    inside = np.pad(inside, ((0, extra_h), (0, extra_w)))
    out = np.zeros((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            window = padded[:, :, i * sh : i * sh + kh, j * sw : j * sw + kw]
            if op.kind == "maxpool":
                out[:, :, i, j] = window.max(axis=(2, 3))
            else:
                count = inside[i * sh : i * sh + kh, j * sw : j * sw + kw].sum()
                out[:, :, i, j] = window.sum(axis=(2, 3)) / count
    return out


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def execute(model: OnnxGraph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor of the graph as N×C×H×W (an N×K tensor as N×K×1×1), in float64."""
    values = {}
    for name, (h, w, c) in model.graph.inputs:
        values[name] = feeds[name].astype(np.float64).reshape(-1, c, h, w)
    for op in model.graph.ops:
        x = values[op.inputs[0]]
        p = {k: v.astype(np.float64) for k, v in model.weights.get(op.name, {}).items()}
        k = op.kind
        if k == "conv":
            y = _conv(
                x,
                p["weight"],
                p.get("bias"),
                op.stride,
                op.padding,
                op.dilation,
                op.groups,
                op.padding_end,
            )
        elif k == "fc":
            y = x.reshape(len(x), -1) @ p["weight"].T + p.get("bias", 0.0)
        elif k in ("maxpool", "avgpool"):
            y = _pool(x, op)
        elif k == "global_avgpool":
            y = x.mean(axis=(2, 3), keepdims=True)
        elif k == "add":
            y = sum(values[t] for t in op.inputs)
        elif k == "mul":  # a gate N×C×1×1 broadcasts
            y = values[op.inputs[0]] * values[op.inputs[1]]
        elif k == "concat":
            y = np.concatenate([values[t] for t in op.inputs], axis=1)
        elif k == "upsample":
            y = x.repeat(op.scale, axis=2).repeat(op.scale, axis=3)
        elif k == "slice":
            y = x[:, op.channels[0] : op.channels[1]]
        elif k == "shuffle":  # channel j·g + i is channel j of group i
            n, c, h, w = x.shape
            y = np.stack(np.split(x, op.groups, axis=1), axis=2).reshape(n, c, h, w)
        elif k == "relu":
            y = np.maximum(x, 0)
        elif k in ("relu6", "clip"):
            y = np.clip(x, op.low, op.high)
        elif k == "leaky_relu":
            y = np.where(x > 0, x, op.alpha * x)
        elif k == "sigmoid":
            y = _sigmoid(x)
        elif k == "silu":
            y = x * _sigmoid(x)
        elif k == "hardswish":
            y = x * np.clip(x + 3, 0, 6) / 6
        elif k == "hardsigmoid":
            y = np.clip(x + 3, 0, 6) / 6
        elif k == "tanh":
            y = np.tanh(x)
        elif k == "gelu":
            y = x * 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
        elif k == "batchnorm":
            shape = (1, -1, 1, 1)
            scale = p["scale"] / np.sqrt(p["var"] + op.epsilon)
            y = (x - p["mean"].reshape(shape)) * scale.reshape(shape) + p["bias"].reshape(shape)
        elif k == "flatten":
            y = x
        elif k == "softmax":
            e = np.exp(x - x.max(axis=1, keepdims=True))
            y = e / e.sum(axis=1, keepdims=True)
        else:
            raise AssertionError(f"no interpreter for {k}")
        h, w, c = op.shape
        values[op.name] = np.asarray(y).reshape(-1, c, h, w)
    return values


class BatchNormalization(OpRun):
    """Inference batch norm at every opset: the reference evaluator's BatchNormalization-9
    uses batch statistics whenever ``momentum`` is set, which its default always is."""

    op_domain = ""

    def _run(self, x, scale, bias, mean, var, **_attrs):
        shape = (1, -1) + (1,) * (x.ndim - 2)
        epsilon = self.epsilon if self.epsilon is not None else 1e-5
        y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + epsilon)
        return ((y * scale.reshape(shape) + bias.reshape(shape)).astype(x.dtype),)


def assert_runs_like_onnx(path: str, model: OnnxGraph, seed: int = 1) -> None:
    """The imported graph computes what ONNX's reference evaluator computes."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, _ in model.graph.inputs:
        value_info = [vi for vi in onnx.load(path).graph.input if vi.name == name][0]
        dims = [d.dim_value or 1 for d in value_info.type.tensor_type.shape.dim]
        feeds[name] = rng.standard_normal(dims).astype(np.float32)
    expected = ReferenceEvaluator(path, new_ops=[BatchNormalization]).run(None, feeds)
    got = execute(model, feeds)
    assert len(expected) == len(model.graph.outputs)
    for tensor, want in zip(model.graph.outputs, expected, strict=True):
        np.testing.assert_allclose(got[tensor].reshape(want.shape), want, rtol=2e-4, atol=2e-5)


# -- independent counts from ONNX's own shape inference ------------------------------------
def inferred(path: str) -> dict[str, tuple]:
    """ONNX tensor -> dims, by onnx.shape_inference on the saved model (and initializers)."""
    model = onnx.shape_inference.infer_shapes(onnx.load(path), data_prop=True)
    g = model.graph
    dims = {
        vi.name: tuple(
            d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim
        )
        for vi in (*g.input, *g.value_info, *g.output)
    }
    dims.update({t.name: tuple(t.dims) for t in g.initializer})
    return dims


def per_image(dims: tuple) -> tuple[int, int, int]:
    return (1, 1, dims[1]) if len(dims) == 2 else (dims[2], dims[3], dims[1])


def onnx_macs(path: str) -> int:
    """MACs of one image: each Conv's output pixels × its weight's size, each Gemm's or
    MatMul's weight size (counted from the ONNX file, not from the imported graph)."""
    dims = inferred(path)
    total = 0
    for node in onnx.load(path).graph.node:
        if node.op_type == "Conv":
            out = dims[node.output[0]]
            total += out[2] * out[3] * math.prod(dims[node.input[1]])
        elif node.op_type in ("Gemm", "MatMul"):
            total += math.prod(dims[node.input[1]])
    return total


def assert_accounted(path: str, model: OnnxGraph) -> None:
    """Every node once, in a topological order; each names an operator of the graph or was
    consumed; a node mapped to its own operator has ONNX's inferred output shape."""
    nodes = list(onnx.load(path).graph.node)
    assert sorted((n.name, n.op_type) for n in nodes) == sorted(
        (n.name, n.op_type) for n in model.nodes
    )
    names = {op.name for op in model.graph.ops}
    splits = [n.operator for n in model.nodes if n.op_type == "Split"]
    later_parts = {name for name in names for s in splits if name.startswith(f"{s}:")}
    assert {n.operator for n in model.nodes} - {None} == names - later_parts
    dims = inferred(path)
    by_name = {n.name: n for n in nodes}
    compared = 0
    for imported in model.nodes:
        out = dims.get(by_name[imported.name].output[0])
        if imported.operator == imported.name and out and None not in out[1:]:
            assert model.graph.op(imported.name).shape == per_image(out), imported.name
            compared += 1
    assert compared >= len(model.graph.ops) // 2  # unknown to ONNX: sizes from a Shape
    # what a schedule stores of the graph rebuilds it as it was (``verify`` lowers it again)
    try:
        lowering = lower(model.graph)
    except GraphError:
        return  # not a network autotune maps: no schedule
    record = graph_record(model.graph, lowering)
    assert graph_from_record(record, path, model.graph.name) == model.graph


def fates(model: OnnxGraph) -> dict[str, str | None]:
    return {n.name: n.operator for n in model.nodes}


def kinds(model: OnnxGraph) -> list[str]:
    return [op.kind for op in model.graph.ops]


# -- the exporters' patterns ---------------------------------------------------------------
def bottleneck(m: Model, x: str, p: str, c_in: int, width: int, stride: int, names) -> str:
    """A ResNet-50 bottleneck: 1×1, 3×3, 1×1 convs with batch norm, a projection shortcut
    when the shape changes. ``names(p, what)`` spells node names as the exporter does."""
    y = m.op(
        "Relu",
        [m.bn(m.conv(x, names(p, "conv1"), c_in, width, 1), names(p, "bn1"), width)],
        names(p, "relu"),
    )
    y = m.conv(y, names(p, "conv2"), width, width, 3, stride=stride, pad=1)
    y = m.op("Relu", [m.bn(y, names(p, "bn2"), width)], names(p, "relu_1"))
    y = m.bn(m.conv(y, names(p, "conv3"), width, 4 * width, 1), names(p, "bn3"), 4 * width)
    short = x
    if stride != 1 or c_in != 4 * width:
        short = m.conv(x, names(p, "downsample.0"), c_in, 4 * width, 1, stride=stride)
        short = m.bn(short, names(p, "downsample.1"), 4 * width)
    return m.op("Relu", [m.op("Add", [y, short], names(p, "add"))], names(p, "relu_2"))


#: The legacy exporter names a node ``/<module path>/<op type>``.
LEGACY_OPS = {"conv": "Conv", "bn": "BatchNormalization", "relu": "Relu", "add": "Add"}
LEGACY_OPS |= {"downsample.0": "Conv", "downsample.1": "BatchNormalization"}


def legacy_name(p: str, what: str) -> str:
    kind = LEGACY_OPS.get(what) or LEGACY_OPS[what.rstrip("0123456789_")]
    return f"/{p.split('.')[0]}/{p}/{what}/{kind}"


def legacy_resnet(tmp_path, batch="batch_size") -> str:
    """The legacy (TorchScript) exporter, opset 17, eval mode without constant folding:
    BatchNormalization kept, ``/layer1/layer1.0/conv1/Conv`` names, Flatten + Gemm(transB),
    an ``Identity`` for a shared weight and one on an activation."""
    m = Model("torch_jit", opset=17)
    x = m.input("input", [batch, 3, 32, 32])
    x = m.conv(x, "/conv1/Conv", 3, 8, 7, stride=2, pad=3, bias=True)
    x = m.op("Relu", [m.bn(x, "/bn1/BatchNormalization", 8)], "/relu/Relu")
    x = m.op("MaxPool", [x], "/maxpool/MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    x = bottleneck(m, x, "layer1.0", 8, 4, 1, legacy_name)
    x = bottleneck(m, x, "layer1.1", 16, 4, 1, legacy_name)
    x = m.op("Identity", [x], "/layer1/Identity")
    x = bottleneck(m, x, "layer2.0", 16, 8, 2, legacy_name)
    x = m.op("GlobalAveragePool", [x], "/avgpool/GlobalAveragePool")
    x = m.op("Flatten", [x], "/Flatten", axis=1)
    shared = m.op("Identity", [m.const("fc.weight", (10, 32))], "Identity_0")
    x = m.op(
        "Gemm", [x, shared, m.const("fc.bias", (10,))], "/fc/Gemm", alpha=1.0, beta=1.0, transB=1
    )
    return m.save(tmp_path / "resnet_legacy.onnx", x)


def dynamo_name(p: str, what: str) -> str:
    return f"node_{p.replace('.', '_')}_{what.replace('.', '_')}"


def dynamo_resnet(tmp_path, linear: str = "gemm") -> str:
    """The dynamo exporter, opset 18: convs without bias, BatchNormalization with
    training_mode=0, ReduceMean with axes as an input, ``view`` as a Reshape to a constant
    [1, -1], and the linear as Gemm -- or, ``linear="matmul"``, Transpose(W) + MatMul + Add."""
    m = Model("main_graph", opset=18)
    x = m.input("x", [1, 3, 32, 32])
    x = m.conv(x, "node_conv2d", 3, 8, 7, stride=2, pad=3)
    x = m.op(
        "Relu",
        [m.bn(x, "node__native_batch_norm_legit_no_training", 8, training_mode=0)],
        "node_relu",
    )
    x = m.op(
        "MaxPool",
        [x],
        "node_max_pool2d",
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1] * 4,
        ceil_mode=0,
    )
    x = bottleneck(m, x, "layer1.0", 8, 4, 1, dynamo_name)
    x = bottleneck(m, x, "layer2.0", 16, 8, 2, dynamo_name)
    axes = m.const("val_axes", np.array([-1, -2], np.int64))
    x = m.op("ReduceMean", [x, axes], "node_mean", keepdims=1)
    x = m.op("Reshape", [x, m.const("val_shape", np.array([1, -1], np.int64))], "node_view")
    if linear == "gemm":
        x = m.op(
            "Gemm",
            [x, m.const("fc.weight", (10, 32)), m.const("fc.bias", (10,))],
            "node_linear",
            transB=1,
        )
    else:
        w = m.op("Transpose", [m.const("fc.weight", (10, 32))], "node_t", perm=[1, 0])
        x = m.op("MatMul", [x, w], "node_linear")
        x = m.op("Add", [x, m.const("fc.bias", (10,))], "node_add_bias")
    return m.save(tmp_path / f"resnet_dynamo_{linear}.onnx", x)


def mobilenetv2(tmp_path, opset: int = 13) -> str:
    """MobileNetV2 blocks: ReLU6 as Clip with min/max as Constant inputs (opset >= 11) or as
    attributes (opset 6..10), depthwise 3×3 convs, an inverted residual Add, then the
    classifier GlobalAveragePool, Flatten, Dropout, Gemm."""
    m = Model("mobilenet_v2", opset=opset)

    def relu6(x: str, name: str) -> str:
        if opset < 11:
            return m.op("Clip", [x], name, min=0.0, max=6.0)
        low = m.op(
            "Constant", [], f"{name}_min", value=numpy_helper.from_array(np.array(0.0, np.float32))
        )
        high = m.op(
            "Constant", [], f"{name}_max", value=numpy_helper.from_array(np.array(6.0, np.float32))
        )
        return m.op("Clip", [x, low, high], name)

    x = m.input("input", [1, 3, 16, 16])
    x = relu6(
        m.bn(m.conv(x, "features.0.0", 3, 8, 3, stride=2, pad=1), "features.0.1", 8), "features.0.2"
    )
    # inverted residual, expansion 4, stride 1: the shortcut is an Add
    y = relu6(
        m.bn(m.conv(x, "features.1.conv.0.0", 8, 32, 1), "features.1.conv.0.1", 32),
        "features.1.conv.0.2",
    )
    y = m.conv(y, "features.1.conv.1.0", 32, 32, 3, pad=1, groups=32)
    y = relu6(m.bn(y, "features.1.conv.1.1", 32), "features.1.conv.1.2")
    y = m.bn(m.conv(y, "features.1.conv.2", 32, 8, 1), "features.1.conv.3", 8)
    x = m.op("Add", [x, y], "features.1.add")
    x = m.op("Flatten", [m.op("GlobalAveragePool", [x], "pool")], "flatten")
    x = m.op("Dropout", [x], "classifier.0")
    x = m.op(
        "Gemm",
        [x, m.const("classifier.1.weight", (10, 8)), m.const("classifier.1.bias", (10,))],
        "classifier.1",
        transB=1,
    )
    return m.save(tmp_path / f"mobilenetv2_{opset}.onnx", x)


def yolov3(tmp_path, upsample: str = "scales", batch=1) -> str:
    """A YOLOv3 route: Conv + BN + LeakyRelu(0.1), a 2× nearest upsample -- Resize with
    constant scales (opset 11, asymmetric/floor), Resize with sizes computed from Shape
    (``sizes``), Upsample-9 (``upsample9``) or Resize-10 (``resize10``) -- and a Concat
    over channels with an earlier feature map; two detection heads as outputs."""
    opset = {"upsample9": 9, "resize10": 10}.get(upsample, 11)
    m = Model("yolov3", opset=opset)

    def cbl(x, name, c_in, c_out, k, stride=1):
        y = m.conv(x, f"{name}.conv", c_in, c_out, k, stride=stride, pad=k // 2)
        return m.op("LeakyRelu", [m.bn(y, f"{name}.bn", c_out)], f"{name}.leaky", alpha=0.1)

    x = m.input("images", [batch, 3, 16, 16])
    route = cbl(cbl(x, "m.0", 3, 8, 3), "m.1", 8, 16, 3, stride=2)  # 8×8×16
    x = cbl(route, "m.2", 16, 16, 3, stride=2)  # 4×4×16
    head1 = m.conv(x, "m.3.conv", 16, 12, 1, bias=True)
    x = cbl(x, "m.4", 16, 8, 1)
    if upsample == "scales":
        roi = m.const("roi", np.zeros(0, np.float32))
        scales = m.const("scales", np.array([1, 1, 2, 2], np.float32))
        x = m.op(
            "Resize",
            [x, roi, scales],
            "m.5",
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )
    elif upsample == "sizes":
        shape = m.op("Shape", [x], "m.5.shape")
        nc = m.op(
            "Slice",
            [
                shape,
                m.const("zero", np.array([0], np.int64)),
                m.const("two", np.array([2], np.int64)),
            ],
            "m.5.slice_nc",
        )
        hw = m.op("Slice", [shape, "two", m.const("four", np.array([4], np.int64))], "m.5.slice_hw")
        hw = m.op("Mul", [hw, m.const("factor", np.array([2, 2], np.int64))], "m.5.mul")
        sizes = m.op("Concat", [nc, hw], "m.5.concat", axis=0)
        empty = m.const("empty", np.zeros(0, np.float32))
        x = m.op(
            "Resize",
            [x, empty, empty, sizes],
            "m.5",
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )
    elif upsample == "upsample9":
        x = m.op(
            "Upsample",
            [x, m.const("scales", np.array([1, 1, 2, 2], np.float32))],
            "m.5",
            mode="nearest",
        )
    else:
        x = m.op(
            "Resize",
            [x, m.const("scales", np.array([1, 1, 2, 2], np.float32))],
            "m.5",
            mode="nearest",
        )
    x = m.op("Concat", [x, route], "m.6", axis=1)  # 8×8×24
    head2 = m.conv(cbl(x, "m.7", 24, 16, 3), "m.8.conv", 16, 12, 1, bias=True)
    return m.save(tmp_path / f"yolov3_{upsample}.onnx", head1, head2)


# -- tests -----------------------------------------------------------------------------------
def test_legacy_resnet(tmp_path):
    path = legacy_resnet(tmp_path)
    model = load_onnx_graph(path)
    assert (model.graph.name, model.batch, model.precision, model.source) == (
        "torch_jit",
        1,
        "fp32",
        path,
    )
    assert_accounted(path, model)
    assert_runs_like_onnx(path, model)
    graph = model.graph
    assert kinds(model)[:4] == ["conv", "batchnorm", "relu", "maxpool"]
    assert kinds(model)[-3:] == ["global_avgpool", "flatten", "fc"]
    assert kinds(model).count("batchnorm") == 1 + 3 * 3 + 2 and kinds(model).count("add") == 3
    assert fates(model)["/layer1/Identity"] is None and fates(model)["Identity_0"] is None
    # the Identity is a pass-through: the block after it reads the Relu before it
    assert graph.op("/layer2/layer2.0/conv1/Conv").inputs == ("/layer1/layer1.1/relu_2/Relu",)
    add = graph.op("/layer1/layer1.0/add/Add")
    assert add.inputs == (
        "/layer1/layer1.0/bn3/BatchNormalization",
        "/layer1/layer1.0/downsample.1/BatchNormalization",
    )
    assert graph.inputs == (("input", (32, 32, 3)),) and graph.outputs == ("/fc/Gemm",)
    assert graph.macs == onnx_macs(path)


def test_dynamo_resnet_with_gemm_and_with_matmul_plus_bias(tmp_path):
    gemm = load_onnx_graph(dynamo_resnet(tmp_path))
    matmul_path = dynamo_resnet(tmp_path, "matmul")
    matmul = load_onnx_graph(matmul_path)
    assert_accounted(matmul_path, matmul)
    assert_runs_like_onnx(matmul_path, matmul)
    for model in (gemm, matmul):
        assert model.graph.op("node_mean").kind == "global_avgpool"
        assert model.graph.op("node_view").kind == "flatten"
        assert model.graph.op("node_linear").kind == "fc"
        assert "bias" not in model.weights["node_conv2d"]
    np.testing.assert_array_equal(
        gemm.weights["node_linear"]["weight"], matmul.weights["node_linear"]["weight"]
    )
    np.testing.assert_array_equal(
        gemm.weights["node_linear"]["bias"], matmul.weights["node_linear"]["bias"]
    )
    # the weight's Transpose is a constant; the bias Add is part of the fc
    assert fates(matmul)["node_t"] is None and fates(matmul)["node_add_bias"] == "node_linear"
    assert [op.shape for op in gemm.graph.ops] == [op.shape for op in matmul.graph.ops]
    assert gemm.graph.macs == matmul.graph.macs == onnx_macs(matmul_path)


@pytest.mark.parametrize("opset", [9, 13])
def test_mobilenetv2(tmp_path, opset):
    path = mobilenetv2(tmp_path, opset)
    model = load_onnx_graph(path)
    assert_accounted(path, model)
    assert_runs_like_onnx(path, model)
    graph = model.graph
    assert graph.op("features.0.2").kind == "relu6"
    depthwise = graph.op("features.1.conv.1.0")
    assert (depthwise.groups, depthwise.out_channels, depthwise.in_channels) == (32, 32, 32)
    assert graph.op("features.1.add").kind == "add" and fates(model)["classifier.0"] is None
    if opset >= 11:
        assert fates(model)["features.0.2_min"] is None  # the bounds' Constant nodes
    assert graph.macs == onnx_macs(path)


@pytest.mark.parametrize("upsample", ["scales", "sizes", "upsample9", "resize10"])
def test_yolov3(tmp_path, upsample):
    path = yolov3(tmp_path, upsample)
    model = load_onnx_graph(path)
    assert_accounted(path, model)
    if upsample != "resize10":  # the reference evaluator has no Resize-10
        assert_runs_like_onnx(path, model)
    graph = model.graph
    up = graph.op("m.5")
    assert (up.kind, up.scale, up.shape) == ("upsample", 2, (8, 8, 8))
    cat = graph.op("m.6")
    assert (cat.kind, cat.inputs, cat.shape) == ("concat", ("m.5", "m.1.leaky"), (8, 8, 24))
    assert graph.op("m.0.leaky").alpha == pytest.approx(0.1)
    assert graph.outputs == ("m.3.conv", "m.8.conv")
    if upsample == "sizes":  # the shape computation is consumed
        assert [
            fates(model)[n] for n in ("m.5.shape", "m.5.slice_hw", "m.5.mul", "m.5.concat")
        ] == [None] * 4
    assert graph.macs == onnx_macs(path)


def test_upsample_sizes_from_a_symbolic_batch(tmp_path):
    """Sizes computed from Shape(x) cannot be evaluated when the batch is symbolic: the
    factor comes from the inferred output shape."""
    path = yolov3(tmp_path, "sizes", batch="N")
    model = load_onnx_graph(path)
    assert model.graph.op("m.5").scale == 2 and model.batch == 1


def test_flatten_as_view_from_shape_of_a_symbolic_batch(tmp_path):
    """The legacy exporter's ``x.view(x.size(0), -1)``: Shape, Gather, Unsqueeze, Concat
    with [-1], Reshape -- a flatten, the shape computation consumed -- then Unsqueeze and
    Squeeze, whose shapes ONNX leaves unknown next to the symbolic batch."""
    m = Model()
    x = m.conv(m.input("x", ["N", 4, 3, 3]), "conv", 4, 8, 1)
    n = m.op(
        "Gather",
        [m.op("Shape", [x], "shape"), m.const("i0", np.array(0, np.int64))],
        "gather",
        axis=0,
    )
    n = m.op("Unsqueeze", [n, m.const("ax0", np.array([0], np.int64))], "unsqueeze")
    target = m.op("Concat", [n, m.const("m1", np.array([-1], np.int64))], "concat", axis=0)
    x = m.op("Reshape", [x, target], "view")
    x = m.op(
        "Squeeze",
        [m.op("Unsqueeze", [x, m.const("ax2", np.array([2, 3], np.int64))], "unsq"), "ax2"],
        "sq",
    )
    x = m.op("Gemm", [x, m.const("w", (5, 72))], "fc", transB=1)
    path = m.save(tmp_path / "view.onnx", x)
    model = load_onnx_graph(path)
    assert_accounted(path, model)
    assert_runs_like_onnx(path, model)
    # rank 4 to rank 2 is a flatten (even of 1×1 images); [N, K] to [N, K, 1, 1] a view
    assert kinds(model) == ["conv", "flatten", "flatten", "fc"]
    assert [fates(model)[k] for k in ("shape", "gather", "unsqueeze", "concat", "unsq")] == [
        None
    ] * 5
    assert model.graph.op("sq").inputs == ("view",) and model.graph.op("fc").inputs == ("sq",)


def test_training_mode_batchnorm_stays_a_batchnorm(tmp_path):
    """A training-mode export keeps BatchNormalization with its running statistics as
    extra outputs: still a batchnorm (nothing read those outputs)."""
    m = Model(opset=15)
    x = m.conv(m.input("x", [2, 4, 6, 6]), "conv", 4, 4, 3, pad=1)
    params = [m.const(f"p{i}", (4,), positive=True) for i in range(4)]
    y, mean, var = m.op("BatchNormalization", [x, *params], "bn", outputs=3, training_mode=1)
    relu = m.op("Relu", [y], "relu")
    path = m.save(tmp_path / "train.onnx", relu)
    model = load_onnx_graph(path)
    assert kinds(model) == ["conv", "batchnorm", "relu"] and model.batch == 2
    assert set(model.weights["bn"]) == {"scale", "bias", "mean", "var"}
    # reading the running mean is refused, by name
    m.nodes.append(helper.make_node("Relu", [mean], ["read_mean"], name="reads_mean"))
    path = m.save(tmp_path / "train_read.onnx", relu, "read_mean")
    with pytest.raises(InputError) as info:
        load_onnx_graph(path)
    assert (info.value.layer, info.value.field) == ("bn", "outputs")


def pooling_and_activations(tmp_path) -> str:
    """The other supported ops: pools with pads, ceil mode and count_include_pad, ceil-mode-
    like asymmetric pads, SAME_UPPER, Sigmoid, HardSwish, SiLU and HardSwish as Mul patterns,
    Clip to other bounds and to a ReLU, dilated conv, Sum of six, a Cast to the same type,
    Softmax over channels (4-D) and over a 2-D tensor."""
    m = Model("misc", opset=17)
    x = m.input("x", [1, 4, 11, 11])
    a = m.op(
        "AveragePool",
        [x],
        "avg_incl",
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1] * 4,
        count_include_pad=1,
    )
    b = m.op("AveragePool", [x], "avg_ceil", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    c = m.op("MaxPool", [x], "max_asym", kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1])
    d = m.op("MaxPool", [x], "max_same", kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")
    # SAME_UPPER with an odd total: the extra pixel of padding at the end, as ceil mode
    e = m.op("MaxPool", [x], "max_odd", kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_UPPER")
    f = m.op("AveragePool", [x], "avg_odd", kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1])
    s = m.op("Sum", [a, b, c, d, e, f], "sum")  # all 6×6×4
    s = m.op("Sigmoid", [s], "sigmoid")
    s = m.op("HardSwish", [m.conv(s, "dilated", 4, 4, 3, pad=2, dilations=[2, 2])], "hardswish")
    s = m.op("Mul", [s, m.op("Sigmoid", [s], "gate")], "silu")
    s = m.op("Mul", [m.op("HardSigmoid", [s], "hgate", alpha=1 / 6, beta=0.5), s], "hswish")
    lo, hi = m.const("lo", np.array(-1.0, np.float32)), m.const("hi", np.array(1.0, np.float32))
    s = m.op("Clip", [m.op("Cast", [s], "cast", to=FLOAT), lo, hi], "clip")
    s = m.op("Clip", [s, m.const("zero", np.array(0.0, np.float32))], "clip_relu")
    t = m.op("Softmax", [s], "softmax4d", axis=1)
    v = m.op("Softmax", [m.op("Flatten", [s], "flat")], "softmax2d", axis=-1)
    return m.save(tmp_path / "misc.onnx", t, v)


def dilated_head(tmp_path, batch: int = 2) -> str:
    """FCN's and DeepLab's dilated convs: a backbone conv dilated 2, a depthwise one dilated
    3 with a bias, and an ASPP-like head (1×1 and 3×3 dilated 2 and 4, concatenated, 1×1)."""
    m = Model("dilated", opset=17)
    x = m.input("x", [batch, 3, 16, 16])
    x = m.op("Relu", [m.conv(x, "stem", 3, 8, 3, stride=2, pad=1)], "stem.relu")
    x = m.op("Relu", [m.conv(x, "d2", 8, 8, 3, pad=2, dilations=[2, 2])], "d2.relu")
    x = m.conv(x, "dw3", 8, 8, 3, pad=3, groups=8, bias=True, dilations=[3, 3])
    branches = [m.conv(x, "aspp0", 8, 4, 1)] + [
        m.conv(x, f"aspp{d}", 8, 4, 3, pad=d, dilations=[d, d]) for d in (2, 4)
    ]
    x = m.op("Concat", branches, "aspp.cat", axis=1)
    return m.save(tmp_path / "dilated.onnx", m.conv(x, "project", 12, 5, 1, bias=True))


def padded_prelu_tanh(tmp_path, batch: int = 2) -> str:
    """Keras/TF-style and GAN-style edges: a zero ``Pad`` before a conv of no padding (opset
    11+: pads as an input), a ``Pad`` that evens out a conv's asymmetric ``pads``, a
    ``PRelu`` of one slope (PyTorch's ``nn.PReLU()``) and one of per-channel slopes that are
    all equal, TensorFlow's ``SAME`` padding of a stride-2 conv and a ``Pad`` at the end only
    (unequal padding), and a ``Tanh`` output."""
    m = Model("edges", opset=17)
    x = m.input("x", [batch, 3, 12, 12])
    pads = m.const("pad1.pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))
    x = m.conv(m.op("Pad", [x, pads], "pad1"), "conv1", 3, 8, 3)
    x = m.op("PRelu", [x, m.const("prelu1.slope", np.array([0.25], np.float32))], "prelu1")
    # the conv's own [0, 0, 1, 1] and the Pad's [1, 1, 0, 0] are 1 on every side
    pads2 = m.const("pad2.pads", np.array([0, 0, 1, 1, 0, 0, 0, 0], np.int64))
    x = m.conv(m.op("Pad", [x, pads2], "pad2"), "conv2", 8, 8, 3, stride=2, pads=[0, 0, 1, 1])
    slopes = m.const("prelu2.slope", np.full((8, 1, 1), 0.1, np.float32))
    x = m.op("PRelu", [x, slopes], "prelu2")
    # TensorFlow's SAME with stride 2 over 6x6: one row and column of zeros, at the end
    x = m.conv(x, "same", 8, 8, 3, stride=2, auto_pad="SAME_UPPER")
    # a Pad at the end only, before a depthwise conv: unequal padding
    pads3 = m.const("pad3.pads", np.array([0, 0, 0, 0, 0, 0, 1, 2], np.int64))
    x = m.conv(m.op("Pad", [x, pads3], "pad3"), "dw", 8, 8, 3, groups=8, bias=True)
    return m.save(tmp_path / "edges.onnx", m.op("Tanh", [m.conv(x, "out", 8, 3, 1)], "tanh"))


def gelus(tmp_path, batch: int = 2, opset: int = 17) -> str:
    """PyTorch's GELU as its legacy exporter writes it (``Div`` by √2, ``Erf``, ``Add`` 1,
    ``Mul`` by x, ``Mul`` by 0.5), once with the Mul by 1/√2 and the operands swapped; at
    opset 20 also ONNX's own ``Gelu``."""
    m = Model("gelus", opset=opset)
    x = m.conv(m.input("x", [batch, 3, 8, 8]), "conv1", 3, 8, 3, pad=1, bias=True)
    e = m.op(
        "Erf", [m.op("Div", [x, m.const("r2", np.array(math.sqrt(2), np.float32))], "d1")], "e1"
    )
    g = m.op("Add", [e, m.const("one", np.array(1.0, np.float32))], "a1")
    x = m.op(
        "Mul", [m.op("Mul", [x, g], "m1"), m.const("half", np.array(0.5, np.float32))], "gelu1"
    )
    x = m.conv(x, "conv2", 8, 8, 1)
    inv = m.const("inv_r2", np.array(1 / math.sqrt(2), np.float32))
    e = m.op("Erf", [m.op("Mul", [inv, x], "d2")], "e2")
    g = m.op("Add", [m.const("one2", np.array(1.0, np.float32)), e], "a2")
    x = m.op(
        "Mul", [m.const("half2", np.array(0.5, np.float32)), m.op("Mul", [g, x], "m2")], "gelu2"
    )
    if opset >= 20:
        x = m.op("Gelu", [m.conv(x, "conv3", 8, 8, 1)], "gelu3")
    return m.save(tmp_path / "gelus.onnx", m.conv(x, "out", 8, 4, 1))


def segmentation_head(tmp_path, batch: int = 2) -> str:
    """FCN's and LR-ASPP's way back to the input's size: bilinear Resize-11 (PyTorch's
    ``align_corners=False``, half-pixel coordinates) by constant scales, and by ``sizes``;
    one with ``align_corners``."""
    m = Model("seg", opset=17)
    x = m.input("x", [batch, 3, 16, 16])
    x = m.op("Relu", [m.conv(x, "stem", 3, 8, 3, stride=2, pad=1)], "stem.relu")
    low = m.op("Relu", [m.conv(x, "d2", 8, 8, 3, pad=2, dilations=[2, 2])], "d2.relu")
    high = m.conv(m.conv(low, "down", 8, 8, 3, stride=2, pad=1), "high", 8, 4, 1, bias=True)
    scales = m.const("up.scales", np.array([1, 1, 2, 2], np.float32))
    up = m.op("Resize", [high, "", scales], "up", mode="linear")  # half_pixel by default
    x = m.op("Concat", [up, m.conv(low, "low", 8, 4, 1)], "cat", axis=1)
    x = m.conv(x, "classifier", 8, 3, 1, bias=True)
    sizes = m.const("out.sizes", np.array([batch, 3, 16, 16], np.int64))
    a = m.op(
        "Resize",
        [x, "", "", sizes],
        "out",
        mode="linear",
        coordinate_transformation_mode="pytorch_half_pixel",
    )
    corners = m.const("corners.scales", np.array([1, 1, 2, 2], np.float32))
    b = m.op(
        "Resize",
        [x, "", corners],
        "corners",
        mode="linear",
        coordinate_transformation_mode="align_corners",
    )
    return m.save(tmp_path / "seg.onnx", a, b)


def squeeze_excitation(tmp_path, batch: int = 2) -> str:
    """Squeeze-excitation as torchvision exports it: MobileNetV3's (GlobalAveragePool, 1×1
    Convs, Relu, HardSigmoid, Mul(gate, x)) and EfficientNet's (ReduceMean, Flatten, Gemm,
    SiLU, Gemm, Sigmoid, Reshape to N×C×1×1, Mul(x, gate)); then a Mul of two feature maps."""
    m = Model("se", opset=17)
    x = m.input("x", [batch, 4, 8, 8])
    x = m.op("HardSwish", [m.bn(m.conv(x, "expand", 4, 16, 1), "expand.bn", 16)], "expand.act")
    s = m.op("GlobalAveragePool", [x], "se1.pool")
    s = m.op("Relu", [m.conv(s, "se1.fc1", 16, 8, 1, bias=True)], "se1.relu")
    s = m.op("HardSigmoid", [m.conv(s, "se1.fc2", 8, 16, 1, bias=True)], "se1.gate", alpha=1 / 6)
    x = m.op("Mul", [s, x], "se1.scale")
    s = m.op("ReduceMean", [x], "se2.pool", axes=[2, 3], keepdims=1)
    s = m.op("Flatten", [s], "se2.flat")
    w1, b1 = m.const("se2.fc1.w", (4, 16)), m.const("se2.fc1.b", (4,))
    s = m.op("Gemm", [s, w1, b1], "se2.fc1", transB=1)
    s = m.op("Mul", [s, m.op("Sigmoid", [s], "se2.silu.gate")], "se2.silu")
    w2, b2 = m.const("se2.fc2.w", (16, 4)), m.const("se2.fc2.b", (16,))
    s = m.op("Gemm", [s, w2, b2], "se2.fc2", transB=1)
    s = m.op("Sigmoid", [s], "se2.gate")
    shape = m.const("nchw", np.array([-1, 16, 1, 1], np.int64))
    x = m.op("Mul", [x, m.op("Reshape", [s, shape], "se2.view")], "se2.scale")
    y = m.conv(x, "proj", 16, 8, 1)
    z = m.op("Mul", [y, m.op("Sigmoid", [m.conv(x, "glu.conv", 16, 8, 1)], "glu.gate")], "glu")
    return m.save(tmp_path / "se.onnx", z)


def shufflenet(tmp_path, batch: int = 2) -> str:
    """Two ShuffleNet V2 units as torchvision exports them: a stride-2 unit (two branches,
    Concat, channel shuffle: Reshape to N×2×C/2×H×W, Transpose [0, 2, 1, 3, 4], Reshape
    back) and a stride-1 unit that halves its input with Slices whose bounds come from the
    input's Shape, then one more unit that halves it with a Split."""
    m = Model("shufflenet", opset=17)
    x = m.op("Relu", [m.conv(m.input("x", [batch, 4, 8, 8]), "stem", 4, 8, 3, pad=1)], "stem.relu")

    def shuffle(x: str, p: str, c: int, h: int) -> str:
        five = m.const(f"{p}.g", np.array([batch, 2, c // 2, h, h], np.int64))
        y = m.op(
            "Transpose", [m.op("Reshape", [x, five], f"{p}.view")], f"{p}.t", perm=[0, 2, 1, 3, 4]
        )
        back = m.const(f"{p}.b", np.array([batch, c, h, h], np.int64))
        return m.op("Reshape", [y, back], f"{p}.shuffle")

    def branch(x: str, p: str, c: int, stride: int) -> str:
        y = m.op("Relu", [m.conv(x, f"{p}.pw1", c, c, 1)], f"{p}.r1")
        y = m.conv(y, f"{p}.dw", c, c, 3, stride=stride, pad=1, groups=c)
        return m.op("Relu", [m.conv(y, f"{p}.pw2", c, c, 1)], f"{p}.r2")

    left = m.conv(m.conv(x, "u1.b1.dw", 8, 8, 3, 2, 1, 8), "u1.b1.pw", 8, 8, 1)
    left = m.op("Relu", [left], "u1.b1.relu")
    x = shuffle(m.op("Concat", [left, branch(x, "u1.b2", 8, 2)], "u1.cat", axis=1), "u1", 16, 4)
    size = m.op("Gather", [m.op("Shape", [x], "u2.shape"), m.const("one", np.array([1]))], "c")
    half = m.op("Div", [size, m.const("two", np.array([2], np.int64))], "u2.half")
    zero, axis = m.const("zero", np.array([0], np.int64)), m.const("axis", np.array([1]))
    a = m.op("Slice", [x, zero, half, axis], "u2.keep")
    b = m.op("Slice", [x, half, size, axis], "u2.work")
    x = shuffle(m.op("Concat", [a, branch(b, "u2.b2", 8, 1)], "u2.cat", axis=1), "u2", 16, 4)
    a, b = m.op("Split", [x, m.const("sizes", np.array([8, 8]))], "u3.split", outputs=2, axis=1)
    x = shuffle(m.op("Concat", [a, branch(b, "u3.b2", 8, 1)], "u3.cat", axis=1), "u3", 16, 4)
    return m.save(tmp_path / "shufflenet.onnx", x)


def test_shufflenet_units(tmp_path):
    path = shufflenet(tmp_path)
    model = load_onnx_graph(path)
    assert_accounted(path, model)
    assert_runs_like_onnx(path, model)
    graph = model.graph
    assert [op.groups for op in graph.ops if op.kind == "shuffle"] == [2, 2, 2]
    slices = {op.name: op.channels for op in graph.ops if op.kind == "slice"}
    assert slices == {
        "u2.keep": (0, 8),
        "u2.work": (8, 16),
        "u3.split": (0, 8),
        "u3.split:1": (8, 16),
    }
    node_fates = fates(model)
    assert node_fates["u1.view"] == node_fates["u1.t"] == "u1.shuffle"
    lowering = lower(graph)
    shuffle = lowering.step("u2.shuffle")
    assert [(r.buffer, r.offset, r.stored[2]) for r in shuffle.inputs] == [
        ("u2.cat", 0, 8),
        ("u2.cat", 8, 8),
    ]
    work = lowering.step("u2.b2.pw1").inputs[0]
    assert (work.buffer, work.offset, work.stored) == ("u1.shuffle", 8, (4, 4, 8))
    # exported and read back: the same operators, computing the same
    again_path = tmp_path / "again.onnx"
    save_onnx(graph, model.weights, again_path, batch=2)
    again = load_onnx_graph(again_path)
    assert [(o.kind, o.shape, o.channels, o.groups) for o in again.graph.ops] == [
        (o.kind, o.shape, o.channels, o.groups) for o in graph.ops
    ]
    assert_runs_like_onnx(str(again_path), again)


def constant_affines(tmp_path, batch: int = 2) -> str:
    """Elementwise arithmetic with constants as exporters write it: an input normalised by
    ``(x − mean) / std`` per channel, tf2onnx's batch norm as ``Mul`` and ``Add`` of vectors
    after a Conv without a bias, a scalar ``Mul``, ``1 − x`` and an ``Add`` of a scalar."""
    m = Model("affine", opset=17)
    x = m.input("x", [batch, 3, 8, 8])
    x = m.op("Sub", [x, m.const("mean", (1, 3, 1, 1))], "norm.sub")
    x = m.op("Div", [x, m.const("std", (1, 3, 1, 1), positive=True)], "norm.div")
    x = m.conv(x, "conv", 3, 8, 3, pad=1)
    x = m.op("Mul", [x, m.const("bn.scale", (8, 1, 1))], "bn.mul")
    x = m.op("Add", [m.const("bn.shift", (8, 1, 1)), x], "bn.add")
    x = m.op("Relu", [x], "relu")
    x = m.op("Mul", [x, m.const("half", np.array(0.5, np.float32))], "half")
    side = m.op("Sub", [m.const("one", np.array([1.0], np.float32)), x], "one_minus")
    y = m.op(
        "Add", [x, m.op("Add", [side, m.const("two", np.array(2.0, np.float32))], "plus2")], "sum"
    )
    return m.save(tmp_path / "affine.onnx", y)


def test_constant_affines_are_batch_norms_merged_and_folded(tmp_path):
    path = constant_affines(tmp_path)
    model = load_onnx_graph(path)
    assert_accounted(path, model)
    assert_runs_like_onnx(path, model)
    node_fates = fates(model)
    assert node_fates["norm.div"] == node_fates["norm.sub"] == "norm.sub"  # one step
    assert node_fates["bn.add"] == node_fates["bn.mul"] == "bn.mul"
    assert node_fates["plus2"] == node_fates["one_minus"] == "one_minus"
    bns = [op.name for op in model.graph.ops if op.kind == "batchnorm"]
    assert bns == ["norm.sub", "bn.mul", "half", "one_minus"]
    lowered = {f.op: f.kind for f in lower(model.graph).fates}
    assert lowered["bn.mul"] == "folded" and lowered["norm.sub"] == "layer"


def test_squeeze_excitation(tmp_path):
    path = squeeze_excitation(tmp_path)
    model = load_onnx_graph(path)
    assert_accounted(path, model)
    assert_runs_like_onnx(path, model)
    graph = model.graph
    gates = {name: graph.op(name).inputs for name in ("se1.scale", "se2.scale", "glu")}
    assert gates == {
        "se1.scale": ("expand.act", "se1.gate"),  # the gate second, as ONNX had it first
        "se2.scale": ("se1.scale", "se2.gate"),
        "glu": ("proj", "glu.gate"),
    }
    assert graph.op("se1.gate").kind == "hardsigmoid"
    steps = {step.op: step for step in lower(graph).steps}
    assert steps["se1.scale"].gate is not None and steps["se1.scale"].layer.kind == "conv"
    assert steps["se2.scale"].gate is not None
    assert steps["glu"].gate is None and steps["glu"].layer.kind == "mul"


def test_squeeze_excitation_exports_and_imports_back(tmp_path):
    """``save_onnx`` writes mul (a gate reshaped to N×C×1×1 where it is a vector) and
    hardsigmoid so that importing the file gives the same operators, computing the same."""
    model = load_onnx_graph(squeeze_excitation(tmp_path))
    path = tmp_path / "again.onnx"
    save_onnx(model.graph, model.weights, path, batch=2)
    again = load_onnx_graph(path)
    assert [(o.kind, o.inputs[1:], o.shape) for o in again.graph.ops if o.kind == "mul"] == [
        (o.kind, o.inputs[1:], o.shape) for o in model.graph.ops if o.kind == "mul"
    ]
    assert [(o.kind, o.shape) for o in again.graph.ops] == [
        (o.kind, o.shape) for o in model.graph.ops
    ]
    assert_runs_like_onnx(str(path), again)


def test_a_vector_gate_read_twice_is_reshaped_once(tmp_path):
    """An fc's output (N×K in ONNX) gating two muls: one Reshape to N×C×1×1 serves both (two
    nodes writing one tensor name would be no valid model)."""
    spec = tmp_path / "gates.yaml"
    spec.write_text(
        "network: gates\nlayers:\n"
        "  - {name: x, kind: conv, in: [4, 4, 8], out_channels: 8, kernel: 1}\n"
        "  - {name: pool, kind: global_avgpool}\n"
        "  - {name: flat, kind: flatten}\n"
        "  - {name: fc, kind: fc, out_channels: 8, bias: true}\n"
        "  - {name: gate, kind: sigmoid}\n"
        "  - {name: once, kind: mul, inputs: [x, gate]}\n"
        "  - {name: twice, kind: mul, inputs: [once, gate]}\n"
    )
    graph = load_network(spec).graph
    assert graph is not None
    path = tmp_path / "gates.onnx"
    save_onnx(graph, seeded_weights(graph), path)
    onnx.checker.check_model(onnx.load(path), full_check=True)
    again = load_onnx_graph(path)
    assert [(o.kind, o.shape) for o in again.graph.ops] == [(o.kind, o.shape) for o in graph.ops]
    assert_runs_like_onnx(str(path), again)


def test_pooling_and_activations(tmp_path):
    path = pooling_and_activations(tmp_path)
    model = load_onnx_graph(path)
    assert_accounted(path, model)
    assert_runs_like_onnx(path, model)
    graph = model.graph
    incl, ceil, asym, same = (graph.op(n) for n in ("avg_incl", "avg_ceil", "max_asym", "max_same"))
    assert (incl.padding, incl.count_include_pad, incl.ceil_mode) == ((1, 1), True, False)
    assert (ceil.padding, ceil.ceil_mode) == ((0, 0), True)
    # extra padding at the bottom and right only: ceil mode with no padding
    assert (asym.padding, asym.ceil_mode) == ((0, 0), True)
    assert (same.padding, same.ceil_mode, same.shape) == ((1, 1), False, (6, 6, 4))
    for odd in (graph.op("max_odd"), graph.op("avg_odd")):
        assert (odd.padding, odd.ceil_mode, odd.shape) == ((0, 0), True, (6, 6, 4))
    assert graph.op("sum").kind == "add" and len(graph.op("sum").inputs) == 6
    assert graph.op("dilated").dilation == (2, 2)
    assert (graph.op("silu").kind, graph.op("silu").inputs) == ("silu", ("hardswish",))
    assert (graph.op("hswish").kind, graph.op("hswish").inputs) == ("hardswish", ("silu",))
    assert fates(model)["gate"] == "silu" and fates(model)["hgate"] == "hswish"
    assert fates(model)["cast"] is None
    clip = graph.op("clip")
    assert (clip.kind, clip.low, clip.high) == ("clip", -1.0, 1.0)
    assert graph.op("clip_relu").kind == "relu"
    assert graph.op("softmax4d").kind == graph.op("softmax2d").kind == "softmax"


def test_reduce_mean_axes_attribute_without_keepdims(tmp_path):
    """Before opset 18 the axes are an attribute; keepdims=0 gives N×C, read by the Gemm."""
    m = Model(opset=13)
    x = m.op("ReduceMean", [m.input("x", [1, 4, 5, 5])], "mean", axes=[3, -2], keepdims=0)
    path = m.save(tmp_path / "mean.onnx", m.op("Gemm", [x, m.const("w", (4, 3))], "fc"))
    model = load_onnx_graph(path)
    assert kinds(model) == ["global_avgpool", "fc"] and model.graph.op("fc").inputs == ("mean",)
    assert_accounted(path, model)
    assert_runs_like_onnx(path, model)


def test_a_shared_sigmoid_is_kept(tmp_path):
    """x·Sigmoid(x) is a SiLU even when the Sigmoid has another reader; then the Sigmoid
    stays an operator of its own."""
    m = Model()
    x = m.input("x", [1, 4, 3, 3])
    gate = m.op("Sigmoid", [x], "gate")
    y = m.op("Add", [m.op("Mul", [x, gate], "silu"), gate], "add")
    path = m.save(tmp_path / "shared.onnx", y)
    model = load_onnx_graph(path)
    assert kinds(model) == ["sigmoid", "silu", "add"] and fates(model)["gate"] == "gate"
    assert_runs_like_onnx(path, model)


def test_weights_round_trip(tmp_path):
    """Conv weights and biases as stored; Gemm's B after transB, times alpha, its C times
    beta; MatMul's B transposed; a weight computed from constants (an fp16 initializer cast
    to float) evaluated."""
    m = Model()
    x = m.input("x", [1, 4, 5, 5])
    half = m.const("half", m.rng.standard_normal((6, 4, 3, 3)).astype(np.float16))
    x = m.op(
        "Conv",
        [x, m.op("Cast", [half], "cast_w", to=FLOAT), m.const("cb", (6,))],
        "conv",
        pads=[1] * 4,
    )
    x = m.op("Flatten", [x], "flat")
    x = m.op(
        "Gemm", [x, m.const("g1", (150, 7)), m.const("c1", (1, 7))], "gemm_n", alpha=0.5, beta=2.0
    )
    x = m.op("Gemm", [x, m.const("g2", (3, 7)), m.const("c2", np.float32(1.5))], "gemm_t", transB=1)
    x = m.op("MatMul", [x, m.const("mm", (3, 2))], "matmul")
    path = m.save(tmp_path / "w.onnx", x)
    model = load_onnx_graph(path)
    w, a = model.weights, m.arrays
    assert w["conv"]["weight"].dtype == np.float32
    np.testing.assert_array_equal(w["conv"]["weight"], a["half"].astype(np.float32))
    np.testing.assert_array_equal(w["conv"]["bias"], a["cb"])
    np.testing.assert_array_equal(w["gemm_n"]["weight"], a["g1"].T * np.float32(0.5))
    np.testing.assert_array_equal(w["gemm_n"]["bias"], a["c1"].reshape(7) * 2)
    np.testing.assert_array_equal(w["gemm_t"]["weight"], a["g2"])
    np.testing.assert_array_equal(w["gemm_t"]["bias"], np.full(3, 1.5, np.float32))
    np.testing.assert_array_equal(w["matmul"]["weight"], a["mm"].T)
    assert set(w) == {"conv", "gemm_n", "gemm_t", "matmul"}
    assert fates(model)["cast_w"] is None
    assert_runs_like_onnx(path, model)
    assert model.graph.macs == onnx_macs(path) == 25 * 6 * 4 * 9 + 150 * 7 + 7 * 3 + 3 * 2


def test_weights_in_an_external_data_file(tmp_path):
    path = legacy_resnet(tmp_path)
    onnx.save(
        onnx.load(path),
        tmp_path / "ext.onnx",
        save_as_external_data=True,
        location="ext.data",
        size_threshold=0,
    )
    model = load_onnx_graph(tmp_path / "ext.onnx")
    np.testing.assert_array_equal(
        model.weights["/conv1/Conv"]["weight"],
        onnx.numpy_helper.to_array(onnx.load(path).graph.initializer[0]),
    )
    (tmp_path / "ext.data").unlink()
    with pytest.raises(InputError, match=r"ext\.onnx: not a valid ONNX model: .*ext\.data"):
        load_onnx_graph(tmp_path / "ext.onnx")


def test_shuffled_node_order_is_sorted(tmp_path):
    """ONNX requires topological order, but a file may lack it: the nodes are sorted (the
    file's order kept where it is one), and ``Graph`` checks the result."""
    path = legacy_resnet(tmp_path)
    reference = load_onnx_graph(path)
    model = onnx.load(path)
    nodes = list(model.graph.node)
    random.Random(0).shuffle(nodes)
    model.graph.ClearField("node")
    model.graph.node.extend(nodes)
    onnx.save(model, tmp_path / "shuffled.onnx")
    shuffled = load_onnx_graph(tmp_path / "shuffled.onnx")
    assert sorted(shuffled.graph.ops, key=lambda op: op.name) == sorted(
        reference.graph.ops, key=lambda op: op.name
    )
    assert shuffled.graph.macs == reference.graph.macs
    position = {op.name: i for i, op in enumerate(shuffled.graph.ops)}
    for op in shuffled.graph.ops:
        assert all(position.get(t, -1) < position[op.name] for t in op.inputs)
    assert_runs_like_onnx(path, shuffled)  # the reference evaluator needs the sorted file


def test_a_cycle_is_refused_by_name(tmp_path):
    """The node named is on the cycle, not one that only reads from it (listed first)."""
    m = Model()
    x = m.input("x", [1, 4])
    m.nodes.append(helper.make_node("Relu", ["a"], ["c"], name="reader"))
    m.nodes.append(helper.make_node("Add", [x, "b"], ["a"], name="first"))
    m.nodes.append(helper.make_node("Relu", ["a"], ["b"], name="second"))
    graph = helper.make_graph(
        m.nodes, "cyclic", m.inputs, [helper.make_tensor_value_info("c", FLOAT, [1, 4])]
    )
    path = tmp_path / "cycle.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(InputError) as info:
        load_onnx_graph(path)
    assert (info.value.layer, info.value.field) == ("first", "input")
    assert "cycle" in str(info.value) and "\n" not in str(info.value)


# -- refusals: one line naming the file, the node and the field ----------------------------
def case_einsum(m, x):
    return m.op("Einsum", [x, x], "einsum", equation="nchw,nchw->nchw")


def case_custom_domain(m, x):
    m.nodes.append(
        helper.make_node("FusedConv", [x], ["fused"], name="fused", domain="com.microsoft")
    )
    return m.op("Relu", [x], "relu")  # an output ONNX can infer (the checker wants its shape)


def case_mul_of_a_constant(m, x):
    return m.op("Mul", [x, m.const("s", (1, 4, 6, 6))], "scale")


def case_sub_of_activations(m, x):
    return m.op("Sub", [x, m.op("Relu", [x], "relu")], "diff")


def case_div_by_zero(m, x):
    zero = np.array([1, 0, 2, 3], np.float32).reshape(1, 4, 1, 1)
    return m.op("Div", [x, m.const("z", zero)], "d")


def case_div_by_an_activation(m, x):
    return m.op("Div", [m.const("one", np.ones((1, 4, 1, 1), np.float32)), x], "inverse")


def case_mul_spatial_gate(m, x):
    gate = m.op("ReduceMean", [x], "mean", axes=[1], keepdims=1)
    return m.op("Mul", [x, gate], "attend")


def case_hard_sigmoid_other_slope(m, x):
    return m.op("HardSigmoid", [x], "hs", alpha=0.2, beta=0.5)


def case_matmul_rank4(m, x):
    return m.op("MatMul", [x, m.const("w", (6, 6))], "rowwise")


def case_resize_cubic(m, x):
    return m.op(
        "Resize", [x, "", m.const("s", np.array([1, 1, 2, 2], np.float32))], "up", mode="cubic"
    )


def case_resize_linear_asymmetric(m, x):
    s = m.const("s", np.array([1, 1, 2, 2], np.float32))
    return m.op(
        "Resize", [x, "", s], "up", mode="linear", coordinate_transformation_mode="asymmetric"
    )


def case_resize_half_pixel_floor(m, x):
    s = m.const("s", np.array([1, 1, 2, 2], np.float32))
    return m.op("Resize", [x, "", s], "up", mode="nearest", nearest_mode="floor")


def case_resize_fractional(m, x):
    return m.op(
        "Resize",
        [x, "", m.const("s", np.array([1, 1, 1.5, 1.5], np.float32))],
        "up",
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )


def case_softmax_last_axis_4d(m, x):
    return m.op("Softmax", [x], "softmax")


def case_reduce_mean_channels(m, x):
    return m.op("ReduceMean", [x], "mean", axes=[1])


def case_concat_height(m, x):
    return m.op("Concat", [x, x], "cat", axis=2)


def case_reshape_rank3(m, x):
    return m.op("Reshape", [x, m.const("shape", np.array([1, 4, 36], np.int64))], "view")


def case_add_constant(m, x):
    return m.op("Add", [m.op("Relu", [x], "relu"), m.const("c", (1, 1, 6, 1))], "shift")


def case_cast_to_half(m, x):
    return m.op("Cast", [m.op("Cast", [x], "cast", to=TensorProto.FLOAT16)], "back", to=FLOAT)


def case_maxpool_indices(m, x):
    y, indices = m.op("MaxPool", [x], "pool", outputs=2, kernel_shape=[2, 2])
    return m.op("Cast", [indices], "use", to=FLOAT)


def case_avgpool_asymmetric_count_pad(m, x):
    return m.op(
        "AveragePool",
        [x],
        "avg",
        kernel_shape=[2, 2],
        strides=[2, 2],
        pads=[0, 0, 1, 1],
        count_include_pad=1,
    )


def case_maxpool_asymmetric_top(m, x):
    return m.op("MaxPool", [x], "pool", kernel_shape=[3, 3], pads=[1, 1, 0, 0])


def case_flatten_axis2(m, x):
    return m.op("Flatten", [x], "flat", axis=2)


def case_transpose(m, x):
    return m.op("Transpose", [x], "nhwc", perm=[0, 2, 3, 1])


def case_slice_rows(m, x):
    starts, ends = m.const("s", np.array([1], np.int64)), m.const("e", np.array([4], np.int64))
    return m.op("Slice", [x, starts, ends, m.const("a", np.array([2], np.int64))], "rows")


def case_slice_every_other_channel(m, x):
    bounds = [m.const(n, np.array([v], np.int64)) for n, v in (("s", 0), ("e", 4), ("a", 1))]
    return m.op("Slice", [x, *bounds, m.const("step", np.array([2], np.int64))], "odd")


def case_split_batch(m, x):
    return m.op("Split", [x], "halves", outputs=2, axis=2)[0]


def case_five_d_read(m, x):
    grouped = m.op("Reshape", [x, m.const("g", np.array([1, 2, 2, 6, 6], np.int64))], "group")
    return m.op("Relu", [grouped], "relu5d")


def case_five_d_back_untransposed(m, x):
    grouped = m.op("Reshape", [x, m.const("g", np.array([1, 2, 2, 6, 6], np.int64))], "group")
    return m.op("Reshape", [grouped, m.const("b", np.array([1, 4, 6, 6], np.int64))], "back")


def case_conv_weight_from_activation(m, x):
    return m.op("Conv", [x, m.op("Relu", [x], "relu")], "dynamic")


def case_gemm_trans_a(m, x):
    f = m.op("Flatten", [x], "flat")
    return m.op("Gemm", [f, m.const("w", (1, 2))], "fc", transA=1)


CASES = [
    (case_einsum, "einsum", "Einsum", "unsupported ONNX op 'Einsum'"),
    (case_custom_domain, "fused", "FusedConv", "unsupported ONNX op 'com.microsoft.FusedConv'"),
    (case_mul_of_a_constant, "scale", "B", "a Mul by a constant of shape [1, 4, 6, 6]"),
    (case_sub_of_activations, "diff", "B", "a Sub of two activations"),
    (case_div_by_an_activation, "inverse", "A", "a Div of a constant by an activation"),
    (case_div_by_zero, "d", "B", "a Div by a constant with a zero"),
    (case_mul_spatial_gate, "mean", "axes", "axes [1]"),
    (case_hard_sigmoid_other_slope, "hs", "alpha", "alpha 0.2"),
    (case_matmul_rank4, "rowwise", "A", "rank-4"),
    (case_resize_cubic, "up", "mode", "'cubic'"),
    (case_resize_linear_asymmetric, "up", "coordinate_transformation_mode", "asymmetric"),
    (
        case_resize_half_pixel_floor,
        "up",
        "coordinate_transformation_mode",
        "half_pixel with nearest_mode floor",
    ),
    (case_resize_fractional, "up", "scales", "integer factor"),
    (case_softmax_last_axis_4d, "softmax", "axis", "axis -1 of a rank-4"),
    (case_reduce_mean_channels, "mean", "axes", "axes [1]"),
    (case_concat_height, "cat", "axis", "axis 2"),
    (case_reshape_rank3, "view", "shape", "to [1, 4, 36]"),
    (case_add_constant, "shift", "B", "only one value per channel ([1, 4, 1, 1])"),
    (case_cast_to_half, "cast", "to", "from FLOAT to FLOAT16"),
    (case_maxpool_indices, "pool", "outputs", "only the first output of MaxPool"),
    (case_avgpool_asymmetric_count_pad, "avg", "pads", "count_include_pad=0"),
    (case_maxpool_asymmetric_top, "pool", "pads", "asymmetric padding [1, 1, 0, 0]"),
    (case_flatten_axis2, "flat", "axis", "axis 2"),
    (case_transpose, "nhwc", "perm", "only supported inside a channel shuffle"),
    (case_slice_rows, "rows", "axes", "a Slice along axis 2 with step 1"),
    (case_slice_every_other_channel, "odd", "steps", "axis 1 with step 2"),
    (case_split_batch, "halves", "axis", "a Split along axis 2"),
    (case_five_d_read, "relu5d", "X", "is a 5-D tensor"),
    (case_five_d_back_untransposed, "back", "shape", "only a channel shuffle"),
    (case_conv_weight_from_activation, "dynamic", "W", "must be a constant"),
    (case_gemm_trans_a, "fc", "transA", "transposed"),
]


@pytest.mark.parametrize(
    ("build", "layer", "field", "text"), CASES, ids=[c[0].__name__[5:] for c in CASES]
)
def test_refusals_name_the_node_and_field(tmp_path, build, layer, field, text):
    m = Model(opset=13)
    out = build(m, m.input("x", [1, 4, 6, 6]))
    path = m.save(tmp_path / "refused.onnx", out)
    with pytest.raises(InputError) as info:
        load_onnx_graph(path)
    message = str(info.value)
    assert (info.value.layer, info.value.field) == (layer, field), message
    assert message.startswith(f"{path}, layer {layer!r}, field {field!r}: ") and text in message
    assert "\n" not in message


def test_matmul_of_two_activations_names_the_operand(tmp_path):
    m = Model()
    a = m.op("Flatten", [m.input("x", [1, 4, 3, 3])], "flat")
    path = m.save(tmp_path / "mm.onnx", m.op("MatMul", [a, m.input("y", [36, 2])], "attention"))
    with pytest.raises(InputError, match="two activations") as info:
        load_onnx_graph(path)
    assert (info.value.layer, info.value.field) == ("attention", "B")


def test_input_limits(tmp_path, monkeypatch):
    """The file size and node count are checked before the checker, the shapes as built."""
    m = Model()
    x = m.op("Relu", [m.op("Relu", [m.input("x", [1, 4, 3, 3])])])
    path = m.save(tmp_path / "two.onnx", x)
    monkeypatch.setattr("autotune.io.onnx_import.MAX_ONNX_NODES", 1)
    with pytest.raises(
        InputError, match=r"number of nodes 2 exceeds the limit of 1 \(MAX_ONNX_NODES"
    ):
        load_onnx_graph(path)
    monkeypatch.setattr("autotune.io.onnx_import.MAX_ONNX_BYTES", 100)
    with pytest.raises(InputError, match="MAX_ONNX_BYTES"):
        load_onnx_graph(path)
    monkeypatch.undo()
    m = Model()
    path = m.save(tmp_path / "wide.onnx", m.op("Relu", [m.input("x", [1, 4, 3, 100_000])], "r"))
    with pytest.raises(InputError, match="MAX_SPATIAL") as info:
        load_onnx_graph(path)
    assert (info.value.layer, info.value.field) == ("x", "shape")
    m = Model()
    x = m.op(
        "Resize",
        [m.input("x", [1, 4, 3, 60_000]), "", m.const("s", np.array([1, 1, 2, 2], np.float32))],
        "up",
        mode="nearest",
    )
    with pytest.raises(InputError, match="width 120000 exceeds") as info:
        load_onnx_graph(m.save(tmp_path / "up.onnx", x))
    assert (info.value.layer, info.value.field) == ("up", "scales")


def test_unknown_input_size_and_missing_extra(tmp_path, monkeypatch):
    m = Model()
    path = m.save(tmp_path / "dyn.onnx", m.op("Relu", [m.input("x", [1, 4, "H", "W"])], "r"))
    with pytest.raises(InputError, match="fixed input size") as info:
        load_onnx_graph(path)
    assert (info.value.layer, info.value.field) == ("x", "shape")
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(InputError, match=r"pip install 'autotune\[onnx\]'"):
        load_onnx_graph(path)


def test_names_unique_against_inputs_and_unnamed_nodes(tmp_path):
    m = Model()
    x = m.input("x", [1, 4, 3, 3])
    y = m.op("Relu", [m.op("Relu", [x], "x")])  # a node named like the input, an unnamed one
    model = load_onnx_graph(m.save(tmp_path / "names.onnx", y))
    assert [op.name for op in model.graph.ops] == ["x_2", "Relu_1"]
    assert model.nodes == (
        ImportedNode("x_2", "Relu", "x_2"),
        ImportedNode("Relu_1", "Relu", "Relu_1"),
    )
    assert isinstance(model.graph, Graph)


def test_load_onnx_still_sees_only_layers(tmp_path):
    """``load_onnx`` is unchanged: the same file gives its conv and fc layers."""
    path = legacy_resnet(tmp_path)
    layers = load_onnx(path).layers
    model = load_onnx_graph(path)
    assert [la.name for la in layers] == [
        op.name for op in model.graph.ops if op.kind in ("conv", "fc")
    ]
    assert sum(la.macs for la in layers) == model.graph.macs


def test_a_clip_with_one_bound_is_tuned_saved_and_verified(tmp_path):
    """``Clip`` with its min or its max left out (``torch.clamp(min=-1)``) has no bound on
    that side: it imports, tunes, and its schedule file says so with an infinite bound,
    ``"Infinity"`` (JSON has no number for it; a held-out run found `tune --out` failing on
    it after all the work), which reads back and verifies."""
    m = Model("clamp", opset=17)
    x = m.input("x", [1, 3, 8, 8])
    lo, hi = m.const("lo", np.array(-1.0, np.float32)), m.const("hi", np.array(2.0, np.float32))
    y = m.op("Clip", [m.conv(x, "a", 3, 4, 3, pad=1), lo], "clamp_min")
    y = m.op("Clip", [m.conv(y, "b", 4, 4, 3, pad=1), "", hi], "clamp_max")
    path = m.save(tmp_path / "clamp.onnx", y)
    model = load_onnx_graph(path)
    assert_runs_like_onnx(path, model)
    graph = model.graph
    assert (graph.op("clamp_min").low, graph.op("clamp_min").high) == (-1.0, math.inf)
    assert (graph.op("clamp_max").low, graph.op("clamp_max").high) == (-math.inf, 2.0)
    out = tmp_path / "clamp.json"
    runner = CliRunner()
    tuned = runner.invoke(
        app, ["tune", path, "--no-refine", "--storage", "memory", "--out", str(out)]
    )
    assert tuned.exit_code == 0, tuned.output
    acts = {
        layer["name"]: layer["shape"]["epilogue"]["activation"]
        for layer in json.loads(out.read_text())["layers"]
    }
    assert (acts["a"]["low"], acts["a"]["high"]) == (-1.0, "Infinity")
    assert (acts["b"]["low"], acts["b"]["high"]) == ("-Infinity", 2.0)
    verified = runner.invoke(app, ["verify", str(out), "--network", path])
    assert verified.exit_code == 0, verified.output


def test_a_refusal_after_import_names_the_onnx_attribute(tmp_path):
    """A layer the tuner cannot map (padding as wide as the kernel: outputs that see only
    zeros); for an ONNX model its one line names the node's attribute (``pads``), not the
    graph's term."""
    m = Model("padded")
    x = m.input("x", [1, 3, 12, 12])
    path = m.save(tmp_path / "padded.onnx", m.conv(x, "d", 3, 4, 3, pad=3))
    with pytest.raises(InputError) as info:
        load_network(path)
    assert (info.value.layer, info.value.field) == ("d", "pads")
    assert "padding" in str(info.value) and "\n" not in str(info.value)


def test_bilinear_and_dilated_operators_survive_the_schedule_record_and_onnx_export(tmp_path):
    """A segmentation head's bilinear Resizes and dilated convs: the graph record a schedule
    stores and an exported ONNX file both give them back as they were."""
    model = load_onnx_graph(segmentation_head(tmp_path))
    graph = model.graph
    assert {o.name: o.mode for o in graph.ops if o.kind == "upsample"} == {
        "up": "bilinear",
        "out": "bilinear",
        "corners": "bilinear_corners",
    }
    record = graph_record(graph, lower(graph))
    assert graph_from_record(record, "seg.json", graph.name) == graph
    path = tmp_path / "again.onnx"
    save_onnx(graph, model.weights, path, batch=2)
    again = load_onnx_graph(path).graph
    assert [(o.kind, o.shape, o.mode, o.dilation) for o in again.ops] == [
        (o.kind, o.shape, o.mode, o.dilation) for o in graph.ops
    ]


def test_pads_before_convs_prelu_and_tanh_import_as_onnx_computes_them(tmp_path):
    """A zero Pad is its conv's padding (consumed), equal on both sides or not, as a conv's
    SAME padding of stride 2 is; a PRelu of one slope a leaky ReLU, Tanh itself; the graph
    computes what ONNX's reference evaluator does, and the record and the export give the
    operators back."""
    path = padded_prelu_tanh(tmp_path)
    model = load_onnx_graph(path)
    assert_accounted(path, model)
    assert_runs_like_onnx(path, model)
    graph = model.graph
    assert fates(model)["pad1"] is None and fates(model)["pad2"] is None
    assert (graph.op("conv1").padding, graph.op("conv2").padding) == ((1, 1), (1, 1))
    assert (graph.op("same").padding, graph.op("same").padding_end) == ((0, 0), (1, 1))
    assert (graph.op("dw").padding, graph.op("dw").padding_end) == ((0, 0), (1, 2))
    assert graph.op("dw").shape == (2, 3, 8)
    assert (graph.op("prelu1").kind, graph.op("prelu1").alpha) == ("leaky_relu", 0.25)
    assert graph.op("prelu2").alpha == pytest.approx(0.1)
    assert graph.op("tanh").kind == "tanh"
    assert graph_from_record(graph_record(graph, lower(graph)), "e.json", graph.name) == graph
    again = tmp_path / "again.onnx"
    save_onnx(graph, model.weights, again, batch=2)
    assert [o.kind for o in load_onnx_graph(again).graph.ops] == [o.kind for o in graph.ops]


@pytest.mark.parametrize(
    "case, field",
    [
        ("prelu_per_channel", "slope"),
        ("pad_reflect", "mode"),
        ("pad_value", "constant_value"),
        ("pad_channels", "pads"),
        ("pad_before_pool", "X"),
        ("pad_output", "outputs"),
    ],
)
def test_what_pad_and_prelu_cannot_be_is_refused_by_node_and_field(tmp_path, case, field):
    """Per-channel PReLU slopes, a Pad of other than zeros or on the channels, a Pad read by
    anything but a conv, a Pad as the output: one line, node and field."""
    m = Model("bad", opset=17)
    x = m.input("x", [1, 4, 8, 8])

    def pad(pads, **attrs):
        inputs = [x, m.const("p", np.array(pads, np.int64))]
        if "value" in attrs:
            inputs.append(m.const("v", np.array(attrs.pop("value"), np.float32)))
        return m.op("Pad", inputs, "pad", **attrs)

    if case == "prelu_per_channel":
        out = m.op(
            "PRelu", [x, m.const("s", np.arange(4, dtype=np.float32).reshape(4, 1, 1))], "pr"
        )
        node = "pr"
    elif case == "pad_reflect":
        out, node = m.conv(pad([0, 0, 1, 1, 0, 0, 1, 1], mode="reflect"), "c", 4, 4, 3), "pad"
    elif case == "pad_value":
        out, node = m.conv(pad([0, 0, 1, 1, 0, 0, 1, 1], value=1.0), "c", 4, 4, 3), "pad"
    elif case == "pad_channels":
        out, node = m.conv(pad([0, 1, 1, 1, 0, 0, 1, 1]), "c", 5, 4, 3), "pad"
    elif case == "pad_before_pool":
        out = m.op("MaxPool", [pad([0, 0, 1, 1, 0, 0, 1, 1])], "mp", kernel_shape=[3, 3])
        node = "mp"
    else:
        out, node = pad([0, 0, 1, 1, 0, 0, 1, 1]), "pad"
    path = m.save(tmp_path / f"{case}.onnx", out)
    with pytest.raises(InputError) as info:
        load_network(path)
    assert (info.value.layer, info.value.field) == (node, field), str(info.value)
    assert "\n" not in str(info.value)


def test_pads_computed_from_shapes_as_timm_writes_them(tmp_path):
    """timm's TensorFlow-style "same" padding computes a Pad's pads from ``Shape(x)``: shape
    inference then loses the dims behind it, and the next Pad's pads are computed from a
    tensor of unknown dims. The importer takes those dims from the operators it built."""
    m = Model("timm_same", opset=17)
    x = m.input("x", [1, 3, 9, 9])

    def same_pad(t: str, name: str) -> str:
        h = m.op(
            "Gather", [m.op("Shape", [t], f"{name}.shape"), m.const(f"{name}.i", np.array([2]))]
        )
        one = m.op(
            "Add", [m.op("Sub", [h, h], f"{name}.zero"), m.const(f"{name}.1", np.array([1]))]
        )
        zeros = m.const(f"{name}.z", np.zeros(6, np.int64))
        pads = m.op("Concat", [zeros, one, one], f"{name}.pads", axis=0)
        return m.op("Pad", [t, pads], name)

    y = m.op("Relu", [m.conv(same_pad(x, "pad1"), "conv1", 3, 4, 3, stride=2)], "relu")
    y = m.conv(same_pad(y, "pad2"), "conv2", 4, 4, 3, stride=2)
    path = m.save(tmp_path / "timm_same.onnx", y)
    inferred = onnx.shape_inference.infer_shapes(onnx.load(path))
    out = next(n.output[0] for n in inferred.graph.node if n.name == "relu")
    dims = next(v for v in inferred.graph.value_info if v.name == out).type.tensor_type.shape.dim
    assert not all(d.HasField("dim_value") for d in dims)  # what the importer works around
    model = load_onnx_graph(path)
    assert_runs_like_onnx(path, model)
    conv1, conv2 = model.graph.op("conv1"), model.graph.op("conv2")
    assert (conv1.padding, conv1.padding_end, conv1.shape) == ((0, 0), (1, 1), (4, 4, 4))
    assert (conv2.padding, conv2.padding_end, conv2.shape) == ((0, 0), (1, 1), (2, 2, 4))


@pytest.mark.parametrize("opset", [17, 20])
def test_gelu_chains_and_the_gelu_op_are_one_operator(tmp_path, opset):
    """Each GELU chain is one gelu operator (its nodes consumed), as ONNX's ``Gelu`` is; the
    graph computes what the reference evaluator does; the export writes the chain back."""
    path = gelus(tmp_path, opset=opset)
    model = load_onnx_graph(path)
    assert_accounted(path, model)
    assert_runs_like_onnx(path, model)
    names = ["gelu1", "gelu2"] + (["gelu3"] if opset >= 20 else [])
    assert [o.name for o in model.graph.ops if o.kind == "gelu"] == names
    assert {fates(model)[n] for n in ("d1", "a1", "m1", "d2", "e2", "a2", "m2")} == {
        "gelu1",
        "gelu2",
    }
    again = tmp_path / "again.onnx"
    save_onnx(model.graph, model.weights, again, batch=2)
    assert [o.kind for o in load_onnx_graph(again).graph.ops] == kinds(model)


def test_a_tanh_gelu_and_a_chain_read_elsewhere_are_refused(tmp_path):
    """The tanh approximation is refused by name; a chain whose Erf is also read elsewhere is
    not a GELU (its Erf is refused as an op)."""
    m = Model("g", opset=20)
    x = m.input("x", [1, 4, 4, 4])
    path = m.save(tmp_path / "tanh.onnx", m.op("Gelu", [x], "g", approximate="tanh"))
    with pytest.raises(InputError) as info:
        load_onnx_graph(path)
    assert (info.value.layer, info.value.field) == ("g", "approximate")
    m = Model("g2", opset=17)
    x = m.input("x", [1, 4, 4, 4])
    e = m.op(
        "Erf", [m.op("Div", [x, m.const("r2", np.array(math.sqrt(2), np.float32))], "d")], "erf"
    )
    g = m.op("Add", [e, m.const("one", np.array(1.0, np.float32))], "a")
    y = m.op("Mul", [m.op("Mul", [x, g], "m"), m.const("half", np.array(0.5, np.float32))], "gelu")
    path = m.save(tmp_path / "shared.onnx", y, m.op("Relu", [e], "reads_erf"))
    with pytest.raises(InputError) as info:
        load_onnx_graph(path)
    assert (info.value.layer, info.value.field) == ("erf", "Erf")
