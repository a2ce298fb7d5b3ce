"""The integer program of one layer: CP-SAT over the mapping variables, proven optimal.

Decision variables are indices into the ``SearchSpace`` value lists (algorithm one-hot via
its index, delta_o, spatial tile, batch tile, input slices per step, share group, and the
buffering depth of each streamed operand); the buffer bytes follow from them exactly
(``depth x tile``, bank-aligned) and are constrained against L1. The cost is the very formula
``analyze`` evaluates (``model.formulas``), built into constraints by ``CpSatOps``: tables
become element constraints, products multiplication equalities, ceilings division
equalities. No relaxation: the optimum is the best mapping of the analytical model.

Ties are broken lexicographically by re-solving with each earlier objective fixed: the
objective, the tie-break outputs (``search.objective.ORDER``) and finally the candidate's
rank in enumeration order, which makes the answer unique and equal to exhaustive search's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from autotune.ir.machine import Machine
from autotune.ir.placement import HBM_ONLY, Placement
from autotune.ir.precision import word_bytes
from autotune.model.formulas import INPUT_PARALLEL, OUTPUT_STACK, SHARED, consts, evaluate
from autotune.search import cpsat
from autotune.search.ilp.ops import CpSatOps, Expr
from autotune.search.objective import ORDER, VARIABLES, check_objective
from autotune.search.space import (
    DEPTH_SOURCE,
    QUANTITY_SOURCE,
    RUN_SOURCE,
    SearchSpace,
    efficiency_tables,
    flat_index,
)


@dataclass
class IlpResult:
    index: dict[str, int] | None
    values: dict[str, int]
    status: str  # OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN
    objective: int | None
    bound: int | None
    wall_s: float
    candidates: int
    min_l1: int | None = None
    stages: list[str] = field(default_factory=list)

    @property
    def gap(self) -> float | None:
        if self.objective is None or self.bound is None:
            return None
        return 0.0 if self.objective == 0 else (self.objective - self.bound) / self.objective


def count_candidates(space: SearchSpace) -> int:
    """Structurally legal candidates (the size of the space exhaustive search walks)."""
    sizes = space.sizes
    rest = sizes["spatial"] * sizes["batch_tile"] * sizes["d_in"] * sizes["d_out"]
    stack_in = space.tables["stack_in_channels_max"][:, None]
    step_in = space.tables["step_in_channels"][None, :]
    total = 0
    for algorithm, code in zip(space.algorithms, space.tables["algorithm"], strict=True):
        pairs = (
            len(space.delta_o) * len(space.in_c)
            if code == INPUT_PARALLEL
            else int((step_in <= stack_in).sum())
        )
        share = sizes["share"] - 1 if code == SHARED else 1
        multicast = sizes["multicast"] if code == OUTPUT_STACK else 1
        total += pairs * rest * share * multicast * space.filter_values(algorithm)
    return total


@dataclass
class Built:
    cpm: cp_model.CpModel
    index: dict[str, Any]  # variable name -> Expr or constant
    values: dict[str, Any]  # formula outputs
    rank: Any


def build(
    space: SearchSpace,
    machine: Machine,
    precision: str,
    *,
    capacity: bool = True,
    placement: Placement = HBM_ONLY,
) -> Built:
    """The CP-SAT model, each stream of the layer at the memory level ``placement`` gives it;
    ``capacity=False`` leaves out the L1 constraint (to find the smallest footprint of an
    infeasible layer)."""
    cpm = cp_model.CpModel()
    ops = CpSatOps(cpm)
    name = space.layer.name
    sizes = space.sizes
    index: dict[str, Any] = {}
    for v in VARIABLES:
        n = sizes[v]
        index[v] = 0 if n == 1 else Expr(cpm.new_int_var(0, n - 1, f"{v}[{name}]"), 0, n - 1)
    codes = [int(c) for c in space.tables["algorithm"]]
    alg = (
        ops.lookup(index["alg"], np.asarray(codes)) if isinstance(index["alg"], Expr) else codes[0]
    )
    # Only Alg. 3 has a share group; every other algorithm uses index 0 (group of 1).
    if isinstance(index["share"], Expr):
        if isinstance(alg, Expr):
            is_shared = ops.literal_equals(alg, SHARED)
            cpm.add(index["share"].expr >= 1).only_enforce_if(is_shared)
            cpm.add(index["share"].expr == 0).only_enforce_if(~is_shared)
        elif alg == SHARED:
            cpm.add(index["share"].expr >= 1)
        else:
            cpm.add(index["share"].expr == 0)
    # The deep filter buffer is Alg. 1-3's only.
    parallel_filters = space.filter_values("input_parallel")
    if isinstance(index["d_f"], Expr) and index["d_f"].hi >= parallel_filters:
        if isinstance(alg, Expr):
            cpm.add(index["d_f"].expr < parallel_filters).only_enforce_if(
                ops.literal_equals(alg, INPUT_PARALLEL)
            )
        elif alg == INPUT_PARALLEL:
            cpm.add(index["d_f"].expr < parallel_filters)
    # Multicast applies to output_stack only.
    if isinstance(index["multicast"], Expr):
        if isinstance(alg, Expr):
            cpm.add(index["multicast"].expr == 0).only_enforce_if(
                ~ops.literal_equals(alg, OUTPUT_STACK)
            )
        elif alg != OUTPUT_STACK:
            cpm.add(index["multicast"].expr == 0)
    q = {
        qname: ops.lookup(index[var], space.tables[qname])
        for qname, var in QUANTITY_SOURCE.items()
        if qname != "algorithm"
    }
    q["algorithm"] = alg
    for qname, table in efficiency_tables(space, machine, precision).items():
        q[qname] = ops.lookup(flat_index(space, RUN_SOURCE[qname][1], index), table)
    for qname, var in DEPTH_SOURCE.items():  # depth = index + 1 (``buffer_depth`` is [1, 2])
        q[qname] = index[var] + 1 if isinstance(index[var], Expr) else 1 + index[var]
    # A step reads at most the input slices its stack has (convolution algorithms).
    step_in, stack_in = q["step_in_channels"], q["stack_in_channels_max"]
    if (isinstance(step_in, Expr) or isinstance(stack_in, Expr)) and alg != INPUT_PARALLEL:
        constraint = cpm.add(_expr(step_in) <= _expr(stack_in))
        if isinstance(alg, Expr):
            constraint.only_enforce_if(~ops.literal_equals(alg, INPUT_PARALLEL))
    k = consts(space.layer, machine, precision, word_bytes(precision), space.batch, placement)
    values = evaluate(ops, q, k)
    l1 = values["l1"]
    if capacity and isinstance(l1, Expr):
        cpm.add(l1.expr <= k.l1_bytes).with_name("l1_capacity")
    if capacity:  # given filter bytes must hold the buffer's tiles (``Buffers``)
        given = q["filter_bytes_given"]
        need = values["need_bytes_filter"]
        for nbytes in sorted({b for _, b in space.filter_buffers if b}):
            if isinstance(given, Expr):
                chosen = [ops.literal_equals(given, nbytes)]
            elif int(given) == nbytes:
                chosen = []
            else:
                continue
            if isinstance(need, Expr):
                cpm.add(need.expr <= nbytes).only_enforce_if(chosen)
            elif int(need) > nbytes:
                cpm.add_bool_or([~lit for lit in chosen])
    rank: Any = 0
    stride = 1
    for v in reversed(VARIABLES):
        rank = rank + index[v] * stride
        stride *= sizes[v]
    return Built(cpm, index, values, rank)


def _expr(x: Any) -> Any:
    return x.expr if isinstance(x, Expr) else x


def solve(
    space: SearchSpace,
    machine: Machine,
    precision: str,
    objective: str = "latency",
    *,
    time_limit: float | None = 60.0,
    workers: int = 1,
    seed: int = 0,
    placement: Placement = HBM_ONLY,
) -> IlpResult:
    """Solve the layer's integer program (each stream at the memory level ``placement``
    gives it); lexicographic stages make the answer unique."""
    check_objective(objective)
    start = time.perf_counter()
    built = build(space, machine, precision, placement=placement)
    cpm = built.cpm
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    # Measured on ResNet-50: no LP relaxation proves these tables-and-products models
    # about twice as fast as the default (benchmarks/bench_ilp.py).
    solver.parameters.linearization_level = 0
    # Probing in presolve (default level 2) learns some 10^5 binary clauses from the element
    # tables and then takes most of a stage's time; without it each stage proves the same
    # optimum 1.3-2x sooner (benchmarks/bench_ilp.py: ResNet-50 130.9 -> 70.6 s summed over
    # its 30 shapes, AlexNet 26.6 -> 17.0 s, the same optima).
    solver.parameters.cp_model_probing_level = 0
    if time_limit is not None:
        solver.parameters.max_time_in_seconds = time_limit
    candidates = count_candidates(space)
    stages = [*ORDER[objective], "rank"]
    first_objective = first_bound = None
    status_name = "OPTIMAL"
    for stage in stages:
        target = built.rank if stage == "rank" else built.values[stage]
        if isinstance(target, int):
            continue  # constant: nothing to decide
        cpm.minimize(_expr(target))
        status = cpsat.solve(solver, cpm)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            name = solver.status_name(status)
            if stage == stages[0]:
                smallest = _smallest_footprint(space, machine, precision, solver, placement)
                return IlpResult(
                    None,
                    {},
                    name,
                    None,
                    None,
                    time.perf_counter() - start,
                    candidates,
                    smallest,
                    stages,
                )
            break
        value = int(round(solver.objective_value))
        if first_objective is None:
            first_objective, first_bound = value, int(round(solver.best_objective_bound))
        if status != cp_model.OPTIMAL:
            status_name = "FEASIBLE"
            break
        cpm.add(_expr(target) == value)
        cpm.clear_hints()
        for v in VARIABLES:
            if isinstance(built.index[v], Expr):
                cpm.add_hint(built.index[v].expr, solver.value(built.index[v].expr))
    index = {
        v: (
            int(solver.value(built.index[v].expr))
            if isinstance(built.index[v], Expr)
            else int(built.index[v])
        )
        for v in VARIABLES
    }
    values = {
        key: (int(solver.value(val.expr)) if isinstance(val, Expr) else int(val))
        for key, val in built.values.items()
    }
    return IlpResult(
        index,
        values,
        status_name,
        first_objective,
        first_bound,
        time.perf_counter() - start,
        candidates,
        None,
        stages,
    )


def _smallest_footprint(
    space: SearchSpace,
    machine: Machine,
    precision: str,
    solver: cp_model.CpSolver,
    placement: Placement,
) -> int | None:
    """When nothing fits: the smallest L1 footprint any candidate needs (for the error)."""
    relaxed = build(space, machine, precision, capacity=False, placement=placement)
    l1 = relaxed.values["l1"]
    if not isinstance(l1, Expr):
        return int(l1)
    relaxed.cpm.minimize(l1.expr)
    status = cpsat.solve(solver, relaxed.cpm)
    return int(round(solver.objective_value)) if status == cp_model.OPTIMAL else None
