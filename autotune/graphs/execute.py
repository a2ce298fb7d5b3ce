"""A whole network executed through its tuned layers, and checked tensor by tensor.

``execute_network`` runs the lowered steps in order, each with its own tiled schedule
(``verification.run.execute_layer``: the program the mapping defines, on a model of main
memory and L1 that checks every operation), on buffers laid out as the lowering placed
them: a concat's producers write channel slices of one buffer, a flatten reads its source's
bytes, an add reads its operands interleaved, a fused add reads its residual. The weights
are the graph's (``graphs.weights``), folded as the lowering folded them; a mul by a channel
gate reads each image's filter from the gate's buffer, so its schedule runs once per image
with that image's gate (each run's output kept for its image only). Given a network
plan (``ir.plan``), the buffers and weights it keeps in the shared L2 are views into one byte
array at their offsets, so a layout that lets live tensors share bytes corrupts them. Each
layer runs through an executor given by the caller (``LayerExecutor``): on a package the API
passes ``chiplets.execute_layer`` (every part on its chiplet, the output assembled), and the
one L2 array stands for every chiplet's L2, which all hold the plan's layout.

``verify_network`` compares every stored tensor with the independent reference
(``graphs.reference``: the graph as written, in float64, without folding, fusion or tiling).
The error of a tensor is its largest absolute difference relative to its largest magnitude;
it must stay within ``TOLERANCE[precision]``: a few hundred units in the last place of the
storage format, which rounding once per layer over a hundred layers stays within (seeded
weights keep activations of order one). Each tensor is compared as it was at the end of its
life (``buffer_lifetimes``): the L2 reuses a dead tensor's bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from autotune.graphs.reference import run_reference
from autotune.graphs.weights import Array, Weights, check_weights, step_weights
from autotune.ir.graph import Graph, tensor_ranks
from autotune.ir.layer import Layer
from autotune.ir.lowering import Lowering, Step, TensorRef
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping as LayerMapping
from autotune.ir.network import Network
from autotune.ir.plan import NetworkPlan, PlannedTensor, weights_tensor
from autotune.verification.executor import DTYPES, fused_operand_names
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


#: ``execute(layer, mapping, machine, x, weights, bias, residual, precision=...)``: one layer's
#: output under its mapping (``verification.run.execute_layer`` on one chiplet; the API passes
#: ``chiplets.execute_layer`` so that a package's layers run part by part).
LayerExecutor = Callable[..., Array]


def execute_on_chiplet(
    layer: Layer,
    mapping: LayerMapping,
    machine: Machine,
    x: Array,
    weights: Array | None = None,
    bias: Array | None = None,
    residual: Array | None = None,
    *,
    precision: str = "fp32",
    fused: dict[str, Array] | None = None,
) -> Array:
    """One layer's output on one chiplet (the default ``LayerExecutor``; a fused pair's
    other operands as ``fused``, by name: ``verification.run.execute_layer``)."""
    return execute_layer(
        layer,
        mapping,
        machine,
        x,
        weights,
        bias,
        residual,
        precision=precision,
        fused=fused,
    ).output


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
    plan: NetworkPlan | None = None,
    execute: LayerExecutor = execute_on_chiplet,
) -> dict[str, Array]:
    """Every buffer after running the network's steps with their mappings (NCHW, in the
    storage dtype of ``precision``), each layer by ``execute``. Raises ``NetworkError``; the
    executor's own errors (a mapping that does not apply, an L1 overflow) propagate.

    ``plan``: the buffers and weights it keeps in L2 live in one byte array of
    ``plan.l2_capacity`` bytes, each a view at its offset (``_Memory``), so a layout
    that lets two live tensors share bytes corrupts them as the hardware would. A buffer in
    L2 is returned as that view: at the end it holds what the L2 holds at its bytes, which a
    tensor placed there after it died has overwritten (``verify_network`` compares each
    tensor at the end of its life instead)."""
    return _execute(
        network,
        mappings,
        machine,
        inputs,
        weights,
        precision=precision,
        batch=batch,
        progress=progress,
        plan=plan,
        execute=execute,
    )


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
    plan: NetworkPlan | None = None,
    execute: LayerExecutor = execute_on_chiplet,
) -> NetworkVerification:
    """Execute the network through its schedules (in the L2 layout of ``plan`` when given,
    ``execute_network``) and compare every stored tensor (each step's output, each concat
    buffer) with the reference (seeded inputs unless given).

    Each tensor is compared as it was at the end of its life (``buffer_lifetimes`` of its
    buffer): copied after the last step that reads its buffer, or after the last that
    writes it when nothing reads it, a network output after the last step. L2 bytes are
    legitimately reused once a tensor is dead; a tensor overwritten while still live fails
    its own check or, through the wrong operand, its readers' (weights overwritten in L2:
    their step's output)."""
    graph, lowering = _graph_of(network)
    precision = precision or network.precision
    batch = batch or network.batch
    given = network_inputs(graph, batch, seed) if inputs is None else inputs
    rounded = {k: np.asarray(v).astype(DTYPES[precision]) for k, v in given.items()}
    tensors = stored_tensors(lowering)
    lifetimes = buffer_lifetimes(lowering)
    due: dict[int, list[str]] = {}
    for tensor, ref in tensors.items():
        due.setdefault(lifetimes[ref.buffer][1], []).append(tensor)
    snapshots: dict[str, Array] = {}

    def snapshot(index: int, buffers: Mapping[str, Array]) -> None:
        for tensor in due.get(index, ()):
            value = _read(buffers, tensors[tensor], batch, stored=True)
            # without a plan nothing is overwritten: the buffer itself is the snapshot
            snapshots[tensor] = value if plan is None else value.copy()

    _execute(
        network,
        mappings,
        machine,
        rounded,
        weights,
        precision=precision,
        batch=batch,
        progress=progress,
        plan=plan,
        execute=execute,
        after_step=snapshot,
    )
    reference = run_reference(graph, rounded, weights)
    tolerance = TOLERANCE[precision]
    checks = []
    for tensor in tensors:
        got = snapshots[tensor].astype(np.float64)
        want = reference[tensor].reshape(got.shape)
        err = float(np.max(np.abs(got - want))) if got.size else 0.0
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        rel = err / scale if scale > 0 else err
        checks.append(TensorCheck(tensor, err, rel, bool(rel <= tolerance)))
    return NetworkVerification(all(c.ok for c in checks), tuple(checks), tolerance)


def buffer_lifetimes(lowering: Lowering) -> dict[str, tuple[int, int]]:
    """Each buffer's life in step indices (``Lowering.steps``), ``(first, last)``: from the
    first step that writes it (a network input: step 0) to the last that reads it (an
    operand or a residual; a flatten reads its source's buffer); a network output to the
    last step, a buffer nothing reads to the last step that writes it."""
    writes: dict[str, list[int]] = {}
    reads: dict[str, list[int]] = {}
    for index, step in enumerate(lowering.steps):
        writes.setdefault(step.output.buffer, []).append(index)
        for ref in (*step.inputs, *(r for r in (step.residual, step.gate) if r is not None)):
            reads.setdefault(ref.buffer, []).append(index)
    end = len(lowering.steps) - 1
    outputs = {ref.buffer for ref in lowering.outputs}
    lives = {}
    for buffer in lowering.buffers:
        first = 0 if buffer.producer is None else min(writes.get(buffer.name, [end]))
        ends = [*writes.get(buffer.name, [first]), *reads.get(buffer.name, [])]
        last = end if buffer.name in outputs else max(ends)
        lives[buffer.name] = (first, last)
    return lives


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


def output_arrays(
    graph: Graph, lowering: Lowering, buffers: Mapping[str, Array], batch: int
) -> list[Array]:
    """The network's outputs, NCHW, or ``(batch, n)`` where ONNX has a vector (an fc's or a
    flatten's output, and activations of them: ``ir.graph.tensor_ranks``)."""
    ranks = tensor_ranks(graph)
    out = []
    for ref in lowering.outputs:
        value = _read(buffers, ref, batch)
        if ranks[ref.tensor] == 2 or ref.view != ref.stored:
            value = value.reshape(batch, -1)
        out.append(value)
    return out


def _execute(
    network: Network,
    mappings: Mapping[str, LayerMapping],
    machine: Machine,
    inputs: Mapping[str, Array],
    weights: Weights,
    *,
    precision: str | None,
    batch: int | None,
    progress: Callable[[str], None] | None,
    plan: NetworkPlan | None,
    execute: LayerExecutor,
    after_step: Callable[[int, dict[str, Array]], None] | None = None,
) -> dict[str, Array]:
    """``execute_network``; ``after_step(index, buffers)`` is called after each step."""
    graph, lowering = _graph_of(network)
    precision = precision or network.precision
    batch = batch or network.batch
    check_inputs(graph, inputs, batch)
    check_weights(graph, weights)
    memory = _Memory(lowering, graph, weights, batch, precision, plan)
    buffers = memory.buffers
    for buffer in lowering.buffers:
        if buffer.producer is None:
            buffers[buffer.name][...] = np.asarray(inputs[buffer.name]).astype(memory.dtype)
    for index, step in enumerate(lowering.steps):
        if step.name not in mappings:
            raise NetworkError(f"layer {step.name!r} has no mapping in the schedule")
        if progress is not None:
            progress(step.name)
        memory.prefetch(index)
        # an fc's kernel covers its input as stored (behind a flatten: the same words)
        stored = step.layer.kind == "fc"
        operands = [_read(buffers, ref, batch, stored) for ref in step.inputs]
        x = operands[0] if len(operands) == 1 else interleave(operands)
        filters, bias = step_weights(step, graph, weights)
        residual = None if step.residual is None else _read(buffers, step.residual, batch)
        mapping = mappings[step.name]
        if step.prologue is not None:  # a fused pair: the layer's filters, then the other's
            pair = pair_operands(step, graph, weights)
            read = memory.filters(step.name, [pair.filters, pair.inner_filters])
            output = execute(
                step.layer,
                mapping,
                machine,
                x,
                read[0],
                bias,
                residual,
                precision=precision,
                fused=pair.operands(read[1]),
            )
        elif step.gate is None:
            output = execute(
                step.layer,
                mapping,
                machine,
                x,
                memory.filters(step.name, [filters])[0],
                bias,
                residual,
                precision=precision,
            )
        else:  # each image's filter is its own gate (module docstring)
            gates = _read(buffers, step.gate, batch)
            output = np.stack(
                [
                    execute(
                        step.layer,
                        mapping,
                        machine,
                        x,
                        gate.reshape(-1, 1, 1, 1),
                        bias,
                        residual,
                        precision=precision,
                    )[n]
                    for n, gate in enumerate(gates)
                ]
            )
        _write(buffers, step.output, output)
        if after_step is not None:
            after_step(index, buffers)
    return buffers


@dataclass(frozen=True)
class PairOperands:
    """A fused step's weights as its layer reads them: ``filters`` (the layer's ``filter``,
    the 1x1's), ``inner_filters`` (the depthwise's) and ``inner_bias`` (the bias of the step
    it absorbed, None without one), the last two under ``names``
    (``verification.executor.fused_operand_names``). The layer's own bias is its step's."""

    filters: Array
    inner_filters: Array
    inner_bias: Array | None
    names: tuple[str, str]

    def operands(self, inner_filters: Array | None) -> dict[str, Array]:
        """``execute_layer``'s ``fused`` with ``inner_filters`` (as read back from the L2)."""
        assert inner_filters is not None, "a fused pair's depthwise has filters"
        out = {self.names[0]: inner_filters}
        if self.inner_bias is not None:
            out[self.names[1]] = self.inner_bias
        return out


def pair_operands(step: Step, graph: Graph, weights: Weights) -> PairOperands:
    """The weights of a fused step (``ir.fusion``): with a depthwise prologue the 1x1 is the
    step and the depthwise the absorbed one; with an expansion, the other way round."""
    assert step.prologue is not None, f"step {step.name!r} fuses nothing"
    own, _ = step_weights(step, graph, weights)
    inner, inner_bias = step_weights(step.prologue, graph, weights)
    assert own is not None and inner is not None
    names = fused_operand_names(step.layer)
    if step.layer.expansion is not None:
        return PairOperands(inner, own, inner_bias, names)
    return PairOperands(own, inner, inner_bias, names)


class _Memory:
    """The buffers of a run and, with a plan, the L2 they share.

    Without a plan every buffer is an array of its own. With one, the L2 is one byte array of
    ``plan.l2_capacity`` bytes; each buffer and each step's weights the plan puts in L2 is a
    view into it at its offset (NCHW, the storage dtype), so tensors whose bytes meet really
    overwrite each other. Weights in L2 are written there at the start of their prefetch step
    (their plan tensor's ``first``), from the folded filters cast to the storage dtype, and
    their step reads them back from there; the bias stays outside the L2 (the plan has no
    tensor for it). Weights the plan does not name stay in HBM. Refused with ``NetworkError``
    before anything runs: plan steps other than the lowering's, a buffer the plan does not
    name, a tensor that names no buffer nor a step's weights, one smaller than what it
    holds, one in L2 without an offset or with bytes outside the L2, weights prefetched
    after their step. Overlapping live tensors are not refused here: running shows them."""

    def __init__(
        self,
        lowering: Lowering,
        graph: Graph,
        weights: Weights,
        batch: int,
        precision: str,
        plan: NetworkPlan | None,
    ) -> None:
        self.dtype = np.dtype(DTYPES[precision])
        self.buffers: dict[str, Array] = {}
        self._filters: dict[str, list[Array]] = {}  # step -> its weights' views into the L2
        self._prefetch: dict[int, list[tuple[Step, list[Array]]]] = {}
        self._graph, self._weights = graph, weights
        if plan is None:
            for buffer in lowering.buffers:
                self.buffers[buffer.name] = np.zeros(_nchw(buffer.shape, batch), self.dtype)
            return
        _check_steps(plan, lowering)
        self._l2 = np.zeros(plan.l2_capacity, dtype=np.uint8)
        self._capacity = plan.l2_capacity
        tensors: dict[str, PlannedTensor] = {}
        for t in plan.tensors:
            if t.name in tensors:
                raise NetworkError(f"the plan names tensor {t.name!r} twice")
            tensors[t.name] = t
        what = f"batch {batch}, {precision}"
        for buffer in lowering.buffers:
            if buffer.name not in tensors:
                raise NetworkError(f"buffer {buffer.name!r} is not in the plan")
            shape = _nchw(buffer.shape, batch)
            t = self._sized(tensors.pop(buffer.name), shape, what)
            self.buffers[buffer.name] = (
                self._view(t, shape) if t.level == "l2" else np.zeros(shape, self.dtype)
            )
        index = {step.name: i for i, step in enumerate(lowering.steps)}
        for t in tensors.values():  # the rest: weights
            owner = t.step if t.step is not None else t.name.removesuffix(":weights")
            if weights_tensor(owner) != t.name or owner not in index:
                raise NetworkError(f"tensor {t.name!r} names no buffer and no step's weights")
            step = lowering.steps[index[owner]]
            arrays = self._step_filters(step)
            if arrays is None:
                raise NetworkError(f"tensor {t.name!r}: step {owner!r} has no weights")
            shapes = [a.shape for a in arrays]
            t = self._sized(t, (sum(math.prod(s) for s in shapes),), what)
            if t.level != "l2":
                continue
            if not 0 <= t.first <= index[owner]:
                raise NetworkError(
                    f"weights {t.name!r} are prefetched at step {t.first}, step {owner!r} "
                    f"reads them at step {index[owner]}"
                )
            views, offset = [], t.offset or 0
            for shape in shapes:  # one after the other: a fused pair's 1x1, then depthwise
                views.append(self._view(t, shape, offset))
                offset += math.prod(shape) * self.dtype.itemsize
            self._filters[owner] = views
            self._prefetch.setdefault(t.first, []).append((step, views))

    def _step_filters(self, step: Step) -> list[Array] | None:
        """The arrays a step's weights tensor holds: its layer's filters, and a fused pair's
        depthwise filters after them; None without filters."""
        if step.prologue is None:
            filters, _ = step_weights(step, self._graph, self._weights)
            return None if filters is None else [filters]
        pair = pair_operands(step, self._graph, self._weights)
        return [pair.filters, pair.inner_filters]

    def prefetch(self, index: int) -> None:
        """Write the weights prefetched during step ``index`` into the L2."""
        for step, views in self._prefetch.get(index, ()):
            arrays = self._step_filters(step)
            assert arrays is not None
            for view, array in zip(views, arrays, strict=True):
                view[...] = np.asarray(array).astype(self.dtype)

    def filters(self, step: str, filters: list[Array | None]) -> list[Array | None]:
        """The filters step ``step`` reads: its views into the L2, else ``filters`` (a
        fused pair's: the 1x1's, the depthwise's)."""
        return list(self._filters.get(step, filters))

    def _sized(self, t: PlannedTensor, shape: tuple[int, ...], what: str) -> PlannedTensor:
        need = math.prod(shape) * self.dtype.itemsize
        if t.bytes < need:
            raise NetworkError(
                f"tensor {t.name!r}: the plan gives it {t.bytes} B, it takes {need} B ({what})"
            )
        return t

    def _view(self, t: PlannedTensor, shape: tuple[int, ...], offset: int | None = None) -> Array:
        """``shape`` at ``offset`` of the L2 (the tensor's own offset by default)."""
        if t.offset is None:
            raise NetworkError(f"tensor {t.name!r} is in L2 without an offset")
        if t.offset < 0 or t.l2_end > self._capacity:
            raise NetworkError(
                f"tensor {t.name!r}: bytes {t.offset}..{t.l2_end - 1} outside the L2's "
                f"{self._capacity} B"
            )
        at = t.offset if offset is None else offset
        return np.ndarray(shape, self.dtype, buffer=self._l2, offset=at)


def _check_steps(plan: NetworkPlan, lowering: Lowering) -> None:
    """The plan's steps are the lowering's, in order (``NetworkError`` naming the first
    that differs)."""
    planned = [s.name for s in plan.steps]
    lowered = [s.name for s in lowering.steps]
    for i, (a, b) in enumerate(zip(planned, lowered, strict=False)):
        if a != b:
            raise NetworkError(f"plan step {i} is {a!r}, the network's step {i} is {b!r}")
    n = min(len(planned), len(lowered))
    if len(planned) > n:
        raise NetworkError(f"plan step {n} {planned[n]!r} is not a step of the network")
    if len(lowered) > n:
        raise NetworkError(f"the network's step {n} {lowered[n]!r} is not in the plan")


def _nchw(shape: tuple[int, int, int], batch: int) -> tuple[int, int, int, int]:
    h, w, c = shape
    return batch, c, h, w


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
