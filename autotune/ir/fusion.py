"""Depthwise fusion: a depthwise conv and the 1×1 conv next to it, as one step.

MobileNet's depthwise-separable pair writes the depthwise's result (as many channels as its
input) only for the 1×1 to read it back. Fused, the 1×1 step carries the depthwise as its
``Layer.prologue``: each task computes the depthwise of its tile in L1 and the 1×1 reads it
there, so the inner tensor never reaches memory, at the price of recomputing it once per
output stack. Whether that pays depends on the placement of the rest (a network plan decides
per pair: ``autotune.plans``); this module only says which pairs can fuse and builds the
lowering where the chosen ones are.

A pair fuses when the depthwise (a conv with ``groups == c_in == c_out``, an epilogue without
a residual) writes a buffer of its own that no network output is and that only the next step
reads, whole, as its only operand, and that step is a dense 1×1 conv of stride 1 without
padding or dilation. The fused step is the 1×1's (its name, operator, epilogue, output and
residual) with the depthwise's window and input; the depthwise step is kept as its
``prologue`` (its weights and what was folded into it are found there), and every operator
that was part of the depthwise step (the depthwise itself, a folded batch norm, a fused
activation) now has the fate ``fused`` into the 1×1's step.

The other way round, MobileNetV2's expansion: a dense 1×1 conv of stride 1 (an epilogue
without a residual) whose output only the depthwise after it reads, whole, as its only
operand, under the same conditions on that buffer. The fused step is the depthwise's (its
name, operator, window, epilogue, output and residual) with the 1×1's input; its layer is a
dense conv from the 1×1's input channels with the 1×1 as its ``Layer.expansion``. The 1×1
step is kept as the step's ``prologue`` (the step it absorbed, whichever kind), its
operators ``fused`` into the depthwise's step.

A step fuses with one neighbour: the depthwise of a chain 1×1 → depthwise → 1×1 joins the
expansion before it or the 1×1 after it, not both (``fuse_depthwise`` refuses).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from autotune.ir.graph import GraphError
from autotune.ir.layer import Expansion, Layer, Prologue
from autotune.ir.lowering import Fate, Lowering, Step


def _reads(step: Step) -> list[str]:
    refs = (*step.inputs, *(r for r in (step.residual, step.gate) if r is not None))
    return [ref.buffer for ref in refs]


def _is_depthwise(layer: Layer) -> bool:
    return layer.kind == "conv" and layer.groups == layer.c_in == layer.c_out and not layer.fuses


def _is_pointwise(layer: Layer) -> bool:
    """A dense 1×1 conv of stride 1 without padding or dilation, fused with nothing."""
    window = (layer.kernel_h, layer.kernel_w, layer.stride_h, layer.stride_w)
    return (
        layer.kind == "conv"
        and layer.groups == 1
        and window == (1, 1, 1, 1)
        and (layer.pad_h, layer.pad_w, layer.pad_bottom, layer.pad_right) == (0, 0, None, None)
        and (layer.dilation_h, layer.dilation_w) == (1, 1)
        and not layer.fuses
    )


def fusion_problem(lowering: Lowering, index: int) -> str | None:
    """Why step ``index`` cannot absorb the step before it (a depthwise before a 1×1, or
    a 1×1 before a depthwise); None when it can (module docstring)."""
    if index < 1 or index >= len(lowering.steps):
        return "it has no step before it"
    first, second = lowering.steps[index - 1], lowering.steps[index]
    a, b = first.layer, second.layer
    if _is_depthwise(b) and a.c_out == b.c_in:
        if not _is_pointwise(a):
            return f"the step before the depthwise, {first.name!r}, is not a dense 1x1 conv"
        what = "1x1"
    else:
        if not _is_depthwise(a):
            return f"the step before it, {first.name!r}, is not a depthwise conv"
        if not _is_pointwise(b):
            return "it is not a dense 1x1 conv of stride 1"
        what = "depthwise"
    if a.epilogue.residual or first.gate is not None:
        return f"the {what} {first.name!r} reads a residual"
    out = first.output
    buffer = lowering.buffer(out.buffer)
    whole = out.offset == 0 and out.stored == out.view == buffer.shape
    if not whole or not out.tensor == out.buffer == buffer.producer:
        return f"the {what} {first.name!r} writes into another buffer (a concat's)"
    if out.buffer in {ref.buffer for ref in lowering.outputs}:
        return f"the {what}'s output {out.buffer!r} is a network output"
    readers = [s.name for s in lowering.steps if out.buffer in _reads(s)]
    if readers != [second.name] or second.inputs != (out,) or second.residual == out:
        return f"the {what}'s output {out.buffer!r} is read by more than this step"
    return None


def fusable(lowering: Lowering) -> tuple[str, ...]:
    """The steps that can absorb the step before them (``fusion_problem``)."""
    return tuple(
        step.name
        for i, step in enumerate(lowering.steps)
        if i > 0 and fusion_problem(lowering, i) is None
    )


def fused_layer(first: Layer, second: Layer) -> Layer:
    """The two layers as one: the 1×1 with the depthwise before it as its prologue, or the
    depthwise with the 1×1 before it as its expansion (``Layer.unfused`` inverts it, up to
    the absorbed layer's name)."""
    if first.groups == 1:  # an expansion: the depthwise's window, from the 1x1's input
        return replace(
            second,
            c_in=first.c_in,
            groups=1,
            expansion=Expansion(first.epilogue.bias, first.epilogue.activation),
        )
    depthwise, pointwise = first, second
    return replace(
        depthwise,
        name=pointwise.name,
        c_out=pointwise.c_out,
        groups=1,
        epilogue=pointwise.epilogue,
        prologue=Prologue(depthwise.epilogue.bias, depthwise.epilogue.activation),
    )


def fuse_depthwise(lowering: Lowering, pointwise: Collection[str]) -> Lowering:
    """``lowering`` with each step named in ``pointwise`` fused with the step before it (a
    1×1 with its depthwise, a depthwise with its expansion; module docstring). Raises
    ``GraphError`` naming a step that is not a step of the lowering, cannot fuse, or would
    absorb a step that is fused itself."""
    wanted = set(pointwise)
    names = [step.name for step in lowering.steps]
    for name in sorted(wanted - set(names)):
        raise GraphError(name, "fused", "is not a step of the network")
    if not wanted:
        return lowering
    steps: list[Step] = []
    gone: set[str] = set()  # buffers of the inner tensors
    into: dict[str, str] = {}  # depthwise step -> the 1x1 step it is fused into
    for i, step in enumerate(lowering.steps):
        if step.name not in wanted:
            steps.append(step)
            continue
        problem = fusion_problem(lowering, i)
        if problem is not None:
            raise GraphError(step.name, "fused", f"cannot absorb the step before it: {problem}")
        first = steps.pop()
        if first.prologue is not None:
            raise GraphError(
                step.name, "fused", f"the step before it, {first.name!r}, is fused already"
            )
        gone.add(first.output.buffer)
        into[first.name] = step.name
        steps.append(
            replace(
                step,
                layer=fused_layer(first.layer, step.layer),
                inputs=first.inputs,
                prologue=first,
            )
        )
    fates = tuple(
        Fate(f.op, "fused", into[f.into]) if f.into in into and f.kind != "view" else f
        for f in lowering.fates
    )
    return replace(
        lowering,
        steps=tuple(steps),
        buffers=tuple(b for b in lowering.buffers if b.name not in gone),
        fates=fates,
    )


def fused_steps(lowering: Lowering) -> tuple[str, ...]:
    """The steps of ``lowering`` that absorbed the step before them."""
    return tuple(step.name for step in lowering.steps if step.prologue is not None)
