"""End to end: whole networks executed through their tiled schedules, against the graph's
independent reference and against onnxruntime; ``autotune run``."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from typer.testing import CliRunner

import autotune
from autotune.api import audit_schedule, run_network, schedule_network, verify_network_schedule
from autotune.cli.app import app
from autotune.graphs.execute import verify_network
from autotune.graphs.weights import seeded_weights
from autotune.io.network_yaml import load_network
from tests.io.test_onnx_graph import (
    Model,
    constant_affines,
    dilated_head,
    gelus,
    legacy_resnet,
    padded_prelu_tanh,
    segmentation_head,
    shufflenet,
    squeeze_excitation,
)

#: Every operator kind, with the fusions and placements the lowering makes.
ALL_KINDS = """\
network: every_kind
layers:
  - {name: conv1, kind: conv, in: [12, 12, 4], out_channels: 8, kernel: 3, padding: 1, bias: true}
  - {name: bn1, kind: batchnorm}
  - {name: relu1, kind: relu}
  - {name: conv2, kind: conv, out_channels: 8, kernel: 3, padding: 1}
  - {name: bn2, kind: batchnorm}
  - {name: add1, kind: add, inputs: [bn2, relu1]}
  - {name: relu6, kind: relu6}
  - {name: side, kind: leaky_relu, alpha: 0.1, inputs: [relu1]}
  - {name: add3, kind: add, inputs: [relu6, side, relu1]}
  - {name: pool, kind: maxpool, kernel: 3, stride: 2, ceil_mode: true}
  - {name: avg, kind: avgpool, kernel: 3, stride: 1, padding: 1, inputs: [pool]}
  - {name: up, kind: upsample, scale: 2, inputs: [avg]}
  - {name: dw, kind: conv, out_channels: 8, kernel: 3, padding: 1, groups: 8, inputs: [add3]}
  - {name: sig, kind: sigmoid}
  - {name: cat, kind: concat, inputs: [up, sig, input]}
  - {name: bn3, kind: batchnorm}
  - {name: hs, kind: hardswish}
  - {name: silu, kind: silu, inputs: [cat]}
  - {name: mix, kind: add, inputs: [hs, silu]}
  - {name: gap, kind: global_avgpool}
  - {name: flat, kind: flatten}
  - {name: fc, kind: fc, out_channels: 10, bias: true}
  - {name: prob, kind: softmax}
"""


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    folder = tmp_path_factory.mktemp("every_kind")
    path = folder / "net.yaml"
    path.write_text(ALL_KINDS)
    result = autotune.tune(path, refine=False, verify=True)
    return path, result


def test_every_kind_runs_end_to_end(tuned):
    path, result = tuned
    net = load_network(path)
    kinds = {layer.kind for layer in net.layers}
    assert {"conv", "fc", "maxpool", "avgpool", "add", "upsample", "activation", "softmax"} <= kinds
    assert result.network_verified is not None and result.network_verified.ok, (
        result.network_verified.errors
    )
    assert result.network_verified.max_rel_error < 1e-5  # fp32 against float64
    stored = {t.tensor for t in result.network_verified.tensors}
    assert {"relu1", "add3", "cat", "prob"} <= stored


def test_a_misplaced_slice_is_caught(tuned):
    """The check is sensitive: two concat operands written to each other's slices fail."""
    path, result = tuned
    net = load_network(path)
    check = verify_forged(net, result, "up", output_moved(4))
    assert not check.ok and any("cat" in line for line in check.errors)


def output_moved(channels: int):
    """A forgery: the step writes its output ``channels`` further into its buffer."""

    def forge(step):
        output = dataclasses.replace(step.output, offset=step.output.offset + channels)
        return dataclasses.replace(step, output=output)

    return forge


def verify_forged(net, result, name: str, forge):
    """The network executed and checked with step ``name`` replaced by ``forge(step)``
    (the network as the schedule runs it: its depthwise pairs fused where the plan did)."""
    net = schedule_network(result, net)
    assert net.lowering is not None
    steps = tuple(forge(s) if s.name == name else s for s in net.lowering.steps)
    assert steps != net.lowering.steps
    forged = dataclasses.replace(net, lowering=dataclasses.replace(net.lowering, steps=steps))
    mappings = {r.layer.name: r.mapping for r in result.layers}
    return verify_network(forged, mappings, result.machine, seeded_weights(net.graph))


def tuned_as_onnxruntime(path, shape: tuple[int, ...], seed: int):
    """``path`` tuned with verification (every layer tile by tile, the network as a whole),
    then run on a seeded input of ``shape``: its output must be onnxruntime's. Returns the
    result and the network for further checks."""
    ort = pytest.importorskip("onnxruntime")
    result = autotune.tune(path, refine=False, verify=True)
    assert result.network_verified is not None and result.network_verified.ok
    assert all(v.ok for v in (r.verified for r in result.layers) if v is not None)
    net = load_network(path)
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    (value,) = run_network(result, net, {"x": x}).values()
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    # Both compute in fp32, each in its own order of sums, and a sum's rounding scales with its
    # terms: through the padded network's random convs (values up to 1.9e3 before its Tanh)
    # onnxruntime's own error from the exact result reaches 4.5e-5, the schedule's 1.7e-5. A
    # wrong operator or a misplaced tile is off by the output's scale (O(1) here).
    np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-4)
    return result, net


def test_an_onnx_model_matches_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    path = legacy_resnet(tmp_path, batch=1)
    result = autotune.tune(path, refine=False, verify=False)
    net = load_network(path)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    got = run_network(result, net, {"input": x})
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"input": x})
    (value,) = got.values()
    assert value.shape == want.shape  # the Gemm's output a vector, as onnxruntime gives it
    np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-4)
    check = verify_network_schedule(result, net)
    assert check is not None and check.ok


def test_squeeze_excitation_gates_each_image_as_onnxruntime_does(tmp_path):
    """A mul by a channel gate runs as a depthwise 1×1 conv whose filter is each image's own
    gate: at batch 2 (two images, two gates) with the network plan, the outputs are
    onnxruntime's and the plan keeps the gates in the L2 as the steps' weights streams."""
    ort = pytest.importorskip("onnxruntime")
    path = squeeze_excitation(tmp_path, batch=2)
    result = autotune.tune(path, refine=False, verify=False)
    net = load_network(path)
    gated = [step for step in net.lowering.steps if step.gate is not None]
    assert [step.op for step in gated] == ["se1.scale", "se2.scale"]
    assert result.plan is not None
    in_l2 = {t.name for t in result.plan.tensors if t.level == "l2"}
    assert {step.gate.buffer for step in gated} <= in_l2
    x = np.random.default_rng(5).standard_normal((2, 4, 8, 8)).astype(np.float32)
    got = run_network(result, net, {"x": x})
    (want,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (value,) = got.values()
    assert value.shape == want.shape
    np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-5)
    check = verify_network_schedule(result, net)
    assert check is not None and check.ok
    # a file rewired to gate by the pool instead (coherent in itself) is not this network's
    path = tmp_path / "s.json"
    result.save(path)
    data = json.loads(path.read_text())
    graph = data["graph"]
    next(op for op in graph["operators"] if op["name"] == "se1.scale")["inputs"][1] = "se1.pool"
    gate = next(step for step in graph["steps"] if step["layer"] == "se1.scale")["gate"]
    gate.update(buffer="se1.pool", tensor="se1.pool")
    path.write_text(json.dumps(data))
    found = [f"{f.field}: {f.message}" for f in audit_schedule(path, net).findings]
    assert any("the graph of network" in line for line in found), found
    assert not any("the graph of network" in f.message for f in audit_schedule(path).findings)


def test_cli_run_writes_the_outputs(tuned, tmp_path):
    path, result = tuned
    schedules = tmp_path / "s.json"
    result.save(schedules)
    x = np.random.default_rng(0).uniform(-1, 1, (1, 4, 12, 12)).astype(np.float32)
    np.save(tmp_path / "in.npy", x)
    runner = CliRunner()
    args = ["run", str(path), "--schedules", str(schedules), "--input", str(tmp_path / "in.npy")]
    ok = runner.invoke(app, [*args, "--output", str(tmp_path / "out.npy")])
    assert ok.exit_code == 0, ok.output
    out = np.load(tmp_path / "out.npy")
    # a softmax of an fc's output: a vector, as ONNX has it
    assert out.shape == (1, 10) and abs(float(out.sum()) - 1.0) < 1e-5
    np.save(tmp_path / "bad.npy", x[:, :3])
    bad = runner.invoke(
        app,
        [*args[:4], "--input", str(tmp_path / "bad.npy"), "--output", str(tmp_path / "o2.npy")],
    )
    assert bad.exit_code == 2 and not (tmp_path / "o2.npy").exists()
    lines = [line for line in bad.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "'input'" in lines[0] and "[1, 4, 12, 12]" in lines[0]


def test_cli_run_refuses_a_schedule_of_another_network_in_one_line(tuned, tmp_path):
    """A schedules file that does not fit the network is bad input like any other: one line,
    exit 2, before anything runs (``verify`` lists every failing claim)."""
    path, result = tuned
    schedules = tmp_path / "s.json"
    result.save(schedules)
    data = json.loads(schedules.read_text())
    data["graph"]["operators"][0]["shape"][2] += 1
    schedules.write_text(json.dumps(data))
    np.save(tmp_path / "in.npy", np.zeros((1, 4, 12, 12), np.float32))
    args = ["run", str(path), "--schedules", str(schedules), "--input", str(tmp_path / "in.npy")]
    out = CliRunner().invoke(app, [*args, "--output", str(tmp_path / "o.npy")])
    lines = [line for line in out.output.splitlines() if line.strip()]
    assert out.exit_code == 2 and len(lines) == 1, out.output
    assert "not a valid schedule of" in lines[0] and str(schedules) in lines[0]
    assert not (tmp_path / "o.npy").exists()


def test_cli_run_refuses_one_npy_for_several_outputs_before_running(tmp_path):
    """Two outputs cannot go to one ``.npy``: said before the network is executed."""
    text = """\
network: two
layers:
  - {name: a, kind: conv, in: [6, 6, 4], out_channels: 4, kernel: 3, padding: 1}
  - {name: b, kind: conv, out_channels: 4, kernel: 1, inputs: [a]}
  - {name: c, kind: conv, out_channels: 4, kernel: 1, inputs: [a]}
"""
    path = tmp_path / "two.yaml"
    path.write_text(text)
    schedules = tmp_path / "s.json"
    autotune.tune(path, refine=False, verify=False).save(schedules)
    np.save(tmp_path / "in.npy", np.zeros((1, 4, 6, 6), np.float32))
    args = ["run", str(path), "--schedules", str(schedules), "--input", str(tmp_path / "in.npy")]
    out = CliRunner().invoke(app, [*args, "--output", str(tmp_path / "o.npy")])
    assert out.exit_code == 2 and "use .npz" in out.output and "run " not in out.output
    ok = CliRunner().invoke(app, [*args, "--output", str(tmp_path / "o.npz")])
    assert ok.exit_code == 0, ok.output
    assert sorted(np.load(tmp_path / "o.npz").files) == ["b", "c"]


def test_whole_network_simulation_and_trace(tuned, tmp_path):
    import json

    _, result = tuned
    schedules = tmp_path / "s.json"
    result.save(schedules)
    trace = tmp_path / "net.trace.json"
    out = CliRunner().invoke(app, ["simulate", str(schedules), "--trace", str(trace)])
    assert out.exit_code == 0, out.output
    assert "images/s" in out.output and "by kind:" in out.output
    doc = json.loads(trace.read_text())
    spans = [e for e in doc["traceEvents"] if e.get("pid") == 0 and e["ph"] == "X"]
    assert [e["name"] for e in spans] == [r.layer.name for r in result.layers]
    starts = [e["args"]["start_cycle"] for e in spans]
    cycles = [e["args"]["cycles"] for e in spans]
    assert starts == [sum(cycles[:i]) for i in range(len(cycles))]  # layer after layer
    assert doc["otherData"]["cycles"] == sum(cycles) == result.totals.cycles
    assert all(e["ts"] >= 0 for e in doc["traceEvents"] if "ts" in e)


def test_cli_run_names_an_onnx_models_outputs_as_the_model_does(tmp_path):
    """``.npz`` by tensor name: the model's output tensors' names (what onnxruntime returns
    them by), not the operators' (the nodes') that the graph names tensors after."""
    ort = pytest.importorskip("onnxruntime")
    m = Model("two_outputs")
    x = m.input("x", [1, 3, 8, 8])
    a = m.op("Relu", [m.conv(x, "conv_a", 3, 4, 3, pad=1)], "relu_a")
    b = m.conv(a, "conv_b", 4, 4, 1)
    path = m.save(tmp_path / "two.onnx", a, b)
    schedules = tmp_path / "s.json"
    autotune.tune(path, refine=False, verify=False).save(schedules)
    value = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "in.npy", value)
    args = ["run", path, "--schedules", str(schedules), "--input", str(tmp_path / "in.npy")]
    out = CliRunner().invoke(app, [*args, "--output", str(tmp_path / "out.npz")])
    assert out.exit_code == 0, out.output
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    want = dict(zip(names, session.run(None, {"x": value}), strict=True))
    got = np.load(tmp_path / "out.npz")
    assert sorted(got.files) == sorted(want) == sorted([a, b])
    for name, array in want.items():
        np.testing.assert_allclose(got[name], array, rtol=1e-4, atol=1e-5)


def test_shufflenet_units_match_onnxruntime_and_a_swapped_group_is_caught(tmp_path):
    """Channel slices read in place and shuffles read as interleaved groups compute what
    onnxruntime computes; the executed network is checked against the reference, and a
    shuffle whose two groups are swapped fails that check."""
    ort = pytest.importorskip("onnxruntime")
    path = shufflenet(tmp_path, batch=2)
    result = autotune.tune(path, refine=False, verify=True)
    assert result.network_verified is not None and result.network_verified.ok
    net = load_network(path)
    x = np.random.default_rng(5).standard_normal((2, 4, 8, 8)).astype(np.float32)
    (value,) = run_network(result, net, {"x": x}).values()
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-5)
    swapped = verify_forged(
        net,
        result,
        "u2.shuffle",
        lambda step: dataclasses.replace(step, inputs=step.inputs[::-1]),
    )
    assert not swapped.ok and any("u2.shuffle" in line for line in swapped.errors)


def test_constant_arithmetic_matches_onnxruntime(tmp_path):
    """Input normalisation, a batch norm written as Mul and Add, scalar arithmetic: as batch
    norms merged and folded, tuned and run, they compute what onnxruntime computes."""
    tuned_as_onnxruntime(constant_affines(tmp_path, batch=2), (2, 3, 8, 8), seed=6)


DENSE_BLOCK = """\
network: dense_block
layers:
  - {name: x0, kind: conv, in: [8, 8, 4], out_channels: 4, kernel: 1}
  - {name: bn1, kind: batchnorm}
  - {name: relu1, kind: relu}
  - {name: f1, kind: conv, out_channels: 2, kernel: 3, padding: 1}
  - {name: cat2, kind: concat, inputs: [x0, f1]}
  - {name: bn2, kind: batchnorm}
  - {name: relu2, kind: relu}
  - {name: f2, kind: conv, out_channels: 2, kernel: 3, padding: 1}
  - {name: out, kind: concat, inputs: [x0, f1, f2]}
  - {name: gap, kind: global_avgpool}
"""


def test_dense_block_reads_its_concats_in_place_and_a_misplaced_output_is_caught(tmp_path):
    """DenseNet's concats before each layer are ranges of the block's last one: executed,
    the network matches the reference; a layer writing over another's channels fails it."""
    path = tmp_path / "dense.yaml"
    path.write_text(DENSE_BLOCK)
    result = autotune.tune(path, refine=False, verify=True)
    assert result.network_verified is not None and result.network_verified.ok
    net = load_network(path)
    assert net.lowering is not None and all(step.op for step in net.lowering.steps)
    forged = verify_forged(net, result, "f1", output_moved(2))
    assert not forged.ok


def test_dilated_convs_match_onnxruntime(tmp_path):
    """Dilated convs (a dense one, a depthwise one, an ASPP-like head): tuned, verified tile
    by tile and run, they compute what onnxruntime computes."""
    _, net = tuned_as_onnxruntime(dilated_head(tmp_path, batch=2), (2, 3, 16, 16), seed=7)
    assert {(la.name, la.dilation_h) for la in net.layers if la.dilation_h > 1} == {
        ("d2", 2),
        ("dw3", 3),
        ("aspp2", 2),
        ("aspp4", 4),
    }


def test_pads_prelu_and_tanh_match_onnxruntime(tmp_path):
    """Zero Pads folded into their convs, unequal padding (TensorFlow's SAME of stride 2, a Pad
    at the end only), PReLUs of one slope, a Tanh: tuned, verified tile by tile and run, they
    compute what onnxruntime computes; the schedule file keeps the unequal padding."""
    path = padded_prelu_tanh(tmp_path, batch=2)
    result, net = tuned_as_onnxruntime(path, (2, 3, 12, 12), seed=8)
    # the depthwise's layer: its own, or the 1x1's it is fused into (the window is its)
    assert result.lowering is not None
    step = next(s for s in result.lowering.steps if "dw" in (s.op, s.prologue and s.prologue.op))
    dw = step.layer
    assert (dw.pad_bottom, dw.pad_right) == (1, 2)
    saved = tmp_path / "edges.json"
    result.save(saved)
    assert not audit_schedule(saved, net).findings


def test_gelus_match_onnxruntime(tmp_path):
    """GELU chains and ONNX's Gelu: tuned, verified tile by tile and run, as onnxruntime."""
    tuned_as_onnxruntime(gelus(tmp_path, batch=2, opset=20), (2, 3, 8, 8), seed=9)


def test_bilinear_upsampling_matches_onnxruntime(tmp_path):
    """Bilinear Resize (half-pixel by scales, pytorch_half_pixel by sizes, align_corners):
    tuned, verified tile by tile and run, as onnxruntime computes it."""
    ort = pytest.importorskip("onnxruntime")
    path = segmentation_head(tmp_path, batch=2)
    result = autotune.tune(path, refine=False, verify=True)
    assert result.network_verified is not None and result.network_verified.ok
    net = load_network(path)
    modes = {la.name: (la.upsample_mode, la.upscale) for la in net.layers if la.kind == "upsample"}
    assert modes == {
        "up": ("bilinear", 2),
        "out": ("bilinear", 2),
        "corners": ("bilinear_corners", 2),
    }
    x = np.random.default_rng(8).standard_normal((2, 3, 16, 16)).astype(np.float32)
    got = run_network(result, net, {"x": x})
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})
    for value, expected in zip(got.values(), want, strict=True):  # fp32, to the largest value
        np.testing.assert_allclose(value, expected, rtol=0, atol=1e-6 * np.abs(expected).max())


def test_check_shows_dilations_and_interpolations(tmp_path):
    result = CliRunner().invoke(app, ["check", segmentation_head(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "3×3 d2" in result.output and "bilinear corners" in result.output


def test_check_shows_unequal_padding(tmp_path):
    """``check`` prints each axis's two sides where they differ (``top+bottom×left+right``)."""
    result = CliRunner(env={"COLUMNS": "250"}).invoke(app, ["check", padded_prelu_tanh(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if "│" in line}
    assert "0+1×0+2" in rows["dw"] and "0+1×0+1" in rows["same"]
    assert "+" not in rows["conv1"]  # equal sides: as before
