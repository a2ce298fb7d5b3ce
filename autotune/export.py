"""Schedule files from the stages' results, and back.

The file format (pydantic records, schema version, atomic writes) is ``autotune.io.schedule_json``;
this module says what goes into it: one ``LayerRecord`` per layer from the mapping, the model's
prediction, the search report, the simulation and the verification, and, reading a file back,
the machine, layers and mappings it names. ``autotune.result.TuneResult`` uses both.
"""

from __future__ import annotations

from pathlib import Path

from autotune.io.machine_yaml import machine_from_description
from autotune.io.schedule_json import (
    LayerRecord,
    PredictedRecord,
    ScheduleFile,
    SearchRecord,
    SimulatedRecord,
    VerifiedRecord,
    mapping_record,
    shape_record,
)
from autotune.io.schedule_json import load as load_schedule_file
from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.model.analysis import Analysis
from autotune.search.solve import SearchReport
from autotune.sim.result import SimResult
from autotune.verification.check import Verification

__all__ = ["layer_record", "read_schedule", "search_report"]


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
            ccr=round(predicted.ccr, 6),
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
