"""What tuning returns: one ``LayerResult`` per layer, the network ``Totals``, the JSON.

``TuneResult.save``/``to_json`` write the schedule file (``autotune.export`` builds the records,
``autotune.io.schedule_json`` is the format); ``TuneResult.load`` reads one back and
recomputes the model's predictions from the stored mappings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from autotune.chiplets import analyze
from autotune.export import (
    graph_of,
    layer_record,
    lowering_of,
    mapping_of,
    read_schedule,
    search_report,
)
from autotune.graphs.execute import NetworkVerification
from autotune.io.graph_json import graph_record
from autotune.io.plan_json import plan_from_record, plan_record
from autotune.io.schedule_json import (
    NetworkVerifiedRecord,
    ScheduleFile,
    ToolRecord,
    TotalsRecord,
    dumps,
    layer_from_record,
    save,
)
from autotune.ir.graph import Graph
from autotune.ir.layer import Layer
from autotune.ir.lowering import Lowering
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.ir.placement import HBM_ONLY, Placement
from autotune.ir.plan import NetworkPlan
from autotune.model.analysis import Analysis
from autotune.plans.options import StepOption
from autotune.search.solve import SearchReport
from autotune.sim.result import SimResult
from autotune.verification.check import Verification
from autotune.version import __version__


@dataclass(frozen=True)
class LayerResult:
    """One tuned layer: its mapping, the model's prediction, the simulator's and the check."""

    layer: Layer
    mapping: Mapping
    predicted: Analysis
    search: SearchReport
    simulated: SimResult | None = None
    verified: Verification | None = None
    trials: int = 0
    ilp_simulated_cycles: int | None = None
    #: The bytes of later layers' weights this layer prefetches into L2 while it runs (a
    #: network plan's).
    prefetch_bytes: int = 0

    @property
    def placement(self) -> Placement:
        """The memory level of each of the layer's streams (the model's, as analysed)."""
        return self.predicted.placement

    @property
    def cycles(self) -> int:
        """Simulated cycles where the simulator ran, else predicted."""
        return self.simulated.cycles if self.simulated is not None else self.predicted.cycles


@dataclass(frozen=True)
class Totals:
    """Network totals of a tuned batch."""

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
    graph: Graph | None = None
    lowering: Lowering | None = None
    network_verified: NetworkVerification | None = None
    plan: NetworkPlan | None = None

    @property
    def failed_layers(self) -> list[str]:
        """Names of the layers whose verification failed."""
        return [r.layer.name for r in self.layers if r.verified is not None and not r.verified.ok]

    def schedule(self) -> ScheduleFile:
        """The schedule file's content."""
        package = self.machine.chiplets > 1
        return ScheduleFile(
            tool=ToolRecord(version=__version__),
            machine=self.machine.description,
            network=self.network,
            batch=self.batch,
            precision=self.precision,
            objective=self.objective,
            seed=self.seed,
            layers=[
                layer_record(
                    r.layer,
                    r.mapping,
                    r.predicted,
                    r.search,
                    r.simulated,
                    r.verified,
                    r.trials,
                    package,
                )
                for r in self.layers
            ],
            totals=TotalsRecord(**asdict(self.totals)),
            graph=None
            if self.graph is None or self.lowering is None
            else graph_record(self.graph, self.lowering),
            verified=None
            if self.network_verified is None
            else NetworkVerifiedRecord(
                ok=self.network_verified.ok,
                tensors=len(self.network_verified.tensors),
                max_rel_error=float(self.network_verified.max_rel_error),
                worst=self.network_verified.worst.tensor,
                tolerance=self.network_verified.tolerance,
                errors=self.network_verified.errors,
            ),
            plan=None if self.plan is None else plan_record(self.plan),
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
        schedule, machine = read_schedule(path)
        plan = None if schedule.plan is None else plan_from_record(schedule.plan)
        layers = []
        for rec in schedule.layers:
            layer = layer_from_record(rec)
            mapping = mapping_of(rec.mapping, layer, machine, schedule.precision, schedule.batch)
            placement, prefetch = step_placement(plan, rec.name)
            predicted = analyze(
                layer,
                mapping,
                machine,
                schedule.precision,
                schedule.batch,
                placement=placement,
                prefetch_bytes=prefetch,
            )
            layers.append(
                LayerResult(
                    layer,
                    mapping,
                    predicted,
                    search_report(rec.search),
                    trials=rec.search.trials,
                    prefetch_bytes=prefetch,
                )
            )
        graph = graph_of(schedule, path)
        return cls.of_schedule(schedule, machine, layers, graph, plan, path=path)

    @classmethod
    def of_schedule(
        cls,
        schedule: ScheduleFile,
        machine: Machine,
        layers: list[LayerResult],
        graph: Graph | None = None,
        plan: NetworkPlan | None = None,
        *,
        path: str | Path,
    ) -> TuneResult:
        """A result with a schedule file's header (network, batch, precision, objective, seed)
        and ``layers`` rebuilt from it; the totals are recomputed from the layers. ``graph``:
        the file's graph, rebuilt (``graph_of``); its lowering is derived again (``InputError``
        naming the file ``path`` if it cannot be)."""
        lowering = None if graph is None else lowering_of(schedule, graph, path)
        return cls(
            schedule.network,
            schedule.batch,
            schedule.precision,
            schedule.objective,
            schedule.seed,
            machine,
            layers,
            totals_of(layers, machine, schedule.precision, schedule.batch),
            graph,
            lowering,
            plan=plan,
        )


def plan_figures(layers: Sequence[LayerResult]) -> list[StepOption]:
    """Each layer as a network plan's step sees it: its placement, mapping and the model's
    cycles, HBM bytes and L2 bytes there (what ``plans.check.restate`` derives a plan from)."""
    return [
        StepOption(
            r.placement,
            r.mapping,
            r.predicted.cycles,
            r.predicted.offchip_bytes,
            r.predicted.l2_bytes,
            l2_both_bytes=r.predicted.l2_both_words * r.predicted.word_bytes,
        )
        for r in layers
    ]


def step_placement(plan: NetworkPlan | None, name: str) -> tuple[Placement, int]:
    """A layer's placement and prefetched bytes in ``plan`` (all HBM, none without one or
    when the plan does not name the layer)."""
    if plan is None:
        return HBM_ONLY, 0
    try:
        return plan.placement(name), plan.prefetch_bytes(name)
    except KeyError:
        return HBM_ONLY, 0


def totals_of(layers: list[LayerResult], machine: Machine, precision: str, batch: int) -> Totals:
    """Network totals; cycles are simulated where the simulator ran, else predicted."""
    cycles = sum(r.cycles for r in layers)
    seconds = cycles / machine.clock_hz
    macs = sum(r.predicted.macs for r in layers)
    peak = machine.peak_macs_per_cycle(precision)
    return Totals(
        cycles=cycles,
        latency_s=seconds,
        images_per_s=batch / seconds if seconds else 0.0,
        tflops=2 * macs / seconds / 1e12 if seconds else 0.0,
        peak_fraction=macs / (cycles * peak) if cycles else 0.0,
        # a prefetch loads one copy of the weights into every chiplet's L2
        offchip_bytes=sum(
            r.predicted.offchip_bytes + r.prefetch_bytes * machine.chiplets for r in layers
        ),
    )
