"""Choose one layer's mapping on one chiplet: by the integer program or exhaustive search."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.ir.errors import ArgumentsError
from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.ir.options import SEARCH_MODES, TuneOptions
from autotune.ir.placement import HBM_ONLY, Placement
from autotune.model.analysis import Analysis, analyze
from autotune.search import exhaustive
from autotune.search.ilp import model as ilp
from autotune.search.space import search_space

__all__ = [
    "SEARCH_MODES",
    "InfeasibleError",
    "LayerSolution",
    "SearchReport",
    "solve_by_placement",
    "solve_layer",
]

DEFAULT_OPTIONS = TuneOptions()
#: The formula output each objective minimises.
OBJECTIVE_FIGURE = {"latency": "cycles", "traffic": "offchip_bytes", "energy": "energy"}


class InfeasibleError(ArgumentsError, ValueError):
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
    options: TuneOptions = DEFAULT_OPTIONS,
    placement: Placement = HBM_ONLY,
) -> LayerSolution:
    """The best mapping of one layer on one chiplet under the analytical model, each of its
    streams at the memory level ``placement`` gives it (HBM or the chiplet's L2).

    The search settings come from ``options`` (``objective``, ``search``, ``time_limit``,
    ``solver_workers``, ``seed``); ``precision`` and ``batch`` are the resolved ones (a
    package's parts run at their own batch). ``search="ilp"`` solves the CP-SAT program
    (proven optimal unless ``time_limit`` cuts it short: see ``search.status``);
    ``"exhaustive"`` evaluates every candidate with numpy. Both return the same mapping.
    Raises ``InfeasibleError`` if nothing fits L1, ``ValueError`` for an L2 stream on a
    machine without an L2. The solution's ``analysis`` has the chosen mapping's figures:
    ``cycles``, ``offchip_bytes`` (HBM) and ``l2_bytes``. A package's layers are solved by
    ``autotune.chiplets.solve_layer``, which calls this for each split's largest part.
    """
    machine.check_precision(precision)
    placement.check(machine)
    objective = options.objective
    space = search_space(layer, machine, batch)
    key = OBJECTIVE_FIGURE[objective]
    if options.search == "exhaustive":
        best = exhaustive.search(space, machine, precision, objective, placement=placement)
        report = exhaustive_report(layer, machine, best, objective, exact=True)
        assert best is not None
        index, values = best.index, best.values
    else:
        result = ilp.solve(
            space,
            machine,
            precision,
            objective,
            time_limit=options.time_limit,
            workers=options.solver_workers,
            seed=options.seed,
            placement=placement,
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
    analysis = analyze(layer, mapping, machine, precision, batch, placement=placement)
    searched = (values["cycles"], values["offchip_bytes"], values["l2_bytes"])
    analysed = (analysis.cycles, analysis.offchip_bytes, analysis.l2_bytes)
    if searched != analysed or not analysis.fits:  # the model is one formula
        raise AssertionError(
            f"layer {layer.name!r}: search and analyze disagree "
            f"(cycles, HBM and L2 bytes: {searched} vs {analysed})"
        )
    return LayerSolution(layer, mapping, analysis, report)


def solve_by_placement(
    layer: Layer,
    machine: Machine,
    precision: str,
    batch: int,
    options: TuneOptions,
    every: Sequence[Placement],
) -> dict[Placement, LayerSolution]:
    """The layer's best mapping on one chiplet for every placement in ``every`` (a network
    plan's options), in one pass over the space (``exhaustive.best_by_placement``).

    The first and the last placement (all in HBM, and everything the layer may keep in L2)
    are exact: status ``OPTIMAL`` with their value as bound. A mix is the best of those two
    rankings' shortlists: ``FEASIBLE`` with no bound. Raises ``InfeasibleError`` when no
    mapping fits L1.
    """
    machine.check_precision(precision)
    space = search_space(layer, machine, batch)
    found = exhaustive.best_by_placement(space, machine, precision, options.objective, every)
    out = {}
    for p, best in found.items():
        exact = p in (every[0], every[-1])
        report = exhaustive_report(layer, machine, best, options.objective, exact)
        assert best is not None
        mapping = space.decode(best.index)
        analysis = analyze(layer, mapping, machine, precision, batch, placement=p)
        out[p] = LayerSolution(layer, mapping, analysis, report)
    return out


def exhaustive_report(
    layer: Layer, machine: Machine, best: exhaustive.Best | None, objective: str, exact: bool
) -> SearchReport:
    """The search record of an exhaustive winner: ``OPTIMAL`` with its value as bound when
    the whole space was ranked (``exact``), else ``FEASIBLE`` without one. Raises
    ``InfeasibleError`` when nothing fits L1."""
    if best is None or not best.index:
        raise InfeasibleError(layer.name, machine.l1_bytes, None if best is None else best.min_l1)
    value = best.values[OBJECTIVE_FIGURE[objective]]
    return SearchReport(
        "exhaustive",
        "OPTIMAL" if exact else "FEASIBLE",
        objective,
        value,
        value if exact else None,
        0.0 if exact else None,
        best.wall_s,
        best.candidates,
    )
