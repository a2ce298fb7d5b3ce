"""Executing one mapped layer on given data: the entry point for running a network.

``execute_layer`` takes a layer, its mapping and the layer's operands (input, weights, the
epilogue's bias and residual) and returns the output the tiled schedule computes, exactly as
``verify`` runs it: a program built from the mapping's tasks (``build``), executed on a model
of main memory and L1 that checks every operation (``executor``). A whole network is run by
calling it layer after layer, each layer's output (or, for an ``add``, its operands
interleaved by ``interleave``) being the next one's input; ``reference`` computes the same
from the definitions, for comparison.

Operands not given are drawn at random (uniform in [-1, 1), seeded), as ``verify`` draws all
of them, so that a caller may give only the activations and let the parameters be synthetic.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.verification.build import build_program
from autotune.verification.executor import DTYPES, Outputs, execute, expected_shapes

#: The operand names of ``execute_layer`` and ``layer_inputs``, as main memory names them.
OPERANDS = {
    "x": "input",
    "weights": "filter",
    "bias": "bias",
    "residual": "residual",
}


def layer_inputs(
    layer: Layer,
    batch: int,
    precision: str = "fp32",
    seed: int = 0,
    *,
    x: np.ndarray | None = None,
    weights: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    fused: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """The main-memory inputs of ``layer`` (``expected_shapes`` without the output) in the
    storage dtype of ``precision``: the arrays given, the others uniform in [-1, 1) from
    ``numpy.random.default_rng(seed)``, drawn in the order of ``expected_shapes`` whether
    given or not (so a given operand does not change the others). ``fused``: a fused pair's
    other operands by their main-memory names (``fused_operand_names``).

    Raises ``ValueError`` for an operand of the wrong shape or one the layer does not read.
    """
    if precision not in DTYPES:
        raise ValueError(f"the executor computes in {', '.join(DTYPES)}, not {precision}")
    rng = np.random.default_rng(seed)
    shapes = expected_shapes(layer, batch)
    given = {
        OPERANDS[k]: v
        for k, v in dict(
            x=x,
            weights=weights,
            bias=bias,
            residual=residual,
        ).items()
        if v is not None
    } | dict(fused or {})
    for name in given:
        if name not in shapes:
            raise ValueError(f"layer {layer.name!r} ({layer.kind}) reads no {name}")
    dtype = DTYPES[precision]
    out = {}
    for name, shape in shapes.items():
        if name == "output":
            continue
        drawn = rng.uniform(-1.0, 1.0, shape)
        array = given.get(name, drawn)
        if np.shape(array) != shape:
            raise ValueError(
                f"{name} has shape {np.shape(array)}, layer {layer.name!r} needs {shape}"
            )
        out[name] = np.asarray(array).astype(dtype)
    return out


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
) -> Outputs:
    """Run ``layer`` under ``mapping`` on one chiplet of ``machine`` and return its output.

    Args:
        x: ``(batch, c_in, h_in, w_in)``; the batch is its first axis. An ``add``'s operands
            interleaved along the channels (``interleave``).
        weights: ``(c_out, c_in / groups, kernel_h, kernel_w)`` for conv and fc (an fc's
            kernel is its input), None for the kinds without weights.
        bias: ``(c_out,)`` when ``layer.epilogue.bias``.
        residual: the output's shape, ``(batch, c_out, h_out, w_out)``, when
            ``layer.epilogue.residual``.
        precision: the storage precision (fp16 data accumulates in fp32 and is rounded once
            at the store, FP16.32).
        seed: draws the weights, bias and residual that are needed but not given.
        fused: a fused pair's other operands by their main-memory names
            (``autotune.verification.program``): a depthwise prologue's ``prologue_filter``
            ``(c_in, 1, kernel_h, kernel_w)`` and ``prologue_bias`` ``(c_in,)``, or an
            expansion's ``depthwise_filter`` ``(c_out, 1, kernel_h, kernel_w)`` and
            ``expansion_bias`` ``(c_out,)``; its ``weights`` are then the 1×1's, ``(c_out,
            c_in, 1, 1)``. Those not given are drawn as the weights are.

    Returns:
        ``Outputs``: ``output`` ``(batch, c_out, h_out, w_out)`` in ``precision``'s dtype, and
        the run's statistics (operations, bytes moved, MACs).

    Raises ``MappingError`` when the mapping does not apply to the layer, ``ScheduleError``
    (``AllocationError``: L1 overflow) when its program cannot run, ``ValueError`` for
    operands of the wrong shape.

    Example:
        >>> import numpy as np
        >>> from autotune import Layer, Machine, Mapping
        >>> pool = Layer("p", "maxpool", 4, 4, 2, 2, 2, 2, 2, 2, groups=2)
        >>> x = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
        >>> run = execute_layer(pool, Mapping("output_stack"), Machine.preset(), x)
        >>> run.output[0, 0].tolist()
        [[5.0, 7.0], [13.0, 15.0]]
    """
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
    return execute(build_program(layer, mapping, machine, precision, batch), data)


def interleave(operands: Sequence[np.ndarray]) -> np.ndarray:
    """The input volume of an ``add`` of ``operands`` (each ``(batch, c, h, w)``): channel
    ``g·n + i`` is channel ``g`` of operand ``i`` (``autotune.ir.layer``)."""
    if len(operands) < 2:
        raise ValueError("an add reads at least two operands")
    stacked = np.stack([np.asarray(a) for a in operands], axis=2)  # (batch, c, n, h, w)
    batch, c, n, h, w = stacked.shape
    return stacked.reshape(batch, c * n, h, w)
