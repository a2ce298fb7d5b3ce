"""Depthwise fusion: a depthwise conv and the 1×1 conv that alone reads it, as one step.

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
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from autotune.ir.graph import GraphError
from autotune.ir.layer import Layer, Prologue
from autotune.ir.lowering import Fate, Lowering, Step


def _reads(step: Step) -> list[str]:
    refs = (*step.inputs, *(r for r in (step.residual, step.gate) if r is not None))
    return [ref.buffer for ref in refs]


def fusion_problem(lowering: Lowering, index: int) -> str | None:
    """Why step ``index`` (a 1×1 conv) cannot take the step before it as its prologue;
    None when it can (module docstring)."""
    if index < 1 or index >= len(lowering.steps):
        return "it has no step before it"
    dw, pw = lowering.steps[index - 1], lowering.steps[index]
    a, b = dw.layer, pw.layer
    if not (a.kind == "conv" and a.groups == a.c_in == a.c_out and a.prologue is None):
        return f"the step before it, {dw.name!r}, is not a depthwise conv"
    if a.epilogue.residual or dw.gate is not None:
        return f"the depthwise {dw.name!r} reads a residual"
    window = (b.kernel_h, b.kernel_w, b.stride_h, b.stride_w, b.pad_h, b.pad_w)
    if not (
        b.kind == "conv"
        and b.groups == 1
        and window == (1, 1, 1, 1, 0, 0)
        and (b.pad_bottom, b.pad_right, b.dilation_h, b.dilation_w) == (None, None, 1, 1)
        and b.prologue is None
    ):
        return "it is not a dense 1x1 conv of stride 1"
    out = dw.output
    buffer = lowering.buffer(out.buffer)
    whole = out.offset == 0 and out.stored == out.view == buffer.shape
    if not whole or not out.tensor == out.buffer == buffer.producer:
        return f"the depthwise {dw.name!r} writes into another buffer (a concat's)"
    if out.buffer in {ref.buffer for ref in lowering.outputs}:
        return f"the depthwise's output {out.buffer!r} is a network output"
    readers = [s.name for s in lowering.steps if out.buffer in _reads(s)]
    if readers != [pw.name] or pw.inputs != (out,) or pw.residual == out:
        return f"the depthwise's output {out.buffer!r} is read by more than this step"
    return None


def fusable(lowering: Lowering) -> tuple[str, ...]:
    """The 1×1 steps that can take the depthwise before them as their prologue."""
    return tuple(
        step.name
        for i, step in enumerate(lowering.steps)
        if i > 0 and fusion_problem(lowering, i) is None
    )


def fused_layer(depthwise: Layer, pointwise: Layer) -> Layer:
    """The 1×1 layer with the depthwise as its prologue (``Layer.unfused`` inverts it, up
    to the depthwise's name)."""
    return replace(
        depthwise,
        name=pointwise.name,
        c_out=pointwise.c_out,
        groups=1,
        epilogue=pointwise.epilogue,
        prologue=Prologue(depthwise.epilogue.bias, depthwise.epilogue.activation),
    )


def fuse_depthwise(lowering: Lowering, pointwise: Collection[str]) -> Lowering:
    """``lowering`` with each 1×1 step named in ``pointwise`` fused with the depthwise step
    before it (module docstring). Raises ``GraphError`` naming a step that is not a 1×1
    step of the lowering or cannot fuse."""
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
            raise GraphError(step.name, "fused", f"cannot take a depthwise prologue: {problem}")
        dw = steps.pop()
        gone.add(dw.output.buffer)
        into[dw.name] = step.name
        steps.append(
            replace(
                step,
                layer=fused_layer(dw.layer, step.layer),
                inputs=dw.inputs,
                prologue=dw,
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
    """The steps of ``lowering`` that carry a depthwise prologue."""
    return tuple(step.name for step in lowering.steps if step.prologue is not None)
