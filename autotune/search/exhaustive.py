"""Exhaustive search: evaluate the cost formula on every candidate mapping with numpy.

A real search mode (``--search exhaustive``), and the reference the integer program is
checked against: both evaluate ``model.formulas.evaluate`` over the same ``SearchSpace`` and
break ties in the same order (objective, tie-break outputs, then enumeration order).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from autotune.ir.machine import Machine
from autotune.ir.placement import HBM_ONLY, Placement
from autotune.ir.precision import word_bytes
from autotune.model.formulas import OUTPUT_STACK, SHARED, Consts, consts, evaluate
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
    multicast only for output_stack, the deep filter buffer not for input_parallel)."""
    sizes = space.sizes
    shared = space.tables["algorithm"][alg_index] == SHARED
    ranges = {v: np.arange(sizes[v]) for v in VARIABLES}
    ranges["alg"] = np.array([alg_index])
    ranges["share"] = np.arange(1, sizes["share"]) if shared else np.array([0])
    if space.tables["algorithm"][alg_index] != OUTPUT_STACK:  # multicast: output_stack only
        ranges["multicast"] = np.array([0])
    ranges["d_f"] = np.arange(space.filter_values(space.algorithms[alg_index]))
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


#: Candidates per extreme placement among which ``best_by_placement`` picks the mixed ones.
SHORTLIST = 256


@dataclass(frozen=True)
class _Chunk:
    """Candidates of one algorithm and a run of ``delta_o`` values, as index arrays."""

    alg: int
    d0: int
    idx: dict[str, np.ndarray]
    q: dict[str, np.ndarray]
    legal: np.ndarray


def _chunks(space: SearchSpace, machine: Machine, precision: str) -> Iterator[_Chunk]:
    """The whole space in chunks of about ``CHUNK`` candidates, in a fixed order."""
    efficiency = efficiency_tables(space, machine, precision)
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
            yield _Chunk(a, d0, idx, q, legal)


@dataclass
class _Tally:
    """Counts over the chunks: legal candidates, those that fit L1, the smallest footprint."""

    candidates: int = 0
    feasible: int = 0
    min_l1: int = int(np.iinfo(np.int64).max)

    def best(self, index: dict[str, int], values: dict[str, int], wall: float) -> Best:
        return Best(index, values, self.candidates, self.feasible, self.min_l1, wall)


def _fitting(
    space: SearchSpace, machine: Machine, precision: str, k: Consts, tally: _Tally
) -> Iterator[tuple[_Chunk, dict[str, np.ndarray], np.ndarray]]:
    """Each chunk with candidates that fit L1: its formula outputs under ``k`` and the
    positions of the fitting candidates (the footprint does not depend on the placement);
    ``tally`` counts every chunk."""
    for chunk in _chunks(space, machine, precision):
        values = _evaluated(space, chunk.q, k)
        l1 = np.broadcast_to(values["l1"], chunk.legal.shape)
        fit = chunk.legal & (l1 <= k.l1_bytes)
        # given filter bytes must hold the buffer's tiles (``Buffers``)
        given = np.broadcast_to(chunk.q["filter_bytes_given"], fit.shape)
        need = np.broadcast_to(values["need_bytes_filter"], fit.shape)
        fit &= (given == 0) | (need <= given)
        tally.candidates += int(chunk.legal.sum())
        tally.feasible += int(fit.sum())
        if chunk.legal.any():
            tally.min_l1 = min(tally.min_l1, int(l1[chunk.legal].min()))
        if fit.any():
            yield chunk, values, np.flatnonzero(fit)


def _evaluated(space: SearchSpace, q: dict[str, np.ndarray], k: Consts) -> dict[str, np.ndarray]:
    values = evaluate(NumpyOps(), q, k)
    for name in ("cycles", "energy", "offchip_bytes", "l2_bytes"):
        if np.max(values[name]) >= LIMIT:  # the integer program clamps there
            raise OverflowError(f"layer {space.layer.name!r}: {name} reaches {LIMIT}")
    return values


def _kept_best(
    kept: list[tuple[tuple, dict[str, int], dict[str, int]]],
    chunk: _Chunk,
    values: dict[str, np.ndarray],
    positions: np.ndarray,
    order: tuple[str, ...],
    count: int,
) -> list[tuple[tuple, dict[str, int], dict[str, int]]]:
    """``kept`` with this chunk's ``count`` best candidates merged in: ``values`` are the
    formula's outputs of the chunk's candidates at ``positions`` (ties: earlier first)."""
    cols = [values[key] for key in order]
    # np.lexsort sorts by the last key first; the position breaks remaining ties.
    for winner in np.lexsort((positions, *reversed(cols)))[:count]:
        pos = positions[winner]
        key = (*(int(c[winner]) for c in cols), chunk.alg, chunk.d0, int(pos))
        kept.append(
            (
                key,
                {v: int(chunk.idx[v][pos]) for v in VARIABLES},
                {name: int(val[winner]) for name, val in values.items()},
            )
        )
    return sorted(kept, key=lambda item: item[0])[:count]


def _at(
    values: dict[str, np.ndarray], shape: tuple[int, ...], rows: np.ndarray | slice
) -> dict[str, np.ndarray]:
    """Every output (array or broadcast scalar) at the candidates ``rows`` of a chunk."""
    return {name: np.broadcast_to(v, shape)[rows] for name, v in values.items()}


def best_by_placement(
    space: SearchSpace,
    machine: Machine,
    precision: str,
    objective: str,
    placements: Sequence[Placement],
    shortlist: int = SHORTLIST,
) -> dict[Placement, Best | None]:
    """The best candidate for each placement of the layer's streams (a network plan's
    per-step options), in one pass over the space.

    The first and the last placement (all in HBM, everything the layer may keep in L2)
    are ranked over the whole space: their winners are ``search``'s, exactly. Every other
    placement (a mix) is the best, under its own formula, of the union of those two
    rankings' ``shortlist`` best candidates: a placement between the two extremes changes
    which streams pay the HBM and which the L2, and its winner is near the top of one of them
    (``benchmarks/bench_plan.py --check-shortlist`` measures how often it is not).
    """
    check_objective(objective)
    start = time.perf_counter()
    wb = word_bytes(precision)
    ks = {p: consts(space.layer, machine, precision, wb, space.batch, p) for p in placements}
    order = ORDER[objective]
    extremes = list(dict.fromkeys([placements[0], placements[-1]]))
    kept: dict[Placement, list[tuple[tuple, dict[str, int], dict[str, int]]]] = {
        p: [] for p in extremes
    }
    tally = _Tally()
    for chunk, values, positions in _fitting(space, machine, precision, ks[placements[0]], tally):
        for p in extremes:
            if p == placements[0]:
                vals = _at(values, chunk.legal.shape, positions)
            else:
                sub = _at(chunk.q, chunk.legal.shape, positions)
                vals = _at(_evaluated(space, sub, ks[p]), positions.shape, slice(None))
            kept[p] = _kept_best(kept[p], chunk, vals, positions, order, shortlist)
    wall = time.perf_counter() - start
    if not tally.feasible:  # nothing fits: the smallest footprint says by how much
        nothing = tally.best({}, {}, wall) if tally.candidates else None
        return {p: nothing for p in placements}
    # the shortlist, in the space's order (the ranking keys' tail: algorithm, chunk, position)
    pool = sorted({item[0][-3:]: item[1] for p in extremes for item in kept[p]}.items())
    idx = {v: np.array([index[v] for _, index in pool]) for v in VARIABLES}
    q = quantities(space, idx, efficiency_tables(space, machine, precision))
    out: dict[Placement, Best | None] = {}
    for p in placements:
        if p in kept:
            best = kept[p][0]
        else:
            vals = _at(_evaluated(space, q, ks[p]), (len(pool),), slice(None))
            cols = [vals[key] for key in order]
            w = int(np.lexsort((np.arange(len(pool)), *reversed(cols)))[0])
            best = ((), pool[w][1], {name: int(v[w]) for name, v in vals.items()})
        out[p] = tally.best(best[1], best[2], wall)
    return out


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
    order = ORDER[objective]
    kept: list[tuple[tuple, dict[str, int], dict[str, int]]] = []
    tally = _Tally()
    for chunk, values, positions in _fitting(space, machine, precision, k, tally):
        kept = _kept_best(
            kept, chunk, _at(values, chunk.legal.shape, positions), positions, order, count
        )
    wall = time.perf_counter() - start
    if not kept:
        return [tally.best({}, {}, wall)] if tally.candidates else []
    return [tally.best(index, values, wall) for _, index, values in kept]
