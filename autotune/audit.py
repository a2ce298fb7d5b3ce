"""Checking a schedule file before anything trusts it.

A schedule file is a list of claims: this layer has this shape, this mapping with these
buffers fits L1, the model predicts these figures, the simulator measured these, the search
proved this optimum. ``audit_schedule`` re-derives every one of them that can be derived
from the file's own shape, mapping and machine (the model, the simulator and the search space
are deterministic) and reports each disagreement as a ``Finding`` naming the layer and the
field. Only a file without findings is executed by ``autotune verify``.

What is checked, and how:

* the file: a known schema version and a well-formed body (the reader, ``io.schedule_json``),
  at least one layer, no two layers of one name, every layer's objective the file's, a
  machine that equals the preset it names (a machine of another name is taken as given and
  every figure is re-derived on it), the totals recomputed from the layers, and, when the
  network is given, the same layers in the same order with the same shapes and, when both
  have one, the same graph (operators, fates, buffers, steps);
* the graph, when the file has one: its operators rebuilt (every shape rule re-checked) and
  lowered again, the stored fates, buffers and steps equal to the result, and the lowered
  layers equal to the file's layers (names, order, shapes): so a compiler reading where a
  tensor lives reads what the tuner derived;
* each layer: the kind agrees with the shape (the structure ``Layer`` gives each kind), and
  the shape's digest is that of its kind and fields (written for the layers that are not a
  plain conv or fc, whose activation parameters, ``count_include_pad`` or ``ceil_mode`` may
  change no figure below: ``io.schedule_json``); the mapping applies to the layer and the
  machine, every field of it is a value the search could choose (the search space's), its
  buffers are the bytes the mapping declares and they fit L1; every predicted
  figure equals the model's; every simulated figure equals a new simulation's; the search
  report is consistent (known mode, objective and status, bound <= value, a proven optimum has
  no gap, the gap is (value - bound) / value, the value is the objective's figure of the
  integer program's mapping, which no other mapping beats under the model, the candidate count
  is the search space's, a layer said to share another's solution has that layer's shape and
  mapping);
* the network plan (``plan``), when there is one: every tensor and step re-derived from the
  lowering and the layers' figures at their placements (``plans.check``): sizes, lifetimes,
  levels (network inputs and outputs in HBM), prefetch windows, each step's placement against
  its tensors' levels, the step and network figures, and the L2 layout: offsets aligned and
  inside the L2, no two tensors live in the same step sharing a byte. Each layer's predicted
  and simulated figures are re-derived at its planned placement and prefetch;
* after execution (``verification_findings``, by ``autotune verify``): each layer's own
  ``verified`` outcome and errors against executing the layer again with the run's seed;
* informational, not checked: ``tool``, ``seed``, the network's name (unless the network is
  given), each layer's ``search.wall_s`` and ``search.trials``, the network's ``verified``
  figures (``autotune verify`` executes the network again instead: its weights, an ONNX
  model's or seeded ones, are not in the file), the plan's ``solve_s``.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from autotune.chiplets import analyze, refinement_target, simulate
from autotune.export import (
    graph_of,
    layer_record,
    lowering_of,
    mapping_of,
    read_schedule,
    search_report,
)
from autotune.io.errors import InputError
from autotune.io.graph_json import fused_steps_of, graph_record
from autotune.io.machine_yaml import load_preset, preset_names
from autotune.io.plan_json import plan_from_record
from autotune.io.schedule_json import LayerRecord, ScheduleFile, layer_from_record
from autotune.ir.graph import Graph, GraphError
from autotune.ir.layer import Layer, LayerError
from autotune.ir.machine import Machine, whole_pj
from autotune.ir.mapping import Mapping
from autotune.ir.network import Network
from autotune.ir.options import OBJECTIVES, SEARCH_MODES
from autotune.ir.placement import HBM_ONLY, Placement
from autotune.model.analysis import Analysis, with_prefetch
from autotune.plans import fused_network
from autotune.plans.check import plan_findings
from autotune.result import LayerResult, TuneResult, plan_figures, step_placement
from autotune.search.ilp.model import count_candidates
from autotune.search.solve import OBJECTIVE_FIGURE
from autotune.search.space import SearchSpace, search_space
from autotune.sim.result import SimResult
from autotune.tiling import MappingError
from autotune.verification.check import Verification

#: Search statuses a schedule may report (CP-SAT's, and exhaustive search's OPTIMAL).
STATUSES = ("OPTIMAL", "FEASIBLE")
#: Relative tolerance for recomputed floating-point totals (sums in another order).
FLOAT_TOLERANCE = 1e-9
#: Relative tolerance for a layer's verification errors executed again with the same data
#: (numpy's sums may round differently on another machine or BLAS).
VERIFIED_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Finding:
    """One claim of the file that does not hold: which layer (None: the file), which field."""

    layer: str | None
    field: str
    message: str

    def line(self, path: str | Path) -> str:
        where = f"layer {self.layer!r}: " if self.layer is not None else ""
        return f"{path}: {where}{self.field}: {self.message}"


@dataclass(frozen=True)
class ScheduleAudit:
    """The outcome of ``audit_schedule``; ``result`` is the file as a ``TuneResult`` (with
    its predicted and re-simulated figures) when the layers could be rebuilt."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    result: TuneResult | None = None
    #: the file as read (its own ``verified`` figures, which only executing can check)
    schedule: ScheduleFile | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return not self.findings and self.result is not None

    def lines(self) -> list[str]:
        """One line per failing layer (and per failing file-level field): its first finding,
        with how many more the layer has."""
        first: dict[str | None, list[Finding]] = {}
        for f in self.findings:
            first.setdefault(f.layer if f.layer is not None else f"\0{f.field}", []).append(f)
        out = []
        for group in first.values():
            more = f" (+{len(group) - 1} more)" if len(group) > 1 else ""
            out.append(group[0].line(self.path) + more)
        return out


def audit_schedule(path: str | Path, network: Network | None = None) -> ScheduleAudit:
    """Re-derive every claim of the schedule file at ``path`` (see the module docstring).

    Raises ``InputError`` when the file cannot be read as a schedule at all (not JSON, a
    field of the wrong type, an unknown schema version); returns the findings otherwise.
    """
    schedule, machine = read_schedule(path)
    findings = _file_findings(schedule, machine, network)
    graph, graph_findings = _graph_findings(schedule, path)
    findings += graph_findings
    if any(f.field.startswith("machine") for f in findings):
        # every figure depends on the machine: re-deriving them on a forged one proves nothing
        return ScheduleAudit(str(path), findings, None)
    plan = None if schedule.plan is None else plan_from_record(schedule.plan)
    if plan is not None and schedule.graph is None:
        findings.append(Finding(None, "plan", "a plan needs the file's graph section"))
    layers: list[LayerResult] = []
    #: earlier layers by name: their shape and mapping, None where the layer did not rebuild
    by_name: dict[str, tuple[Layer, Mapping] | None] = {}
    simulations: dict[tuple[object, ...], SimResult] = {}
    for rec in schedule.layers:
        rebuilt = _audit_layer(
            rec, schedule, machine, by_name, findings, simulations, step_placement(plan, rec.name)
        )
        if rebuilt is not None:
            layers.append(rebuilt)
        by_name.setdefault(rec.name, None if rebuilt is None else (rebuilt.layer, rebuilt.mapping))
    if len(layers) != len(schedule.layers) or not layers:
        return ScheduleAudit(str(path), findings, None)
    result = TuneResult.of_schedule(schedule, machine, layers, graph, plan, path=path)
    if plan is not None and result.lowering is not None:
        figures = plan_figures(layers)
        findings += [
            Finding(None, where, problem)
            for where, problem in plan_findings(
                plan, result.lowering, machine, schedule.batch, schedule.precision, figures
            )
        ]
        if plan.status == "REFINED" and not any(rec.search.trials for rec in schedule.layers):
            findings.append(Finding(None, "plan.status", "REFINED, but no layer was refined"))
        assert schedule.plan is not None
        if schedule.plan.gap != round(plan.gap, 6):
            findings.append(
                Finding(
                    None,
                    "plan.gap",
                    f"{schedule.plan.gap}, the bound and cycles give {plan.gap:.6f}",
                )
            )
    findings += _totals_findings(schedule, result)
    return ScheduleAudit(str(path), findings, result, schedule)


def verification_findings(
    audit: ScheduleAudit, checks: Sequence[Verification], seed: int
) -> list[Finding]:
    """The tune run's own ``verified`` figures of each layer against executing the layer
    again (``checks``, one per layer in order): with the run's seed the test data are the
    same, so are the outcome and the errors (up to a float's rounding on another machine:
    ``VERIFIED_TOLERANCE``). With another seed the figures are of other data: nothing to
    compare. (The network's end-to-end figures depend on where its weights came from, an
    ONNX model's or seeded ones, which the file does not say: not compared.)"""
    schedule = audit.schedule
    if schedule is None or seed != schedule.seed:
        return []
    found = []
    for rec, check in zip(schedule.layers, checks, strict=True):
        claim = rec.verified
        if claim is None:
            continue
        figures: list[tuple[str, object, object]] = [("verified.ok", claim.ok, check.ok)]
        figures += [
            (f"verified.{name}", getattr(claim, name), float(getattr(check, name)))
            for name in ("max_abs_error", "max_rel_error")
        ]
        for where, said, found_again in figures:
            if not _same_figure(said, found_again):
                found.append(
                    Finding(
                        rec.name,
                        where,
                        f"{said}, executing the layer again with the run's seed gives "
                        f"{found_again}",
                    )
                )
    return found


def _same_figure(said: object, again: object) -> bool:
    if isinstance(again, float):
        if not isinstance(said, float | int) or isinstance(said, bool):
            return False
        if math.isnan(again) or math.isnan(said):
            return math.isnan(again) and math.isnan(said)
        return math.isclose(said, again, rel_tol=VERIFIED_TOLERANCE, abs_tol=1e-30)
    return said == again


# -- the file --------------------------------------------------------------------------------


def _file_findings(
    schedule: ScheduleFile, machine: Machine, network: Network | None
) -> list[Finding]:
    found = []
    if not schedule.layers:
        found.append(Finding(None, "layers", "the schedule has no layers"))
    seen: set[str] = set()
    for rec in schedule.layers:
        if rec.name in seen:
            found.append(Finding(rec.name, "name", "two layers have this name"))
        seen.add(rec.name)
    if schedule.objective not in OBJECTIVES:
        found.append(Finding(None, "objective", f"unknown objective {schedule.objective!r}"))
    name = machine.name
    if name in preset_names():
        preset = load_preset(name).description
        differ = _differences(schedule.machine, preset, "machine")
        if differ:
            found.append(
                Finding(
                    None,
                    differ[0],
                    f"differs from the preset {name!r} the file names "
                    f"({len(differ)} field(s) differ)",
                )
            )
    if network is not None:
        found += _network_findings(schedule, network)
    return found


def _graph_findings(schedule: ScheduleFile, path: str | Path) -> tuple[Graph | None, list[Finding]]:
    """The file's graph rebuilt, and where its stored lowering or its layers differ from
    lowering it again (nothing without a graph)."""
    if schedule.graph is None:
        return None, []
    try:
        graph = graph_of(schedule, path)
    except InputError as exc:
        return None, [Finding(exc.layer, exc.field or "graph", exc.reason)]
    assert graph is not None
    try:
        lowering = lowering_of(schedule, graph, path)
    except InputError as exc:
        return None, [Finding(exc.layer, exc.field or "graph", exc.reason)]
    found = []
    differ = _differences(_dump(schedule.graph), _dump(graph_record(graph, lowering)), "graph")
    if differ:
        found.append(
            Finding(
                None,
                differ[0],
                f"differs from lowering the file's operators again ({len(differ)} field(s))",
            )
        )
    names = [rec.name for rec in schedule.layers]
    lowered = [layer.name for layer in lowering.layers]
    if names != lowered:
        found.append(
            Finding(None, "layers", f"are not the graph's lowered layers {lowered[:4]}...")
        )
        return None, found
    for rec, layer in zip(schedule.layers, lowering.layers, strict=True):
        try:
            stored = layer_from_record(rec)
        except LayerError:
            continue  # reported with the layer
        if stored.shape_key() != layer.shape_key():
            found.append(Finding(rec.name, "shape", "differs from the graph's lowered layer"))
    return (graph if not found else None), found


def _network_findings(schedule: ScheduleFile, network: Network) -> list[Finding]:
    found = []
    if schedule.graph is not None and network.lowering is not None:
        # the network as the schedule runs it: the depthwise pairs its graph fuses fused
        try:
            network = fused_network(network, fused_steps_of(schedule.graph))
        except GraphError as exc:
            return [Finding(exc.op, f"graph.{exc.field}", exc.reason)]
    names = [rec.name for rec in schedule.layers]
    expected = [layer.name for layer in network.layers]
    if names != expected:
        missing = [n for n in expected if n not in names]
        extra = [n for n in names if n not in expected]
        what = (
            f"missing {missing[:3]}"
            if missing
            else f"not in the network {extra[:3]}"
            if extra
            else "in another order"
        )
        found.append(Finding(None, "layers", f"the layers differ from {network.name!r}: {what}"))
    shapes = {layer.name: layer for layer in network.layers}
    for rec in schedule.layers:
        layer = shapes.get(rec.name)
        if layer is None:
            continue
        try:
            stored = layer_from_record(rec)
        except LayerError:
            continue  # reported with the layer
        if stored.kind != layer.kind:
            found.append(Finding(rec.name, "kind", f"{stored.kind}, the network says {layer.kind}"))
        elif stored.shape_key() != layer.shape_key():
            found.append(Finding(rec.name, "shape", f"differs from {network.name!r}'s layer"))
    if schedule.graph is not None and network.graph is not None and network.lowering is not None:
        # the network given is what runs: a file whose graph is another one (a tensor read
        # from elsewhere, with a plan whose lifetimes fit that wiring) is not its schedule
        theirs = _dump(graph_record(network.graph, network.lowering))
        differ = _differences(_dump(schedule.graph), theirs, "graph")
        if differ:
            found.append(
                Finding(
                    None,
                    differ[0],
                    f"differs from the graph of network {network.name!r} "
                    f"({len(differ)} field(s) differ)",
                )
            )
    return found


def _totals_findings(schedule: ScheduleFile, result: TuneResult) -> list[Finding]:
    found = []
    stored = schedule.totals.model_dump()
    for name, value in vars(result.totals).items():
        claim = stored[name]
        same = (
            claim == value
            if isinstance(value, int)
            else math.isclose(claim, value, rel_tol=FLOAT_TOLERANCE, abs_tol=0.0)
        )
        if not same:
            found.append(Finding(None, f"totals.{name}", f"{claim}, the layers give {value}"))
    return found


# -- one layer -------------------------------------------------------------------------------


def _audit_layer(
    rec: LayerRecord,
    schedule: ScheduleFile,
    machine: Machine,
    earlier: dict[str, tuple[Layer, Mapping] | None],
    findings: list[Finding],
    simulations: dict[tuple[object, ...], SimResult],
    planned: tuple[Placement, int] = (HBM_ONLY, 0),
) -> LayerResult | None:
    name = rec.name
    placement, prefetch = planned
    if not name.strip():
        findings.append(Finding(name, "name", "a layer needs a name"))

    def report(field_name: str, message: str) -> None:
        findings.append(Finding(name, field_name, message))

    try:
        layer = layer_from_record(rec)
    except LayerError as exc:
        report(f"shape.{exc.field}", exc.reason)
        return None
    try:
        mapping = mapping_of(rec.mapping, layer, machine, schedule.precision, schedule.batch)
    except ValueError as exc:
        report("mapping", str(exc))
        return None
    precision, batch = schedule.precision, schedule.batch
    try:
        predicted = _analysed(layer, mapping, machine, precision, batch, placement)
    except (MappingError, ValueError) as exc:
        report("mapping", f"does not apply: {exc}")
        return None
    if not predicted.fits:
        report("mapping.buffers", f"do not fit L1: {predicted.reason}")
        return None
    package = machine.chiplets > 1
    before = len(findings)
    # The search's claims are the layer's own figures; the prediction is the layer's as the
    # plan runs it, beside the weights it prefetches (``model.analysis.with_prefetch``).
    alone, predicted = predicted, with_prefetch(predicted, machine, prefetch)
    expected = layer_record(
        layer, mapping, predicted, search_report(rec.search), None, None, 0, package
    )
    for where, (claim, derived) in {
        "shape": (rec.shape, expected.shape),
        "mapping": (rec.mapping, expected.mapping),
        "predicted": (rec.predicted, expected.predicted),
    }.items():
        for path in _differences(_dump(claim), _dump(derived), where):
            report(path, f"{_at(claim, path)} in the file, {_at(derived, path)} re-derived")
    _audit_search(rec, schedule, layer, mapping, alone, machine, earlier, report)
    if rec.verified is not None and rec.verified.ok == bool(rec.verified.errors):
        report("verified.ok", "contradicts its own error list")
    if len(findings) > before:
        return None  # a layer already refused is not simulated
    key = (layer.shape_key(), mapping, placement, prefetch)
    if key not in simulations:  # identical layers are simulated once
        simulations[key] = _simulated(layer, mapping, machine, precision, batch, planned)
    simulated = simulations[key]
    if rec.simulated is not None:
        measured = layer_record(
            layer, mapping, predicted, search_report(rec.search), simulated, None, 0, package
        ).simulated
        assert measured is not None
        for path in _differences(_dump(rec.simulated), _dump(measured), "simulated"):
            report(
                path,
                f"{_at(rec.simulated, path)} in the file, {_at(measured, path)} simulated again",
            )
    return LayerResult(
        layer,
        mapping,
        predicted,
        search_report(rec.search),
        simulated,
        prefetch_bytes=prefetch,
    )


def _audit_search(
    rec: LayerRecord,
    schedule: ScheduleFile,
    layer: Layer,
    mapping: Mapping,
    predicted: Analysis,
    machine: Machine,
    earlier: dict[str, tuple[Layer, Mapping] | None],
    report: Any,
) -> None:
    s = rec.search
    if s.trials < 0 or s.wall_s < 0 or s.candidates < 0:
        report("search", "a count or time is negative")
    if s.mode not in SEARCH_MODES:
        report("search.mode", f"unknown search mode {s.mode!r}")
    if s.objective != schedule.objective:
        report(
            "search.objective", f"{s.objective!r}, the file's objective is {schedule.objective!r}"
        )
    if s.status not in STATUSES:
        report("search.status", f"unknown status {s.status!r} (known: {', '.join(STATUSES)})")
    if s.bound is not None and s.bound > s.value:
        report("search.bound", f"{s.bound} exceeds the value {s.value}")
    if s.status == "OPTIMAL" and (s.bound != s.value or s.gap not in (0, 0.0)):
        report("search.status", "OPTIMAL with a bound or gap that says otherwise")
    if s.mode == "exhaustive" and s.status != "OPTIMAL" and (s.bound, s.gap) != (None, None):
        # a network plan's mixed placement: the best of a shortlist, no proven bound
        report("search.bound", "an exhaustive search that is not OPTIMAL proves no bound")
    if s.gap is not None and s.bound is not None and s.value > 0:
        gap = round((s.value - s.bound) / s.value, 9)
        if not math.isclose(s.gap, gap, rel_tol=0, abs_tol=1e-9):
            report("search.gap", f"{s.gap}, (value - bound) / value is {gap}")
    figure = _objective_figure(predicted, schedule.objective)
    if figure is not None and s.objective in OBJECTIVES:
        refined = s.trials > 0
        if not refined and s.value != figure:
            report("search.value", f"{s.value}, the mapping's {schedule.objective} is {figure}")
        elif refined and s.value > figure and (machine.chiplets == 1 or s.objective == "latency"):
            report(
                "search.value",
                f"{s.value} exceeds the {schedule.objective} {figure} of the chosen mapping, "
                f"so it cannot be the optimum",
            )
    part, chiplet, part_batch, inner = refinement_target(
        layer, mapping, machine, schedule.precision, schedule.batch
    )
    space = _space(part, chiplet, part_batch)
    outside = _outside(inner, space)
    if outside is not None:
        report(f"mapping.{outside}", "not a value the search could choose for this layer")
    if machine.chiplets == 1:
        count = count_candidates(space)
        if s.candidates != count:
            report("search.candidates", f"{s.candidates}, the search space has {count}")
    elif s.candidates < 1:
        report("search.candidates", f"{s.candidates}: a solved layer has candidates")
    if s.shared_with is not None:
        other = earlier.get(s.shared_with)
        if s.shared_with not in earlier:
            report("search.shared_with", f"no earlier layer named {s.shared_with!r}")
        elif other is not None and (
            other[0].shape_key() != layer.shape_key() or other[1] != mapping
        ):
            report("search.shared_with", f"{s.shared_with!r} has another shape or mapping")


def _outside(mapping: Mapping, space: SearchSpace) -> str | None:
    """The first field of ``mapping`` that is no value of the search space (None: every
    field is one the integer program or the refinement could have chosen)."""
    b = mapping.buffers
    checks = {
        "algorithm": mapping.algorithm in space.algorithms,
        "delta_o": mapping.delta_o in space.delta_o,
        "tile": (mapping.tile.out_h, mapping.tile.out_w) in space.spatial,
        "tile.in_c": mapping.tile.in_c in space.in_c,
        "batch_tile": mapping.batch_tile in space.batch_tile,
        "share_group": mapping.share_group in space.share,
        "buffers": all(d in space.depths for d in (b.input_depth, b.output_depth))
        and (b.filter_depth, b.filter_bytes)
        in space.filter_buffers[: space.filter_values(mapping.algorithm)]
        and (b.filter_depth == 1 or space.layer.filter_words_per_output > 0)
        and (b.input_bytes, b.output_bytes, b.share_bytes) == (None,) * 3,
        "multicast": mapping.multicast in space.multicast,
    }
    return next((name for name, ok in checks.items() if not ok), None)


def _objective_figure(predicted: Analysis, objective: str) -> int | None:
    key = OBJECTIVE_FIGURE.get(objective)
    if key == "cycles":
        return predicted.cycles
    if key == "offchip_bytes":
        return predicted.offchip_bytes
    if key == "energy":
        return whole_pj(predicted.energy_pj)
    return None


# -- derivations shared between audits ---------------------------------------------------------
#
# The model, the simulator and the search space are pure functions of (layer shape, mapping,
# machine, precision, batch): re-deriving a claim for a file whose shape, mapping and machine
# another audit in this process already derived (the same schedule checked again, or edited in
# one field) reuses the result. Keys hold every input, the machine as its full description.

_CACHE_SIZE = 256
_SIMULATED: OrderedDict[tuple[object, ...], SimResult] = OrderedDict()
_SPACES: OrderedDict[tuple[object, ...], SearchSpace] = OrderedDict()
_ANALYSED: OrderedDict[tuple[object, ...], Analysis] = OrderedDict()


def _machine_key(machine: Machine) -> str:
    return json.dumps(machine.description, sort_keys=True, default=str)


def _remember(
    cache: OrderedDict[tuple[object, ...], Any], key: tuple[object, ...], make: Any
) -> Any:
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    value = make()
    cache[key] = value
    if len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)
    return value


def _simulated(
    layer: Layer,
    mapping: Mapping,
    machine: Machine,
    precision: str,
    batch: int,
    planned: tuple[Placement, int],
) -> SimResult:
    placement, prefetch = planned
    key = (layer.shape_key(), mapping, _machine_key(machine), precision, batch, planned)
    sim = _remember(
        _SIMULATED,
        key,
        lambda: simulate(
            layer,
            mapping,
            machine,
            precision,
            batch,
            placement=placement,
            prefetch_bytes=prefetch,
        ),
    )
    return sim if sim.layer == layer.name else replace(sim, layer=layer.name)


def _analysed(
    layer: Layer,
    mapping: Mapping,
    machine: Machine,
    precision: str,
    batch: int,
    placement: Placement,
) -> Analysis:
    """``analyze``, remembered like the simulations: a file audited again, or a batch of files
    of one network, re-derives each layer's figures once (failures are not remembered)."""
    key = (layer.shape_key(), mapping, _machine_key(machine), precision, batch, placement)
    a = _remember(
        _ANALYSED,
        key,
        lambda: analyze(layer, mapping, machine, precision, batch, placement=placement),
    )
    return a if a.layer == layer.name else replace(a, layer=layer.name)


def _space(layer: Layer, machine: Machine, batch: int) -> SearchSpace:
    key = (layer.shape_key(), _machine_key(machine), batch)
    return _remember(_SPACES, key, lambda: search_space(layer, machine, batch))  # type: ignore[no-any-return]


# -- comparing records ----------------------------------------------------------------------


def _dump(record: BaseModel) -> dict[str, Any]:
    return record.model_dump(mode="json")


def _differences(claim: Any, derived: Any, path: str) -> list[str]:
    """Dotted paths where two JSON values differ (every leaf, missing keys included)."""
    if isinstance(claim, dict) and isinstance(derived, dict):
        out = []
        for key in sorted(set(claim) | set(derived), key=str):
            out += _differences(claim.get(key), derived.get(key), f"{path}.{key}")
        return out
    if isinstance(claim, list) and isinstance(derived, list) and len(claim) == len(derived):
        out = []
        for i, (a, b) in enumerate(zip(claim, derived, strict=True)):
            out += _differences(a, b, f"{path}[{i}]")
        return out
    if type(claim) is not type(derived) or claim != derived:
        return [path]
    return []


def _at(record: BaseModel, path: str) -> Any:
    value: Any = _dump(record)
    for key in path.split(".")[1:]:
        value = value.get(key) if isinstance(value, dict) else None
    return value
