"""``tune``: the one place that chains the stages, network in -> schedules out.

solve   the integer program picks every layer's mapping (search/, through chiplets/)
refine  Optuna refines the winners against the simulator (search/refine/)
measure the winner is simulated (sim/) -- always, also without refinement
verify  the winner is executed in numpy against a reference (verification/)
export  a versioned, schema-checked JSON record per layer (result.py, export.py)

Every stage is called through ``autotune.chiplets``, which runs it on one chiplet or splits a
package's layer into per-chiplet parts. The choices of the run travel as one ``TuneOptions``.
Also here: the library calls behind the commands that read a schedule file back
(``audit_schedule``, ``verify_schedule``, ``simulate_schedule``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from autotune.audit import ScheduleAudit, audit_schedule, verification_findings
from autotune.chiplets import (
    analyze,
    execute_layer,
    refinement_target,
    simulate,
    solve_by_placement,
    solve_layer,
    verify,
)
from autotune.graphs.execute import (
    NetworkError,
    NetworkVerification,
    execute_network,
    output_arrays,
    verify_network,
)
from autotune.graphs.weights import Weights, WeightsError, seeded_weights
from autotune.io.limits import check_fits
from autotune.io.machine_yaml import resolve_machine
from autotune.io.network_yaml import load_network
from autotune.ir.fusion import fused_steps
from autotune.ir.layer import Layer
from autotune.ir.lowering import Lowering
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.ir.network import Network
from autotune.ir.options import TuneOptions
from autotune.ir.placement import HBM_ONLY, Placement
from autotune.ir.plan import NetworkPlan
from autotune.ir.precision import word_bytes
from autotune.plans import fused_network, plan_applies, plan_network
from autotune.plans.check import restate
from autotune.result import LayerResult, TuneResult, plan_figures, step_placement, totals_of
from autotune.search.exhaustive import top_k
from autotune.search.parallel import map_processes
from autotune.search.refine import refine_layer
from autotune.search.refine.storage import MEMORY, check_storage, prepare_storage
from autotune.search.solve import LayerSolution
from autotune.search.space import search_space, system_strategies
from autotune.sim.result import SimResult
from autotune.verification.check import Verification

__all__ = [
    "NetworkError",
    "WeightsError",
    "ScheduleAudit",
    "audit_schedule",
    "load_inputs",
    "load_schedule",
    "run_network",
    "simulate_schedule",
    "solve_network",
    "tune",
    "tune_network",
    "verification_findings",
    "verify_network_schedule",
    "verify_schedule",
]

#: Top-k analytical mappings each refinement study starts from.
SEED_MAPPINGS = 4

#: ``progress`` callbacks get (stage, layer name).
Progress = Callable[[str, str], None]


def tune(
    network: str | Path | Network,
    machine: str | Path | Machine | None = None,
    *,
    options: TuneOptions | None = None,
    progress: bool | Progress = False,
    precision: str | None = None,
    objective: str | None = None,
    refine: bool | None = None,
    verify: bool | None = None,
    trials: int | None = None,
    storage: str | None = None,
    seed: int | None = None,
    batch: int | None = None,
    search: str | None = None,
    time_limit: float | None = None,
    workers: int | None = None,
    timeout: float | None = None,
) -> TuneResult:
    """Tune every conv/fc layer of ``network`` for ``machine``.

    Args:
        network: a ``network.yaml`` / ``.onnx`` path or a ``Network`` built in code.
        machine: a preset name, a machine YAML path, a ``Machine``, or None (``manticore``).
        options: every choice of the run (``autotune.TuneOptions``); defaults if None.
        progress: True prints a line per stage to stderr; a callable gets (stage, layer).
        precision, objective, refine, verify, trials, storage, seed, batch, search,
            time_limit: shorthands that override the same ``options`` field when given;
            ``workers`` overrides ``refine_workers`` and ``timeout`` ``refine_timeout``.

    No printing unless ``progress`` asks for it.

    Example:
        >>> import autotune
        >>> result = autotune.tune("examples/alexnet.yaml", refine=False, verify=False)
        >>> len(result.layers), result.plan.status, result.totals.images_per_s > 0
        (11, 'OPTIMAL', True)
    """
    shorthands = {
        "precision": precision,
        "objective": objective,
        "refine": refine,
        "verify": verify,
        "trials": trials,
        "storage": storage,
        "seed": seed,
        "batch": batch,
        "search": search,
        "time_limit": time_limit,
        "refine_workers": workers,
        "refine_timeout": timeout,
    }
    given = {name: value for name, value in shorthands.items() if value is not None}
    opts = replace(options or TuneOptions(), **given)  # type: ignore[arg-type]
    net, mach, _ = load_inputs(network, machine, opts.precision)
    return tune_network(net, mach, opts, progress_reporter(progress))


def load_inputs(
    network: str | Path | Network,
    machine: str | Path | Machine | None = None,
    precision: str | None = None,
) -> tuple[Network, Machine, str]:
    """The network, the machine and the precision to compute in (``precision`` or the
    network's), checked against each other: ``InputError`` or ``ValueError`` naming what is
    wrong (an unreadable file, an unknown preset, a precision the machine lacks)."""
    net = network if isinstance(network, Network) else load_network(network)
    mach = resolve_machine(machine)
    if precision is not None:
        word_bytes(precision)
    chosen = precision or net.precision
    mach.check_precision(chosen)
    check_fits(net, mach, chosen)  # the input limits at the network's batch
    return net, mach, chosen


def tune_network(
    network: Network, machine: Machine, options: TuneOptions, progress: Progress
) -> TuneResult:
    """``tune`` on a loaded network and machine: solve, then refine, simulate and verify
    every distinct layer shape once."""
    options = resolve(options, network)
    precision, batch = str(options.precision), int(options.batch or 1)
    machine.check_precision(precision)
    check_fits(network, machine, precision, batch)  # the input limits, before any work
    options = with_storage(options)
    plan = None
    if options.plan == "network" and plan_applies(network, machine):
        planned = plan_network(
            network, machine, options, lambda name: progress("plan", name), solve_by_placement
        )
        solutions, plan = list(planned.solutions), planned.plan
        network = planned.network  # as the plan runs it: its fused pairs fused
    else:
        solutions = solve_network(network, machine, options, lambda n: progress("solve", n))
    finished = finish_network(solutions, machine, options, progress, plan)
    layers: list[LayerResult] = []
    mapping_of: dict[str, Mapping] = {}
    for sol in solutions:
        placement, prefetch = step_placement(plan, sol.layer.name)
        first = finished[(sol.layer.shape_key(), placement, prefetch)]
        search = sol.search
        # Refinement runs per (shape, placement, prefetch): a layer that shares an earlier
        # one's solve but prefetches other bytes beside it is refined on its own and may end
        # on another mapping, and then no longer shares that layer's result.
        if search.shared_with is not None and mapping_of.get(search.shared_with) != first.mapping:
            search = replace(search, shared_with=None)
        mapping_of[sol.layer.name] = first.mapping
        layers.append(
            replace(
                first,
                layer=sol.layer,
                search=search,
                predicted=replace(first.predicted, layer=sol.layer.name),
            )
        )
    if plan is not None and any(
        r.mapping != sol.mapping for r, sol in zip(layers, solutions, strict=True)
    ):
        assert network.lowering is not None
        plan = refined_plan(plan, network.lowering, machine, batch, precision, layers)
    result = TuneResult(
        network.name,
        batch,
        precision,
        options.objective,
        options.seed,
        machine,
        layers,
        totals_of(layers, machine, precision, batch),
        network.graph,
        network.lowering,
        plan=plan,
    )
    if options.verify and network.graph is not None:
        checked = verify_network_schedule(
            result, network, options.seed, lambda name: progress("network", name)
        )
        result = replace(result, network_verified=checked)
    return result


def refined_plan(
    plan: NetworkPlan,
    lowering: Lowering,
    machine: Machine,
    batch: int,
    precision: str,
    layers: Sequence[LayerResult],
) -> NetworkPlan:
    """The plan once the refinement changed some of its layers' mappings: the same layout,
    every step figure derived again from the refined layers (``plans.check.restate``),
    status ``REFINED`` and, as bound, the CP-SAT's (the model's optimum over the options the
    refined mappings were chosen among; never above the plan's cycles)."""
    again = restate(plan, lowering, machine, batch, precision, plan_figures(layers))
    return replace(again, status="REFINED", bound_cycles=min(plan.bound_cycles, again.cycles))


def resolve(options: TuneOptions, network: Network) -> TuneOptions:
    """``options`` with the network's precision and batch where the options leave them."""
    return replace(
        options,
        precision=options.precision or network.precision,
        batch=options.batch or network.batch,
    )


def with_storage(options: TuneOptions) -> TuneOptions:
    """``options`` with the refinement storage checked and opened before any solving: a bad
    one is a ``StorageError`` now, not after the first layer's solve. The default cache
    becomes its URL, or "memory" when it cannot be written (a ``StorageWarning``)."""
    if not options.refine:
        if options.storage is not None:
            check_storage(options.storage)
        return options
    url = prepare_storage(options.storage)
    return replace(options, storage=MEMORY if url is None else url)


@dataclass(frozen=True)
class _SolveJob:
    layer: Layer
    machine: Machine
    options: TuneOptions


def _solve_job(job: _SolveJob) -> LayerSolution:
    opts = job.options
    return solve_layer(job.layer, job.machine, str(opts.precision), int(opts.batch or 1), opts)


def solve_network(
    network: Network,
    machine: Machine,
    options: TuneOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[LayerSolution]:
    """Solve every layer of ``network``; layers of identical shape are solved once.

    Distinct shapes are solved in ``options.processes`` worker processes (default: one per
    core, at most one per shape; 1 solves in this process). Results do not depend on it.
    ``progress`` is called with a layer name as each distinct shape finishes.
    """
    options = resolve(options or TuneOptions(), network)
    first: dict[tuple[object, ...], Layer] = {}
    for layer in network.layers:
        first.setdefault(layer.shape_key(), layer)
    jobs = [_SolveJob(layer, machine, options) for layer in first.values()]
    solved: dict[tuple[object, ...], LayerSolution] = {}
    for sol in map_processes(_solve_job, jobs, options.processes):
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


@dataclass(frozen=True)
class _FinishJob:
    solution: LayerSolution
    machine: Machine
    options: TuneOptions
    placement: Placement
    prefetch_bytes: int


def _finish_job(job: _FinishJob) -> LayerResult:
    return finish_layer(
        job.solution, job.machine, job.options, _quiet, job.placement, job.prefetch_bytes
    )


def _quiet(stage: str, name: str) -> None:
    pass


def finish_network(
    solutions: list[LayerSolution],
    machine: Machine,
    options: TuneOptions,
    progress: Progress,
    plan: NetworkPlan | None = None,
) -> dict[tuple[object, ...], LayerResult]:
    """``finish_layer`` of each distinct (shape, placement, prefetch) of ``solutions``, by
    that key. The distinct layers are independent (each its own refinement study, seeded by
    the run's seed and the layer), so they run over ``options.processes`` worker processes,
    in order, with the same results as one after the other; serially when each study already
    has several workers (``refine_workers``) or one process is asked for."""
    jobs: dict[tuple[object, ...], _FinishJob] = {}  # (shape, placement, prefetch bytes)
    for sol in solutions:
        placement, prefetch = step_placement(plan, sol.layer.name)
        jobs.setdefault(
            (sol.layer.shape_key(), placement, prefetch),
            _FinishJob(sol, machine, options, placement, prefetch),
        )
    if options.refine_workers > 1 or options.processes == 1 or len(jobs) <= 1:
        return {
            key: finish_layer(j.solution, machine, options, progress, j.placement, j.prefetch_bytes)
            for key, j in jobs.items()
        }
    out: dict[tuple[object, ...], LayerResult] = {}
    work = list(jobs.values())
    for key, done in zip(jobs, map_processes(_finish_job, work, options.processes), strict=True):
        out[key] = done
        if options.refine:
            progress("refine", done.layer.name)
        if options.verify:
            progress("verify", done.layer.name)
    return out


def finish_layer(
    solution: LayerSolution,
    machine: Machine,
    options: TuneOptions,
    progress: Progress,
    placement: Placement = HBM_ONLY,
    prefetch_bytes: int = 0,
) -> LayerResult:
    """Refine (if asked), simulate, verify (if asked) and re-analyze one solved layer, its
    streams at ``placement`` while it prefetches ``prefetch_bytes`` (a network plan's). The
    refinement simulates every trial with the layer's streams at ``placement`` and its
    prefetch beside it (on a package: the split's largest part on one chiplet)."""
    layer, mapping = solution.layer, solution.mapping
    precision, batch = str(options.precision), int(options.batch or 1)
    n_trials, ilp_cycles = 0, None
    if options.refine:
        # on a package: the split's largest part on one chiplet, the split fixed
        part, part_machine, part_batch, inner = refinement_target(
            layer, mapping, machine, precision, batch
        )
        space = search_space(part, part_machine, part_batch)
        # the integer program's winner, the machine's own strategies, the runners-up
        seeds = [inner, *system_strategies(part, part_machine, precision, part_batch)]
        seeds += [
            space.decode(i)
            for i in top_k(
                space,
                part_machine,
                precision,
                options.objective,
                SEED_MAPPINGS,
                placement=placement,
            )
        ]
        refined = refine_layer(
            part,
            part_machine,
            precision,
            part_batch,
            seeds,
            options,
            placement=placement,
            prefetch_bytes=prefetch_bytes,
        )
        mapping, n_trials, ilp_cycles = refined.mapping, refined.trials, refined.ilp_cycles
        if machine.chiplets > 1:
            mapping = mapping.with_(chiplet_split=solution.mapping.chiplet_split)
            ilp_cycles = None  # the study's cycles are the part's, not the package's
        progress("refine", layer.name)
    # the model and the simulator see the layer as the plan runs it: at its placement,
    # beside the weights it prefetches
    args = (layer, mapping, machine, precision, batch)
    simulated = simulate(*args, placement=placement, prefetch_bytes=prefetch_bytes)
    if ilp_cycles is None:
        ilp_cycles = simulated.cycles if mapping == solution.mapping else None
    verified = None
    if options.verify:
        verified = verify(layer, mapping, machine, precision, batch, seed=options.seed)
        progress("verify", layer.name)
    predicted = analyze(*args, placement=placement, prefetch_bytes=prefetch_bytes)
    return LayerResult(
        layer,
        mapping,
        predicted,
        solution.search,
        simulated,
        verified,
        n_trials,
        ilp_cycles,
        prefetch_bytes,
    )


def load_schedule(path: str | Path) -> TuneResult:
    """A schedule file read back (``TuneResult.load``)."""
    return TuneResult.load(path)


def verify_schedule(result: TuneResult, seed: int = 0) -> list[Verification]:
    """Execute every layer of a tuned (or loaded) schedule in numpy and check it."""
    return [
        verify(r.layer, r.mapping, result.machine, result.precision, result.batch, seed=seed)
        for r in result.layers
    ]


def schedule_network(result: TuneResult, network: Network | None = None) -> Network:
    """The network a schedule runs: ``network`` (checked to be the schedule's by the caller's
    audit), else the one its graph section describes; with the depthwise pairs the schedule
    fused fused (``ir.fusion``). ``NetworkError`` without either."""
    if network is None:
        if result.graph is None:
            raise NetworkError(
                f"the schedule of {result.network!r} has no graph section: give the network file"
            )
        network = Network.of_graph(result.graph, result.batch, result.precision)
    if result.lowering is None:
        return network
    return fused_network(network, fused_steps(result.lowering))


def verify_network_schedule(
    result: TuneResult,
    network: Network | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> NetworkVerification | None:
    """Execute the whole network through the schedule's tiled layers and compare every
    stored tensor with the graph's independent reference (``graphs.execute``): the file's
    weights when the network has them (an ONNX model's), else seeded ones; each layer through
    ``chiplets.execute_layer`` (on a package: part by part). None for a schedule without a
    graph."""
    if network is None and result.graph is None:
        return None
    net = schedule_network(result, network)
    assert net.graph is not None
    weights = net.weights if net.weights is not None else seeded_weights(net.graph, seed)
    mappings = {r.layer.name: r.mapping for r in result.layers}
    return verify_network(
        net,
        mappings,
        result.machine,
        weights,
        precision=result.precision,
        batch=result.batch,
        seed=seed,
        progress=progress,
        plan=result.plan,
        execute=execute_layer,
    )


def run_network(
    result: TuneResult,
    network: Network,
    inputs: dict[str, np.ndarray],
    weights: Weights | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> dict[str, np.ndarray]:
    """The network's outputs (by tensor name, NCHW; a flattened output ``(batch, n)``),
    computed through the schedule's tiled layers: the golden outputs of the code a compiler
    generates from the schedule. ``weights``: given, else the network's own (ONNX), else
    seeded. Raises ``NetworkError`` or ``WeightsError`` for inputs or weights that do not
    fit the network."""
    if network.graph is None or network.lowering is None:
        raise NetworkError(f"network {network.name!r} has no graph")
    network = schedule_network(result, network)  # the schedule's depthwise pairs fused
    assert network.graph is not None and network.lowering is not None
    chosen = weights if weights is not None else network.weights
    if chosen is None:
        chosen = seeded_weights(network.graph, seed)
    buffers = execute_network(
        network,
        {r.layer.name: r.mapping for r in result.layers},
        result.machine,
        inputs,
        chosen,
        precision=result.precision,
        batch=result.batch,
        progress=progress,
        plan=result.plan,
        execute=execute_layer,
    )
    outputs = output_arrays(network.graph, network.lowering, buffers, result.batch)
    return dict(zip(network.graph.outputs, outputs, strict=True))


def simulate_schedule(
    result: TuneResult, layer: str | None = None, *, trace: bool = False
) -> list[tuple[LayerResult, SimResult]]:
    """Simulate the layers of a schedule (only ``layer`` if named; ``trace`` records each
    one's timeline). Raises ``KeyError`` naming the layer when there is no such layer."""
    chosen = [r for r in result.layers if layer is None or r.layer.name == layer]
    if not chosen:
        raise KeyError(layer)
    return [
        (
            r,
            simulate(
                r.layer,
                r.mapping,
                result.machine,
                result.precision,
                result.batch,
                placement=r.placement,
                prefetch_bytes=r.prefetch_bytes,
                trace=trace,
            ),
        )
        for r in chosen
    ]


def progress_reporter(progress: bool | Progress) -> Progress:
    """The ``progress`` argument as a callback: a callable as is; True prints one line per
    stage to stderr; False ignores."""
    if callable(progress):
        return progress
    if not progress:
        return lambda stage, name: None

    def show(stage: str, name: str) -> None:
        print(f"{stage:7} {name}", file=sys.stderr, flush=True)

    return show
