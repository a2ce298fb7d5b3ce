"""Schedule files from the stages' results, and back.

The file format (pydantic records, schema version, atomic writes) is ``autotune.io.schedule_json``;
this module says what goes into it: one ``LayerRecord`` per layer from the mapping, the model's
prediction, the search report, the simulation and the verification, and, reading a file back,
the machine, layers and mappings it names. ``autotune.result.TuneResult`` uses both.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from autotune.chiplets import refinement_target
from autotune.io.errors import InputError
from autotune.io.graph_json import fused_steps_of, graph_from_record
from autotune.io.machine_yaml import machine_from_description
from autotune.io.schedule_json import (
    LayerRecord,
    MappingRecord,
    PredictedRecord,
    ScheduleFile,
    SearchRecord,
    SimulatedRecord,
    VerifiedRecord,
    mapping_from_record,
    mapping_record,
    shape_record,
)
from autotune.io.schedule_json import load as load_schedule_file
from autotune.ir.fusion import fuse_depthwise
from autotune.ir.graph import Graph, GraphError
from autotune.ir.layer import Layer
from autotune.ir.lowering import Lowering, lower
from autotune.ir.machine import Machine
from autotune.ir.mapping import Buffers, Mapping
from autotune.ir.precision import word_bytes
from autotune.model.analysis import Analysis
from autotune.search.solve import SearchReport
from autotune.sim.result import SimResult
from autotune.tiling import MappingError, declared_buffers, task_grid
from autotune.verification.check import Verification

__all__ = ["layer_record", "mapping_of", "read_schedule", "search_report"]


def layer_record(
    layer: Layer,
    mapping: Mapping,
    predicted: Analysis,
    search: SearchReport,
    simulated: SimResult | None,
    verified: Verification | None,
    trials: int,
    package: bool,
) -> LayerRecord:
    """The JSON record of one tuned layer (``package``: the machine has several chiplets,
    so the die-to-die figures are written)."""
    package_figures = (
        dict(d2d_bytes=predicted.d2d_bytes, d2d_cycles=predicted.d2d_cycles) if package else {}
    )
    return LayerRecord(
        name=layer.name,
        kind=layer.kind,
        shape=shape_record(layer),
        mapping=mapping_record(mapping, layer.c_out, predicted.buffer_bytes),
        predicted=PredictedRecord(
            cycles=predicted.cycles,
            macs=predicted.macs,
            offchip_bytes=predicted.offchip_bytes,
            intercluster_bytes=predicted.intercluster_bytes,
            l1_bytes=predicted.l1_bytes,
            ccr=round(predicted.ccr, 6) if math.isfinite(predicted.ccr) else None,
            bound=predicted.bound,
            **package_figures,
        ),
        simulated=None
        if simulated is None
        else SimulatedRecord(
            cycles=simulated.cycles,
            breakdown={k: round(v, 3) for k, v in simulated.breakdown.as_dict().items()},
            hbm_bytes_per_cycle=round(simulated.hbm_bytes_per_cycle, 6),
            fpu_utilization=round(simulated.fpu_utilization, 6),
            d2d_bytes=simulated.d2d_bytes if package else None,
        ),
        search=SearchRecord(
            mode=search.mode,
            status=search.status,
            objective=search.objective,
            value=search.value,
            bound=search.bound,
            gap=None if search.gap is None else round(search.gap, 9),
            wall_s=round(search.wall_s, 3),
            candidates=search.candidates,
            trials=trials,
            shared_with=search.shared_with,
        ),
        verified=None
        if verified is None
        else VerifiedRecord(
            ok=verified.ok,
            errors=list(verified.errors),
            max_abs_error=float(verified.max_abs_error),
            max_rel_error=float(verified.max_rel_error),
        ),
    )


def read_schedule(path: str | Path) -> tuple[ScheduleFile, Machine]:
    """A schedule file and the machine it embeds (``InputError`` naming the file if either
    is malformed)."""
    schedule = load_schedule_file(path)
    return schedule, machine_from_description(schedule.machine, str(path))


def graph_of(schedule: ScheduleFile, path: str | Path) -> Graph | None:
    """The graph a schedule file records (rebuilt and checked), or None without one."""
    if schedule.graph is None:
        return None
    return graph_from_record(schedule.graph, path, schedule.network)


def lowering_of(schedule: ScheduleFile, graph: Graph, path: str | Path) -> Lowering:
    """The lowering a schedule file's graph records: lowered again, with the depthwise pairs
    its fates say were fused (``ir.fusion``). Raises ``InputError`` naming the file, the
    step and the field for a graph that does not lower or a pair that cannot fuse (a
    forged file)."""
    assert schedule.graph is not None
    try:
        return fuse_depthwise(lower(graph), fused_steps_of(schedule.graph))
    except GraphError as exc:
        raise InputError(path, exc.reason, layer=exc.op, field=f"graph.{exc.field}") from None


def search_report(record: SearchRecord) -> SearchReport:
    """The search report a layer record stores."""
    return SearchReport(
        record.mode,
        record.status,
        record.objective,
        record.value,
        record.bound,
        record.gap,
        record.wall_s,
        record.candidates,
        record.shared_with,
    )


def mapping_of(
    record: MappingRecord, layer: Layer, machine: Machine, precision: str, batch: int
) -> Mapping:
    """The mapping a layer record describes, with its buffer bytes: as explicit reservations
    where they differ from what the mapping declares without them (``tiling``), so that a
    tuned mapping reads back equal to itself and an edited buffer is what runs (and is
    checked). Raises ``ValueError`` for buffer bytes no mapping can have."""
    stored = mapping_from_record(record)
    plain = stored.with_(
        buffers=Buffers(
            input_depth=stored.buffers.input_depth,
            filter_depth=stored.buffers.filter_depth,
            output_depth=stored.buffers.output_depth,
        )
    )
    try:
        # on a package the buffers are those of the split's largest part, on one chiplet
        part, chiplet, part_batch, inner = refinement_target(
            layer, plain, machine, precision, batch
        )
        grid = task_grid(part, inner, part_batch, chiplet)
    except (MappingError, ValueError):
        return stored  # the stages will say why it does not apply
    default = declared_buffers(grid, word_bytes(precision), chiplet.l1_bank_bytes)
    given = stored.buffers
    keep = {
        f"{op}_bytes": getattr(given, f"{op}_bytes")
        for op in ("input", "filter", "output", "share")
        if (getattr(given, f"{op}_bytes") or 0) != default.allocated_bytes[op]
    }
    return plain.with_(buffers=replace(plain.buffers, **keep))
