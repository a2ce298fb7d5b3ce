"""The tensors a network plan places: every stored buffer of the lowering and every layer's
weights, with their sizes and the steps that write and read them.

Time is the step index (``Lowering.steps``). An activation is live from its first writing step
to its last reading step (a concat's buffer from its first producer on); a network input or
output stays in HBM (the host puts inputs there and takes outputs from there), so the plan
never moves it. A layer's weights are read by their step only; in L2 they are live from the
step that prefetches them to that step. A mul by a channel gate reads the gate as its weights
stream (``ir.lowering``): the gate is an activation, placed as one, with no weights tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.ir.fusion import fused_layer
from autotune.ir.lowering import Lowering, Step
from autotune.ir.plan import L2_ALIGN, TensorRole, weights_tensor
from autotune.ir.precision import word_bytes


def aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to the L2's alignment."""
    return -(-nbytes // L2_ALIGN) * L2_ALIGN


@dataclass(frozen=True)
class TensorSpec:
    """One tensor the plan may place: its bytes (aligned), the steps that write it and
    read it, and whether it must stay in HBM."""

    name: str
    role: TensorRole
    bytes: int
    writers: tuple[int, ...]
    readers: tuple[int, ...]
    pinned: bool  # must stay in HBM (network input or output)
    step: str | None = None  # weights: the step that reads them

    @property
    def first(self) -> int:
        """The first step during which it is live (its first writer; weights: their step)."""
        return min(self.writers + self.readers)

    @property
    def last(self) -> int:
        return max(self.writers + self.readers)


def may_live_in_l2(tensor: TensorSpec, capacity: int) -> bool:
    """The tensor can be in L2 at all: not pinned to HBM, not larger than the L2, and
    (weights) an earlier step exists to prefetch them in."""
    if tensor.pinned or not 0 < tensor.bytes <= capacity:
        return False
    return tensor.role != "weights" or tensor.readers[0] > 0


def step_buffers(step: Step) -> tuple[tuple[str, ...], str | None, str]:
    """The buffers a step reads as its input stream, as its residual, and writes."""
    inputs = tuple(dict.fromkeys(ref.buffer for ref in step.inputs))
    residual = None if step.residual is None else step.residual.buffer
    return inputs, residual, step.output.buffer


def weights_stream(step: Step) -> str:
    """The plan tensor a step reads as its weights: its channel gate's buffer, else its own
    weights tensor (which exists only when the layer has weights)."""
    return step.gate.buffer if step.gate is not None else weights_tensor(step.name)


def fused_weights(step: str) -> str:
    """The problem's name of a fused pair's weights (its second step ``step``'s and the
    step before's, as one tensor): ``weights_tensor(step)`` once the pair is fused."""
    return f"{step}:fused-weights"


def plan_tensors(
    lowering: Lowering, batch: int, precision: str, fused: Sequence[int] = ()
) -> tuple[TensorSpec, ...]:
    """Every buffer of ``lowering`` and every step's weights, at ``batch`` and ``precision``;
    for each step of ``fused`` (indices: ``ir.fusion``) the weights it and the step before
    it would have as a fused pair (``fused_weights``), read by that step."""
    wb = word_bytes(precision)
    writers: dict[str, list[int]] = {b.name: [] for b in lowering.buffers}
    readers: dict[str, list[int]] = {b.name: [] for b in lowering.buffers}
    for i, step in enumerate(lowering.steps):
        inputs, residual, output = step_buffers(step)
        for name in inputs + ((residual,) if residual else ()):
            readers[name].append(i)
        if step.gate is not None:
            readers[step.gate.buffer].append(i)
        writers[output].append(i)
    outputs = {ref.buffer for ref in lowering.outputs}
    specs = []
    for buffer in lowering.buffers:
        h, w, c = buffer.shape
        if buffer.producer is None:
            role: TensorRole = "input"
        elif buffer.name in outputs:
            role = "output"
        else:
            role = "activation"
        if not writers[buffer.name] and not readers[buffer.name]:
            continue  # nothing touches it (an input no step reads)
        specs.append(
            TensorSpec(
                buffer.name,
                role,
                aligned(batch * h * w * c * wb),
                tuple(writers[buffer.name]) or (0,),
                tuple(readers[buffer.name]),
                pinned=role != "activation",
            )
        )
    for i, step in enumerate(lowering.steps):
        if step.layer.weight_words and step.gate is None:
            specs.append(
                TensorSpec(
                    weights_tensor(step.name),
                    "weights",
                    aligned(step.layer.weight_words * wb),
                    (),
                    (i,),
                    pinned=False,
                    step=step.name,
                )
            )
    for i in fused:
        layer = fused_layer(lowering.steps[i - 1].layer, lowering.steps[i].layer)
        name = lowering.steps[i].name
        specs.append(
            TensorSpec(
                fused_weights(name),
                "weights",
                aligned(layer.weight_words * wb),
                (),
                (i,),
                pinned=False,
                step=name,
            )
        )
    return tuple(specs)
