"""A whole network executed through its tuned layers, and checked tensor by tensor.

``execute_network`` runs the lowered steps in order, each with its own tiled schedule
(``verification.run.execute_layer``: the program the mapping defines, on a model of main
memory and L1 that checks every operation), on buffers laid out as the lowering placed
them: a concat's producers write channel slices of one buffer, a flatten reads its source's
bytes, an add reads its operands interleaved, a fused add reads its residual. The weights
are the graph's (``graphs.weights``), folded as the lowering folded them.

``verify_network`` compares every stored tensor with the independent reference
(``graphs.reference``: the graph as written, in float64, without folding, fusion or tiling).
The error of a tensor is its largest absolute difference relative to its largest magnitude;
it must stay within ``TOLERANCE[precision]``: a few hundred units in the last place of the
storage format, which rounding once per layer over a hundred layers stays within (seeded
weights keep activations of order one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from autotune.graphs.reference import run_reference
from autotune.graphs.weights import Array, Weights, check_weights, step_weights
from autotune.ir.graph import Graph
from autotune.ir.lowering import Lowering, TensorRef
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping as LayerMapping
from autotune.ir.network import Network
from autotune.verification.executor import DTYPES
from autotune.verification.run import execute_layer, interleave

#: Largest relative error of a tensor against the float64 reference, by storage precision.
TOLERANCE = {"fp64": 1e-9, "fp32": 2e-4, "fp16": 6e-2}


class NetworkError(ValueError):
    """The network cannot be executed as given (no graph, a layer without a mapping, inputs
    of the wrong shape); names what is wrong."""


@dataclass(frozen=True)
class TensorCheck:
    """One stored tensor compared with the reference."""

    tensor: str
    max_abs_error: float
    rel_error: float  # max_abs_error / the reference's largest magnitude
    ok: bool


@dataclass(frozen=True)
class NetworkVerification:
    """The end-to-end check: every stored tensor against the reference."""

    ok: bool
    tensors: tuple[TensorCheck, ...]
    tolerance: float

    @property
    def worst(self) -> TensorCheck:
        return max(self.tensors, key=lambda t: t.rel_error)

    @property
    def max_rel_error(self) -> float:
        return max((t.rel_error for t in self.tensors), default=0.0)

    @property
    def errors(self) -> list[str]:
        return [
            f"tensor {t.tensor!r}: relative error {t.rel_error:.3g} > {self.tolerance:g}"
            for t in self.tensors
            if not t.ok
        ]


def network_inputs(graph: Graph, batch: int, seed: int = 0) -> dict[str, Array]:
    """Seeded inputs, NCHW, uniform in [-1, 1)."""
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(-1.0, 1.0, (batch, c, h, w)) for name, (h, w, c) in graph.inputs}


def check_inputs(graph: Graph, inputs: Mapping[str, Array], batch: int) -> None:
    """Every network input present, NCHW with the network's batch (``NetworkError``)."""
    for name, (h, w, c) in graph.inputs:
        if name not in inputs:
            raise NetworkError(f"input {name!r} missing")
        shape = tuple(np.shape(inputs[name]))
        if shape != (batch, c, h, w):
            raise NetworkError(
                f"input {name!r} has shape {list(shape)}, the network takes "
                f"{[batch, c, h, w]} (batch, channels, height, width)"
            )
    extra = sorted(set(inputs) - set(graph.input_names))
    if extra:
        raise NetworkError(f"{extra[0]!r} is not an input of the network")


def execute_network(
    network: Network,
    mappings: Mapping[str, LayerMapping],
    machine: Machine,
    inputs: Mapping[str, Array],
    weights: Weights,
    *,
    precision: str | None = None,
    batch: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Array]:
    """Every buffer after running the network's steps with their mappings (NCHW, in the
    storage dtype of ``precision``). Raises ``NetworkError``; the executor's own errors
    (a mapping that does not apply, an L1 overflow) propagate."""
    graph, lowering = _graph_of(network)
    precision = precision or network.precision
    batch = batch or network.batch
    check_inputs(graph, inputs, batch)
    check_weights(graph, weights)
    dtype = DTYPES[precision]
    buffers: dict[str, Array] = {}
    for buffer in lowering.buffers:
        h, w, c = buffer.shape
        if buffer.producer is None:
            buffers[buffer.name] = np.asarray(inputs[buffer.name]).astype(dtype)
        else:
            buffers[buffer.name] = np.zeros((batch, c, h, w), dtype=dtype)
    for step in lowering.steps:
        if step.name not in mappings:
            raise NetworkError(f"layer {step.name!r} has no mapping in the schedule")
        if progress is not None:
            progress(step.name)
        # an fc's kernel covers its input as stored (behind a flatten: the same words)
        stored = step.layer.kind == "fc"
        operands = [_read(buffers, ref, batch, stored) for ref in step.inputs]
        x = operands[0] if len(operands) == 1 else interleave(operands)
        filters, bias = step_weights(step, graph, weights)
        residual = None if step.residual is None else _read(buffers, step.residual, batch)
        run = execute_layer(
            step.layer,
            mappings[step.name],
            machine,
            x,
            filters,
            bias,
            residual,
            precision=precision,
        )
        _write(buffers, step.output, run.output)
    return buffers


def verify_network(
    network: Network,
    mappings: Mapping[str, LayerMapping],
    machine: Machine,
    weights: Weights,
    *,
    inputs: Mapping[str, Array] | None = None,
    precision: str | None = None,
    batch: int | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> NetworkVerification:
    """Execute the network through its schedules and compare every stored tensor (each
    step's output, each concat buffer) with the reference (seeded inputs unless given)."""
    graph, lowering = _graph_of(network)
    precision = precision or network.precision
    batch = batch or network.batch
    given = network_inputs(graph, batch, seed) if inputs is None else inputs
    rounded = {k: np.asarray(v).astype(DTYPES[precision]) for k, v in given.items()}
    buffers = execute_network(
        network,
        mappings,
        machine,
        rounded,
        weights,
        precision=precision,
        batch=batch,
        progress=progress,
    )
    reference = run_reference(graph, rounded, weights)
    tolerance = TOLERANCE[precision]
    checks = []
    for tensor, ref in stored_tensors(lowering).items():
        got = _read(buffers, ref, batch, stored=True).astype(np.float64)
        want = reference[tensor].reshape(got.shape)
        err = float(np.max(np.abs(got - want))) if got.size else 0.0
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        rel = err / scale if scale > 0 else err
        checks.append(TensorCheck(tensor, err, rel, bool(rel <= tolerance)))
    return NetworkVerification(all(c.ok for c in checks), tuple(checks), tolerance)


def stored_tensors(lowering: Lowering) -> dict[str, TensorRef]:
    """The graph tensors that exist in memory: every step's output and every buffer (a
    concat's whole output), by tensor name; copies of concat operands are left out."""
    out: dict[str, TensorRef] = {}
    for step in lowering.steps:
        if step.op:
            out[step.output.tensor] = step.output
    for buffer in lowering.buffers:
        if buffer.producer is not None and buffer.name not in out:
            h, w, c = buffer.shape
            out[buffer.name] = TensorRef(buffer.name, buffer.name, 0, (h, w, c), (h, w, c))
    return out


def output_arrays(lowering: Lowering, buffers: Mapping[str, Array], batch: int) -> list[Array]:
    """The network's outputs, NCHW (a flatten's output as ``(batch, n)``, as ONNX has it)."""
    out = []
    for ref in lowering.outputs:
        value = _read(buffers, ref, batch)
        if ref.view != ref.stored:
            value = value.reshape(batch, -1)
        out.append(value)
    return out


def _graph_of(network: Network) -> tuple[Graph, Lowering]:
    if network.graph is None or network.lowering is None:
        raise NetworkError(
            f"network {network.name!r} has no graph (a schedule read without its network): "
            f"give the network file"
        )
    return network.graph, network.lowering


def _read(buffers: Mapping[str, Array], ref: TensorRef, batch: int, stored: bool = False) -> Array:
    """The slice a ref names, NCHW, as the reading layer sees it (``view``) or as stored."""
    h, w, c = ref.stored
    data = buffers[ref.buffer][:, ref.offset : ref.offset + c]
    if stored or ref.view == ref.stored:
        return data
    vh, vw, vc = ref.view
    return np.ascontiguousarray(data).reshape(batch, vc, vh, vw)


def _write(buffers: dict[str, Array], ref: TensorRef, value: Array) -> None:
    h, w, c = ref.stored
    target = buffers[ref.buffer]
    target[:, ref.offset : ref.offset + c] = value.reshape(target.shape[0], c, h, w)
