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

The other kinds are bounded the same way, with their own ``K`` (the roundings on the way to
one output) and scale (the bound's ``sum(|x| |w|)``): a max is exact (``K = 0``, scale the
largest ``|x|`` of the window); an average sums its taps and divides (``K`` = taps + 1,
scale the average of ``|x|``); an add sums ``n`` operands (``K = n``, scale ``sum |x_i|``);
an activation or an upsample copies (``K = 0``, scale ``|x|``). A softmax evaluates ``c``
exponentials, sums them, rescales the sums as the running maximum rises (at most once per
input step) and divides: each exponential of ``x - max`` is off by ``(1 + |x - max|) u``
relative, so its output is within ``(2c + 3)(1 + spread) u`` of itself, ``spread`` the
largest minus the smallest input of the pixel; ``K = 2c + SOFTMAX_OPS`` and the scale is
the exact output times ``1 + spread``. The epilogue adds a rounding per step (``+ bias``,
``+ residual``: counted into ``K`` as ``Epilogue.ops`` counts them, with the activation's
operations) and its operands' magnitudes to the scale (``scale + |bias| + |residual|``);
an activation ``f`` then moves an error ``e`` of its argument by at most ``L e`` (``L``
its Lipschitz constant, ``LIPSCHITZ``) and is evaluated within a few ``u`` of ``|f(z)|``, so
the scale becomes ``L (scale + |bias| + |residual|) + |f(z)|``. A layer without an epilogue
keeps the scale and ``K`` above, so the convolutions' bound is unchanged.
A fused pair (``Layer.prologue``) is bounded as its two layers one after the other: the
depthwise's error, relative to its own scale, plus the rounding of its result to the storage
precision in L1 (``2 u``), is carried by the 1×1 as an error of its input, so the tolerance
is the sum of the two layers' and that rounding, and the scale is the 1×1's ``sum(|w| s)``
over the depthwise's scale ``s``. A fused expansion likewise: the 1×1's tolerance, its
result's rounding and the depthwise's, the scale the depthwise's ``sum(|w| s)`` over the
1×1's scale ``s``.
Deviation, noticed and left to the model: the partial sums of an output tile held in L1 are
fp32 (4 B) on the machine, but the model and the program count output buffers in 2 B words;
the executor keeps the fp32 partial sums beside the L1 arena, in the words the schedule gave
the buffer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from autotune.ir.layer import OPERAND_KINDS, SOFTMAX_OPS, WEIGHTED_KINDS, Layer
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.verification.build import build_program
from autotune.verification.executor import ScheduleError, execute, fused_operand_names
from autotune.verification.program import Program
from autotune.verification.reference import body, finish
from autotune.verification.run import layer_inputs

LAMBDA = 10.0
UNIT_ROUNDOFF = {"fp32": 2.0**-24, "fp64": 2.0**-53, "fp16": 2.0**-11}
#: Precision partial sums are accumulated in (FP16.32: fp16 operands, fp32 sums).
ACCUMULATION = {"fp32": "fp32", "fp64": "fp64", "fp16": "fp32"}
#: Smallest normal fp16 number: below it the output's rounding error is absolute.
FP16_MIN_NORMAL = 2.0**-14
#: Lipschitz constant of each activation: ``|f(a) - f(b)| <= L |a - b|``. Sigmoid's slope is
#: at most 1/4; SiLU's, ``sigmoid(z) (1 + z (1 - sigmoid(z)))``, peaks at 1.0998 near
#: z = 2.4; hardswish's, ``(2z + 3) / 6`` on ``[-3, 3]``, at 1.5; hardsigmoid's is 1/6; tanh's 1;
#: GELU's, ``Φ(z) + z·φ(z)``, peaks at 1.1289 at z = √2;
#: leaky ReLU's is ``max(1, |alpha|)`` (``lipschitz``).
LIPSCHITZ = {
    "relu": 1.0,
    "clip": 1.0,
    "sigmoid": 0.25,
    "silu": 1.1,
    "hardswish": 1.5,
    "hardsigmoid": 1 / 6,
    "tanh": 1.0,
    "gelu": 1.13,
}


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
    """Roundings on the way to one output: K of the tolerance (module docstring). A conv or
    an fc: the products summed into one output."""
    kind = layer.kind
    if kind in WEIGHTED_KINDS:
        k = layer.cin_per_group * layer.kernel_h * layer.kernel_w
    elif kind == "avgpool":
        k = layer.kernel_h * layer.kernel_w + 1
    elif kind in OPERAND_KINDS:  # n - 1 sums or products
        k = layer.operands
    elif kind == "softmax":
        k = 2 * layer.c_in + SOFTMAX_OPS
    elif kind == "upsample" and layer.upsample_mode != "nearest":
        k = 4  # the 2 × 2 taps weighed and summed
    else:  # maxpool, activation, nearest upsample: exact
        k = 0
    return k + layer.epilogue.ops


def lipschitz(layer: Layer) -> float:
    """``L`` of the layer's activation (1 without one)."""
    act = layer.epilogue.activation
    if act is None:
        return 1.0
    if act.kind == "leaky_relu":
        return max(1.0, abs(act.alpha))
    return LIPSCHITZ[act.kind]


def tolerance(layer: Layer, precision: str) -> float:
    """``lambda * sqrt(K + 1) * (u + u_fp64)``: the bound relative to ``sum(|x| |w|)``, with
    ``u`` that of the accumulation; plus ``2 u16`` for the fp16 output's rounding (FP16.32).
    A fused pair: its two layers' and the rounding of the result between them."""
    if layer.fuses:
        first, second = layer.unfused()
        between = 2 * UNIT_ROUNDOFF[precision]
        return tolerance(first, precision) + tolerance(second, precision) + between
    k = reduction_length(layer)
    u = UNIT_ROUNDOFF[ACCUMULATION[precision]]
    bound = LAMBDA * math.sqrt(k + 1) * (u + UNIT_ROUNDOFF["fp64"])
    if precision == "fp16":
        bound += 2 * UNIT_ROUNDOFF["fp16"]
    return bound


def random_inputs(layer: Layer, batch: int, precision: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Every operand the layer reads (input; filters, bias, residual when it has them)
    uniform in [-1, 1) from ``numpy.random.default_rng(seed)`` (``run.layer_inputs``)."""
    return layer_inputs(layer, batch, precision, seed)


def error_scale(
    layer: Layer, data: dict[str, np.ndarray], z: np.ndarray, exact: np.ndarray, precision: str
) -> np.ndarray:
    """The scale the tolerance is relative to, per output (module docstring): ``data`` the
    operands as the executor read them, ``z`` the exact operator output (before the
    epilogue), ``exact`` the exact layer output."""
    # The scale needs no more than a few digits: fp32 halves its cost; fp16 magnitudes would
    # lose digits (or overflow) in sums of up to K terms.
    magnitudes = {
        name: np.abs(a).astype(np.float64 if a.dtype == np.float64 else np.float32)
        for name, a in data.items()
    }
    if layer.fuses:
        # the first layer's filter and the second's, as main memory names them
        depthwise, bias_name = fused_operand_names(layer)
        names = (depthwise, "filter") if layer.prologue is not None else ("filter", depthwise)
        first, second = layer.unfused()
        inner = {"input": data["input"], "filter": data[names[0]]}
        if bias_name in data:
            inner["bias"] = data[bias_name]
        wide = {name: a.astype(np.float64) for name, a in inner.items()}
        z_inner = body(first, wide["input"], wide["filter"])
        exact_inner = finish(first, z_inner, wide.get("bias"), None)
        inner_scale = error_scale(first, inner, z_inner, exact_inner, precision)
        scale = body(second, inner_scale, magnitudes[names[1]].astype(np.float64))
    elif layer.kind == "softmax":
        x = data["input"].astype(np.float64)
        spread = x.max(axis=1, keepdims=True) - x.min(axis=1, keepdims=True)
        scale = np.abs(z) * (1.0 + spread)
    else:
        scale = body(layer, magnitudes["input"], magnitudes.get("filter")).astype(np.float64)
    if "bias" in magnitudes:
        scale = scale + magnitudes["bias"].astype(np.float64)[None, :, None, None]
    residual_last = layer.epilogue.activation_first
    if "residual" in magnitudes and not residual_last:
        scale = scale + magnitudes["residual"]
    if layer.epilogue.activation is not None:
        scale = lipschitz(layer) * scale + np.abs(exact)
    if "residual" in magnitudes and residual_last:
        scale = scale + magnitudes["residual"]
    if precision == "fp16":
        scale = np.maximum(scale, FP16_MIN_NORMAL)
    return np.asarray(scale, dtype=np.float64)


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
    """Execute ``layer`` under ``mapping`` on random data and compare with the reference, on
    one chiplet (a package's layers go through ``autotune.chiplets``, which runs each part).

    ``x``, ``weights``, ``bias``, ``residual``: operands to use instead of random ones
    (``run.layer_inputs``: the others are still drawn from ``seed``; ``x`` fixes the batch).

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
    if x is not None:
        batch = int(np.shape(x)[0])
    program = build_program(layer, mapping, machine, precision, batch)
    return verify_program(program, seed, x=x, weights=weights, bias=bias, residual=residual)


def verify_program(
    program: Program,
    seed: int = 0,
    *,
    x: np.ndarray | None = None,
    weights: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
) -> Verification:
    """Execute an already built (possibly hand-modified) program and check its output
    (operands as for ``verify``)."""
    layer, precision = program.layer, program.precision
    if precision not in UNIT_ROUNDOFF:
        raise ValueError(f"verification runs fp16, fp32 and fp64, not {precision}")
    data = layer_inputs(
        layer, program.batch, precision, seed, x=x, weights=weights, bias=bias, residual=residual
    )
    subject = Subject(
        layer.name, program.mapping.algorithm, precision, program.batch, tolerance(layer, precision)
    )
    try:
        run = execute(program, data)
    except ScheduleError as error:
        return subject.failed([str(error)], program.op_counts())
    _, exact, scale = exact_and_scale(layer, data, precision)
    return subject.compared(
        run.output, exact, scale, run.stats.op_counts, run.stats.bytes_moved(), run.stats.macs
    )


def exact_and_scale(
    layer: Layer, data: dict[str, np.ndarray], precision: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(operator output, layer output, error scale), exact (in fp64) for the operands
    ``data`` as the executor read them (``random_inputs``'s names)."""
    wide = {name: a.astype(np.float64) for name, a in data.items()}
    z = body(
        layer,
        wide["input"],
        wide.get("filter"),
        wide.get("prologue_filter"),
        wide.get("prologue_bias"),
        wide.get("depthwise_filter"),
        wide.get("expansion_bias"),
    )
    exact = finish(layer, z, wide.get("bias"), wide.get("residual"))
    return z, exact, error_scale(layer, data, z, exact, precision)


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
