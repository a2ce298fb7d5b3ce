"""``verify`` on any machine; a chiplet split: execute every chiplet's part and assemble the
whole output.

Each part (``autotune.chiplets``) is an ordinary sub-layer: its program is built for one
chiplet (``machine.chiplet()``) and run by the executor on the part's slice of the layer's
input (its images, input channels and input rows, the spatial bands' padding rows made
explicit as zeros) and of the filters (its output channels). The part outputs are written
into the layer's output at the part's images, channels and rows, counting how many parts
cover each output word: a word no part computes, or that two parts compute, is a schedule
error, whatever the numbers. The assembled output is then compared with the independent
reference of the whole layer, as ``verify`` does for one chiplet. A part reads the slices of
the epilogue's operands that its output covers: the bias of its output channels, the residual
of its images, channels and rows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from autotune.chiplets.split import ChipletPart, coverage, part_mapping, split_parts
from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.ir.precision import word_bytes
from autotune.verification.build import build_program
from autotune.verification.check import (
    UNIT_ROUNDOFF,
    Subject,
    Verification,
    exact_and_scale,
    tolerance,
)
from autotune.verification.check import verify as verify_chiplet
from autotune.verification.executor import DTYPES, ScheduleError, execute, expected_shapes
from autotune.verification.run import execute_layer as execute_chiplet
from autotune.verification.run import layer_inputs


def verify(
    layer: Layer,
    mapping: Mapping,
    machine: Machine,
    precision: str = "fp32",
    batch: int = 1,
    seed: int = 0,
    *,
    x: np.ndarray | None = None,
    weights: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
) -> Verification:
    """Execute ``layer`` under ``mapping`` on ``machine`` (one chiplet or a package) on random
    data and compare with the reference (on a package: ``verify_package``). ``x``,
    ``weights``, ``bias``, ``residual``: operands to use instead of random ones.

    Example:
        >>> from autotune import Layer, Machine, Mapping, verify
        >>> conv = Layer("c", "conv", 12, 12, 8, 20, 3, 3, pad_h=1, pad_w=1)
        >>> split = Mapping.from_report(2, delta_o=8).with_(chiplet_split="output_channels")
        >>> v = verify(conv, split, Machine.preset("manticore-package"))
        >>> v.ok
        True
    """
    if machine.chiplets == 1:
        return verify_chiplet(
            layer, mapping, machine, precision, batch, seed,
            x=x, weights=weights, bias=bias, residual=residual,
        )  # fmt: skip
    return verify_package(
        layer, mapping, machine, precision, batch, seed,
        x=x, weights=weights, bias=bias, residual=residual,
    )  # fmt: skip


def verify_package(
    layer: Layer,
    mapping: Mapping,
    machine: Machine,
    precision: str = "fp32",
    batch: int = 1,
    seed: int = 0,
    parts: tuple[ChipletPart, ...] | None = None,
    *,
    x: np.ndarray | None = None,
    weights: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
) -> Verification:
    """``verify`` on a package; ``parts`` overrides the split's parts (to inject faults)."""
    if precision not in UNIT_ROUNDOFF:
        raise ValueError(f"verification runs fp32 and fp64, not {precision}")
    machine.check_precision(precision)
    if x is not None:
        batch = int(np.shape(x)[0])
    if parts is None:
        parts = split_parts(
            layer, mapping.chiplet_split, machine.chiplets, batch, word_bytes(precision)
        )
    subject = Subject(layer.name, mapping.algorithm, precision, batch, tolerance(layer, precision))
    data = layer_inputs(
        layer, batch, precision, seed, x=x, weights=weights, bias=bias, residual=residual
    )
    run = run_parts(layer, mapping, machine, data, precision, parts)
    if run.errors:
        return subject.failed(run.errors, run.op_counts)
    _, exact, scale = exact_and_scale(layer, data, precision)
    return subject.compared(run.output, exact, scale, run.op_counts, run.bytes_moved, run.macs)


@dataclass(frozen=True)
class PackageRun:
    """A split layer executed part by part: the assembled ``output`` and what went wrong
    (``errors`` empty: every output word computed by exactly one part), with the parts'
    operations, bytes moved and MACs summed."""

    output: np.ndarray
    errors: list[str]
    op_counts: dict[str, int]
    bytes_moved: dict[str, int]
    macs: int


def run_parts(
    layer: Layer,
    mapping: Mapping,
    machine: Machine,
    data: dict[str, np.ndarray],
    precision: str,
    parts: tuple[ChipletPart, ...],
) -> PackageRun:
    """Execute every part on its chiplet, on its slices of the layer's operands ``data``
    (``verification.run.layer_inputs``'s names), and assemble the output (module docstring)."""
    chiplet = machine.chiplet()
    x = data["input"]
    batch = x.shape[0]
    padded = np.pad(x, ((0, 0), (0, 0), (layer.pad_h, layer.pad_end_h), (0, 0)))
    output = np.zeros((batch, layer.c_out, layer.h_out, layer.w_out), dtype=DTYPES[precision])
    errors = _coverage_errors(layer, parts, batch)
    op_counts: dict[str, int] = {}
    moved: dict[str, int] = {}
    macs = 0
    for part in parts:
        (i0, i1), (c0, c1), (r0, r1) = part.images, part.in_channels, part.in_rows
        (o0, o1), (q0, q1) = part.out_channels, part.out_rows
        inputs = {"input": padded[i0:i1, c0:c1, r0:r1]}
        if "filter" in data:
            inputs["filter"] = data["filter"][o0:o1]
        if "bias" in data:
            inputs["bias"] = data["bias"][o0:o1]
        for name in ("prologue_filter", "prologue_bias"):  # every part reads every channel
            if name in data:
                inputs[name] = data[name]
        for name in ("depthwise_filter", "expansion_bias"):  # per output channel
            if name in data:
                inputs[name] = data[name][o0:o1]
        if "residual" in data:
            inputs["residual"] = data["residual"][i0:i1, o0:o1, q0:q1]
        shapes = expected_shapes(part.layer, part.batch)
        if any(inputs[name].shape != shapes[name] for name in inputs):
            names = list(inputs)
            errors.append(
                f"chiplet {part.chiplet}: its slices of {', '.join(names)} "
                f"{', '.join(str(inputs[n].shape) for n in names)} do not match its "
                f"sub-layer's {', '.join(str(shapes[n]) for n in names)}"
            )
            continue
        program = build_program(
            part.layer, part_mapping(mapping, part), chiplet, precision, part.batch
        )
        try:
            run = execute(program, inputs)
        except ScheduleError as error:
            errors.append(f"chiplet {part.chiplet}: {error}")
            continue
        target = output[i0:i1, o0:o1, q0:q1]
        if run.output.shape != target.shape:
            errors.append(
                f"chiplet {part.chiplet}: its sub-layer computes an output of shape "
                f"{run.output.shape}, but its part of the layer's output is {target.shape}"
            )
            continue
        target[...] = run.output
        for name, count in run.stats.op_counts.items():
            op_counts[name] = op_counts.get(name, 0) + count
        for name, count in run.stats.bytes_moved().items():
            moved[name] = moved.get(name, 0) + count
        macs += run.stats.macs
    return PackageRun(output, errors, op_counts, moved, macs)


def execute_layer(
    layer: Layer,
    mapping: Mapping,
    machine: Machine,
    x: np.ndarray,
    weights: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    *,
    precision: str = "fp32",
    seed: int = 0,
    fused: dict[str, np.ndarray] | None = None,
) -> np.ndarray:
    """The output of ``layer`` under ``mapping`` on ``machine``, one chiplet or a package:
    ``autotune.verification.execute_layer``'s operands and arguments, on a package every
    part run on its chiplet and the output assembled.

    Raises ``ScheduleError`` when a part's program cannot run or the parts do not compute
    every output word exactly once, ``MappingError`` when the mapping does not apply.

    Example:
        >>> import numpy as np
        >>> from autotune import Layer, Machine, Mapping
        >>> add = Layer("sum", "add", 2, 2, 4, 2, groups=2)
        >>> split = Mapping("output_stack", chiplet_split="output_channels")
        >>> x = np.ones((1, 4, 2, 2), dtype=np.float32)
        >>> execute_layer(add, split, Machine.preset("manticore-package"), x)[0, :, 0, 0]
        array([2., 2.], dtype=float32)
    """
    if machine.chiplets == 1:
        return execute_chiplet(
            layer,
            mapping,
            machine,
            x,
            weights,
            bias,
            residual,
            precision=precision,
            seed=seed,
            fused=fused,
        ).output
    machine.check_precision(precision)
    batch = int(np.shape(x)[0])
    data = layer_inputs(
        layer,
        batch,
        precision,
        seed,
        x=x,
        weights=weights,
        bias=bias,
        residual=residual,
        fused=fused,
    )
    parts = split_parts(
        layer, mapping.chiplet_split, machine.chiplets, batch, word_bytes(precision)
    )
    run = run_parts(layer, mapping, machine, data, precision, parts)
    if run.errors:
        raise ScheduleError("; ".join(run.errors))
    return run.output


def _coverage_errors(layer: Layer, parts: tuple[ChipletPart, ...], batch: int) -> list[str]:
    count = coverage(layer, parts, batch)
    errors = []
    for what, bad in (("no chiplet computes", count == 0), ("several chiplets compute", count > 1)):
        if bad.any():
            image, channel, row = (int(i) for i in np.argwhere(bad)[0])
            errors.append(
                f"{what} {int(bad.sum()) * layer.w_out} output words, first at "
                f"image {image}, channel {channel}, row {row}"
            )
    return errors


# -- faults: broken splits the verifier must reject ------------------------------------------


def drop_part(parts: tuple[ChipletPart, ...]) -> tuple[ChipletPart, ...]:
    """Forget the last chiplet's part (its output is missing)."""
    if len(parts) < 2:
        raise ValueError("a single part: nothing to drop")
    return parts[:-1]


def duplicate_part(parts: tuple[ChipletPart, ...]) -> tuple[ChipletPart, ...]:
    """Run the first part twice (its output is computed by two chiplets)."""
    return (*parts, replace(parts[0], chiplet=len(parts)))
