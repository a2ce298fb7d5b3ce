"""Exhaustive search: evaluate the cost formula on every candidate mapping with numpy.

A real search mode (``--search exhaustive``), and the reference the integer program is
checked against: both evaluate ``model.formulas.evaluate`` over the same ``SearchSpace`` and
break ties in the same order (objective, tie-break outputs, then enumeration order).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from autotune.ir.machine import Machine
from autotune.ir.placement import HBM_ONLY, Placement
from autotune.ir.precision import word_bytes
from autotune.model.formulas import OUTPUT_STACK, SHARED, consts, evaluate
from autotune.model.ops import NumpyOps
from autotune.search.ilp.ops import LIMIT
from autotune.search.objective import ORDER, VARIABLES, check_objective
from autotune.search.space import (
    DEPTH_SOURCE,
    QUANTITY_SOURCE,
    RUN_SOURCE,
    SearchSpace,
    efficiency_tables,
    flat_index,
)

#: Candidates evaluated per numpy batch (bounds memory: ~100 int64 temporaries of this size).
CHUNK = 1 << 18


@dataclass(frozen=True)
class Best:
    """The winning candidate: one index per variable and its formula outputs."""

    index: dict[str, int]
    values: dict[str, int]
    candidates: int  # structurally legal candidates examined
    feasible: int  # of which fit L1
    min_l1: int  # smallest footprint among legal candidates (bytes)
    wall_s: float


def _variable_values(space: SearchSpace, alg_index: int) -> dict[str, np.ndarray]:
    """Index values each variable ranges over for one algorithm (share only for Alg. 3,
    multicast only for output_stack)."""
    sizes = space.sizes
    shared = space.tables["algorithm"][alg_index] == SHARED
    ranges = {v: np.arange(sizes[v]) for v in VARIABLES}
    ranges["alg"] = np.array([alg_index])
    ranges["share"] = np.arange(1, sizes["share"]) if shared else np.array([0])
    if space.tables["algorithm"][alg_index] != OUTPUT_STACK:  # multicast: output_stack only
        ranges["multicast"] = np.array([0])
    return ranges


def quantities(
    space: SearchSpace, idx: dict[str, np.ndarray], efficiency: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The formula's quantities for candidates given as index arrays (``efficiency``: the
    inverse DMA efficiency tables, ``space.efficiency_tables(...)``)."""
    q = {name: space.tables[name][idx[var]] for name, var in QUANTITY_SOURCE.items()}
    for name, (_, variables, _) in RUN_SOURCE.items():
        q[name] = efficiency[name][flat_index(space, variables, idx)]
    for name, var in DEPTH_SOURCE.items():
        q[name] = space.tables["buffer_depth"][idx[var]]
    return q


def search(
    space: SearchSpace,
    machine: Machine,
    precision: str,
    objective: str = "latency",
    *,
    placement: Placement = HBM_ONLY,
) -> Best | None:
    """The best candidate under ``objective`` (None if nothing fits; see ``min_l1``)."""
    ranked = ranking(space, machine, precision, objective, 1, placement=placement)
    return ranked[0] if ranked else None


def top_k(
    space: SearchSpace,
    machine: Machine,
    precision: str,
    objective: str,
    k: int,
    *,
    placement: Placement = HBM_ONLY,
) -> list[dict[str, int]]:
    """Indices of the ``k`` best fitting candidates, best first (same order as ``search``)."""
    ranked = ranking(space, machine, precision, objective, k, placement=placement)
    return [b.index for b in ranked if b.index]


def ranking(
    space: SearchSpace,
    machine: Machine,
    precision: str,
    objective: str,
    count: int,
    *,
    placement: Placement = HBM_ONLY,
) -> list[Best]:
    """The ``count`` best candidates (one ``Best`` each; an infeasible layer gives one ``Best``
    with an empty index and the smallest footprint; an empty space gives []), each stream of
    the layer at the memory level ``placement`` gives it (the space does not depend on it)."""
    check_objective(objective)
    start = time.perf_counter()
    k = consts(space.layer, machine, precision, word_bytes(precision), space.batch, placement)
    efficiency = efficiency_tables(space, machine, precision)
    order = ORDER[objective]
    kept: list[tuple[tuple, dict[str, int], dict[str, int]]] = []
    candidates = feasible = 0
    min_l1 = np.iinfo(np.int64).max
    for a in range(len(space.algorithms)):
        ranges = _variable_values(space, a)
        inner = [v for v in VARIABLES if v not in ("alg", "delta_o")]
        inner_shape = [len(ranges[v]) for v in inner]
        per_delta = int(np.prod(inner_shape))
        step = max(1, CHUNK // per_delta)
        for d0 in range(0, len(ranges["delta_o"]), step):
            deltas = ranges["delta_o"][d0 : d0 + step]
            grids = np.meshgrid(deltas, *[ranges[v] for v in inner], indexing="ij")
            idx = {"alg": np.full(grids[0].size, a), "delta_o": grids[0].ravel()}
            idx.update({v: g.ravel() for v, g in zip(inner, grids[1:], strict=True)})
            q = quantities(space, idx, efficiency)
            legal = np.ones(grids[0].size, dtype=bool)
            if space.algorithms[a] != "input_parallel":
                # a step cannot exceed the slices a stack reads
                legal &= q["step_in_channels"] <= q["stack_in_channels_max"]
            values = evaluate(NumpyOps(), q, k)
            for name in ("cycles", "energy", "offchip_bytes", "l2_bytes"):
                if np.max(values[name]) >= LIMIT:  # the integer program clamps there
                    raise OverflowError(f"layer {space.layer.name!r}: {name} reaches {LIMIT}")
            l1 = np.broadcast_to(values["l1"], legal.shape)
            fit = legal & (l1 <= k.l1_bytes)
            candidates += int(legal.sum())
            feasible += int(fit.sum())
            if legal.any():
                min_l1 = min(min_l1, int(l1[legal].min()))
            if not fit.any():
                continue
            cols = [np.broadcast_to(values[key], legal.shape)[fit] for key in order]
            # np.lexsort sorts by the last key first; the position breaks remaining ties.
            positions = np.flatnonzero(fit)
            for winner in np.lexsort((positions, *reversed(cols)))[:count]:
                pos = positions[winner]
                key = (*(int(c[winner]) for c in cols), a, d0, int(pos))
                kept.append(
                    (
                        key,
                        {v: int(idx[v][pos]) for v in VARIABLES},
                        {
                            name: int(np.broadcast_to(val, legal.shape)[pos])
                            for name, val in values.items()
                        },
                    )
                )
            kept = sorted(kept, key=lambda item: item[0])[:count]
    wall = time.perf_counter() - start
    if not kept:
        return [Best({}, {}, candidates, 0, int(min_l1), wall)] if candidates else []
    return [
        Best(index, values, candidates, feasible, int(min_l1), wall) for _, index, values in kept
    ]
