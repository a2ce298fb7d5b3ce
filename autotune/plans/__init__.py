"""Network plans: where every tensor of a network lives (HBM or the chiplet's L2) and how each
layer runs there, chosen by one CP-SAT model over the whole network.

A layer above the search and simulation stages (like ``chiplets``): it asks the search for
each step's best mapping under every placement of its streams (``options``), builds the
network model (``network_model``) over those options, the tensors' lifetimes and the L2,
and returns the plan with each step's solution. ``greedy`` is the baseline it is compared
with, ``per_layer`` today's all-HBM schedule. The plan's data types live in ``ir.plan``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from autotune.ir.fusion import fusable, fuse_depthwise, fused_steps
from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.network import Network
from autotune.ir.options import TuneOptions
from autotune.ir.placement import HBM_ONLY, Placement, placements
from autotune.ir.plan import NetworkPlan
from autotune.plans.greedy import greedy_choice
from autotune.plans.network_model import solve_plan
from autotune.plans.options import StepOption, step_options
from autotune.plans.problem import PlanProblem, assemble, make_problem, per_layer_choice
from autotune.plans.tensors import plan_tensors
from autotune.search.parallel import map_processes
from autotune.search.solve import LayerSolution, solve_by_placement

__all__ = [
    "PlacementSolver",
    "PlannedNetwork",
    "greedy_plan",
    "solve_network_plan",
    "fused_network",
    "network_problem",
    "per_layer_plan",
    "plan_applies",
    "plan_network",
]


@dataclass(frozen=True)
class PlannedNetwork:
    """A plan and, for every step, the solution of its layer at the plan's placement;
    ``network``: the network as the plan runs it (the depthwise pairs it fuses fused)."""

    plan: NetworkPlan
    solutions: tuple[LayerSolution, ...]
    problem: PlanProblem
    network: Network


def fused_network(network: Network, fused: Sequence[str]) -> Network:
    """``network`` with the steps before the steps ``fused`` fused into them
    (``ir.fusion``): its lowering and its layers; ``network`` itself when those are the
    pairs it has fused already. Raises ``GraphError`` for a pair that cannot fuse."""
    if network.lowering is None or fused_steps(network.lowering) == tuple(fused):
        return network
    lowering = fuse_depthwise(network.lowering, fused)
    return replace(network, layers=lowering.layers, lowering=lowering)


def plan_applies(network: Network, machine: Machine) -> bool:
    """A network plan needs the graph (tensor lifetimes) and an L2 the DMA reaches (on a
    package, every chiplet's own: see ``problem``)."""
    return network.lowering is not None and machine.has_l2


#: ``solver(layer, machine, precision, batch, options, placements)``: the layer's best
#: solution for each placement. ``search.solve.solve_by_placement`` on one chiplet;
#: ``chiplets.solve_by_placement`` on any machine (the API passes it: plans do not know
#: packages). It must pickle (a module-level function) to run in worker processes.
PlacementSolver = Callable[
    [Layer, Machine, str, int, TuneOptions, Sequence[Placement]], dict[Placement, LayerSolution]
]


@dataclass(frozen=True)
class _ShapeJob:
    layer: Layer
    machine: Machine
    options: TuneOptions
    solver: PlacementSolver


def _solve_shape(job: _ShapeJob) -> dict[Placement, LayerSolution]:
    """The layer's best mapping for every placement of its streams (exact for all-HBM and
    for all-L2, the best of their shortlists for the mixes)."""
    opts, layer = job.options, job.layer
    every = placements(layer.weight_words > 0, layer.epilogue.residual)
    if not job.machine.has_l2:
        every = (HBM_ONLY,)
    return job.solver(layer, job.machine, str(opts.precision), int(opts.batch or 1), opts, every)


def network_problem(
    network: Network,
    machine: Machine,
    options: TuneOptions,
    progress: Callable[[str], None] | None = None,
    solver: PlacementSolver = solve_by_placement,
) -> tuple[PlanProblem, dict[tuple[object, ...], LayerSolution]]:
    """The plan problem of ``network`` (every step's options: each distinct layer shape
    solved once for all its placements by ``solver``, over ``options.processes``) and the
    solutions by (shape, placement)."""
    assert network.lowering is not None
    precision, batch = str(options.precision), int(options.batch or 1)
    lowering = network.lowering
    names = [step.name for step in lowering.steps]
    fused = [names.index(name) for name in fusable(lowering)] if options.fuse_depthwise else []
    tensors = plan_tensors(lowering, batch, precision, fused)
    solutions: dict[tuple[object, ...], LayerSolution] = {}

    def solve(jobs: Sequence[tuple[Layer, Placement]]) -> list[StepOption]:
        shapes: dict[tuple[object, ...], Layer] = {}
        for layer, _ in jobs:
            shapes.setdefault(layer.shape_key(), layer)
        work = [_ShapeJob(layer, machine, options, solver) for layer in shapes.values()]
        for job, solved in zip(
            work, map_processes(_solve_shape, work, options.processes), strict=True
        ):
            for p, sol in solved.items():
                solutions[(job.layer.shape_key(), p)] = sol
            if progress is not None:
                progress(job.layer.name)
        out = []
        for layer, p in jobs:
            a = solutions[(layer.shape_key(), p)].analysis
            out.append(
                StepOption(
                    p,
                    solutions[(layer.shape_key(), p)].mapping,
                    a.cycles,
                    a.offchip_bytes,
                    a.l2_bytes,
                    l2_both_bytes=a.l2_both_words * a.word_bytes,
                )
            )
        return out

    options_per_step = step_options(lowering, tensors, machine, solve, fused)
    problem = make_problem(
        lowering, tensors, options_per_step, machine, fused, batch=batch, precision=precision
    )
    return problem, solutions


def plan_network(
    network: Network,
    machine: Machine,
    options: TuneOptions,
    progress: Callable[[str], None] | None = None,
    solver: PlacementSolver = solve_by_placement,
) -> PlannedNetwork:
    """The network CP-SAT's plan within ``options.plan_time_limit``, started from the greedy
    plan (``plan_applies`` says when there is anything to plan); ``solver`` gives each
    layer shape's options (``PlacementSolver``)."""
    problem, solved = network_problem(network, machine, options, progress, solver)
    plan = solve_network_plan(
        problem, options.plan_time_limit or 3600.0, options.solver_workers, options.seed
    )
    runs = fused_network(network, plan.fused)
    return PlannedNetwork(plan, step_solutions(runs, plan, solved), problem, runs)


def solve_network_plan(
    problem: PlanProblem, time_limit: float, workers: int = 1, seed: int = 0
) -> NetworkPlan:
    """The network CP-SAT's plan, started from the greedy one; or the greedy plan itself when
    the time limit leaves the CP-SAT's best behind it under the ranked objective (latency,
    then HBM bytes, then L2 peak): a time limit returns the best plan found, and the greedy
    plan is one."""
    greedy = greedy_choice(problem)
    choice, report = solve_plan(problem, time_limit, workers, seed, hint=greedy)
    plan = assemble(problem, choice, "network", report.status, report.bound, report.wall_s)
    start = assemble(problem, greedy, "network", report.status, report.bound, report.wall_s)
    return start if _ranked(start) < _ranked(plan) else plan


def _ranked(plan: NetworkPlan) -> tuple[int, int, int]:
    return (plan.cycles, plan.hbm_bytes, plan.l2_peak_bytes)


def step_solutions(
    network: Network, plan: NetworkPlan, solved: dict[tuple[object, ...], LayerSolution]
) -> tuple[LayerSolution, ...]:
    """Each step's solution at its planned placement, named after the step; a step with the
    shape, placement and mapping of an earlier one says it shares that one's solution."""
    out = []
    first: dict[tuple[object, ...], str] = {}
    for layer, step in zip(network.layers, plan.steps, strict=True):
        key = (layer.shape_key(), step.placement)
        sol = solved[key]
        earlier = first.setdefault(key, layer.name)
        if sol.layer.name != layer.name or earlier != layer.name:
            sol = LayerSolution(
                layer,
                sol.mapping,
                replace(sol.analysis, layer=layer.name),
                replace(sol.search, shared_with=earlier if earlier != layer.name else None),
            )
        out.append(sol)
    return tuple(out)


def greedy_plan(problem: PlanProblem) -> NetworkPlan:
    """The greedy baseline's plan (first-fit, ``greedy``)."""
    return assemble(problem, greedy_choice(problem), "network", "GREEDY")


def per_layer_plan(problem: PlanProblem) -> NetworkPlan:
    return assemble(problem, per_layer_choice(problem), "per-layer", "PER_LAYER")
