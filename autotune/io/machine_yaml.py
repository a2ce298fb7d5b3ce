"""Machine descriptions: YAML files where every number carries a unit and a source.

A parameter is ``{value, unit, source}`` or ``{value, unit, assumption}``: exactly one of
``source`` (seed and section) and ``assumption`` (why the number is plausible). Units are
checked against the unit each parameter is defined in, so a file cannot silently mix GB/s and
B/cycle. The loader converts the file into the plain ``Machine`` dataclass the core uses, and
keeps the validated description for export.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from autotune.io.bounded_yaml import load_yaml
from autotune.io.errors import InputError, first_validation_error
from autotune.io.limits import (
    MAX_CHIPLETS,
    MAX_CLUSTERS,
    MAX_COUNT,
    MAX_HBM_BYTES,
    MAX_L1_BYTES,
    MAX_LATENCY_CYCLES,
    MAX_LEVELS,
    MAX_TABLE_ROWS,
    MAX_YAML_BYTES,
    read_text_bounded,
    too_large,
)
from autotune.ir.machine import STATIC_ENERGY, Level, Machine, install_machine_source


class Parameter(BaseModel):
    """One number (or per-precision table) with its unit and provenance."""

    model_config = ConfigDict(extra="forbid")
    value: float | int | dict[str | int, float | int]
    unit: str
    source: str | None = None
    assumption: str | None = None

    @model_validator(mode="after")
    def _provenance(self) -> Parameter:
        if (self.source is None) == (self.assumption is None):
            raise ValueError("give exactly one of 'source' (seed + section) or 'assumption'")
        return self


class LevelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    fanout: Parameter
    uplink_bandwidth: Parameter
    latency: Parameter


class MachineSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    summary: str = ""
    parameters: dict[str, Parameter]
    hierarchy: list[LevelSpec]
    energy: dict[str, Parameter] = {}


#: parameter name -> (unit it must be given in, required)
UNITS: dict[str, tuple[str, bool]] = {
    "clock": ("Hz", True),
    "cores_per_cluster": ("cores", True),
    "macs_per_cycle_per_core": ("MAC/cycle", True),
    "fpu_utilization": ("fraction", True),
    "l1_size": ("B", True),
    "l1_banks": ("banks", True),
    "l1_bank_width": ("B", True),
    "dma_width": ("B/cycle", True),
    "dma_read_engines": ("engines", True),
    "dma_write_engines": ("engines", True),
    "dma_setup": ("cycles", True),
    "hbm_bandwidth": ("GB/s", True),
    "hbm_latency": ("cycles", True),
    "l2_size": ("B", False),
    # optional: the shared on-chip memory the DMA reaches (network plans keep tensors there)
    "l2_bandwidth": ("GB/s", False),
    "l2_latency": ("cycles", False),
    # optional: main-memory capacity per chiplet; networks that cannot fit are refused
    "hbm_size": ("B", False),
    # optional: packages of chiplets (seed 002), multicast DMA (seed 003), block-size
    # dependent DMA efficiency (seed 004, Table II)
    "chiplets": ("chiplets", False),
    "d2d_bandwidth": ("GB/s", False),
    "d2d_latency": ("cycles", False),
    "dma_multicast": ("flag", False),
    "dma_read_efficiency": ("fraction", False),
    "dma_write_efficiency": ("fraction", False),
}
#: parameters whose value is a table rather than one number
TABLES = ("macs_per_cycle_per_core", "dma_read_efficiency", "dma_write_efficiency")
LEVEL_UNITS = {"uplink_bandwidth": "B/cycle", "latency": "cycles"}
#: parameter -> (largest value, the limit's name): the machine-side input limits, so that no
#: machine file can make the model's per-cluster tables or the verifier's L1 arenas huge.
BOUNDS: dict[str, tuple[int, str]] = {
    "cores_per_cluster": (MAX_COUNT, "MAX_COUNT"),
    "macs_per_cycle_per_core": (MAX_COUNT, "MAX_COUNT"),
    "l1_size": (MAX_L1_BYTES, "MAX_L1_BYTES"),
    "l1_banks": (MAX_COUNT, "MAX_COUNT"),
    "l1_bank_width": (MAX_COUNT, "MAX_COUNT"),
    "dma_width": (MAX_COUNT, "MAX_COUNT"),
    "dma_read_engines": (MAX_COUNT, "MAX_COUNT"),
    "dma_write_engines": (MAX_COUNT, "MAX_COUNT"),
    "dma_setup": (MAX_LATENCY_CYCLES, "MAX_LATENCY_CYCLES"),
    "hbm_latency": (MAX_LATENCY_CYCLES, "MAX_LATENCY_CYCLES"),
    "l2_latency": (MAX_LATENCY_CYCLES, "MAX_LATENCY_CYCLES"),
    "hbm_size": (MAX_HBM_BYTES, "MAX_HBM_BYTES"),
    "chiplets": (MAX_CHIPLETS, "MAX_CHIPLETS"),
    "d2d_latency": (MAX_LATENCY_CYCLES, "MAX_LATENCY_CYCLES"),
    "fanout": (MAX_CLUSTERS, "MAX_CLUSTERS"),
    "latency": (MAX_LATENCY_CYCLES, "MAX_LATENCY_CYCLES"),
}
ENERGY_UNIT = "pJ"
#: The energy entry in W: power drawn whatever runs (leakage, idle memories).
STATIC_POWER = "static_power"
STATIC_POWER_UNIT = "W"


def _numbers(spec: MachineSpec) -> Iterator[tuple[str, str, Parameter]]:
    """(field for messages, parameter name, parameter) of every number in the file."""
    for key, param in spec.parameters.items():
        yield key, key, param
    for i, level in enumerate(spec.hierarchy):
        for key in ("fanout", "uplink_bandwidth", "latency"):
            yield f"hierarchy.{i}.{key}", key, getattr(level, key)
    for key, param in spec.energy.items():
        yield f"energy.{key}", key, param


def check_bounds(spec: MachineSpec, path: str) -> None:
    """The machine-side input limits, before anything is derived from the numbers: every
    number finite (a NaN passes every ``<= 0`` test), sizes within ``BOUNDS``, at most
    ``MAX_LEVELS`` levels, ``MAX_CLUSTERS`` clusters per chiplet, ``MAX_TABLE_ROWS`` rows."""
    if len(spec.hierarchy) > MAX_LEVELS:
        message = too_large("number of levels", len(spec.hierarchy), MAX_LEVELS, "MAX_LEVELS")
        raise InputError(path, message, field="hierarchy")
    for field, key, param in _numbers(spec):
        table = param.value if isinstance(param.value, dict) else {None: param.value}
        if len(table) > MAX_TABLE_ROWS:
            message = too_large("number of rows", len(table), MAX_TABLE_ROWS, "MAX_TABLE_ROWS")
            raise InputError(path, message, field=field)
        for value in table.values():
            if isinstance(value, float) and not math.isfinite(value):
                raise InputError(path, f"must be a finite number, got {value!r}", field=field)
            if key in BOUNDS and value > BOUNDS[key][0]:
                limit, name = BOUNDS[key]
                raise InputError(path, too_large("value", value, limit, name), field=field)
    fanouts = [level.fanout.value for level in spec.hierarchy]
    clusters = math.prod(int(f) for f in fanouts if not isinstance(f, dict) and f >= 1)
    if clusters > MAX_CLUSTERS:
        message = too_large("clusters per chiplet", clusters, MAX_CLUSTERS, "MAX_CLUSTERS")
        raise InputError(path, message, field="hierarchy")


def _scalar(path: str, key: str, param: Parameter) -> float:
    if isinstance(param.value, dict):
        raise InputError(path, "expected a single number, not a table", field=key)
    return param.value


def _positive_int(path: str, key: str, param: Parameter) -> int:
    value = _scalar(path, key, param)
    if value != int(value) or value < 1:
        raise InputError(path, f"must be a positive integer, got {value!r}", field=key)
    return int(value)


def _efficiency_table(
    path: str, key: str, param: Parameter | None
) -> tuple[tuple[int, float], ...]:
    """A ``{contiguous bytes: fraction}`` table, sorted by size, fractions in (0, 1]."""
    if param is None:
        return ()
    if not isinstance(param.value, dict) or not param.value:
        raise InputError(path, "expected a table {contiguous bytes: fraction}", field=key)
    rows = []
    for size, fraction in param.value.items():
        try:
            n = int(size)
        except ValueError:
            raise InputError(path, f"bad block size {size!r}", field=key) from None
        if n < 1 or not 0 < fraction <= 1:
            raise InputError(
                path, f"bad entry {size}: {fraction} (bytes >= 1, fraction in (0, 1])", field=key
            )
        rows.append((n, float(fraction)))
    return tuple(sorted(rows))


def _package(path: str, params: dict[str, Parameter], clock: float) -> dict[str, Any]:
    """Chiplet count and die-to-die link of a package; one chiplet needs no link."""
    if "chiplets" not in params:
        for key in ("d2d_bandwidth", "d2d_latency"):
            if key in params:
                raise InputError(path, "only meaningful with 'chiplets'", field=key)
        return {}
    chiplets = _positive_int(path, "chiplets", params["chiplets"])
    if chiplets == 1:
        return {"chiplets": 1}
    for key in ("d2d_bandwidth", "d2d_latency"):
        if key not in params:
            raise InputError(path, "required when 'chiplets' > 1", field=key)
    d2d = _scalar(path, "d2d_bandwidth", params["d2d_bandwidth"])
    if d2d <= 0:
        raise InputError(path, "must be positive", field="d2d_bandwidth")
    return {
        "chiplets": chiplets,
        "d2d_bytes_per_cycle": d2d * 1e9 / clock,
        "d2d_latency_cycles": _positive_int(path, "d2d_latency", params["d2d_latency"]),
    }


def build_machine(spec: MachineSpec, path: str) -> Machine:
    """Check units and ranges and convert a validated spec into a ``Machine``."""
    params = spec.parameters
    for key, (unit, required) in UNITS.items():
        if key not in params:
            if required:
                raise InputError(path, "required parameter is missing", field=key)
            continue
        if params[key].unit != unit:
            raise InputError(path, f"unit must be {unit!r}, got {params[key].unit!r}", field=key)
    unknown = sorted(set(params) - set(UNITS))
    if unknown:
        raise InputError(path, "unknown parameter", field=unknown[0])
    check_bounds(spec, path)
    clock = _scalar(path, "clock", params["clock"])
    if clock <= 0:
        raise InputError(path, "must be positive", field="clock")
    macs = params["macs_per_cycle_per_core"].value
    if not isinstance(macs, dict) or not macs:
        raise InputError(
            path, "expected a table {precision: MAC/cycle}", field="macs_per_cycle_per_core"
        )
    for key, param in params.items():
        if isinstance(param.value, dict) and key not in TABLES:
            raise InputError(path, "expected a single number, not a table", field=key)
    multicast = params.get("dma_multicast")
    if multicast is not None and multicast.value not in (0, 1):
        raise InputError(path, "must be 0 or 1", field="dma_multicast")
    for precision, rate in macs.items():
        if precision not in ("fp64", "fp32", "fp16") or rate != int(rate) or rate < 1:
            raise InputError(
                path, f"bad entry {precision}: {rate}", field="macs_per_cycle_per_core"
            )
    utilization = _scalar(path, "fpu_utilization", params["fpu_utilization"])
    if not 0 < utilization <= 1:
        raise InputError(path, "must be in (0, 1]", field="fpu_utilization")
    if not spec.hierarchy:
        raise InputError(path, "needs at least one level", field="hierarchy")
    levels = []
    for i, lv in enumerate(spec.hierarchy):
        for key, unit in LEVEL_UNITS.items():
            if getattr(lv, key).unit != unit:
                raise InputError(path, f"unit must be {unit!r}", field=f"hierarchy.{i}.{key}")
        bandwidth = _scalar(path, f"hierarchy.{i}.uplink_bandwidth", lv.uplink_bandwidth)
        if bandwidth <= 0:
            raise InputError(path, "must be positive", field=f"hierarchy.{i}.uplink_bandwidth")
        levels.append(
            Level(
                name=lv.name,
                fanout=_positive_int(path, f"hierarchy.{i}.fanout", lv.fanout),
                uplink_bytes_per_cycle=float(bandwidth),
                latency_cycles=_positive_int(path, f"hierarchy.{i}.latency", lv.latency),
            )
        )
    energy = {}
    for key, param in spec.energy.items():
        if key == STATIC_POWER:  # W, stored as pJ per cycle
            if param.unit != STATIC_POWER_UNIT:
                raise InputError(path, f"unit must be {STATIC_POWER_UNIT!r}", field=f"energy.{key}")
            watts = float(_scalar(path, f"energy.{key}", param))
            energy[STATIC_ENERGY] = watts / float(clock) * 1e12
            continue
        if param.unit != ENERGY_UNIT:
            raise InputError(path, f"unit must be {ENERGY_UNIT!r}", field=f"energy.{key}")
        energy[key] = float(_scalar(path, f"energy.{key}", param))
    hbm_gbs = _scalar(path, "hbm_bandwidth", params["hbm_bandwidth"])
    if hbm_gbs <= 0:
        raise InputError(path, "must be positive", field="hbm_bandwidth")
    return Machine(
        name=spec.name,
        clock_hz=float(clock),
        cores_per_cluster=_positive_int(path, "cores_per_cluster", params["cores_per_cluster"]),
        macs_per_cycle_per_core={str(k): int(v) for k, v in sorted(macs.items())},
        fpu_utilization=float(utilization),
        l1_bytes=_positive_int(path, "l1_size", params["l1_size"]),
        l1_banks=_positive_int(path, "l1_banks", params["l1_banks"]),
        l1_bank_bytes=_positive_int(path, "l1_bank_width", params["l1_bank_width"]),
        dma_bytes_per_cycle=_positive_int(path, "dma_width", params["dma_width"]),
        dma_read_engines=_positive_int(path, "dma_read_engines", params["dma_read_engines"]),
        dma_write_engines=_positive_int(path, "dma_write_engines", params["dma_write_engines"]),
        dma_setup_cycles=int(_scalar(path, "dma_setup", params["dma_setup"])),
        hbm_bytes_per_cycle=hbm_gbs * 1e9 / clock,
        hbm_latency_cycles=_positive_int(path, "hbm_latency", params["hbm_latency"]),
        l2_bytes=(_positive_int(path, "l2_size", params["l2_size"]) if "l2_size" in params else 0),
        **_l2_port(path, params, float(clock)),
        hbm_bytes=(
            _positive_int(path, "hbm_size", params["hbm_size"]) if "hbm_size" in params else 0
        ),
        levels=tuple(levels),
        energy_pj=energy,
        dma_multicast=bool(multicast is not None and multicast.value),
        dma_read_efficiency=_efficiency_table(
            path, "dma_read_efficiency", params.get("dma_read_efficiency")
        ),
        dma_write_efficiency=_efficiency_table(
            path, "dma_write_efficiency", params.get("dma_write_efficiency")
        ),
        **_package(path, params, float(clock)),
        description=spec.model_dump(mode="json", exclude_none=True),
    )


def _l2_port(path: str, params: dict[str, Parameter], clock: float) -> dict[str, Any]:
    """The L2's bandwidth and latency, given together with a positive ``l2_size``."""
    given = [key for key in ("l2_bandwidth", "l2_latency") if key in params]
    if not given:
        return {}
    if "l2_size" not in params:
        raise InputError(path, "needs l2_size (the L2 it describes)", field=given[0])
    missing = [key for key in ("l2_bandwidth", "l2_latency") if key not in params]
    if missing:
        raise InputError(path, f"needs {missing[0]} beside it", field=given[0])
    gbs = _scalar(path, "l2_bandwidth", params["l2_bandwidth"])
    if gbs <= 0:
        raise InputError(path, "must be positive", field="l2_bandwidth")
    return {
        "l2_bytes_per_cycle": gbs * 1e9 / clock,
        "l2_latency_cycles": _positive_int(path, "l2_latency", params["l2_latency"]),
    }


def machine_from_description(description: dict[str, Any], path: str) -> Machine:
    """Rebuild a ``Machine`` from the description a schedule file embeds."""
    try:
        spec = MachineSpec.model_validate(description)
    except ValidationError as exc:
        raise first_validation_error(path, exc) from None
    return build_machine(spec, path)


def with_base(raw: dict[str, Any], path: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """``raw`` with ``base: PRESET`` resolved: the preset's description overlaid by this one.

    A machine that differs from a preset in a few numbers (``manticore-package`` is four
    ``manticore`` chiplets plus links) names it instead of repeating it: its ``parameters``
    and ``energy`` entries replace or add to the base's, its ``hierarchy`` (if given)
    replaces the base's, and ``name``/``summary`` are its own. The result is a complete,
    self-contained description (what schedule files embed).
    """
    base = raw.get("base")
    if base is None:
        return raw
    if not isinstance(base, str) or base not in preset_names():
        raise InputError(
            path,
            f"unknown base preset {base!r} (presets: {', '.join(preset_names())})",
            field="base",
        )
    if base in seen:
        raise InputError(
            path,
            f"presets derive from each other in a cycle: {' -> '.join((*seen, base))}",
            field="base",
        )
    text = (resources.files("autotune") / "machines" / f"{base}.yaml").read_text("utf-8")
    parent = with_base(load_yaml(text, f"<preset {base}>"), f"<preset {base}>", (*seen, base))
    merged = {k: v for k, v in parent.items() if k not in ("name", "summary")}
    for key, value in raw.items():
        if key in ("parameters", "energy") and isinstance(value, dict):
            merged[key] = {**parent.get(key, {}), **value}
        elif key != "base":
            merged[key] = value
    return merged


def parse_machine(text: str, path: str) -> Machine:
    """Parse machine YAML text (``path`` is only used in error messages)."""
    raw: Any = load_yaml(text, path)
    if not isinstance(raw, dict):
        raise InputError(path, "expected a mapping with 'name', 'parameters' and 'hierarchy'")
    try:
        spec = MachineSpec.model_validate(with_base(raw, path))
    except ValidationError as exc:
        raise first_validation_error(path, exc) from None
    return build_machine(spec, path)


PRESET_DIR = Path(str(resources.files("autotune") / "machines"))


def preset_names() -> tuple[str, ...]:
    """Names of the bundled presets (``autotune/machines/*.yaml``)."""
    folder = resources.files("autotune") / "machines"
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml")))


@cache
def load_preset(name: str) -> Machine:
    """A bundled machine by name."""
    if name not in preset_names():
        raise InputError(
            None,
            f"unknown machine preset {name!r} (presets: {', '.join(preset_names())})",
            field="machine",
        )
    resource = resources.files("autotune") / "machines" / f"{name}.yaml"
    return parse_machine(resource.read_text(encoding="utf-8"), f"<preset {name}>")


def load_machine_file(path: Path) -> Machine:
    text = read_text_bounded(path, MAX_YAML_BYTES, "machine file", "MAX_YAML_BYTES")
    return parse_machine(text, str(path))


def resolve_machine(name_or_path: str | Path | Machine | None) -> Machine:
    """A ``Machine`` from a preset name, a YAML path, an instance, or None (the default)."""
    if isinstance(name_or_path, Machine):
        return name_or_path
    if name_or_path is None:
        return load_preset("manticore")
    text = str(name_or_path)
    if text in preset_names():
        return load_preset(text)
    if text.endswith((".yaml", ".yml")) or Path(text).exists():
        return load_machine_file(Path(text))
    raise InputError(
        None,
        f"unknown machine {text!r}: not a preset ({', '.join(preset_names())}) nor a YAML file",
        field="machine",
    )


class YamlMachineSource:
    """``Machine.preset``/``from_file``/``presets`` backed by the YAML reader above."""

    def preset(self, name: str) -> Machine:
        return load_preset(name)

    def from_file(self, path: Path) -> Machine:
        return load_machine_file(path)

    def preset_names(self) -> tuple[str, ...]:
        return preset_names()


install_machine_source(YamlMachineSource())
