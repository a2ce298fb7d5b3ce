"""Choosing a layer's mapping on any machine: on a package, the chiplet split and what each
chiplet runs.

Every chiplet split (``autotune.chiplets.split``) has its largest part solved on one chiplet
by the single-chiplet search (``autotune.search.solve``) to proven optimality (or
enumerated); the die-to-die cost is added by ``autotune.chiplets.analysis``; the best split
under the objective wins, ties to the earlier split in ``SPLITS`` order.

For the latency objective the link cost does not depend on the inner mapping, so this is the
optimum over (split, mapping); for traffic and energy each split keeps its largest part's
optimum and the package totals (all parts) decide between splits.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from autotune.chiplets.analysis import analyze
from autotune.chiplets.split import SPLITS, ChipletPart, split_parts
from autotune.ir.layer import Layer
from autotune.ir.machine import Machine, whole_pj
from autotune.ir.mapping import Mapping
from autotune.ir.options import TuneOptions
from autotune.ir.placement import HBM_ONLY, Placement
from autotune.ir.precision import word_bytes
from autotune.model.analysis import Analysis
from autotune.search.objective import ORDER
from autotune.search.solve import (
    DEFAULT_OPTIONS,
    InfeasibleError,
    LayerSolution,
    SearchReport,
)
from autotune.search.solve import solve_by_placement as solve_placements
from autotune.search.solve import solve_layer as solve_chiplet
from autotune.tiling import MappingError


def solve_layer(
    layer: Layer,
    machine: Machine,
    precision: str = "fp32",
    batch: int = 1,
    options: TuneOptions = DEFAULT_OPTIONS,
    placement: Placement = HBM_ONLY,
) -> LayerSolution:
    """The best mapping of ``layer`` on ``machine``, one chiplet or a package (see the module
    docstring); the search settings come from ``options``. Raises ``InfeasibleError`` when no
    mapping fits L1. ``placement`` puts streams in the L2 (on a package, each chiplet's own)."""
    if machine.chiplets == 1:
        return solve_chiplet(layer, machine, precision, batch, options, placement)
    placement.check(machine)
    machine.check_precision(precision)
    chiplet = machine.chiplet()
    objective = options.objective
    solved: dict[tuple[object, ...], LayerSolution | None] = {}
    best: tuple[tuple[int, ...], Mapping, Analysis, SearchReport] | None = None
    wall, candidates, smallest = 0.0, 0, None
    statuses: set[str] = set()
    for order, split, part in largest_parts(layer, machine, precision, batch):
        key = (part.layer.shape_key(), part.batch)
        if key not in solved:
            try:
                found = solve_chiplet(
                    part.layer, chiplet, precision, part.batch, options, placement
                )
            except InfeasibleError as exc:
                solved[key] = None
                if exc.smallest is not None:
                    smallest = exc.smallest if smallest is None else min(smallest, exc.smallest)
                continue
            solved[key] = found
            wall += found.search.wall_s
            candidates += found.search.candidates
            statuses.add(found.search.status)
        sub = solved[key]
        if sub is None:
            continue
        mapping = sub.mapping.with_(chiplet_split=split)
        analysis = analyze(layer, mapping, machine, precision, batch, placement=placement)
        rank = (*package_key(analysis, objective), order)
        if best is None or rank < best[0]:
            best = (rank, mapping, analysis, sub.search)
    if best is None:
        raise InfeasibleError(layer.name, machine.l1_bytes, smallest)
    rank, mapping, analysis, sub_report = best
    status = "OPTIMAL" if statuses == {"OPTIMAL"} else sub_report.status
    value = rank[0]
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


def largest_parts(
    layer: Layer, machine: Machine, precision: str, batch: int
) -> Iterator[tuple[int, str, ChipletPart]]:
    """(order in ``SPLITS``, split, its largest part) of every split that applies to the
    layer (not, e.g., a softmax's channels)."""
    for order, split in enumerate(SPLITS):
        try:
            part = split_parts(layer, split, machine.chiplets, batch, word_bytes(precision))[0]
        except MappingError:
            continue
        yield order, split, part


def solve_by_placement(
    layer: Layer,
    machine: Machine,
    precision: str,
    batch: int,
    options: TuneOptions,
    every: Sequence[Placement],
) -> dict[Placement, LayerSolution]:
    """The best mapping of ``layer`` for every placement in ``every`` (a network plan's
    options), one chiplet or a package.

    On one chiplet, ``autotune.search.solve.solve_by_placement``. On a package, every split's
    largest part gets its best mapping for every placement on one chiplet, the die-to-die
    cost is added (``analyze``) and the best split under the objective wins per placement,
    as ``solve_layer`` does for one placement. A placement is ``OPTIMAL`` when every split's
    part was (the all-HBM and all-L2 extremes), else ``FEASIBLE`` with no bound.
    """
    if machine.chiplets == 1:
        return solve_placements(layer, machine, precision, batch, options, every)
    machine.check_precision(precision)
    chiplet = machine.chiplet()
    best: dict[Placement, tuple[tuple[int, ...], LayerSolution]] = {}
    wall, candidates, smallest = 0.0, 0, None
    exact: dict[Placement, bool] = dict.fromkeys(every, True)
    for order, split, part in largest_parts(layer, machine, precision, batch):
        try:
            found = solve_placements(part.layer, chiplet, precision, part.batch, options, every)
        except InfeasibleError as exc:
            if exc.smallest is not None:
                smallest = exc.smallest if smallest is None else min(smallest, exc.smallest)
            continue
        one = found[every[0]].search  # one pass over the part's space for all placements
        wall, candidates = wall + one.wall_s, candidates + one.candidates
        for p, sub in found.items():
            exact[p] = exact[p] and sub.search.status == "OPTIMAL"
            mapping = sub.mapping.with_(chiplet_split=split)
            analysis = analyze(layer, mapping, machine, precision, batch, placement=p)
            rank = (*package_key(analysis, options.objective), order)
            if p not in best or rank < best[p][0]:
                best[p] = (rank, LayerSolution(layer, mapping, analysis, sub.search))
    if len(best) < len(every):
        raise InfeasibleError(layer.name, machine.l1_bytes, smallest)
    out = {}
    for p in every:
        rank, sol = best[p]
        value = rank[0]
        report = SearchReport(
            sol.search.mode,
            "OPTIMAL" if exact[p] else "FEASIBLE",
            options.objective,
            value,
            value if exact[p] else None,
            0.0 if exact[p] else None,
            wall,
            candidates,
        )
        out[p] = LayerSolution(layer, sol.mapping, sol.analysis, report)
    return out


def package_key(analysis: Analysis, objective: str) -> tuple[int, ...]:
    """A package layer's figures compared in the objective's order (``ORDER``)."""
    values = {
        "cycles": analysis.cycles,
        "offchip_bytes": analysis.offchip_bytes,
        "energy": whole_pj(analysis.energy_pj),
        "l1": analysis.l1_bytes,
    }
    return tuple(values[name] for name in ORDER[objective])


def refinement_target(
    layer: Layer, mapping: Mapping, machine: Machine, precision: str, batch: int
) -> tuple[Layer, Machine, int, Mapping]:
    """What a refinement study runs on: (layer, machine, batch, incumbent mapping).

    On one chiplet, the layer itself. On a package, the largest part of ``mapping``'s chiplet
    split on one chiplet, with the mapping without its split: the split stays fixed and the
    study refines what each chiplet runs (put the split back with
    ``.with_(chiplet_split=...)``).
    """
    if machine.chiplets == 1:
        return layer, machine, batch, mapping
    part = split_parts(
        layer, mapping.chiplet_split, machine.chiplets, batch, word_bytes(precision)
    )[0]
    return part.layer, machine.chiplet(), part.batch, mapping.with_(chiplet_split="none")
