"""Each step's options: for every placement of its streams that the plan could choose, the
best mapping under the model there, with its cycles, HBM bytes and L2 bytes.

The placements a step may take follow from its tensors: a stream whose tensor must stay in
HBM (a network input or output) or cannot fit the L2 at all has only ``hbm``; weights can be
in L2 only if an earlier step can prefetch them. Steps of one shape and one placement are
solved once (``solve`` is called with distinct ``(layer, placement)`` pairs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import product
from typing import Literal

from autotune.ir.fusion import fused_layer
from autotune.ir.layer import Layer
from autotune.ir.lowering import Lowering
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.ir.placement import HBM_ONLY, MEMORY_LEVELS, MemoryLevel, Placement
from autotune.plans.tensors import (
    TensorSpec,
    fused_weights,
    may_live_in_l2,
    step_buffers,
    weights_stream,
)

#: What an option runs: the step's own layer; the step with the step before it fused into it
#: (a 1x1 with its depthwise, a depthwise with its expansion: ``ir.fusion``); or nothing, a
#: step fused into the step after it.
OptionRole = Literal["own", "fused", "absorbed"]


@dataclass(frozen=True)
class StepOption:
    """One way to run a step: its placement, the mapping chosen for it and the model's
    figures (cycles of the step alone, bytes it moves to and from HBM and L2, and of those
    the L2 bytes that come down while its stores go up: ``model.analysis.l2_both_words``);
    ``role``: ``OptionRole``."""

    placement: Placement
    mapping: Mapping
    cycles: int
    hbm_bytes: int
    l2_bytes: int
    role: OptionRole = "own"
    l2_both_bytes: int = 0


#: A step fused into the step after it: it runs nothing and moves nothing.
ABSORBED = StepOption(HBM_ONLY, Mapping("output_stack"), 0, 0, 0, "absorbed")


#: ``solve(layer, placement)`` -> the option's mapping and figures (the model's best).
Solver = Callable[[Layer, Placement], StepOption]


def stream_levels(
    lowering: Lowering, tensors: Sequence[TensorSpec], machine: Machine
) -> list[dict[str, tuple[MemoryLevel, ...]]]:
    """Per step, the levels each of its streams may take."""
    spec = {t.name: t for t in tensors}
    capacity = machine.l2_bytes if machine.has_l2 else 0

    def levels(names: Sequence[str]) -> tuple[MemoryLevel, ...]:
        if names and all(may_live_in_l2(spec[n], capacity) for n in names):
            return MEMORY_LEVELS
        return ("hbm",)

    out = []
    for step in lowering.steps:
        inputs, residual, output = step_buffers(step)
        weights = weights_stream(step)
        out.append(
            {
                "input": levels(inputs),
                "weights": levels([weights]) if weights in spec else ("hbm",),
                "residual": levels([residual]) if residual else ("hbm",),
                "output": levels([output]),
            }
        )
    return out


def step_placements(levels: dict[str, tuple[MemoryLevel, ...]]) -> tuple[Placement, ...]:
    """Every placement a step's stream levels allow (HBM_ONLY first)."""
    found = [
        Placement(input=a, weights=b, residual=c, output=d)
        for a, b, c, d in product(
            levels["input"], levels["weights"], levels["residual"], levels["output"]
        )
    ]
    return (HBM_ONLY, *[p for p in found if p != HBM_ONLY])


def step_options(
    lowering: Lowering,
    tensors: Sequence[TensorSpec],
    machine: Machine,
    solve: Callable[[Sequence[tuple[Layer, Placement]]], Sequence[StepOption]],
    fused: Sequence[int] = (),
) -> list[list[StepOption]]:
    """Options of every step; ``solve`` gets each distinct (shape, placement) once, in a
    list, so that it can spread them over processes, and returns their options in order.

    ``fused``: the indices of the steps that may absorb the step before them
    (``ir.fusion``). Such a step also gets the fused layer's options, at every placement of
    its streams: the input of the step before, the two steps' weights together
    (``tensors.fused_weights``), its own residual and output; the step before gets
    ``ABSORBED``."""
    Key = tuple[tuple[object, ...], Placement]
    wanted: dict[Key, tuple[Layer, Placement]] = {}
    keys: list[list[tuple[Key, OptionRole]]] = []
    levels = stream_levels(lowering, tensors, machine)
    spec = {t.name: t for t in tensors}
    capacity = machine.l2_bytes if machine.has_l2 else 0
    for i, step in enumerate(lowering.steps):
        row: list[tuple[Key, OptionRole]] = []
        for placement in step_placements(levels[i]):
            key = (step.layer.shape_key(), placement)
            wanted.setdefault(key, (step.layer, placement))
            row.append((key, "own"))
        if i in fused:
            layer = fused_layer(lowering.steps[i - 1].layer, step.layer)
            weights = spec[fused_weights(step.name)]
            both = MEMORY_LEVELS if may_live_in_l2(weights, capacity) else ("hbm",)
            joint = dict(levels[i], input=levels[i - 1]["input"], weights=both)
            for placement in step_placements(joint):
                key = (layer.shape_key(), placement)
                wanted.setdefault(key, (layer, placement))
                row.append((key, "fused"))
        keys.append(row)
    jobs = list(wanted.items())
    solved = dict(zip([k for k, _ in jobs], solve([job for _, job in jobs]), strict=True))
    out = [[replace(solved[key], role=role) for key, role in row] for row in keys]
    for i in fused:
        out[i - 1].append(ABSORBED)
    return out
