"""Schedule files: the versioned JSON that ``tune`` writes and ``show``/``verify``/``simulate``
and the library read back. The pydantic models are the format; ``autotune schema`` prints the
JSON Schema generated from them (shipped as ``autotune/schema/schedule.schema.json``).

Writes are atomic (temp file + rename), and keys are sorted, so the same run gives the same
bytes and an interrupted run never leaves a truncated file.

A layer of any kind (``autotune.ir.layer``) is one record. Its ``shape`` holds the fields of
a conv/fc layer, plus, only where they differ from their defaults (so a file of conv and fc
layers without epilogues is what it always was, and schema version 1 covers both):
``upscale``, ``ceil_mode``, ``count_include_pad``, ``dilation_h``, ``dilation_w``,
``upsample_mode``, ``pad_bottom``, ``pad_right``, ``epilogue`` (``{bias, residual,
activation: {kind, alpha, low, high} | null}``), ``prologue`` (a fused depthwise: ``{bias,
activation}``), ``expansion`` (a fused 1x1 before a depthwise: ``{bias, activation}``) and
``digest``. The digest is a checksum of
the kind and the shape, written for every layer that is not a plain conv or fc: an edit of a
field that changes no figure of the file (an activation's parameters, ``count_include_pad``,
a ``ceil_mode`` that rounds to the same size) would otherwise read as a valid schedule of
another network; ``autotune.audit`` re-derives it. It guards against mistakes, not forgery
(every figure of the file can be recomputed by whoever edits it).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_serializer

from autotune.files import write_atomic
from autotune.io.errors import InputError, first_validation_error
from autotune.io.graph_json import ClipBound, GraphRecord
from autotune.io.limits import (
    MAX_SCHEDULE_BYTES,
    check_batch,
    check_count,
    check_fits,
    check_json_integers,
    check_layer,
    check_name,
    read_text_bounded,
)
from autotune.io.machine_yaml import machine_from_description
from autotune.io.plan_json import PlanRecord
from autotune.ir.layer import (
    WEIGHTED_KINDS,
    Activation,
    ActivationKind,
    Epilogue,
    Expansion,
    Layer,
    LayerError,
    LayerKind,
    Prologue,
)
from autotune.ir.mapping import Buffers, Mapping, Tile
from autotune.ir.network import Network
from autotune.ir.precision import word_bytes
from autotune.ir.resample import UpsampleMode

SCHEMA_VERSION = 1
ChipletSplitName = Literal["none", "output_channels", "spatial", "images"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _omit_none(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """Leave out optional package-only fields that are absent (single-chiplet files keep
    their layout)."""
    return {k: v for k, v in data.items() if not (k in keys and v is None)}


class ActivationRecord(_Model):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    kind: ActivationKind
    alpha: float = Field(description="leaky_relu's slope below zero")
    low: ClipBound = Field(description='clip\'s lower bound ("-Infinity": none)')
    high: ClipBound = Field(description='clip\'s upper bound ("Infinity": none)')


class EpilogueRecord(_Model):
    bias: bool = Field(description="+ a per-channel bias (a folded batch norm)")
    residual: bool = Field(description="+ a residual operand of the output's shape")
    activation: ActivationRecord | None = Field(description="then this function; null: none")
    activation_first: bool = Field(
        default=False, description="the residual is added after the activation"
    )

    _omit_default = model_serializer(mode="wrap")(
        lambda self, handler: {
            k: v for k, v in handler(self).items() if not (k == "activation_first" and not v)
        }
    )


class PrologueRecord(_Model):
    bias: bool = Field(description="the fused depthwise adds a per-channel bias")
    activation: ActivationRecord | None = Field(description="then this function; null: none")


class ExpansionRecord(_Model):
    bias: bool = Field(description="the fused 1x1 adds a per-channel bias")
    activation: ActivationRecord | None = Field(description="then this function; null: none")


#: Shape fields beyond a conv/fc layer's, with the value a record leaves out.
SHAPE_DEFAULTS: dict[str, Any] = {
    "upscale": 1,
    "ceil_mode": False,
    "count_include_pad": False,
    "dilation_h": 1,
    "dilation_w": 1,
    "upsample_mode": "nearest",
    "pad_bottom": None,
    "pad_right": None,
    "epilogue": None,
    "prologue": None,
    "expansion": None,
    "digest": None,
}


def _omit_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """Leave out the shape fields at their defaults (conv/fc files keep their layout)."""
    return {k: v for k, v in data.items() if k not in SHAPE_DEFAULTS or v != SHAPE_DEFAULTS[k]}


class ShapeRecord(_Model):
    h_in: int
    w_in: int
    c_in: int
    c_out: int
    kernel_h: int
    kernel_w: int
    stride_h: int
    stride_w: int
    pad_h: int
    pad_w: int
    groups: int
    upscale: int = Field(default=1, description="upsample: the nearest-neighbour scale")
    ceil_mode: bool = Field(default=False, description="pools: output size rounded up")
    count_include_pad: bool = Field(
        default=False, description="avgpool: the padding counts in the divisor"
    )
    dilation_h: int = Field(default=1, description="conv: rows between two kernel taps")
    dilation_w: int = Field(default=1, description="conv: columns between two kernel taps")
    upsample_mode: UpsampleMode = Field(
        default="nearest", description="upsample: the interpolation (autotune.ir.resample)"
    )
    pad_bottom: int | None = Field(
        default=None, description="conv: rows of zeros below the input when not pad_h"
    )
    pad_right: int | None = Field(
        default=None, description="conv: columns of zeros right of the input when not pad_w"
    )
    epilogue: EpilogueRecord | None = Field(
        default=None, description="what the output store applies; absent: nothing"
    )
    prologue: PrologueRecord | None = Field(
        default=None,
        description="conv: the depthwise fused before this 1x1 (its window is the layer's); "
        "absent: none",
    )
    expansion: ExpansionRecord | None = Field(
        default=None,
        description="conv: the 1x1 fused before this depthwise (the layer's filter is the "
        "1x1's, its window and epilogue the depthwise's); absent: none",
    )
    digest: str | None = Field(
        default=None,
        description="checksum of the kind and the shape, for layers that are not a plain "
        "conv or fc (module docstring)",
    )

    _omit_defaults = model_serializer(mode="wrap")(
        lambda self, handler: _omit_defaults(handler(self))
    )


class TileRecord(_Model):
    out_h: int | None = Field(description="output rows per task; null = all")
    out_w: int | None = Field(description="output columns per task; null = all")
    in_c: int = Field(description="input depth slices per step (per task for input_parallel)")


class BuffersRecord(_Model):
    input: int = Field(description="bytes of the input buffer")
    filter: int
    output: int
    share: int
    input_depth: int = Field(description="1 single, 2 double buffered")
    filter_depth: int
    output_depth: int


class MappingRecord(_Model):
    algorithm: str
    report_algorithm: int | None
    delta_o: int
    batch_tile: int
    share_group: int
    tile: TileRecord
    buffers: BuffersRecord
    chiplet_split: ChipletSplitName = Field(
        default="none",
        description="how the layer is divided among a package's chiplets; "
        "the rest of the mapping is what each chiplet runs on its part",
    )
    multicast: bool = Field(
        False,
        description="one main-memory read per datum and wave, "
        "multicast to the wave's tasks (machines with dma_multicast)",
    )


class PredictedRecord(_Model):
    cycles: int
    macs: int
    offchip_bytes: int
    intercluster_bytes: int
    l1_bytes: int
    ccr: float | None = Field(
        description="MAC per off-chip word (loads and stores); null when the layer moves "
        "nothing to or from the HBM (every stream in L2)"
    )
    bound: str
    d2d_bytes: int | None = Field(
        default=None, description="bytes over the die-to-die links (package machines only)"
    )
    d2d_cycles: int | None = Field(
        default=None, description="cycles the die-to-die transfer adds (package machines only)"
    )

    _omit_absent = model_serializer(mode="wrap")(
        lambda self, handler: _omit_none(handler(self), ("d2d_bytes", "d2d_cycles"))
    )


class SimulatedRecord(_Model):
    cycles: int
    breakdown: dict[str, float] = Field(default_factory=dict)
    hbm_bytes_per_cycle: float | None = None
    fpu_utilization: float | None = None
    d2d_bytes: int | None = Field(
        default=None, description="bytes over the die-to-die links (package machines only)"
    )

    _omit_absent = model_serializer(mode="wrap")(
        lambda self, handler: _omit_none(handler(self), ("d2d_bytes",))
    )


class SearchRecord(_Model):
    mode: str
    status: str
    objective: str
    value: int
    bound: int | None
    gap: float | None
    wall_s: float
    candidates: int
    trials: int = 0
    shared_with: str | None = None


class VerifiedRecord(_Model):
    ok: bool
    errors: list[str] = Field(default_factory=list)
    max_abs_error: float | None = None
    max_rel_error: float | None = None


class LayerRecord(_Model):
    name: str
    kind: LayerKind
    shape: ShapeRecord
    mapping: MappingRecord
    predicted: PredictedRecord
    simulated: SimulatedRecord | None = None
    search: SearchRecord
    verified: VerifiedRecord | None = None


class NetworkVerifiedRecord(_Model):
    """The end-to-end check: the whole network executed through its tiled schedules,
    every stored tensor compared with the graph's independent reference."""

    ok: bool
    tensors: int = Field(description="stored tensors compared")
    max_rel_error: float = Field(description="largest error relative to the tensor's scale")
    worst: str = Field(description="the tensor with the largest relative error")
    tolerance: float
    errors: list[str] = Field(default_factory=list)


class TotalsRecord(_Model):
    cycles: int
    latency_s: float
    images_per_s: float
    tflops: float
    peak_fraction: float
    offchip_bytes: int


class ToolRecord(_Model):
    name: str = "autotune"
    version: str


class ScheduleFile(_Model):
    """A tuned network: one mapping per layer with its predicted and checked figures."""

    schema_version: int = SCHEMA_VERSION
    tool: ToolRecord
    machine: dict[str, Any] = Field(description="the resolved machine description")
    network: str
    batch: int = Field(ge=1, description="images per run")
    precision: str
    objective: str
    seed: int
    layers: list[LayerRecord]
    totals: TotalsRecord
    verified: NetworkVerifiedRecord | None = Field(
        default=None, description="the end-to-end check of the tune run (graphs only)"
    )
    graph: GraphRecord | None = Field(
        default=None,
        description="the network's operators, what became of each, and where every "
        "layer reads and writes (absent for a network known only by its layers)",
    )
    plan: PlanRecord | None = Field(
        default=None,
        description="where every tensor lives (HBM or L2 at an offset, for which steps) and "
        "each layer's placement (graphs on one chiplet)",
    )

    _omit_absent = model_serializer(mode="wrap")(
        lambda self, handler: _omit_none(handler(self), ("graph", "verified", "plan"))
    )


# -- conversions ---------------------------------------------------------------------------


#: The shape fields that are ``Layer`` fields of the same name and type.
_PLAIN_FIELDS = tuple(
    f for f in ShapeRecord.model_fields if f not in ("epilogue", "prologue", "expansion", "digest")
)


def epilogue_record(epilogue: Epilogue) -> EpilogueRecord | None:
    """The record of an epilogue; None for the identity (left out of the file)."""
    if epilogue.is_identity:
        return None
    act = epilogue.activation
    return EpilogueRecord(
        bias=epilogue.bias,
        residual=epilogue.residual,
        activation=activation_record(act),
        activation_first=epilogue.activation_first,
    )


def activation_record(act: Activation | None) -> ActivationRecord | None:
    if act is None:
        return None
    return ActivationRecord(kind=act.kind, alpha=act.alpha, low=act.low, high=act.high)


def _activation(record: ActivationRecord | None, layer: str, field_name: str) -> Activation | None:
    """The activation a record describes; ``LayerError`` naming ``field_name`` if none can."""
    if record is None:
        return None
    try:
        return Activation(record.kind, record.alpha, record.low, record.high)
    except ValueError as exc:
        raise LayerError(layer, field_name, str(exc)) from None


def shape_digest(kind: str, shape: ShapeRecord) -> str:
    """The checksum of a layer's kind and shape (the record without its digest, as its JSON
    with sorted keys): 16 hex digits of SHA-256."""
    fields = shape.model_dump(mode="json", exclude={"digest"})
    text = json.dumps({"kind": kind, "shape": fields}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def shape_record(layer: Layer) -> ShapeRecord:
    """The shape of ``layer`` as a file stores it: with its digest unless a plain conv/fc."""
    prologue, expansion = layer.prologue, layer.expansion
    record = ShapeRecord(
        **{f: getattr(layer, f) for f in _PLAIN_FIELDS},
        epilogue=epilogue_record(layer.epilogue),
        prologue=None
        if prologue is None
        else PrologueRecord(bias=prologue.bias, activation=activation_record(prologue.activation)),
        expansion=None
        if expansion is None
        else ExpansionRecord(
            bias=expansion.bias, activation=activation_record(expansion.activation)
        ),
    )
    if not _is_plain(layer.kind, record):
        record = record.model_copy(update={"digest": shape_digest(layer.kind, record)})
    return record


def _is_plain(kind: str, shape: ShapeRecord) -> bool:
    """A conv or fc record with every later field at its default (no digest needed)."""
    return kind in WEIGHTED_KINDS and all(
        getattr(shape, f) == SHAPE_DEFAULTS[f] for f in SHAPE_DEFAULTS if f != "digest"
    )


def layer_from_record(record: LayerRecord) -> Layer:
    """The layer a record describes. Raises ``LayerError`` (naming the shape's field) for a
    shape no layer of its kind can have."""
    s = record.shape
    epilogue = Epilogue()
    if s.epilogue is not None:
        act = _activation(s.epilogue.activation, record.name, "epilogue.activation")
        try:
            epilogue = Epilogue(
                s.epilogue.bias, s.epilogue.residual, act, s.epilogue.activation_first
            )
        except ValueError as exc:
            raise LayerError(record.name, "epilogue.activation_first", str(exc)) from None
    if record.kind == "fc":  # the kernel is the input's: a record that says otherwise is audited
        geometry = (s.h_in, s.w_in, 1, 1, 0, 0, 1)
    else:
        geometry = (s.kernel_h, s.kernel_w, s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.groups)
    kh, kw, sh, sw, ph, pw, groups = geometry
    return Layer(
        record.name,
        record.kind,
        s.h_in,
        s.w_in,
        s.c_in,
        s.c_out,
        kh,
        kw,
        sh,
        sw,
        ph,
        pw,
        groups,
        upscale=s.upscale,
        ceil_mode=s.ceil_mode,
        count_include_pad=s.count_include_pad,
        epilogue=epilogue,
        dilation_h=s.dilation_h,
        dilation_w=s.dilation_w,
        upsample_mode=s.upsample_mode,
        pad_bottom=s.pad_bottom,
        pad_right=s.pad_right,
        prologue=None
        if s.prologue is None
        else Prologue(
            s.prologue.bias, _activation(s.prologue.activation, record.name, "prologue.activation")
        ),
        expansion=None
        if s.expansion is None
        else Expansion(
            s.expansion.bias,
            _activation(s.expansion.activation, record.name, "expansion.activation"),
        ),
    )


def mapping_record(mapping: Mapping, c_out: int, buffer_bytes: dict[str, int]) -> MappingRecord:
    b = mapping.buffers
    return MappingRecord(
        algorithm=mapping.algorithm,
        report_algorithm=mapping.report_algorithm_for(c_out),
        delta_o=mapping.delta_o,
        batch_tile=mapping.batch_tile,
        share_group=mapping.share_group,
        tile=TileRecord(out_h=mapping.tile.out_h, out_w=mapping.tile.out_w, in_c=mapping.tile.in_c),
        buffers=BuffersRecord(
            **{op: buffer_bytes.get(op, 0) for op in ("input", "filter", "output", "share")},
            input_depth=b.input_depth,
            filter_depth=b.filter_depth,
            output_depth=b.output_depth,
        ),
        chiplet_split=cast(ChipletSplitName, mapping.chiplet_split),
        multicast=mapping.multicast,
    )


def mapping_from_record(record: MappingRecord) -> Mapping:
    """The mapping a record describes; its buffer bytes become explicit reservations (0: an
    operand without a buffer), so a file's buffers are what runs, and what is checked."""
    b = record.buffers
    return Mapping(
        record.algorithm,
        delta_o=record.delta_o,
        batch_tile=record.batch_tile,
        share_group=record.share_group,
        tile=Tile(out_h=record.tile.out_h, out_w=record.tile.out_w, in_c=record.tile.in_c),
        buffers=Buffers(
            input_bytes=b.input or None,
            filter_bytes=b.filter or None,
            output_bytes=b.output or None,
            share_bytes=b.share or None,
            input_depth=b.input_depth,
            filter_depth=b.filter_depth,
            output_depth=b.output_depth,
        ),
        chiplet_split=record.chiplet_split,
        multicast=record.multicast,
    )


# -- files -----------------------------------------------------------------------------------


def dumps(schedule: ScheduleFile) -> str:
    return json.dumps(schedule.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def save(schedule: ScheduleFile, path: str | Path) -> None:
    write_atomic(path, dumps(schedule))


def load(path: str | Path) -> ScheduleFile:
    """Read and validate a schedule file (``InputError`` naming file, layer, field).

    Within the input limits (``autotune.io.limits``): the file size, the number and names
    of the layers and the batch before validation; every layer's shape, and the network's
    fit in its machine's main memory, after it.
    """
    path = Path(path)
    text = read_text_bounded(path, MAX_SCHEDULE_BYTES, "schedule file", "MAX_SCHEDULE_BYTES")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"not valid JSON at line {exc.lineno}") from None
    except RecursionError:
        raise InputError(path, "not valid JSON: nested too deeply") from None
    if not isinstance(raw, dict):
        raise InputError(path, "expected a JSON object")
    layers = raw.get("layers")
    check_json_integers(raw, path, layers=layers if isinstance(layers, list) else None)
    version = raw.get("schema_version")
    if version != SCHEMA_VERSION:
        raise InputError(
            path,
            f"schema_version {version!r} is not supported (this autotune "
            f"reads version {SCHEMA_VERSION})",
            field="schema_version",
        )
    names = (
        [entry.get("name") if isinstance(entry, dict) else None for entry in raw.get("layers", [])]
        if isinstance(raw.get("layers"), list)
        else []
    )
    check_count(len(names), path)
    check_name(raw.get("network"), path, field="network")
    for index, name in enumerate(names):
        check_name(name, path, layer=f"#{index}")
    if isinstance(raw.get("batch"), int):
        check_batch(raw["batch"], path)
    try:
        schedule = ScheduleFile.model_validate(raw)
    except ValidationError as exc:
        raise first_validation_error(path, exc, names) from None
    _check_shapes(schedule, path)
    return schedule


def _check_shapes(schedule: ScheduleFile, path: Path) -> None:
    """Every layer a valid shape within the limits, and all of them within the memory and
    the arithmetic range of the file's machine: what ``verify`` and ``simulate`` will run."""
    layers = []
    for record in schedule.layers:
        try:
            layer = layer_from_record(record)
            check_layer(layer)
        except LayerError as exc:
            field = f"shape.{exc.field}"
            raise InputError(path, exc.reason, layer=record.name, field=field) from None
        layers.append(layer)
    try:
        word_bytes(schedule.precision)
    except ValueError as exc:
        raise InputError(path, str(exc), field="precision") from None
    machine = machine_from_description(schedule.machine, str(path))
    network = Network(schedule.network, tuple(layers), schedule.batch, source=str(path))
    check_fits(network, machine, schedule.precision)


def json_schema() -> dict[str, Any]:
    schema = ScheduleFile.model_json_schema()
    schema["$id"] = f"https://autotune.invalid/schedule-v{SCHEMA_VERSION}.schema.json"
    return schema
