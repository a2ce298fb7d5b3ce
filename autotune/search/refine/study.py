"""Refine one layer's mapping with Optuna against the simulator.

The analytical model the integer program optimises is an approximation; the simulator is
the more faithful judge. Each layer gets an Optuna study over the same variables as the
integer program (``search.space.SearchSpace``), seeded (``enqueue_trial``) with the
analytical model's top-k mappings, the proven optimum first. Proposals that do not apply to
the layer or do not fit L1 are pruned from the analytical footprint without simulating. The
answer is the best simulated trial, so it is never worse than the integer program's winner.

A trial's value is the run's objective measured on the simulation (``simulated_value``):
cycles for ``latency``, off-chip bytes for ``traffic``, and for ``energy`` the same
per-event energies the model charges (``Machine.energy_pj``) applied to the simulated MACs,
off-chip and inter-cluster bytes. Ties between trials go to fewer simulated cycles (stored
with each trial), then to the earlier trial. The sampler is the options' (``tpe`` or
``random``), in every process that works on the study.

Studies live in Optuna storage (``search.refine.storage``): by default an SQLite file in the
user's cache directory, so every run is resumable and cached; a study is named by everything
its result depends on (tool version, machine, precision, objective, batch, layer shape), so a
shape tuned once is taken from storage the next time. Any number of processes may work on one
study at once (several runs, ``refine_workers`` helpers, other machines on PostgreSQL): the
trial loop (``run_trials``) is this module's rather than ``Study.optimize``, so that the
budget counts every process's trials, a trial is told once, a dead process's trial is retried
and Ctrl-C leaves no trial running.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import signal
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Any

import optuna

from autotune import interrupts
from autotune.ir.layer import Layer
from autotune.ir.machine import STATIC_ENERGY, Machine
from autotune.ir.mapping import Mapping
from autotune.ir.options import TuneOptions
from autotune.ir.placement import HBM_ONLY, Placement
from autotune.ir.precision import word_bytes
from autotune.model.footprint import footprint
from autotune.search.objective import VARIABLES
from autotune.search.refine.storage import (
    GRACE_PERIOD_S,
    create_or_load_study,
    fail_stale_trials,
    heartbeat,
    open_storage,
    prepare_storage,
    retry_callback,
)
from autotune.search.space import SearchSpace, search_space
from autotune.sim.result import SimResult
from autotune.sim.simulate import simulate as simulate_chiplet
from autotune.tiling import MappingError, task_grid
from autotune.version import __version__

#: Bump when the search space or the meaning of a trial changes: old studies are not reused.
#: 3: a trial's value is the objective measured on the simulation (was: cycles always).
#: 4: the energy objective charges L2 bytes and the static energy per cycle; studies are
#: named by the layer's placement and prefetch too.
#: 5: the simulator waits the first tiles' round trip after their transfer (a trial's
#: simulated cycles changed).
#: 6: a store's round trip passes after its bytes (a trial's simulated cycles changed).
#: 7: output stacks load the next task's first tiles beside the stream, and transfers an
#: agent restarts in the event that ends others of the same kind are no longer ended with
#: them (a trial's simulated cycles changed).
#: 8: Alg. 3's double-buffered streams are a transfer of their own, as Alg. 1/2's (a trial's
#: simulated cycles changed).
#: 9: ``d_f`` takes a third value, the deep filter buffer (a study of 8 lacks the integer
#: program's incumbents that use it).
SPACE_VERSION = 9

#: The simulator as refinement calls it:
#: ``simulate(layer, mapping, machine, precision, batch, placement, prefetch_bytes)``.
Simulator = Callable[[Layer, Mapping, Machine, str, int, Placement, int], SimResult]


@dataclass(frozen=True)
class RefineResult:
    mapping: Mapping
    cycles: int  # simulated cycles of ``mapping``
    ilp_cycles: int  # simulated cycles of the integer program's mapping
    trials: int  # completed or pruned trials in the study (all runs)
    simulated: int  # trials that ran the simulator
    cached: bool  # True if the study was already complete: nothing was run
    wall_s: float
    study: str


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=10)
    raise ValueError(f"unknown sampler {name!r} (tpe, random)")


def study_name(
    layer: Layer,
    machine: Machine,
    precision: str,
    batch: int,
    objective: str,
    sampler: str = "tpe",
    placement: Placement = HBM_ONLY,
    prefetch_bytes: int = 0,
) -> str:
    """The study's name: a hash of everything its trials' values depend on (with a network
    plan's placement and prefetch)."""
    key = json.dumps(
        [
            __version__,
            SPACE_VERSION,
            machine.description,
            precision,
            batch,
            objective,
            sampler,
            list(layer.shape_key()),
            placement.label(),
            prefetch_bytes,
        ],
        sort_keys=True,
    )
    return f"autotune-{hashlib.sha1(key.encode()).hexdigest()[:20]}"


def trial_params(space: SearchSpace, mapping: Mapping) -> dict[str, int | str]:
    """The Optuna parameters that decode to ``mapping`` (for ``enqueue_trial``)."""
    tile = (mapping.tile.out_h, mapping.tile.out_w)
    params: dict[str, int | str] = {
        "alg": mapping.algorithm,
        "delta_o": space.delta_o.index(mapping.delta_o),
        "spatial": space.spatial.index(tile),
        "batch_tile": space.batch_tile.index(mapping.batch_tile),
        "in_c": space.in_c.index(mapping.tile.in_c),
        "d_in": mapping.buffers.input_depth,
        # the filter buffer's value (single, double, deep), counted from 1 as the depths
        "d_f": space.filter_buffers.index(
            (mapping.buffers.filter_depth, mapping.buffers.filter_bytes)
        )
        + 1,
        "d_out": mapping.buffers.output_depth,
    }
    if mapping.algorithm == "output_stack_shared":
        params["share"] = space.share.index(mapping.share_group)
    if mapping.algorithm == "output_stack" and len(space.multicast) > 1:
        params["multicast"] = space.multicast.index(mapping.multicast)
    return params


def _suggest(trial: optuna.Trial, space: SearchSpace) -> Mapping:
    sizes = space.sizes
    algorithm = trial.suggest_categorical("alg", list(space.algorithms))
    index = {"alg": space.algorithms.index(algorithm)}
    for var in ("delta_o", "spatial", "batch_tile", "in_c"):
        index[var] = trial.suggest_int(var, 0, sizes[var] - 1)
    index["share"] = (
        trial.suggest_int("share", 1, sizes["share"] - 1)
        if algorithm == "output_stack_shared"
        else 0
    )
    # d_f: single, double, and (Alg. 1-3, a layer with weights) the deep filter buffer
    filters = space.filter_values(algorithm)
    for var, values in (("d_in", 2), ("d_f", filters), ("d_out", 2)):
        index[var] = trial.suggest_int(var, 1, values) - 1
    # Only machines that multicast offer the choice (other studies are unchanged).
    index["multicast"] = (
        trial.suggest_int("multicast", 0, sizes["multicast"] - 1)
        if algorithm == "output_stack" and sizes["multicast"] > 1
        else 0
    )
    assert set(index) == set(VARIABLES)
    return space.decode(index)


def simulated_value(result: SimResult, machine: Machine, precision: str, objective: str) -> float:
    """The objective of a simulated run: cycles, off-chip bytes, or energy in pJ (the model's
    per-event energies, ``Machine.energy_pj``, on the simulated counts: an FPU operation costs
    a MAC's energy, a byte its memory's, a cycle the static energy, as in ``model.formulas``)."""
    if objective == "latency":
        return float(result.cycles)
    if objective == "traffic":
        return float(result.hbm_bytes)
    energy = machine.energy_pj
    return (
        result.ops * energy.get(f"mac_{precision}", 0.0)
        + result.hbm_bytes * energy.get("hbm_byte", 0.0)
        + result.l2_bytes * energy.get("l2_byte", 0.0)
        + result.intercluster_bytes * energy.get("noc_byte", 0.0)
        + result.cycles * energy.get(STATIC_ENERGY, 0.0)
    )


def _write(trial: optuna.Trial, **attrs: object) -> None:
    """Set the trial's user attributes, Ctrl-C held back until they are written: an interrupt
    landing in a storage transaction could leave it holding the database's write lock, and
    every later write (failing this trial among them) waiting the busy timeout."""
    with interrupts.deferred():
        for key, value in attrs.items():
            trial.set_user_attr(key, value)


@dataclass(frozen=True)
class StudyTarget:
    """What a study refines: one layer at one batch on one chiplet, and how it measures."""

    layer: Layer
    machine: Machine
    precision: str
    batch: int
    objective: str
    placement: Placement = HBM_ONLY  # a network plan's levels of the layer's streams
    prefetch_bytes: int = 0  # and the weights it prefetches into L2 meanwhile

    def simulate(self, simulate: Simulator, mapping: Mapping) -> SimResult:
        return simulate(
            self.layer,
            mapping,
            self.machine,
            self.precision,
            self.batch,
            self.placement,
            self.prefetch_bytes,
        )

    def evaluate(self, trial: optuna.Trial, space: SearchSpace, simulate: Simulator) -> float:
        """One trial: prune what does not apply or fit (no simulation), else simulate. What it
        draws and notes is written to the storage out of Ctrl-C's reach (``_write``)."""
        with interrupts.deferred():
            mapping = _suggest(trial, space)
        try:
            grid = task_grid(self.layer, mapping, self.batch, self.machine)
        except MappingError as exc:
            _write(trial, pruned=str(exc))
            raise optuna.TrialPruned() from None
        fp = footprint(grid, self.machine, word_bytes(self.precision), self.precision)
        if not fp.fits:
            _write(trial, pruned=fp.reason)
            raise optuna.TrialPruned()
        result = self.simulate(simulate, mapping)
        _write(trial, simulated=True, cycles=result.cycles)
        return simulated_value(result, self.machine, self.precision, self.objective)


def refine_layer(
    layer: Layer,
    machine: Machine,
    precision: str,
    batch: int,
    incumbents: list[Mapping],
    options: TuneOptions,
    simulate: Simulator = simulate_chiplet,
    placement: Placement = HBM_ONLY,
    prefetch_bytes: int = 0,
) -> RefineResult:
    """Refine ``incumbents[0]`` (the integer program's winner) against the simulator, the
    layer's streams at ``placement`` while it prefetches ``prefetch_bytes`` into L2 (a
    network plan's step; every trial is simulated so).

    Reads from ``options``: ``trials`` (the study's total budget, across resumed runs and
    every process sharing the study), ``refine_timeout`` (this call's seconds), ``storage``
    (an Optuna storage URL, ``"memory"``, or None for the cache file; see
    ``search.refine.storage``), ``seed``, ``objective`` (what a trial's value measures, see
    ``simulated_value``), ``sampler`` and ``refine_workers`` (processes on the shared study;
    not with "memory"). ``simulate`` is the single-chiplet simulator.

    Ctrl-C (``KeyboardInterrupt``) fails the trial under way, queues it again for the next
    run, stops the helper processes the same way, and propagates.
    """
    start = time.perf_counter()
    target = StudyTarget(
        layer, machine, precision, batch, options.objective, placement, prefetch_bytes
    )
    space = search_space(layer, machine, batch)
    url = prepare_storage(options.storage)
    name = study_name(
        layer,
        machine,
        precision,
        batch,
        options.objective,
        options.sampler,
        placement,
        prefetch_bytes,
    )
    trials = options.trials
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = None if url is None else open_storage(url)
    study, created = create_or_load_study(
        name, storage, make_sampler(options.sampler, options.seed)
    )
    if created:  # exactly one process creates the study, and only that one seeds it
        seen = set()
        for mapping in incumbents:
            params = trial_params(space, mapping)
            key = json.dumps(params, sort_keys=True)
            if key not in seen:
                seen.add(key)
                study.enqueue_trial(params, skip_if_exists=True)
    cached = _count(study, FINISHED) >= trials
    simulated = 0

    def objective_fn(trial: optuna.Trial) -> float:
        nonlocal simulated
        value = target.evaluate(trial, space, simulate)
        simulated += 1
        return value

    if not cached:
        helpers = []
        if options.refine_workers > 1 and url is not None:
            ctx = multiprocessing.get_context("spawn")
            for i in range(1, options.refine_workers):
                proc = ctx.Process(
                    target=_worker,
                    args=(target, url, name, options, options.seed + i, simulate),
                )
                proc.start()
                helpers.append(proc)
        try:
            run_trials(study, storage, objective_fn, trials, options.refine_timeout)
        except BaseException:
            _interrupt(helpers)
            raise
        for proc in helpers:
            proc.join()
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    ilp_params = trial_params(space, incumbents[0])
    ilp_trials = [t for t in complete if t.params == ilp_params]
    if ilp_trials:
        ilp = min(ilp_trials, key=_rank)
        ilp_value, ilp_cycles = _value(ilp), _cycles(ilp)
    else:
        run = target.simulate(simulate, incumbents[0])
        ilp_value = simulated_value(run, machine, precision, options.objective)
        ilp_cycles = run.cycles
    # The incumbent rule: the best simulated trial (objective, then cycles), the integer
    # program's winner on ties.
    best_mapping, best_cycles = incumbents[0], ilp_cycles
    best = min(complete, key=_rank, default=None)
    if best is not None and (_value(best), _cycles(best)) < (ilp_value, ilp_cycles):
        best_mapping, best_cycles = _decode_params(space, best.params), _cycles(best)
    return RefineResult(
        best_mapping,
        best_cycles,
        ilp_cycles,
        _count(study, FINISHED),
        simulated,
        cached,
        time.perf_counter() - start,
        name,
    )


def _value(trial: optuna.trial.FrozenTrial) -> float:
    """The objective value of a complete trial (a study of one objective: always set)."""
    if trial.value is None:
        raise ValueError(f"trial {trial.number} has no value (state {trial.state.name})")
    return float(trial.value)


#: Trials that count towards a study's budget.
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
#: Seconds between looks at a study whose last trials other processes are running, and how
#: long to wait for them when none of them finishes (and none is failed as stale).
POLL_S = 0.25
PATIENCE_S = 3 * GRACE_PERIOD_S


def _count(study: optuna.Study, states: tuple[optuna.trial.TrialState, ...]) -> int:
    return len(study.get_trials(deepcopy=False, states=states))


def run_trials(
    study: optuna.Study,
    storage: optuna.storages.BaseStorage | None,
    objective: Callable[[optuna.Trial], float],
    budget: int,
    timeout: float | None = None,
) -> None:
    """Run trials of ``study`` in this process until it holds ``budget`` finished (complete
    or pruned) trials, counting every process's, or ``timeout`` seconds have passed.

    Trials other processes are running count as well; when only they are left, wait for them
    to finish, so every process sharing the study returns the same answer. A dead process's
    trial is failed once its heartbeat is stale (``GRACE_PERIOD_S``) and queued again, and
    run here. A trial another process finished (it took our heartbeat for dead) is dropped,
    not told twice.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    with interrupts.latched():
        counted = (*FINISHED, optuna.trial.TrialState.RUNNING)
        seen, since = None, 0.0
        while deadline is None or time.monotonic() < deadline:
            with interrupts.deferred():  # storage transactions, as in ``_write``
                fail_stale_trials(study)
                trials = study.get_trials(deepcopy=False, states=counted)
            finished = sum(t.state in FINISHED for t in trials)
            if finished >= budget:
                return
            if len(trials) < budget:
                _run_trial(study, storage, objective)
                continue
            # Only trials other processes are running are missing: wait for them while the
            # study moves (a trial without heartbeats may never be failed as stale).
            now, state = time.monotonic(), (finished, frozenset(t.number for t in trials))
            if state != seen:
                seen, since = state, now
            elif now - since > PATIENCE_S:
                return
            time.sleep(POLL_S)


def _run_trial(
    study: optuna.Study,
    storage: optuna.storages.BaseStorage | None,
    objective: Callable[[optuna.Trial], float],
) -> None:
    """Ask, evaluate and tell one trial. The storage writes are shielded from Ctrl-C; an
    interrupted trial is failed and queued again (for the next run) before the interrupt
    propagates, so no trial of this process is left RUNNING."""
    trial = None
    try:
        with interrupts.deferred(), warnings.catch_warnings():
            # the heartbeats are this loop's (``heartbeat``), not Study.optimize's
            warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
            trial = study.ask()
        with heartbeat(storage, trial._trial_id):
            try:
                value: float | None = objective(trial)
                state = optuna.trial.TrialState.COMPLETE
            except optuna.TrialPruned:
                value, state = None, optuna.trial.TrialState.PRUNED
    except BaseException as exc:
        if isinstance(exc, RuntimeError) and _finished_elsewhere(exc):
            return  # another process failed this trial (stale heartbeat) and queued it again
        if trial is not None:
            _give_up(study, storage, trial, retry=isinstance(exc, KeyboardInterrupt))
        raise
    with interrupts.deferred():
        study.tell(trial, value, state=state, skip_if_finished=True)


def _give_up(
    study: optuna.Study,
    storage: optuna.storages.BaseStorage | None,
    trial: optuna.Trial,
    retry: bool,
) -> None:
    """Fail a trial this process will not finish, and queue it again if ``retry``. Should the
    storage fail here too, the trial's heartbeat has stopped: the next run fails it."""
    with interrupts.deferred():
        try:
            failed = study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
            if retry and storage is not None and failed.state == optuna.trial.TrialState.FAIL:
                retry_callback()(study, failed)
        except Exception:
            pass  # the exception under way says more than this one


def _finished_elsewhere(exc: RuntimeError) -> bool:
    """Whether ``exc`` says the trial was already finished (by another process): Optuna's
    ``UpdateFinishedTrialError`` (4.x), a plain RuntimeError before it."""
    finished = getattr(optuna.exceptions, "UpdateFinishedTrialError", None)
    if finished is not None:
        return isinstance(exc, finished)
    return "has already finished" in str(exc)


def _interrupt(helpers: Sequence[BaseProcess]) -> None:
    """Stop the helper processes as Ctrl-C would (each fails its trial and queues it again),
    and kill any that has not stopped after a few seconds."""
    for proc in helpers:
        if proc.is_alive() and proc.pid is not None:
            os.kill(proc.pid, signal.SIGINT)
    for proc in helpers:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
            proc.join()


def _cycles(trial: optuna.trial.FrozenTrial) -> int:
    """Simulated cycles of a complete trial (its value, for studies of the latency objective
    written before the cycles were stored beside it)."""
    if "cycles" in trial.user_attrs:
        return int(trial.user_attrs["cycles"])
    return int(_value(trial))


def _rank(trial: optuna.trial.FrozenTrial) -> tuple[float, int, int]:
    return (_value(trial), _cycles(trial), trial.number)


def _worker(
    target: StudyTarget,
    url: str,
    name: str,
    options: TuneOptions,
    seed: int,
    simulate: Simulator,
) -> None:
    """A helper process: run trials of the shared study until it holds ``options.trials``.
    Ctrl-C ends it quietly (its trial failed and queued again)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        storage = open_storage(url)
        study = optuna.load_study(
            study_name=name, storage=storage, sampler=make_sampler(options.sampler, seed)
        )
        space = search_space(target.layer, target.machine, target.batch)
        run_trials(
            study,
            storage,
            lambda t: target.evaluate(t, space, simulate),
            options.trials,
            options.refine_timeout,
        )
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _decode_params(space: SearchSpace, params: dict[str, Any]) -> Mapping:
    index = {
        "alg": space.algorithms.index(params["alg"]),
        "share": params.get("share", 0),
        "multicast": params.get("multicast", 0),
        **{v: params[v] for v in ("delta_o", "spatial", "batch_tile", "in_c")},
        **{v: params[v] - 1 for v in ("d_in", "d_f", "d_out")},
    }
    return space.decode(index)
