"""``tune``: the one place that chains the stages, network in -> schedules out.

solve   the integer program picks every layer's mapping (search/)
refine  Optuna refines the winners against the simulator (search/refine/)
measure the winner is simulated (sim/) -- always, also without refinement
verify  the winner is executed in numpy against a reference (verify/)
export  a versioned, schema-checked JSON record per layer (io/schedule_json.py)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from autotune.io.limits import check_fits
from autotune.io.machine_yaml import machine_from_description, resolve_machine
from autotune.io.network_yaml import load_network
from autotune.io.schedule_json import (
    LayerRecord,
    PredictedRecord,
    ScheduleFile,
    SearchRecord,
    SimulatedRecord,
    ToolRecord,
    TotalsRecord,
    VerifiedRecord,
    dumps,
    layer_from_record,
    mapping_from_record,
    mapping_record,
    save,
    shape_record,
)
from autotune.io.schedule_json import load as load_schedule
from autotune.ir.layer import Layer, Network
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.model.analysis import Analysis, analyze
from autotune.search.solve import LayerSolution, SearchReport, solve_network

#: Trials per layer when refining and no budget is given.
DEFAULT_TRIALS = 24
#: Top-k analytical mappings each refinement study starts from.
SEED_MAPPINGS = 4


@dataclass(frozen=True)
class LayerResult:
    """One tuned layer: its mapping, the model's prediction, the simulator's and the check."""

    layer: Layer
    mapping: Mapping
    predicted: Analysis
    search: SearchReport
    simulated: Any | None = None  # autotune.sim.SimResult
    verified: Any | None = None  # autotune.verify.Verification
    trials: int = 0
    ilp_simulated_cycles: int | None = None


@dataclass(frozen=True)
class Totals:
    cycles: int
    latency_s: float
    images_per_s: float
    tflops: float
    peak_fraction: float
    offchip_bytes: int


@dataclass(frozen=True)
class TuneResult:
    """What ``tune`` returns: per-layer results, network totals, and the JSON record."""

    network: str
    batch: int
    precision: str
    objective: str
    seed: int
    machine: Machine
    layers: list[LayerResult]
    totals: Totals

    def schedule(self) -> ScheduleFile:
        from autotune import __version__

        records = []
        for r in self.layers:
            a = r.predicted
            sim = r.simulated
            ver = r.verified
            package_figures = (
                dict(d2d_bytes=a.d2d_bytes, d2d_cycles=a.d2d_cycles)
                if self.machine.chiplets > 1
                else {}
            )
            records.append(
                LayerRecord(
                    name=r.layer.name,
                    kind=r.layer.kind,
                    shape=shape_record(r.layer),
                    mapping=mapping_record(r.mapping, r.layer.c_out, a.buffer_bytes),
                    predicted=PredictedRecord(
                        cycles=a.cycles,
                        macs=a.macs,
                        offchip_bytes=a.offchip_bytes,
                        intercluster_bytes=a.intercluster_bytes,
                        l1_bytes=a.l1_bytes,
                        ccr=round(a.ccr, 6),
                        bound=a.bound,
                        **package_figures,
                    ),
                    simulated=None
                    if sim is None
                    else SimulatedRecord(
                        cycles=sim.cycles,
                        breakdown={k: round(v, 3) for k, v in sim.breakdown.as_dict().items()},
                        hbm_bytes_per_cycle=round(sim.hbm_bytes_per_cycle, 6),
                        fpu_utilization=round(sim.fpu_utilization, 6),
                        d2d_bytes=sim.d2d_bytes if self.machine.chiplets > 1 else None,
                    ),
                    search=SearchRecord(
                        mode=r.search.mode,
                        status=r.search.status,
                        objective=r.search.objective,
                        value=r.search.value,
                        bound=r.search.bound,
                        gap=None if r.search.gap is None else round(r.search.gap, 9),
                        wall_s=round(r.search.wall_s, 3),
                        candidates=r.search.candidates,
                        trials=r.trials,
                        shared_with=r.search.shared_with,
                    ),
                    verified=None
                    if ver is None
                    else VerifiedRecord(
                        ok=ver.ok,
                        errors=list(ver.errors),
                        max_abs_error=float(ver.max_abs_error),
                        max_rel_error=float(ver.max_rel_error),
                    ),
                )
            )
        return ScheduleFile(
            tool=ToolRecord(version=__version__),
            machine=self.machine.description,
            network=self.network,
            batch=self.batch,
            precision=self.precision,
            objective=self.objective,
            seed=self.seed,
            layers=records,
            totals=TotalsRecord(**asdict(self.totals)),
        )

    def to_json(self) -> str:
        """Deterministic JSON (sorted keys): same input and seed give the same text, except
        the ``wall_s`` timings."""
        return dumps(self.schedule())

    def save(self, path: str | Path) -> None:
        """Write the JSON atomically (temp file + rename)."""
        save(self.schedule(), path)

    @classmethod
    def load(cls, path: str | Path) -> TuneResult:
        """Read a schedule file back; the predictions are recomputed from the mappings."""
        schedule = load_schedule(path)
        machine = machine_from_description(schedule.machine, str(path))
        layers = []
        for rec in schedule.layers:
            layer = layer_from_record(rec)
            mapping = mapping_from_record(rec.mapping)
            predicted = analyze(layer, mapping, machine, schedule.precision, schedule.batch)
            s = rec.search
            layers.append(
                LayerResult(
                    layer,
                    mapping,
                    predicted,
                    SearchReport(
                        s.mode,
                        s.status,
                        s.objective,
                        s.value,
                        s.bound,
                        s.gap,
                        s.wall_s,
                        s.candidates,
                        s.shared_with,
                    ),
                    trials=s.trials,
                )
            )
        return cls(
            schedule.network,
            schedule.batch,
            schedule.precision,
            schedule.objective,
            schedule.seed,
            machine,
            layers,
            totals_of(layers, machine, schedule.precision, schedule.batch),
        )


def totals_of(layers: list[LayerResult], machine: Machine, precision: str, batch: int) -> Totals:
    """Network totals; cycles are simulated where the simulator ran, else predicted."""
    cycles = sum(
        r.simulated.cycles if r.simulated is not None else r.predicted.cycles for r in layers
    )
    seconds = cycles / machine.clock_hz
    macs = sum(r.predicted.macs for r in layers)
    peak = machine.peak_macs_per_cycle(precision)
    return Totals(
        cycles=cycles,
        latency_s=seconds,
        images_per_s=batch / seconds if seconds else 0.0,
        tflops=2 * macs / seconds / 1e12 if seconds else 0.0,
        peak_fraction=macs / (cycles * peak) if cycles else 0.0,
        offchip_bytes=sum(r.predicted.offchip_bytes for r in layers),
    )


def tune(
    network: str | Path | Network,
    machine: str | Path | Machine | None = None,
    *,
    precision: str | None = None,
    objective: str = "latency",
    refine: bool = True,
    verify: bool = True,
    trials: int | None = None,
    storage: str | None = None,
    seed: int = 0,
    progress: bool | Callable[[str, str], None] = False,
    batch: int | None = None,
    search: str = "ilp",
    time_limit: float | None = 60.0,
    workers: int = 1,
    timeout: float | None = None,
) -> TuneResult:
    """Tune every conv/fc layer of ``network`` for ``machine``.

    Args:
        network: a ``network.yaml`` / ``.onnx`` path or a ``Network`` built in code.
        machine: a preset name, a machine YAML path, a ``Machine``, or None (``manticore``).
        precision, batch: override the network's.
        objective: ``latency`` (cycles), ``traffic`` (off-chip bytes) or ``energy``.
        refine: refine the integer program's winners against the simulator with Optuna.
        verify: execute every winner in numpy and compare with a reference.
        trials: refinement trials per distinct layer shape (default 24).
        storage: Optuna storage URL, ``"memory"``, or None (SQLite in the user cache).
        seed: seeds CP-SAT, Optuna and the verification data.
        progress: True prints a progress bar to stderr; a callable gets (stage, layer).
        search: ``ilp`` (CP-SAT, proven optimal) or ``exhaustive``.
        workers: refinement processes sharing each layer's study (needs a storage that
            several processes can open: the default SQLite file or PostgreSQL).

    No printing unless ``progress`` asks for it.

    Example:
        >>> result = tune("examples/alexnet.yaml", refine=False)   # doctest: +SKIP
        >>> result.totals.images_per_s                             # doctest: +SKIP
    """
    net = network if isinstance(network, Network) else load_network(network)
    mach = resolve_machine(machine)
    prec = precision or net.precision
    mach.check_precision(prec)
    n_batch = batch or net.batch
    check_fits(net, mach, prec, n_batch)  # the input limits, before any work
    report = _progress(progress)
    solutions = solve_network(
        net,
        mach,
        precision=prec,
        batch=n_batch,
        objective=objective,
        search=search,
        time_limit=time_limit,
        workers=1,
        seed=seed,
        progress=lambda name: report("solve", name),
    )
    results: dict[tuple, LayerResult] = {}
    for sol in solutions:
        key = sol.layer.shape_key()
        if key not in results:
            results[key] = _finish_layer(
                sol,
                mach,
                prec,
                n_batch,
                objective,
                refine,
                verify,
                trials,
                storage,
                seed,
                timeout,
                report,
                workers,
            )
    layers = []
    for sol in solutions:
        first = results[sol.layer.shape_key()]
        layers.append(
            replace(
                first,
                layer=sol.layer,
                search=sol.search,
                predicted=replace(first.predicted, layer=sol.layer.name),
            )
        )
    return TuneResult(
        net.name,
        n_batch,
        prec,
        objective,
        seed,
        mach,
        layers,
        totals_of(layers, mach, prec, n_batch),
    )


def _finish_layer(
    sol: LayerSolution,
    machine: Machine,
    precision: str,
    batch: int,
    objective: str,
    refine: bool,
    verify: bool,
    trials: int | None,
    storage: str | None,
    seed: int,
    timeout: float | None,
    report: Callable[[str, str], None],
    workers: int = 1,
) -> LayerResult:
    from autotune.sim import simulate
    from autotune.verify import verify as verify_layer

    layer, mapping = sol.layer, sol.mapping
    n_trials, ilp_cycles = 0, None
    if refine:
        from autotune.search.exhaustive import top_k
        from autotune.search.refine import refine_layer, refinement_target
        from autotune.search.space import search_space

        # on a package: the split's largest part on one chiplet, the split fixed
        part, part_machine, part_batch, inner = refinement_target(
            layer, mapping, machine, precision, batch
        )
        space = search_space(part, part_machine, part_batch)
        seeds = [inner] + [
            space.decode(i) for i in top_k(space, part_machine, precision, objective, SEED_MAPPINGS)
        ]
        refined = refine_layer(
            part,
            part_machine,
            precision,
            part_batch,
            seeds,
            trials=trials or DEFAULT_TRIALS,
            timeout=timeout,
            storage=storage,
            seed=seed,
            objective=objective,
            workers=workers,
        )
        mapping, n_trials, ilp_cycles = refined.mapping, refined.trials, refined.ilp_cycles
        if machine.chiplets > 1:
            mapping = mapping.with_(chiplet_split=sol.mapping.chiplet_split)
            ilp_cycles = None  # the study's cycles are the part's, not the package's
        report("refine", layer.name)
    simulated = simulate(layer, mapping, machine, precision, batch)
    if ilp_cycles is None:
        ilp_cycles = simulated.cycles if mapping == sol.mapping else None
    verified = None
    if verify:
        verified = verify_layer(layer, mapping, machine, precision, batch, seed=seed)
        report("verify", layer.name)
    predicted = analyze(layer, mapping, machine, precision, batch)
    return LayerResult(
        layer, mapping, predicted, sol.search, simulated, verified, n_trials, ilp_cycles
    )


def _progress(progress: bool | Callable[[str, str], None]) -> Callable[[str, str], None]:
    if callable(progress):
        return progress
    if not progress:
        return lambda stage, name: None
    import sys

    def show(stage: str, name: str) -> None:
        print(f"{stage:7} {name}", file=sys.stderr, flush=True)

    return show
