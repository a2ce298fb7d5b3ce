"""The graph IR and its lowering: shapes, DAG checks, folding, fusion, zero-copy concat."""

from __future__ import annotations

import pytest

from autotune.ir.graph import Graph, GraphError, make_operator
from autotune.ir.layer import Layer
from autotune.ir.lowering import lower
from autotune.ir.network import Network

Spec = tuple[str, str, list[str], dict[str, object]]


def build(specs: list[Spec], shape: tuple[int, int, int] = (16, 16, 8)) -> Graph:
    shapes = {"input": shape}
    ops = []
    for name, kind, inputs, fields in specs:
        op = make_operator(name, kind, inputs, shapes, **fields)  # type: ignore[arg-type]
        shapes[name] = op.shape
        ops.append(op)
    return Graph("g", (("input", shape),), tuple(ops))


def residual_block() -> list[Spec]:
    return [
        ("c1", "conv", ["input"], dict(out_channels=8, kernel=3, padding=1)),
        ("bn1", "batchnorm", ["c1"], {}),
        ("r1", "relu", ["bn1"], {}),
        ("c2", "conv", ["r1"], dict(out_channels=8, kernel=3, padding=1)),
        ("bn2", "batchnorm", ["c2"], {}),
        ("add", "add", ["bn2", "r1"], {}),
        ("r2", "relu", ["add"], {}),
    ]


def test_shapes_are_inferred():
    g = build(
        [
            ("c", "conv", ["input"], dict(out_channels=4, kernel=3, stride=2, padding=1)),
            ("p", "maxpool", ["c"], dict(kernel=3, stride=2, ceil_mode=True)),
            ("u", "upsample", ["p"], dict(scale=2)),
            ("g", "global_avgpool", ["u"], {}),
            ("f", "flatten", ["g"], {}),
            ("fc", "fc", ["f"], dict(out_channels=10)),
        ]
    )
    assert [op.shape for op in g.ops] == [
        (8, 8, 4),
        (4, 4, 4),  # ceil((8 - 3) / 2) + 1
        (8, 8, 4),
        (1, 1, 4),
        (1, 1, 4),
        (1, 1, 10),
    ]


@pytest.mark.parametrize(
    ("specs", "field", "words"),
    [
        ([("a", "add", ["input", "nope"], {})], "inputs", "'nope'"),
        ([("c", "conv", ["input"], dict(out_channels=4))], "kernel", "required"),
        (
            [
                ("c", "conv", ["input"], dict(out_channels=4, kernel=3)),
                ("a", "add", ["c", "input"], {}),
            ],
            "inputs",
            "differ in shape",
        ),
        ([("p", "maxpool", ["input"], dict(kernel=40))], "kernel", "exceeds"),
        ([("u", "upsample", ["input"], {})], "scale", "required"),
        ([("r", "relu", ["input", "input"], {})], "inputs", "one input"),
    ],
)
def test_bad_operators_name_the_layer_and_field(specs, field, words):
    with pytest.raises(GraphError) as info:
        build(specs)
    assert info.value.field == field and words in str(info.value)


def test_a_mismatch_names_the_producer():
    with pytest.raises(GraphError) as info:
        build(
            [
                ("c", "conv", ["input"], dict(out_channels=4, kernel=3)),
                ("d", "conv", ["input"], dict(out_channels=4, kernel=1)),
                ("cat", "concat", ["c", "d"], {}),
            ]
        )
    assert info.value.producer == "d" and "'cat'" in str(info.value)


def test_cycles_and_unknown_inputs_are_refused():
    a = make_operator("a", "relu", ["b"], {"b": (4, 4, 4)})
    b = make_operator("b", "relu", ["a"], {"a": (4, 4, 4)})
    with pytest.raises(GraphError, match="defined later"):
        Graph("g", (("input", (4, 4, 4)),), (a, b))
    with pytest.raises(GraphError, match="not a layer"):
        Graph("g", (("input", (4, 4, 4)),), (a,))


def test_residual_block_folds_and_fuses_into_two_convs():
    low = lower(build(residual_block()))
    assert [s.name for s in low.steps] == ["c1", "c2"]
    fates = {f.op: (f.kind, f.into) for f in low.fates}
    assert fates == {
        "c1": ("layer", "c1"),
        "bn1": ("folded", "c1"),
        "r1": ("fused", "c1"),
        "c2": ("layer", "c2"),
        "bn2": ("folded", "c2"),
        "add": ("fused", "c2"),
        "r2": ("fused", "c2"),
    }
    c1, c2 = low.steps
    assert c1.layer.epilogue.bias and c1.layer.epilogue.activation is not None
    assert c2.layer.epilogue.residual and c2.residual is not None
    assert c2.residual.buffer == "r1" and c2.output.buffer == "r2"
    assert c2.absorbed == ("bn2", "add", "r2")


def test_an_add_whose_operands_are_both_read_elsewhere_stays_a_layer():
    specs = [
        *residual_block()[:4],
        ("add", "add", ["c2", "r1"], {}),
        ("other", "relu", ["c2"], {}),
    ]
    low = lower(build(specs))
    assert [s.layer.kind for s in low.steps] == ["conv", "conv", "add", "activation"]
    add = low.step("add")
    assert add.layer.c_in == 16 and add.layer.c_out == 8 and add.layer.operands == 2
    assert [r.buffer for r in add.inputs] == ["c2", "r1"]


def test_batchnorm_after_an_activation_stands_alone():
    specs = [
        ("c", "conv", ["input"], dict(out_channels=8, kernel=1)),
        ("r", "relu", ["c"], {}),
        ("bn", "batchnorm", ["r"], {}),
    ]
    low = lower(build(specs))
    assert [(s.name, s.layer.kind) for s in low.steps] == [("c", "conv"), ("bn", "conv")]
    bn = low.step("bn").layer
    assert bn.groups == 8 and bn.epilogue.bias and bn.kernel_h == 1


def test_concat_is_zero_copy_and_nested_concats_are_slices():
    specs: list[Spec] = [
        ("a", "conv", ["input"], dict(out_channels=4, kernel=1)),
        ("b", "conv", ["input"], dict(out_channels=6, kernel=1)),
        ("inner", "concat", ["a", "b"], {}),
        ("c", "maxpool", ["input"], dict(kernel=3, padding=1)),
        ("outer", "concat", ["c", "inner"], {}),
        ("d", "conv", ["outer"], dict(out_channels=2, kernel=1)),
    ]
    low = lower(build(specs))
    out = {s.name: (s.output.buffer, s.output.offset) for s in low.steps}
    assert out["c"] == ("outer", 0)
    assert out["a"] == ("outer", 8) and out["b"] == ("outer", 12)
    assert low.step("d").inputs[0].buffer == "outer"
    assert [b.name for b in low.buffers] == ["input", "d", "outer"]


def dense_block(layers: int = 3) -> list[Spec]:
    """DenseNet's block: before each layer, the block's input and every output so far
    concatenated (and once more after the last), each layer a batch norm, a ReLU and a conv."""
    specs: list[Spec] = [("x0", "conv", ["input"], dict(out_channels=4, kernel=1))]
    features = ["x0"]
    for n in range(1, layers + 1):
        source = features[0]
        if n > 1:
            specs.append((f"cat{n}", "concat", list(features), {}))
            source = f"cat{n}"
        specs += [
            (f"bn{n}", "batchnorm", [source], {}),
            (f"relu{n}", "relu", [f"bn{n}"], {}),
            (f"f{n}", "conv", [f"relu{n}"], dict(out_channels=2, kernel=3, padding=1)),
        ]
        features.append(f"f{n}")
    specs.append(("out", "concat", list(features), {}))
    return specs


def test_dense_block_concats_are_views_of_the_last_one():
    low = lower(build(dense_block(3)))
    assert all(step.op for step in low.steps)  # no copies
    out = {s.name: (s.output.buffer, s.output.offset) for s in low.steps}
    assert [out[t] for t in ("x0", "f1", "f2", "f3")] == [("out", c) for c in (0, 4, 6, 8)]
    for n, channels in ((2, 6), (3, 8)):
        read = low.step(f"bn{n}").inputs[0]
        assert (read.buffer, read.offset, read.stored[2]) == ("out", 0, channels)
    fates = {f.op: (f.kind, f.into) for f in low.fates}
    assert fates["cat2"] == fates["cat3"] == ("view", "out")
    assert [b.name for b in low.buffers if b.producer is not None and "cat" in b.name] == []


def test_a_concat_in_another_order_is_copied_and_a_hosted_operand_too():
    specs = dense_block(2) + [
        ("swapped", "concat", ["f1", "x0"], {}),  # not a run of "out": copied
        ("nested", "concat", ["cat2", "f2"], {}),  # cat2 is a view of "out": copied
    ]
    low = lower(build(specs))
    copies = sorted(
        (s.inputs[0].tensor, s.output.buffer, s.output.offset) for s in low.steps if not s.op
    )
    # (f1 and x0 are read by two concats that are not views: copied into both)
    assert copies == [
        ("cat2", "nested", 0),
        ("f1", "out", 4),
        ("f1", "swapped", 0),
        ("f2", "nested", 6),
        ("f2", "out", 6),
        ("x0", "out", 0),
        ("x0", "swapped", 2),
    ]
    assert low.step("bn2").inputs[0].buffer == "out"
    assert {f.op: f.kind for f in low.fates}["cat2"] == "view"


def test_a_network_input_in_a_concat_is_copied():
    specs: list[Spec] = [
        ("a", "conv", ["input"], dict(out_channels=4, kernel=1)),
        ("cat", "concat", ["input", "a"], {}),
    ]
    low = lower(build(specs))
    copy = low.steps[0] if low.steps[0].layer.kind == "upsample" else low.steps[1]
    assert copy.layer.kind == "upsample" and copy.layer.upscale == 1
    assert (copy.output.buffer, copy.output.offset) == ("cat", 0)
    assert (low.step("a").output.buffer, low.step("a").output.offset) == ("cat", 8)
    assert copy.op == ""


def test_flatten_is_a_view_and_fc_reads_the_stored_volume():
    specs: list[Spec] = [
        ("c", "conv", ["input"], dict(out_channels=4, kernel=1)),
        ("f", "flatten", ["c"], {}),
        ("fc", "fc", ["f"], dict(out_channels=10)),
        ("s", "softmax", ["fc"], {}),
    ]
    low = lower(build(specs))
    fc = low.step("fc")
    assert fc.inputs[0].buffer == "c" and fc.inputs[0].view == (1, 1, 16 * 16 * 4)
    assert (fc.layer.h_in, fc.layer.w_in, fc.layer.c_in) == (16, 16, 4)
    assert fc.layer.kernel_h == 16
    assert {f.op: f.kind for f in low.fates}["f"] == "view"
    assert low.step("s").layer.kind == "softmax"


def test_network_macs_match_the_graph_count():
    g = build(residual_block())
    net = Network.of_graph(g)
    assert net.macs == g.macs == 2 * 16 * 16 * 8 * 8 * 9


def test_a_dilated_conv_is_a_layer_whose_window_spans_its_taps():
    g = build([("c", "conv", ["input"], dict(out_channels=4, kernel=3, dilation=2, padding=2))])
    layer = lower(g).step("c").layer
    assert (layer.dilation_h, layer.dilation_w, layer.span_h) == (2, 2, 5)
    assert (layer.h_out, layer.w_out) == (16, 16) == g.shape("c")[:2]


def test_a_shortcut_after_the_activation_fuses_with_activation_first():
    """YOLOv3's shortcut adds activated outputs: the add joins the later conv's epilogue
    after its activation."""
    specs: list[Spec] = [
        ("c1", "conv", ["input"], dict(out_channels=8, kernel=1)),
        ("l1", "leaky_relu", ["c1"], dict(alpha=0.1)),
        ("c2", "conv", ["l1"], dict(out_channels=8, kernel=3, padding=1)),
        ("l2", "leaky_relu", ["c2"], dict(alpha=0.1)),
        ("s", "add", ["l2", "l1"], {}),
    ]
    low = lower(build(specs))
    assert [s.name for s in low.steps] == ["c1", "c2"]
    epilogue = low.step("c2").layer.epilogue
    assert epilogue.residual and epilogue.activation_first
    assert epilogue.activation is not None and epilogue.activation.alpha == 0.1


def test_shape_keys_tell_a_dilation_and_an_interpolation_apart():
    """Layers of equal keys share one solve, refinement and verification: a dilated conv is
    not its undilated twin, nor a bilinear upsample a nearest one; other keys are as before
    (the refinement studies are named from them)."""
    conv = Layer("c", "conv", 8, 8, 4, 4, 3, 3, pad_h=2, pad_w=2)
    dilated = Layer("d", "conv", 8, 8, 4, 4, 3, 3, pad_h=2, pad_w=2, dilation_h=2, dilation_w=2)
    up = Layer("u", "upsample", 4, 4, 4, 4, groups=4, upscale=2)
    corners = Layer("v", "upsample", 4, 4, 4, 4, groups=4, upscale=2, upsample_mode="bilinear")
    assert conv.shape_key() != dilated.shape_key() and up.shape_key() != corners.shape_key()
    assert len(conv.shape_key()) == len(up.shape_key()) == 23
