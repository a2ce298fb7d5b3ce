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

from dataclasses import replace

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
    random_inputs,
    tolerance,
)
from autotune.verification.check import verify as verify_chiplet
from autotune.verification.executor import DTYPES, ScheduleError, execute, expected_shapes


def verify(
    layer: Layer,
    mapping: Mapping,
    machine: Machine,
    precision: str = "fp32",
    batch: int = 1,
    seed: int = 0,
) -> Verification:
    """Execute ``layer`` under ``mapping`` on ``machine`` (one chiplet or a package) on random
    data and compare with the reference (on a package: ``verify_package``).

    Example:
        >>> from autotune import Layer, Machine, Mapping, verify
        >>> conv = Layer("c", "conv", 12, 12, 8, 20, 3, 3, pad_h=1, pad_w=1)
        >>> split = Mapping.from_report(2, delta_o=8).with_(chiplet_split="output_channels")
        >>> v = verify(conv, split, Machine.preset("manticore-package"))
        >>> v.ok
        True
    """
    if machine.chiplets == 1:
        return verify_chiplet(layer, mapping, machine, precision, batch, seed)
    return verify_package(layer, mapping, machine, precision, batch, seed)


def verify_package(
    layer: Layer,
    mapping: Mapping,
    machine: Machine,
    precision: str = "fp32",
    batch: int = 1,
    seed: int = 0,
    parts: tuple[ChipletPart, ...] | None = None,
) -> Verification:
    """``verify`` on a package; ``parts`` overrides the split's parts (to inject faults)."""
    if precision not in UNIT_ROUNDOFF:
        raise ValueError(f"verification runs fp32 and fp64, not {precision}")
    machine.check_precision(precision)
    if parts is None:
        parts = split_parts(
            layer, mapping.chiplet_split, machine.chiplets, batch, word_bytes(precision)
        )
    chiplet = machine.chiplet()
    subject = Subject(layer.name, mapping.algorithm, precision, batch, tolerance(layer, precision))
    data = random_inputs(layer, batch, precision, seed)
    x = data["input"]
    padded = np.pad(x, ((0, 0), (0, 0), (layer.pad_h, layer.pad_h), (0, 0)))
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
        output[i0:i1, o0:o1, part.out_rows[0] : part.out_rows[1]] = run.output
        for name, count in run.stats.op_counts.items():
            op_counts[name] = op_counts.get(name, 0) + count
        for name, count in run.stats.bytes_moved().items():
            moved[name] = moved.get(name, 0) + count
        macs += run.stats.macs
    if errors:
        return subject.failed(errors, op_counts)
    _, exact, scale = exact_and_scale(layer, data, precision)
    return subject.compared(output, exact, scale, op_counts, moved, macs)


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
