"""L1 footprint of a mapping: words per buffer tile and bytes per allocated buffer.

The report's space complexities (Sec. 2.1.2, 2.2.2, 2.3.2, 3.1.2, 3.2.2) are the minimum
words per cluster: one output stack, one input depth slice (or batch of slices), one filter
slice, plus a forwarding buffer for Alg. 3. Here the same buffers (and one for an epilogue's
residual operand) are sized from the task structure, so spatial tiles, multi-slice steps and
batch tiles change them. The sizes come from the cost formula (``formulas.evaluate``), the
single definition of the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.ir.machine import Machine
from autotune.model.formulas import consts, evaluate
from autotune.model.ops import NumpyOps, Value, as_int
from autotune.model.quantities import grid_quantities
from autotune.tiling import OPERANDS, TaskGrid


@dataclass(frozen=True)
class Footprint:
    """Per-operand tile words, buffering depth and allocated bytes in one cluster's L1."""

    tile_words: dict[str, int]
    depth: dict[str, int]
    allocated_bytes: dict[str, int]
    l1_bytes: int
    fits: bool
    reason: str | None


def buffer_override(grid: TaskGrid) -> dict[str, int | None]:
    """The explicit bytes the mapping gives each buffer (None: ``depth`` tiles; the residual
    buffer has no field of its own: it is always ``output_depth`` tiles)."""
    b = grid.mapping.buffers
    return {
        "input": b.input_bytes,
        "filter": b.filter_bytes,
        "output": b.output_bytes,
        "share": b.share_bytes,
        "residual": None,
    }


def footprint_from(
    values: dict[str, Value], grid: TaskGrid, machine: Machine, word_bytes: int
) -> Footprint:
    """The ``Footprint`` from an evaluated formula (explicit buffers must hold depth tiles)."""
    b = grid.mapping.buffers
    depth = {
        "input": b.input_depth,
        "filter": b.filter_depth,
        "output": b.output_depth,
        "share": 1,
        "residual": b.output_depth,
    }
    words = {op: as_int(values[f"tile_words_{op}"]) for op in OPERANDS}
    allocated = {op: as_int(values[f"alloc_bytes_{op}"]) if words[op] else 0 for op in OPERANDS}
    given = buffer_override(grid)
    reason = None
    for op in OPERANDS:
        need, explicit = depth[op] * words[op] * word_bytes, given[op]
        if words[op] and explicit is not None and explicit < need:
            reason = (
                f"{op} buffer of {explicit} B is smaller than {depth[op]} x "
                f"{words[op] * word_bytes} B tiles"
            )
            break
    total = sum(allocated.values())
    if reason is None and total > machine.l1_bytes:
        parts = ", ".join(f"{op} {allocated[op]}" for op in OPERANDS if allocated[op])
        reason = f"buffers need {total} B > {machine.l1_bytes} B of L1 ({parts})"
    return Footprint(words, depth, allocated, total, reason is None, reason)


def footprint(
    grid: TaskGrid, machine: Machine, word_bytes: int, precision: str | None = None
) -> Footprint:
    """Allocate every buffer the mapping declares and check the sum against L1.

    A buffer with explicit bytes must hold ``depth`` tiles; one without is allocated exactly
    ``depth`` tiles. Every buffer is rounded up to the L1 bank width so that it starts on a
    bank word. The forwarding buffer of Alg. 3 is single (Sec. 2.3.2: one input slice).
    """
    if precision is None:
        precision = next(iter(machine.macs_per_cycle_per_core))
    k = consts(grid.layer, machine, precision, word_bytes, grid.batch)
    q = grid_quantities(grid, machine, word_bytes)
    values = evaluate(NumpyOps(), q, k, buffer_override(grid))
    return footprint_from(values, grid, machine, word_bytes)
