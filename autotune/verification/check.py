"""``verify``: execute a mapped layer on random data and compare it with the reference.

Tolerance. Every output is a sum of ``K = (c_in / groups) * kh * kw`` products (an fc
layer: ``c_in * h_in * w_in``), which the executor forms and adds in the layer's precision in
whatever order the schedule implies (input steps, filter chunks, tree reduction). With unit
roundoff ``u`` (2^-24 for fp32, 2^-53 for fp64) the probabilistic bound of Higham and Mary
(SIAM J. Sci. Comput. 2019, Thm. 3.1) gives, for any summation order,

    |computed - exact| <= lambda * sqrt(K + 1) * u * sum(|x| * |w|)

with probability at least ``1 - 2 (K + 1) exp(-lambda^2 / 2)`` per output for independent
rounding errors; ``lambda = 10`` makes that failure probability negligible (< 1e-17 for
every layer of the example networks). A single dropped product of average size, about
``sum(|x| |w|) / K``, still exceeds the bound up to K of about 14 000 (ResNet-50 has K <= 4 608);
a dropped row, channel or step exceeds it by far. The worst-case bound ``K * u`` would be
looser by ``sqrt(K)`` and would let a single missing product of a long reduction pass. (The
executor also counts the products summed into every output, so a missing step is caught even
where numbers alone could not tell.) The reference is computed in fp64 from
the same (rounded) operands, so its own error adds ``lambda * sqrt(K + 1) * 2^-53``.

``tolerance`` is that factor; ``max_rel_error`` is the largest ``|error| / sum(|x| |w|)`` over
the outputs, the quantity the bound limits (``|error| / |exact|`` is unbounded where an
output is close to zero).

fp16 is FP16.32, as the MPPA3 coprocessor computes it (seed 003 Sec. II: "multiply-accumulate
of two 4x4 FP16 matrices into a 4x4 FP32 matrix"): inputs and filters are fp16 in main memory
and L1, products of two fp16 numbers are exact in fp32, partial sums (across input steps and
the fc reduction tree too) are fp32, and the output is rounded once to fp16 when it is
stored, which is what an inference engine writes for the next layer. The bound is then the
fp32 summation bound above plus that one rounding: ``|fl16(y) - y| <= u16 |y| <= u16
sum(|x| |w|)`` with ``u16 = 2^-11`` for a normal fp16 result; a result below the smallest
normal (2^-14) is rounded on the subnormal grid with absolute error at most 2^-25, which is
``u16`` relative to a scale of 2^-14, so the relative error is measured against
``max(sum(|x| |w|), 2^-14)`` and the tolerance is ``lambda sqrt(K + 1) (u32 + u64) + 2 u16``
(about 1e-3: a missing input step or channel of a K <= 1000 reduction still exceeds it, and
the executor's pair count catches any missing step regardless). Coprocessor accumulators are
exact 4-deep dot products (Kulisch), more accurate than the fp32 sum this bound assumes.
Deviation, noticed and left to the model: the partial sums of an output tile held in L1 are
fp32 (4 B) on the machine, but the model and the program count output buffers in 2 B words;
the executor keeps the fp32 partial sums beside the L1 arena, in the words the schedule gave
the buffer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.verification.build import build_program
from autotune.verification.executor import DTYPES, ScheduleError, execute, expected_shapes
from autotune.verification.program import Program
from autotune.verification.reference import reference

LAMBDA = 10.0
UNIT_ROUNDOFF = {"fp32": 2.0**-24, "fp64": 2.0**-53, "fp16": 2.0**-11}
#: Precision partial sums are accumulated in (FP16.32: fp16 operands, fp32 sums).
ACCUMULATION = {"fp32": "fp32", "fp64": "fp64", "fp16": "fp32"}
#: Smallest normal fp16 number: below it the output's rounding error is absolute.
FP16_MIN_NORMAL = 2.0**-14


@dataclass(frozen=True)
class Verification:
    """The outcome of executing one mapped layer.

    ``ok`` is true when the program ran without a schedule error and every output is within
    ``tolerance`` (see the module docstring); otherwise ``errors`` says why. Errors are NaN
    when the program did not run to the end.
    """

    layer: str
    algorithm: str
    precision: str
    batch: int
    ok: bool
    max_abs_error: float
    max_rel_error: float
    tolerance: float
    errors: list[str] = field(default_factory=list)
    op_counts: dict[str, int] = field(default_factory=dict)
    bytes_moved: dict[str, int] = field(default_factory=dict)
    macs: int = 0


@dataclass(frozen=True)
class Subject:
    """What a verification is of: the fields every ``Verification`` of one run repeats."""

    layer: str
    algorithm: str
    precision: str
    batch: int
    tolerance: float

    def failed(self, errors: list[str], op_counts: dict[str, int]) -> Verification:
        """The program did not run to the end (or its parts do not fit together): NaN errors."""
        return Verification(
            layer=self.layer,
            algorithm=self.algorithm,
            precision=self.precision,
            batch=self.batch,
            ok=False,
            max_abs_error=math.nan,
            max_rel_error=math.nan,
            tolerance=self.tolerance,
            errors=errors,
            op_counts=op_counts,
        )

    def compared(
        self,
        output: np.ndarray,
        exact: np.ndarray,
        scale: np.ndarray,
        op_counts: dict[str, int],
        bytes_moved: dict[str, int],
        macs: int,
    ) -> Verification:
        """The program ran: its ``output`` against the ``exact`` one (``compare``)."""
        max_abs, max_rel, errors = compare(output, exact, scale, self.tolerance)
        return Verification(
            layer=self.layer,
            algorithm=self.algorithm,
            precision=self.precision,
            batch=self.batch,
            ok=not errors,
            max_abs_error=max_abs,
            max_rel_error=max_rel,
            tolerance=self.tolerance,
            errors=errors,
            op_counts=op_counts,
            bytes_moved=bytes_moved,
            macs=macs,
        )


def reduction_length(layer: Layer) -> int:
    """Products summed into one output: K of the tolerance."""
    return layer.cin_per_group * layer.kernel_h * layer.kernel_w


def tolerance(layer: Layer, precision: str) -> float:
    """``lambda * sqrt(K + 1) * (u + u_fp64)``: the bound relative to ``sum(|x| |w|)``, with
    ``u`` that of the accumulation; plus ``2 u16`` for the fp16 output's rounding (FP16.32)."""
    k = reduction_length(layer)
    u = UNIT_ROUNDOFF[ACCUMULATION[precision]]
    bound = LAMBDA * math.sqrt(k + 1) * (u + UNIT_ROUNDOFF["fp64"])
    if precision == "fp16":
        bound += 2 * UNIT_ROUNDOFF["fp16"]
    return bound


def random_inputs(layer: Layer, batch: int, precision: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Input and filters uniform in [-1, 1) from ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    shapes = expected_shapes(layer, batch)
    dtype = DTYPES[precision]
    return {
        name: rng.uniform(-1.0, 1.0, shapes[name]).astype(dtype) for name in ("input", "filter")
    }


def verify(
    layer: Layer,
    mapping: Mapping,
    machine: Machine,
    precision: str = "fp32",
    batch: int = 1,
    seed: int = 0,
) -> Verification:
    """Execute ``layer`` under ``mapping`` on random data and compare with the reference, on
    one chiplet (a package's layers go through ``autotune.chiplets``, which runs each part).

    A mapping that does not fit L1 (or breaks any other rule of the executor) comes back
    with ``ok=False`` and the reason in ``errors``; a mapping that does not apply to the layer
    at all raises ``autotune.MappingError``, as ``analyze`` does.

    Example:
        >>> from autotune import Layer, Machine, Mapping, verify
        >>> conv = Layer("c", "conv", 12, 12, 8, 20, 3, 3, pad_h=1, pad_w=1)
        >>> v = verify(conv, Mapping.from_report(2, delta_o=8), Machine.preset("manticore"))
        >>> v.ok, v.max_rel_error <= v.tolerance
        (True, True)
    """
    return verify_program(build_program(layer, mapping, machine, precision, batch), seed)


def verify_program(program: Program, seed: int = 0) -> Verification:
    """Execute an already built (possibly hand-modified) program and check its output."""
    layer, precision = program.layer, program.precision
    if precision not in UNIT_ROUNDOFF:
        raise ValueError(f"verification runs fp16, fp32 and fp64, not {precision}")
    data = random_inputs(layer, program.batch, precision, seed)
    subject = Subject(
        layer.name, program.mapping.algorithm, precision, program.batch, tolerance(layer, precision)
    )
    try:
        run = execute(program, data)
    except ScheduleError as error:
        return subject.failed([str(error)], program.op_counts())
    x, w = (data[name].astype(np.float64) for name in ("input", "filter"))
    exact = reference(layer, x, w)
    # The scale of the bound needs no more than a few digits: fp32 halves its cost.
    magnitudes = [np.abs(data[name]) for name in ("input", "filter")]
    if precision == "fp16":  # sums of up to K products would lose digits (or overflow) in fp16
        magnitudes = [a.astype(np.float32) for a in magnitudes]
        scale = np.maximum(reference(layer, *magnitudes).astype(np.float64), FP16_MIN_NORMAL)
    else:
        scale = reference(layer, *magnitudes).astype(np.float64)
    return subject.compared(
        run.output, exact, scale, run.stats.op_counts, run.stats.bytes_moved(), run.stats.macs
    )


def compare(
    output: np.ndarray, exact: np.ndarray, scale: np.ndarray, tol: float
) -> tuple[float, float, list[str]]:
    """(max |error|, max |error| / scale, errors) of ``output`` against ``exact``."""
    error = np.abs(output.astype(np.float64) - exact)
    rel = error / np.where(scale > 0, scale, 1.0)
    worst = np.unravel_index(int(np.argmax(rel)), rel.shape)
    max_rel = float(rel[worst])
    errors = []
    if not max_rel <= tol:  # also catches NaN
        bad = int(np.count_nonzero(~(rel <= tol)))
        names = ("image", "channel", "row", "column")
        at = ", ".join(f"{n} {i}" for n, i in zip(names, worst, strict=True))
        errors.append(
            f"numerical mismatch in {bad} of {rel.size} outputs: at {at} the "
            f"executor gives {float(output[worst]):.6g}, the reference "
            f"{float(exact[worst]):.6g} (error {max_rel:.3g} x sum|x||w|, "
            f"tolerance {tol:.3g})"
        )
    return float(error.max()), max_rel, errors
