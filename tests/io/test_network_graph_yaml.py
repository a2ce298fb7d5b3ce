"""network.yaml as a graph: ``inputs``, every operator kind, shapes checked between layers."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from autotune import InputError, load_network
from autotune.cli.app import app

BLOCK = """\
network: block
layers:
  - {name: conv1, kind: conv, in: [16, 16, 8], out_channels: 8, kernel: 3, padding: 1}
  - {name: bn1, kind: batchnorm}
  - {name: relu1, kind: relu}
  - {name: conv2, kind: conv, out_channels: 8, kernel: 3, padding: 1}
  - {name: bn2, kind: batchnorm, epsilon: 0.001}
  - {name: add, kind: add, inputs: [bn2, relu1]}
  - {name: relu2, kind: relu6}
  - {name: pool, kind: maxpool, kernel: 3, stride: 2, padding: 1}
  - {name: up, kind: upsample, scale: 2, out: [16, 16, 8]}
  - {name: side, kind: leaky_relu, alpha: 0.1, inputs: [relu2]}
  - {name: cat, kind: concat, inputs: [up, side]}
  - {name: gap, kind: global_avgpool}
  - {name: flat, kind: flatten}
  - {name: fc, kind: fc, out_channels: 10}
  - {name: prob, kind: softmax}
"""


def write(tmp_path, text: str):
    path = tmp_path / "net.yaml"
    path.write_text(text)
    return path


def test_a_graph_file_loads_with_its_fusions(tmp_path):
    net = load_network(write(tmp_path, BLOCK))
    assert net.graph is not None and net.lowering is not None
    assert len(net.graph.ops) == 15
    fates = {f.op: f.kind for f in net.lowering.fates}
    assert fates["bn1"] == fates["bn2"] == "folded"
    assert fates["relu1"] == fates["add"] == fates["relu2"] == "fused"
    assert fates["flat"] == "view" and fates["cat"] == "concat"
    kinds = [layer.kind for layer in net.layers]
    assert kinds == [
        "conv",
        "conv",
        "maxpool",
        "upsample",
        "activation",
        "avgpool",
        "fc",
        "softmax",
    ]
    assert net.layer("conv2").epilogue.residual
    assert net.layer("fc").c_in == 16
    assert net.graph.op("bn2").epsilon == 0.001


def test_a_flat_file_keeps_its_meaning(tmp_path):
    text = """\
network: flat
layers:
  - {name: a, kind: conv, in: [8, 8, 4], out_channels: 4, kernel: 3, padding: 1}
  - {name: b, kind: conv, in: [8, 8, 4], out_channels: 8, kernel: 1}
  - {name: c, kind: conv, in: [4, 4, 16], out_channels: 8, kernel: 1}
  - {name: d, kind: fc, in: [1, 1, 32], out_channels: 10}
"""
    net = load_network(write(tmp_path, text))
    assert [layer.name for layer in net.layers] == ["a", "b", "c", "d"]
    assert net.graph is not None
    assert [name for name, _ in net.graph.inputs] == ["input", "c.in", "d.in"]
    assert net.graph.op("b").inputs == ("a",)


@pytest.mark.parametrize(
    ("edit", "layer", "field", "words"),
    [
        (("inputs: [bn2, relu1]", "inputs: [bn2, nope]"), "add", "inputs", "'nope'"),
        (("inputs: [bn2, relu1]", "inputs: [bn2, fc]"), "add", "inputs", "defined later"),
        (
            ("{name: up, kind: upsample, scale: 2, out: [16, 16, 8]}", "{name: up, kind: relu}"),
            "cat",
            "inputs",
            "'side'",
        ),
        (("kind: upsample, scale: 2,", "kind: upsample,"), "up", "scale", "required"),
        (
            ("kind: upsample, scale: 2,", "kind: upsample, scale: 2, mode: cubic,"),
            "up",
            "mode",
            "bilinear",
        ),
        (("kind: relu6}", "kind: relu6, mode: bilinear}"), "relu2", "mode", "not allowed"),
        (("alpha: 0.1,", "alpha: 0.1, kernel: 3,"), "side", "kernel", "not allowed"),
        (("out: [16, 16, 8]", "out: [16, 16, 9]"), "up", "out", "declared"),
        (("{name: relu1, kind: relu}", "{name: input, kind: relu}"), "input", "name", "network"),
        (
            ("{name: conv2, kind: conv,", "{name: conv2, kind: conv, in: [9, 9, 8],"),
            "conv2",
            "in",
            "'relu1' gives",
        ),
    ],
)
def test_graph_errors_name_both_layers(tmp_path, edit, layer, field, words):
    assert_edit_refused(tmp_path, BLOCK, edit, layer, field, words)


def assert_edit_refused(tmp_path, text: str, edit, layer: str, field: str, words: str) -> None:
    """``text`` with ``edit`` (old, new) applied is refused naming ``layer`` and ``field``."""
    old, new = edit
    assert old in text
    with pytest.raises(InputError) as info:
        load_network(write(tmp_path, text.replace(old, new)))
    err = info.value
    assert (err.layer, err.field) == (layer, field), str(err)
    assert words in str(err)


def test_the_cli_refuses_a_bad_graph_with_one_line(tmp_path):
    path = write(tmp_path, BLOCK.replace("inputs: [bn2, relu1]", "inputs: [bn2, fc]"))
    result = CliRunner().invoke(app, ["check", str(path)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "layer 'add'" in lines[0] and "'fc'" in lines[0]


def test_ceil_mode_pooling(tmp_path):
    text = """\
network: p
layers:
  - {name: pool, kind: maxpool, in: [16, 16, 8], kernel: 3, stride: 2, ceil_mode: true}
  - {name: avg, kind: avgpool, kernel: 2, stride: 2, count_include_pad: true, out: [4, 4, 8]}
"""
    net = load_network(write(tmp_path, text))
    pool = net.layer("pool")
    assert pool.ceil_mode and (pool.h_out, pool.w_out) == (8, 8)  # floor mode gives 7
    assert net.layer("avg").count_include_pad


def test_a_clip_bound_left_out_is_none(tmp_path):
    """As ONNX's ``Clip``: ``{kind: clip, min: -1}`` is ``max(x, -1)`` (it was clipped to
    [-1, 6] before, a default the README never gave)."""
    text = """\
network: c
layers:
  - {name: a, kind: conv, in: [8, 8, 4], out_channels: 4, kernel: 3, padding: 1}
  - {name: lo, kind: clip, min: -1.0}
  - {name: b, kind: conv, out_channels: 4, kernel: 3, padding: 1}
  - {name: hi, kind: clip, max: 2.0}
"""
    net = load_network(write(tmp_path, text))
    for layer, bounds in (("a", (-1.0, math.inf)), ("b", (-math.inf, 2.0))):
        act = net.layer(layer).epilogue.activation
        assert act is not None and (act.kind, act.low, act.high) == ("clip", *bounds)


SHUFFLE_UNIT = """\
network: shuffle_unit
layers:
  - {name: stem, kind: conv, in: [8, 8, 4], out_channels: 16, kernel: 3, padding: 1}
  - {name: keep, kind: slice, inputs: [stem], channels: [0, 8]}
  - {name: work, kind: slice, inputs: [stem], channels: [8, 16]}
  - {name: pw, kind: conv, inputs: [work], out_channels: 8, kernel: 1}
  - {name: cat, kind: concat, inputs: [keep, pw]}
  - {name: shuf, kind: shuffle, groups: 4}
"""


def test_slices_are_views_and_a_shuffle_reads_its_groups(tmp_path):
    net = load_network(write(tmp_path, SHUFFLE_UNIT))
    assert net.graph is not None and net.lowering is not None
    fates = {f.op: (f.kind, f.into) for f in net.lowering.fates}
    assert fates["keep"] == fates["work"] == ("view", "stem")
    pw = net.lowering.step("pw").inputs[0]
    assert (pw.buffer, pw.offset, pw.stored) == ("stem", 8, (8, 8, 8))
    shuf = net.lowering.step("shuf")
    assert [(r.buffer, r.offset, r.stored[2]) for r in shuf.inputs] == [
        ("cat", 0, 4),
        ("cat", 4, 4),
        ("cat", 8, 4),
        ("cat", 12, 4),
    ]
    assert shuf.layer.kind == "upsample" and shuf.layer.c_in == shuf.layer.c_out == 16
    assert shuf.shuffle_groups == 4 and net.lowering.step("pw").shuffle_groups == 0


@pytest.mark.parametrize(
    ("edit", "layer", "field", "words"),
    [
        (("channels: [8, 16]", "channels: [8, 17]"), "work", "channels", "within the input's 16"),
        (("channels: [8, 16]", "channels: [8, 8]"), "work", "channels", "non-empty"),
        (("channels: [8, 16]", "channels: [8]"), "work", "channels", "at least 2"),
        (("inputs: [stem], channels: [0, 8]", "inputs: [stem]"), "keep", "channels", "required"),
        (("groups: 4", "groups: 3"), "shuf", "groups", "divide its 16 channels"),
        (("groups: 4", "groups: 1"), "shuf", "groups", "2 or more"),
        (
            ("kind: conv, inputs: [work],", "kind: conv, channels: [0, 1], inputs: [work],"),
            "pw",
            "channels",
            "not allowed",
        ),
    ],
)
def test_slice_and_shuffle_errors(tmp_path, edit, layer, field, words):
    assert_edit_refused(tmp_path, SHUFFLE_UNIT, edit, layer, field, words)


def test_bilinear_upsample(tmp_path):
    text = BLOCK.replace("kind: upsample, scale: 2,", "kind: upsample, scale: 2, mode: bilinear,")
    net = load_network(write(tmp_path, text))
    assert net.graph is not None and net.graph.op("up").mode == "bilinear"
    layer = net.layer("up")
    assert (layer.upsample_mode, layer.upscale, layer.ops_per_output) == ("bilinear", 2, 4)


def test_a_conv_padded_unequally(tmp_path):
    """``padding: [top, left, bottom, right]`` (TensorFlow's SAME of stride 2) on a conv; a
    pool padded unequally is refused, naming the field."""
    text = """\
network: p
layers:
  - {name: same, kind: conv, in: [16, 16, 8], out_channels: 8, kernel: 3, stride: 2,
     padding: [0, 0, 1, 1], out: [8, 8, 8]}
  - {name: tanh, kind: tanh}
"""
    net = load_network(write(tmp_path, text))
    layer = net.layer("same")
    assert (layer.pad_h, layer.pad_w, layer.pad_end_h, layer.pad_end_w) == (0, 0, 1, 1)
    assert net.layer("same").epilogue.activation.kind == "tanh"
    pool = text.replace(
        "kind: conv, in: [16, 16, 8], out_channels: 8,", "kind: maxpool, in: [16, 16, 8],"
    )
    with pytest.raises(InputError) as info:
        load_network(write(tmp_path, pool))
    assert (info.value.layer, info.value.field) == ("same", "padding")
    three = text.replace("padding: [0, 0, 1, 1]", "padding: [0, 0, 1]")
    with pytest.raises(InputError) as info:
        load_network(write(tmp_path, three))
    assert info.value.field == "padding" and "[top, left, bottom, right]" in str(info.value)
