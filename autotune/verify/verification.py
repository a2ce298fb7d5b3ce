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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.tiling import MappingError
from autotune.verify.build import build_program
from autotune.verify.executor import DTYPES, ScheduleError, execute, expected_shapes
from autotune.verify.program import Program
from autotune.verify.reference import reference

LAMBDA = 10.0
UNIT_ROUNDOFF = {"fp32": 2.0 ** -24, "fp64": 2.0 ** -53}


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


def reduction_length(layer: Layer) -> int:
    """Products summed into one output: K of the tolerance."""
    return layer.cin_per_group * layer.kernel_h * layer.kernel_w


def tolerance(layer: Layer, precision: str) -> float:
    """``lambda * sqrt(K + 1) * (u + u_fp64)``: the bound relative to ``sum(|x| |w|)``."""
    k = reduction_length(layer)
    return LAMBDA * math.sqrt(k + 1) * (UNIT_ROUNDOFF[precision] + UNIT_ROUNDOFF["fp64"])


def random_inputs(layer: Layer, batch: int, precision: str,
                  seed: int = 0) -> dict[str, np.ndarray]:
    """Input and filters uniform in [-1, 1) from ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    shapes = expected_shapes(layer, batch)
    dtype = DTYPES[precision]
    return {name: rng.uniform(-1.0, 1.0, shapes[name]).astype(dtype)
            for name in ("input", "filter")}


def verify(layer: Layer, mapping: Mapping, machine: Machine, precision: str = "fp32",
           batch: int = 1, seed: int = 0) -> Verification:
    """Execute ``layer`` under ``mapping`` on random data and compare with the reference.

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
    if machine.chiplets > 1:
        from autotune.verify.package import verify_package

        return verify_package(layer, mapping, machine, precision, batch, seed)
    if mapping.chiplet_split != "none":
        raise MappingError(f"chiplet_split {mapping.chiplet_split!r} needs a package of "
                           f"several chiplets; {machine.name!r} has one")
    return verify_program(build_program(layer, mapping, machine, precision, batch), seed)


def verify_program(program: Program, seed: int = 0) -> Verification:
    """Execute an already built (possibly hand-modified) program and check its output."""
    layer, precision = program.layer, program.precision
    if precision not in UNIT_ROUNDOFF:
        raise ValueError(f"verification runs fp32 and fp64, not {precision}")
    data = random_inputs(layer, program.batch, precision, seed)
    tol = tolerance(layer, precision)
    common = dict(layer=layer.name, algorithm=program.mapping.algorithm, precision=precision,
                  batch=program.batch, tolerance=tol)
    try:
        run = execute(program, data)
    except ScheduleError as error:
        return Verification(ok=False, max_abs_error=math.nan, max_rel_error=math.nan,
                            errors=[str(error)], op_counts=program.op_counts(), **common)
    x, w = (data[name].astype(np.float64) for name in ("input", "filter"))
    exact = reference(layer, x, w)
    # The scale of the bound needs no more than a few digits: fp32 halves its cost.
    scale = reference(layer, np.abs(data["input"]), np.abs(data["filter"])).astype(np.float64)
    max_abs, max_rel, errors = compare(run.output, exact, scale, tol)
    return Verification(ok=not errors, max_abs_error=max_abs, max_rel_error=max_rel,
                        errors=errors, op_counts=run.stats.op_counts,
                        bytes_moved=run.stats.bytes_moved(), macs=run.stats.macs, **common)


def compare(output: np.ndarray, exact: np.ndarray, scale: np.ndarray,
            tol: float) -> tuple[float, float, list[str]]:
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
        errors.append(f"numerical mismatch in {bad} of {rel.size} outputs: at {at} the "
                      f"executor gives {float(output[worst]):.6g}, the reference "
                      f"{float(exact[worst]):.6g} (error {max_rel:.3g} x sum|x||w|, "
                      f"tolerance {tol:.3g})")
    return float(error.max()), max_rel, errors
