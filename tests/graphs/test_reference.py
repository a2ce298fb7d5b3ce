"""The independent whole-network reference against onnxruntime on imported models."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.graphs.reference import run_reference
from autotune.io.onnx_import import load_onnx_graph
from tests.io.test_onnx_graph import (
    dynamo_resnet,
    legacy_resnet,
    mobilenetv2,
    pooling_and_activations,
    squeeze_excitation,
    yolov3,
)

ort = pytest.importorskip("onnxruntime")

MODELS = {
    "legacy_resnet": lambda tmp: legacy_resnet(tmp, batch=2),
    "dynamo_resnet": dynamo_resnet,
    "mobilenetv2": mobilenetv2,
    "yolov3": yolov3,
    "pooling_and_activations": pooling_and_activations,
    "squeeze_excitation": squeeze_excitation,
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_reference_equals_onnxruntime(tmp_path, name):
    path = MODELS[name](tmp_path)
    imported = load_onnx_graph(path)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for arg in session.get_inputs():
        dims = [d if isinstance(d, int) else imported.batch for d in arg.shape]
        feeds[arg.name] = rng.standard_normal(dims).astype(np.float32)
    expected = session.run(None, feeds)
    got = run_reference(imported.graph, feeds, imported.weights)
    for tensor, want in zip(imported.graph.outputs, expected, strict=True):
        # onnxruntime computes in fp32 with the kernels this CPU has (their order of sums),
        # the reference in fp64: a sum's rounding scales with its terms, not its result, so an
        # output that cancels (38.86 among values of 1e4, YOLOv3's head) is compared at the
        # tensor's scale. A wrong operator is off by the scale itself.
        scale = float(np.max(np.abs(want)))
        np.testing.assert_allclose(
            got[tensor].reshape(want.shape), want, rtol=1e-4, atol=max(1e-4, 1e-6 * scale)
        )
