"""Choose every layer's mapping: per layer by the integer program (or exhaustive search),
per network with identical shapes solved once and distinct shapes solved in parallel.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

from autotune.chiplets import SPLITS, split_parts
from autotune.ir.layer import Layer, Network
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.ir.precision import word_bytes
from autotune.model.analysis import Analysis, analyze
from autotune.search import exhaustive
from autotune.search.ilp import model as ilp
from autotune.search.objective import ORDER, check_objective
from autotune.search.space import search_space

SEARCH_MODES = ("ilp", "exhaustive")


class InfeasibleError(ValueError):
    """No candidate mapping of the layer fits L1; names the layer and the smallest footprint."""

    def __init__(self, layer: str, l1_bytes: int, smallest: int | None) -> None:
        self.layer = layer
        self.smallest = smallest
        found = (
            f"the smallest footprint found is {smallest} B: L1 would need at least {smallest} B"
            if smallest is not None
            else "no candidate mapping applies"
        )
        super().__init__(f"layer {layer!r}: no mapping fits the {l1_bytes} B of L1; {found}")


@dataclass(frozen=True)
class SearchReport:
    """How a layer's mapping was found."""

    mode: str  # "ilp" or "exhaustive"
    status: str  # OPTIMAL, FEASIBLE (time limit hit), ...
    objective: str  # latency, traffic, energy
    value: int  # objective value of the chosen mapping
    bound: int | None  # best proven bound (ILP)
    gap: float | None  # (value - bound) / value
    wall_s: float
    candidates: int  # structurally legal candidate mappings in the space
    shared_with: str | None = None  # name of the layer with the same shape actually solved


@dataclass(frozen=True)
class LayerSolution:
    layer: Layer
    mapping: Mapping
    analysis: Analysis
    search: SearchReport


def solve_layer(
    layer: Layer,
    machine: Machine,
    precision: str = "fp32",
    batch: int = 1,
    *,
    objective: str = "latency",
    search: str = "ilp",
    time_limit: float | None = 60.0,
    workers: int = 1,
    seed: int = 0,
) -> LayerSolution:
    """The best mapping of one layer under the analytical model.

    ``search="ilp"`` solves the CP-SAT program (proven optimal unless ``time_limit`` cuts it
    short: see ``search.status``); ``"exhaustive"`` evaluates every candidate with numpy.
    Both return the same mapping. Raises ``InfeasibleError`` if nothing fits L1.
    """
    check_objective(objective)
    if search not in SEARCH_MODES:
        raise ValueError(f"unknown search mode {search!r} (choose: {', '.join(SEARCH_MODES)})")
    machine.check_precision(precision)
    if machine.chiplets > 1:
        return _solve_package(
            layer,
            machine,
            precision,
            batch,
            objective=objective,
            search=search,
            time_limit=time_limit,
            workers=workers,
            seed=seed,
        )
    space = search_space(layer, machine, batch)
    key = {"latency": "cycles", "traffic": "offchip_bytes", "energy": "energy"}[objective]
    if search == "exhaustive":
        best = exhaustive.search(space, machine, precision, objective)
        if best is None or not best.index:
            raise InfeasibleError(
                layer.name, machine.l1_bytes, None if best is None else best.min_l1
            )
        index, values = best.index, best.values
        report = SearchReport(
            "exhaustive",
            "OPTIMAL",
            objective,
            values[key],
            values[key],
            0.0,
            best.wall_s,
            best.candidates,
        )
    else:
        result = ilp.solve(
            space, machine, precision, objective, time_limit=time_limit, workers=workers, seed=seed
        )
        if result.index is None:
            raise InfeasibleError(layer.name, machine.l1_bytes, result.min_l1)
        index, values = result.index, result.values
        report = SearchReport(
            "ilp",
            result.status,
            objective,
            values[key],
            result.bound,
            result.gap,
            result.wall_s,
            result.candidates,
        )
    mapping = space.decode(index)
    analysis = analyze(layer, mapping, machine, precision, batch)
    if analysis.cycles != values["cycles"] or not analysis.fits:  # the model is one formula
        raise AssertionError(
            f"layer {layer.name!r}: search and analyze disagree "
            f"({values['cycles']} vs {analysis.cycles} cycles)"
        )
    return LayerSolution(layer, mapping, analysis, report)


def package_key(analysis: Analysis, objective: str) -> tuple[int, ...]:
    """A package layer's figures compared in the objective's order (``ORDER``)."""
    values = {
        "cycles": analysis.cycles,
        "offchip_bytes": analysis.offchip_bytes,
        "energy": round(analysis.energy_pj * 1000),
        "l1": analysis.l1_bytes,
    }
    return tuple(values[name] for name in ORDER[objective])


def _solve_package(
    layer: Layer, machine: Machine, precision: str, batch: int, **kwargs: object
) -> LayerSolution:
    """Every chiplet split (``autotune.chiplets``): its largest part solved on one chiplet
    to proven optimality (or enumerated), plus the die-to-die cost (``model.package``); the
    best split under the objective, ties to the earlier split in ``SPLITS`` order.

    For the latency objective the link cost does not depend on the inner mapping, so this is
    the optimum over (split, mapping); for traffic and energy each split keeps its largest
    part's optimum and the package totals (all parts) decide between splits.
    """
    chiplet = machine.chiplet()
    objective = str(kwargs["objective"])
    solved: dict[tuple, LayerSolution | None] = {}
    best: tuple | None = None
    wall, candidates, statuses, smallest = 0.0, 0, set(), None
    for order, split in enumerate(SPLITS):
        part = split_parts(layer, split, machine.chiplets, batch, word_bytes(precision))[0]
        key = (part.layer.shape_key(), part.batch)
        if key not in solved:
            try:
                solved[key] = solve_layer(part.layer, chiplet, precision, part.batch, **kwargs)
            except InfeasibleError as exc:
                solved[key] = None
                if exc.smallest is not None:
                    smallest = exc.smallest if smallest is None else min(smallest, exc.smallest)
                continue
            wall += solved[key].search.wall_s
            candidates += solved[key].search.candidates
            statuses.add(solved[key].search.status)
        sub = solved[key]
        if sub is None:
            continue
        mapping = sub.mapping.with_(chiplet_split=split)
        analysis = analyze(layer, mapping, machine, precision, batch)
        rank = (*package_key(analysis, objective), order)
        if best is None or rank < best[0]:
            best = (rank, mapping, analysis, sub.search)
    if best is None:
        raise InfeasibleError(layer.name, machine.l1_bytes, smallest)
    _, mapping, analysis, sub_report = best
    status = "OPTIMAL" if statuses == {"OPTIMAL"} else sub_report.status
    value = best[0][0]
    report = SearchReport(
        sub_report.mode,
        status,
        objective,
        value,
        value if status == "OPTIMAL" else None,
        0.0 if status == "OPTIMAL" else None,
        wall,
        candidates,
    )
    return LayerSolution(layer, mapping, analysis, report)


def _solve_job(args: tuple) -> LayerSolution:
    layer, machine, precision, batch, kwargs = args
    return solve_layer(layer, machine, precision, batch, **kwargs)


def solve_network(
    network: Network,
    machine: Machine,
    *,
    precision: str | None = None,
    batch: int | None = None,
    objective: str = "latency",
    search: str = "ilp",
    time_limit: float | None = 60.0,
    workers: int = 1,
    seed: int = 0,
    processes: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[LayerSolution]:
    """Solve every layer of ``network``; layers of identical shape are solved once.

    Distinct shapes are solved in ``processes`` worker processes (default: one per core,
    at most one per shape; 1 solves in this process). Results do not depend on it.
    ``progress`` is called with a layer name as each distinct shape finishes.
    """
    precision = precision or network.precision
    batch = batch or network.batch
    kwargs = dict(
        objective=objective, search=search, time_limit=time_limit, workers=workers, seed=seed
    )
    first: dict[tuple, Layer] = {}
    for layer in network.layers:
        first.setdefault(layer.shape_key(), layer)
    unique = list(first.values())
    jobs = [(layer, machine, precision, batch, kwargs) for layer in unique]
    processes = processes or min(os.cpu_count() or 1, len(unique))
    solved: dict[tuple, LayerSolution] = {}
    if processes <= 1 or len(unique) <= 1:
        for job in jobs:
            sol = _solve_job(job)
            solved[sol.layer.shape_key()] = sol
            if progress:
                progress(sol.layer.name)
    else:
        with ProcessPoolExecutor(max_workers=processes) as pool:
            for sol in pool.map(_solve_job, jobs):
                solved[sol.layer.shape_key()] = sol
                if progress:
                    progress(sol.layer.name)
    out = []
    for layer in network.layers:
        sol = solved[layer.shape_key()]
        if sol.layer.name != layer.name:
            sol = LayerSolution(
                layer,
                sol.mapping,
                replace(sol.analysis, layer=layer.name),
                replace(sol.search, shared_with=sol.layer.name),
            )
        out.append(sol)
    return out
