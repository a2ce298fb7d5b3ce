"""The conv/fc ONNX reader ``load_onnx`` (models built here with ``onnx.helper``); its
command-line tests go through ``load_network``, which imports the whole graph
(``load_onnx_graph``, tested in ``test_onnx_graph.py``)."""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

import autotune
from autotune import InputError, Layer
from autotune.cli.app import app
from autotune.io.onnx_import import load_onnx as load_network
from autotune.ir.layer import Epilogue
from tests.conftest import EXAMPLES

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

FLOAT = TensorProto.FLOAT


class Graph:
    """A tiny ONNX graph builder: each op gets one output named after its position."""

    def __init__(self, name: str = "net", dtype: type = np.float32) -> None:
        self.name = name
        self.dtype = dtype
        self.nodes: list = []
        self.inits: list = []
        self.inputs: list = []

    def input(self, name: str, shape: list, elem: int = FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def const(self, name: str, shape: tuple) -> str:
        self.inits.append(numpy_helper.from_array(np.zeros(shape, self.dtype), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str = "", **attrs) -> str:
        out = f"t{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def conv(
        self,
        x: str,
        name: str,
        c_in: int,
        c_out: int,
        k: int,
        stride: int = 1,
        pad: int = 0,
        groups: int = 1,
        **attrs,
    ) -> str:
        w = self.const(f"{name}.weight", (c_out, c_in // groups, k, k))
        if "auto_pad" not in attrs:
            attrs.setdefault("pads", [pad] * 4)
        return self.op(
            "Conv", [x, w], name, kernel_shape=[k, k], strides=[stride] * 2, group=groups, **attrs
        )

    def save(self, path, out: str) -> str:
        elem = self.inputs[0].type.tensor_type.elem_type
        graph = helper.make_graph(
            self.nodes,
            self.name,
            self.inputs,
            [helper.make_tensor_value_info(out, elem, None)],
            initializer=self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        # The checker wants the output's shape: infer it, and keep only that.
        model = onnx.shape_inference.infer_shapes(model)
        model.graph.ClearField("value_info")
        onnx.save(model, path)
        return str(path)


def conv_net(tmp_path, name: str = "one.onnx", **conv_attrs) -> str:
    """A single 3×3 conv over 1×8×16×16, with ``conv_attrs`` overriding its attributes."""
    g = Graph()
    out = g.conv(g.input("x", [1, 8, 16, 16]), "c", 8, 8, 3, **conv_attrs)
    return g.save(tmp_path / name, out)


def small_cnn(tmp_path) -> str:
    g = Graph("small_cnn")
    x = g.conv(g.input("x", [2, 3, 32, 32]), "conv1", 3, 16, 3, pad=1)
    x = g.op("Relu", [x])  # unnamed: Relu_1
    x = g.op("MaxPool", [x], "pool", kernel_shape=[2, 2], strides=[2, 2])
    x = g.conv(x, "gconv", 16, 32, 3, pad=1, groups=4)
    dw_weight = helper.make_tensor("dw.weight", FLOAT, [32, 1, 3, 3], [0.0] * 288)
    w = g.op("Constant", [], "dw_const", value=dw_weight)  # not listed
    x = g.op("Conv", [x, w], "dw", pads=[1, 1, 1, 1], group=32)
    x = g.conv(x, "down", 32, 64, 3, stride=2, pad=1)
    x = g.op("Flatten", [x], "flat", axis=1)
    x = g.op(
        "Gemm",
        [x, g.const("fc1.weight", (128, 4096)), g.const("fc1.bias", (128,))],
        "fc1",
        transB=1,
    )
    x = g.op("Relu", [x])  # unnamed: Relu_9
    x = g.op("MatMul", [x, g.const("fc2.weight", (128, 10))], "fc2")
    return g.save(tmp_path / "small.onnx", x)


def test_small_cnn_layers_and_skipped(tmp_path):
    path = small_cnn(tmp_path)
    net = load_network(path)
    assert (net.name, net.batch, net.precision, net.source) == ("small_cnn", 2, "fp32", path)
    assert net.layers == (
        Layer("conv1", "conv", 32, 32, 3, 16, 3, 3, 1, 1, 1, 1, 1),
        Layer("gconv", "conv", 16, 16, 16, 32, 3, 3, 1, 1, 1, 1, 4),
        Layer("dw", "conv", 16, 16, 32, 32, 3, 3, 1, 1, 1, 1, 32),
        Layer("down", "conv", 16, 16, 32, 64, 3, 3, 2, 2, 1, 1, 1),
        Layer.fc("fc1", 8, 8, 64, 128),
        Layer.fc("fc2", 1, 1, 128, 10),
    )
    assert net.layers[2].is_depthwise
    assert net.skipped == ("Relu Relu_1", "MaxPool pool", "Flatten flat", "Relu Relu_9")


def test_resnet50_shapes_equal_the_bundled_yaml(tmp_path):
    g = Graph("resnet50")
    x = g.conv(g.input("input", ["N", 3, 224, 224]), "conv1", 3, 64, 7, stride=2, pad=3)
    x = g.op("Relu", [x])
    x = g.op("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    c_in = 64
    for stage, (width, blocks, stride) in enumerate(
        [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)], start=1
    ):
        for b in range(blocks):
            s = stride if b == 0 else 1
            p = f"layer{stage}.{b}"
            y = g.op("Relu", [g.conv(x, f"{p}.conv1", c_in, width, 1)])
            y = g.op("Relu", [g.conv(y, f"{p}.conv2", width, width, 3, stride=s, pad=1)])
            y = g.conv(y, f"{p}.conv3", width, 4 * width, 1)
            short = g.conv(x, f"{p}.downsample.0", c_in, 4 * width, 1, stride=s) if b == 0 else x
            x = g.op("Relu", [g.op("Add", [y, short])])
            c_in = 4 * width
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x], "avgpool")], "flatten")
    x = g.op(
        "Gemm", [x, g.const("fc.weight", (1000, 2048)), g.const("fc.bias", (1000,))], "fc", transB=1
    )
    net = load_network(g.save(tmp_path / "resnet50.onnx", x))
    # the bundled file is the full graph: its lowered conv and fc layers, less the epilogues
    # (folded batch norms, fused relus and adds) this conv/fc-only reader does not import
    reference = [
        replace(la, epilogue=Epilogue())
        for la in autotune.load_network(EXAMPLES / "resnet50.yaml").layers
        if la.kind in ("conv", "fc")
    ]
    assert len(net.layers) == 54
    assert [(la.kind, la.shape_key()) for la in net.layers] == [
        (la.kind, la.shape_key()) for la in reference
    ]
    assert [la.name for la in net.layers] == [la.name for la in reference]
    assert net.macs == sum(la.macs for la in reference) and net.batch == 1
    # stem Relu + MaxPool; per block 3 Relu + Add; GlobalAveragePool + Flatten
    assert len(net.skipped) == 2 + 16 * 4 + 2
    assert net.skipped[:2] == ("Relu Relu_1", "MaxPool maxpool")


def test_fc_after_reshape_gets_the_spatial_volume(tmp_path):
    g = Graph()
    x = g.conv(g.input("x", [1, 8, 7, 7]), "conv", 8, 16, 3, pad=1)
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    g.inits.append(shape)
    x = g.op("Reshape", [x, "shape"], "reshape")
    x = g.op("Gemm", [x, g.const("fc6.weight", (7 * 7 * 16, 32))], "fc6")
    net = load_network(g.save(tmp_path / "vgg_like.onnx", x))
    assert net.layers[1] == Layer.fc("fc6", 7, 7, 16, 32)


def test_fc_after_transpose_falls_back_to_a_vector(tmp_path):
    g = Graph()
    x = g.op("Transpose", [g.input("x", [1, 16, 7, 7])], "nhwc", perm=[0, 2, 3, 1])
    x = g.op("Flatten", [x], "flat")
    x = g.op("MatMul", [x, g.const("w", (7 * 7 * 16, 32))], "fc")
    assert load_network(g.save(tmp_path / "t.onnx", x)).layers == (
        Layer.fc("fc", 1, 1, 7 * 7 * 16, 32),
    )


def test_matmul_over_rows_is_a_pointwise_conv(tmp_path):
    g = Graph()
    x = g.op("MatMul", [g.input("x", [1, 4, 6, 8]), g.const("w", (8, 16))], "pw")
    assert load_network(g.save(tmp_path / "nhwc.onnx", x)).layers == (
        Layer("pw", "conv", 4, 6, 8, 16),
    )


def test_double_input_symbolic_batch_and_duplicate_names(tmp_path):
    g = Graph(dtype=np.float64)
    x = g.input("x", ["batch", 4, 8, 8], TensorProto.DOUBLE)
    for weight in ("w1", "w2"):
        x = g.op("Conv", [x, g.const(weight, (4, 4, 1, 1))], "c")
    net = load_network(g.save(tmp_path / "d.onnx", x))
    assert (net.precision, net.batch) == ("fp64", 1)
    assert [la.name for la in net.layers] == ["c", "c_2"]


def test_dilations(tmp_path):
    layer = load_network(conv_net(tmp_path, pad=2, dilations=[2, 2])).layers[0]
    assert (layer.dilation_h, layer.dilation_w, layer.h_out) == (2, 2, 16)


@pytest.mark.parametrize(("auto_pad", "pad"), [("SAME_UPPER", 1), ("SAME_LOWER", 1), ("VALID", 0)])
def test_auto_pad(tmp_path, auto_pad, pad):
    layer = load_network(conv_net(tmp_path, auto_pad=auto_pad)).layers[0]
    assert (layer.pad_h, layer.pad_w, layer.h_out) == (pad, pad, 16 - 2 + 2 * pad)


@pytest.mark.parametrize(
    ("attrs", "pads", "out"),
    [
        (dict(pads=[0, 0, 1, 1]), (0, 0, 1, 1), 15),
        # TensorFlow's SAME with stride 2: the odd row of padding at the end (LOWER: start)
        (dict(auto_pad="SAME_UPPER", stride=2), (0, 0, 1, 1), 8),
        (dict(auto_pad="SAME_LOWER", stride=2), (1, 1, 0, 0), 8),
    ],
)
def test_unequal_padding_is_kept(tmp_path, attrs, pads, out):
    layer = load_network(conv_net(tmp_path, **attrs)).layers[0]
    assert (layer.pad_h, layer.pad_w, layer.pad_end_h, layer.pad_end_w) == pads
    assert (layer.h_out, layer.w_out) == (out, out)


@pytest.mark.parametrize(
    ("attrs", "field", "text"),
    [
        (dict(pads=[0, 0, 3, 0]), "pads", "smaller than the kernel"),
        (dict(pads=[3, 0, 0, 0]), "pads", "smaller than the kernel"),
    ],
)
def test_unsupported_conv_is_one_line_naming_file_node_field(tmp_path, attrs, field, text):
    path = conv_net(tmp_path, **attrs)
    with pytest.raises(InputError) as info:
        load_network(path)
    message = str(info.value)
    assert (info.value.layer, info.value.field) == ("c", field)
    assert message.startswith(f"{path}, layer 'c', field '{field}': ") and text in message
    assert "\n" not in message


def test_matmul_without_constant_weight_is_skipped_and_listed(tmp_path):
    g = Graph()
    x = g.op("Gemm", [g.input("x", [1, 8]), g.const("w", (8, 4))], "fc")
    x = g.op("MatMul", [x, g.input("y", [4, 2])], "mm")
    net = load_network(g.save(tmp_path / "mm.onnx", x))
    assert net.layers == (Layer.fc("fc", 1, 1, 8, 4),)
    assert net.skipped == ("MatMul mm",)


def test_weights_in_an_external_data_file(tmp_path):
    model = onnx.load(conv_net(tmp_path, pad=1))
    onnx.save(
        model,
        tmp_path / "ext.onnx",
        save_as_external_data=True,
        location="ext.data",
        size_threshold=0,
    )
    assert load_network(tmp_path / "ext.onnx").layers == (
        Layer("c", "conv", 16, 16, 8, 8, 3, 3, pad_h=1, pad_w=1),
    )
    (tmp_path / "ext.data").unlink()
    with pytest.raises(InputError, match=r"ext\.onnx: not a valid ONNX model: .*ext\.data"):
        load_network(tmp_path / "ext.onnx")


def test_missing_and_garbage_files(tmp_path):
    with pytest.raises(InputError, match=r"none\.onnx: cannot read ONNX file"):
        load_network(tmp_path / "none.onnx")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\xff\xff this is not a model \x00\x01")
    with pytest.raises(InputError) as info:
        load_network(garbage)
    assert str(info.value).startswith(f"{garbage}: not ") and "\n" not in str(info.value)


def test_no_layers_is_an_error(tmp_path):
    g = Graph()
    x = g.op("Relu", [g.input("x", [1, 8])], "r")
    with pytest.raises(InputError, match="nothing to tune"):
        load_network(g.save(tmp_path / "r.onnx", x))


def test_missing_onnx_extra_names_the_install(tmp_path, monkeypatch):
    path = conv_net(tmp_path)
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx now raises ImportError
    with pytest.raises(InputError, match=r"pip install 'autotune\[onnx\]'"):
        load_network(path)


def test_cli_check_onnx(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["check", small_cnn(tmp_path)])
    assert result.exit_code == 0, result.output
    for text in ("small_cnn: 7 layers, batch 2", "gconv", "fc2", "8×8×64"):
        assert text in result.output
    bad = conv_net(tmp_path, "bad.onnx", pads=[0, 0, 3, 1])
    result = runner.invoke(app, ["check", bad])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and bad in lines[0] and "'pads'" in lines[0]


@pytest.mark.parametrize(
    ("shape", "name", "field", "limit"),
    [
        ([1, 8, 100_000_000, 16], "c", "shape", "MAX_SPATIAL"),
        ([1_000_000_000, 8, 16, 16], "c", "input", "MAX_BATCH"),
        ([1, 8, 16, 16], "n" * 1000, "name", "MAX_NAME_CHARS"),
    ],
)
def test_input_limits(tmp_path, shape, name, field, limit):
    """A model over the input limits is one line naming the node and the field."""
    g = Graph()
    path = g.save(tmp_path / "big.onnx", g.conv(g.input("x", shape), name, 8, 8, 3))
    result = CliRunner().invoke(app, ["check", path])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert path in result.output and f"field '{field}'" in result.output
    assert limit in result.output and "n" * 600 not in result.output
