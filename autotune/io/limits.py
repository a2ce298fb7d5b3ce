"""Upper bounds on every input, checked before any work (the README's "Input limits").

A hostile or mistaken file must be refused within moments and in little memory, with one line
naming the file, the layer and the field -- not hang in the search for minutes or exhaust the
host. Every bound sits far above what real networks and machines need, and each says why it
is there. The YAML structure bounds are enforced while the document is composed
(``autotune.io.bounded_yaml``); the shape bounds on the layers a loader builds (``check_layer``,
``check_network``); the bounds that need the machine (main memory, the cost model's integer
range) by ``check_fits``, which every entry point that does work calls first.
"""

from __future__ import annotations

from pathlib import Path

from autotune.io.errors import InputError
from autotune.ir.layer import Layer, LayerError
from autotune.ir.machine import STATIC_ENERGY, Machine
from autotune.ir.network import Network
from autotune.ir.precision import word_bytes

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30

# -- files -----------------------------------------------------------------------------------
#: network and machine YAML: a 10 000-layer network in block style is about 2.5 MiB.
MAX_YAML_BYTES = 8 * MIB
#: schedule JSON: about 1.6 KiB per layer, so 10 000 layers are about 16 MiB.
MAX_SCHEDULE_BYTES = 64 * MIB
#: ONNX models carry their weights; 2 GiB is protobuf's own limit for one message.
MAX_ONNX_BYTES = 2 * GIB

# -- YAML structure (counted while composing, aliases by their expanded size) ----------------
#: nodes after alias expansion: a 10 000-layer network has at most ~26 per layer.
MAX_YAML_NODES = 400_000
#: nesting: networks need 4 levels, machine files 5.
MAX_YAML_DEPTH = 32
#: characters of any one string or number: the longest preset text is ~550; Python refuses
#: to convert integers of more than 4300 digits.
MAX_STRING_CHARS = 4096
#: ONNX graph nodes (layers plus the skipped activations, pooling, reshapes, ...).
MAX_ONNX_NODES = 100_000

# -- networks --------------------------------------------------------------------------------
#: layers of one network: the deepest published CNNs have about 1000 conv layers.
MAX_LAYERS = 10_000
#: characters of a layer or network name (printed in every table and message).
MAX_NAME_CHARS = 512
#: height, width, kernel, stride and padding: 8K video is 7680 x 4320, and a 1-D signal of
#: 4 s at 16 kHz written as a 1 x W convolution is 64 000 wide. The search enumerates tile
#: sizes per axis, so its work grows with these.
MAX_SPATIAL = 65_536
#: input and output channels (and so groups): LLM vocabularies reach about 150 000 classes.
MAX_CHANNELS = 262_144
#: images per batch: sweeps go to 256 by default. The search's candidates grow with
#: sqrt(batch) and refinement enumerates them all: at batch 2048 a 64x64x64 conv already
#: takes 40 s and 2 GB to seed refinement.
MAX_BATCH = 4096

# -- machines --------------------------------------------------------------------------------
#: clusters of one chiplet (Manticore 128, SW26010 core group 64, MPPA3 5): the cost model
#: keeps per-cluster tables and the simulator and verifier loop over clusters.
MAX_CLUSTERS = 65_536
#: chiplets of a package (Manticore 4), levels of the quadrant tree (Manticore 4).
MAX_CHIPLETS = 64
MAX_LEVELS = 16
#: L1 per cluster (MPPA3 4 MiB): the verifier allocates it per cluster.
MAX_L1_BYTES = 256 * MIB
#: cores per cluster, MAC per cycle per core, DMA engines, banks, bank and DMA width.
MAX_COUNT = 65_536
#: rows of a DMA efficiency table (swDNN's has 12).
MAX_TABLE_ROWS = 256
#: any latency or DMA setup, in cycles (DRAM round trips are hundreds).
MAX_LATENCY_CYCLES = 1 << 20
#: main memory per chiplet (``hbm_size``): 1 PiB.
MAX_HBM_BYTES = 1 << 50

# -- arithmetic ------------------------------------------------------------------------------
#: The integer program clamps every figure at 2**60 (``autotune.search.ilp.ops.LIMIT``) and
#: exhaustive search raises at it; ``check_fits`` keeps every candidate's figures below.
COST_LIMIT = 1 << 60
#: Off-chip words per MAC the worst candidate mapping can move: measured at most 2.01 (a 1x1
#: depthwise layer, one output pixel per task) over the presets; 4 leaves a factor two.
WORST_WORDS_PER_MAC = 4
#: Fixed-point scale of rates in the cost formula (``autotune.model.formulas.SCALE``).
RATE_SCALE = 1000


#: Magnitude of any integer a JSON file read back may hold: a figure above the cost range is
#: no claim the tool could have written, and Python's unbounded integers would reach numpy
#: and the solver (an overflow deep inside instead of a line naming the field).
MAX_JSON_INT = COST_LIMIT


def check_json_integers(
    value: object, path: str | Path, field: str = "", layers: list[object] | None = None
) -> None:
    """Every integer of a parsed JSON document within +-``MAX_JSON_INT``; the first one
    outside is refused naming its field (and its layer, under ``layers``)."""
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if abs(value) > MAX_JSON_INT:
            layer, rest = _layer_of(field, layers)
            what = f"integer {value:.3e}" if abs(value) < 10**300 else "an integer of 300+ digits"
            bound = f"2**{MAX_JSON_INT.bit_length() - 1}"
            message = f"{what} is outside +-{bound} (MAX_JSON_INT, see 'Input limits')"
            raise InputError(path, message, layer=layer, field=rest)
        return
    if isinstance(value, (dict, list)):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            check_json_integers(item, path, f"{field}.{key}" if field else str(key), layers)


def _layer_of(field: str, layers: list[object] | None) -> tuple[str | None, str]:
    """(layer name, field within it) for a field under ``layers.<i>``, else (None, field)."""
    parts = field.split(".")
    if layers is None or len(parts) < 2 or parts[0] != "layers" or not parts[1].isdigit():
        return None, field
    entry = layers[int(parts[1])] if int(parts[1]) < len(layers) else None
    name = entry.get("name") if isinstance(entry, dict) else None
    if not isinstance(name, str):
        return f"#{parts[1]}", ".".join(parts[2:])
    return name, ".".join(parts[2:])


def too_large(what: str, value: float, limit: int, name: str, unit: str = "") -> str:
    """The message for ``value`` over ``limit`` (``name``: the constant, as the README lists)."""
    return f"{what} {value}{unit} exceeds the limit of {limit}{unit} ({name}, see 'Input limits')"


def read_bounded(path: Path, limit: int, what: str, name: str) -> bytes:
    """At most ``limit`` bytes of ``path``, or ``InputError``.

    Reads ``limit + 1`` bytes instead of trusting ``stat``, so a pipe or ``/dev/zero`` is
    refused like a large file, without reading the rest.
    """
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise InputError(path, f"cannot read {what}: {exc.strerror}") from None
    if len(data) > limit:
        raise InputError(path, too_large(f"{what} size", len(data), limit, name, " bytes"))
    return data


def read_text_bounded(path: Path, limit: int, what: str, name: str) -> str:
    """``read_bounded`` decoded as UTF-8 (bad bytes are an ``InputError``, not a crash)."""
    data = read_bounded(path, limit, what, name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"{what} is not UTF-8 text (byte {exc.start})") from None


#: Layer field -> (what it is, limit, constant name) for ``check_layer``. Padding is smaller
#: than the kernel (``Layer`` checks that), so it needs no bound of its own.
_LAYER_BOUNDS = {
    "h_in": ("height", MAX_SPATIAL, "MAX_SPATIAL"),
    "w_in": ("width", MAX_SPATIAL, "MAX_SPATIAL"),
    "c_in": ("input channels", MAX_CHANNELS, "MAX_CHANNELS"),
    "c_out": ("output channels", MAX_CHANNELS, "MAX_CHANNELS"),
    "kernel_h": ("kernel height", MAX_SPATIAL, "MAX_SPATIAL"),
    "kernel_w": ("kernel width", MAX_SPATIAL, "MAX_SPATIAL"),
    "stride_h": ("vertical stride", MAX_SPATIAL, "MAX_SPATIAL"),
    "stride_w": ("horizontal stride", MAX_SPATIAL, "MAX_SPATIAL"),
    "upscale": ("upsample scale", MAX_SPATIAL, "MAX_SPATIAL"),
    "dilation_h": ("vertical dilation", MAX_SPATIAL, "MAX_SPATIAL"),
    "dilation_w": ("horizontal dilation", MAX_SPATIAL, "MAX_SPATIAL"),
}


def check_layer(layer: Layer) -> None:
    """Raise ``LayerError`` (field in ``Layer`` terms) for a dimension over its limit.

    Only compares fields, derives nothing, so it is cheap on any input. Loaders call it in
    the ``try`` that maps ``LayerError`` fields to their format's field names.
    """
    for field, (what, limit, name) in _LAYER_BOUNDS.items():
        value = getattr(layer, field)
        if value > limit:
            raise LayerError(layer.name, field, too_large(what, value, limit, name))


def check_volume(shape: tuple[int, int, int], path: str | Path | None) -> None:
    """``InputError`` (field ``in``) for a tensor of shape ``(h, w, c)`` with a dimension over
    its limit: checked on every tensor of a graph before anything is built from it."""
    for value, (what, limit, name) in zip(
        shape,
        (
            ("height", MAX_SPATIAL, "MAX_SPATIAL"),
            ("width", MAX_SPATIAL, "MAX_SPATIAL"),
            ("channels", MAX_CHANNELS, "MAX_CHANNELS"),
        ),
        strict=True,
    ):
        if value > limit:
            raise InputError(path, too_large(what, value, limit, name), field="in")


def check_count(count: int, path: str | Path | None, field: str = "layers") -> None:
    """``InputError`` for more than ``MAX_LAYERS`` layers."""
    if count > MAX_LAYERS:
        raise InputError(
            path, too_large("number of layers", count, MAX_LAYERS, "MAX_LAYERS"), field=field
        )


def check_name(
    name: object, path: str | Path | None, layer: str | None = None, field: str = "name"
) -> None:
    """``InputError`` for a name over ``MAX_NAME_CHARS``; ``layer`` names the layer by index
    (``#3``), since repeating the long name in the message is what the limit prevents."""
    if isinstance(name, str) and len(name) > MAX_NAME_CHARS:
        raise InputError(
            path,
            too_large("name length", len(name), MAX_NAME_CHARS, "MAX_NAME_CHARS", " characters"),
            layer=layer,
            field=field,
        )


def check_batch(batch: int, path: str | Path | None, field: str = "batch") -> None:
    """``InputError`` for a batch over ``MAX_BATCH``."""
    if batch > MAX_BATCH:
        raise InputError(path, too_large("batch", batch, MAX_BATCH, "MAX_BATCH"), field=field)


def check_network(network: Network) -> None:
    """All bounds of a built network: layer count, names, every layer's dimensions, batch.

    The loaders check while they read; this covers networks built in code (``tune`` on a
    ``Network``), with the ``Layer`` field names.
    """
    path = network.source
    check_count(len(network.layers), path)
    check_name(network.name, path, field="network")
    for index, layer in enumerate(network.layers):
        check_name(layer.name, path, layer=f"#{index}")
        try:
            check_layer(layer)
        except LayerError as exc:
            raise InputError(path, exc.reason, layer=layer.name, field=exc.field) from None
    check_batch(network.batch, path)


def main_memory_bytes(machine: Machine) -> int:
    """Main memory of the whole machine (one HBM per chiplet); 0 when the file gives none."""
    return machine.chiplets * machine.hbm_bytes


def cost_scale(machine: Machine, precision: str) -> int:
    """An upper bound, per MAC, on every cost figure of every candidate mapping.

    The figures are cycles (in fixed point: bytes x ``RATE_SCALE`` x active clusters over the
    slowest link at the worst DMA efficiency, plus every latency per step), off-chip bytes,
    and energy in whole pJ (``ir.machine.whole_pj``); each is bounded by moving
    ``WORST_WORDS_PER_MAC`` words per MAC.
    """
    moved = WORST_WORDS_PER_MAC * word_bytes(precision)
    rates = [machine.hbm_bytes_per_cycle, float(machine.dma_bytes_per_cycle)]
    rates += [level.uplink_bytes_per_cycle for level in machine.levels]
    if machine.chiplets > 1:
        rates.append(machine.d2d_bytes_per_cycle)
    tables = (*machine.dma_read_efficiency, *machine.dma_write_efficiency)
    slowest = min(rates) * min([fraction for _, fraction in tables] + [1.0])
    latency = machine.hbm_latency_cycles + machine.dma_setup_cycles + machine.d2d_latency_cycles
    latency += sum(level.latency_cycles for level in machine.levels)
    cycles = moved * RATE_SCALE * machine.total_clusters / slowest + WORST_WORDS_PER_MAC * latency
    per_byte = sum(
        v for k, v in machine.energy_pj.items() if not k.startswith("mac_") and k != STATIC_ENERGY
    )
    static = machine.energy_pj.get(STATIC_ENERGY, 0.0)  # per cycle
    energy = (
        machine.energy_pj.get(f"mac_{precision}", 0.0)
        + moved * (per_byte + 1)  # + 1: each per-word energy is rounded to a whole pJ
        + cycles / RATE_SCALE * static  # the cycles bound is in fixed point
    )
    return int(max(cycles, energy, moved)) + 1


#: The field a main-memory or arithmetic refusal names, by file type: (weights, shape).
_FIELDS = {".onnx": ("W", "X"), ".json": ("shape", "shape")}


def check_fits(
    network: Network, machine: Machine, precision: str, batch: int | None = None
) -> None:
    """Refuse a network the machine cannot run at ``batch`` (default: the network's): the
    bounds of ``check_network``, and two that need the machine.

    Both are necessary conditions, so nothing that could run is refused:

    * main memory: all weights of the network plus the largest input + output of one layer
      for the whole batch must fit the machine's HBM (``hbm_size`` x chiplets; skipped for a
      machine file that gives no size);
    * arithmetic: batch x MACs of each layer x ``cost_scale`` must stay below
      ``COST_LIMIT``, so no cost figure of any candidate mapping can overflow.

    The message names the layer that breaks the bound and, when one does, the batch that fits.
    """
    check_network(network)
    path = network.source
    batch = batch or network.batch
    check_batch(batch, path)
    suffix = Path(path or "").suffix.lower()
    weights_field, shape_field = _FIELDS.get(suffix, ("out_channels", "in"))
    wb = word_bytes(precision)
    weights = sum(layer.weight_words for layer in network.layers) * wb
    capacity = main_memory_bytes(machine) if network.layers else 0
    if capacity and weights > capacity:
        heaviest = max(network.layers, key=lambda la: la.weight_words)
        raise InputError(
            path,
            f"the network's weights need {_size(weights)} ({precision}), more than the "
            f"{_size(capacity)} of main memory of {machine.name}",
            layer=heaviest.name,
            field=weights_field,
        )
    if capacity:
        largest = max(network.layers, key=lambda la: la.input_words + la.output_words)
        per_image = (largest.input_words + largest.output_words) * wb
        if weights + batch * per_image > capacity:
            fits = (capacity - weights) // per_image
            raise InputError(
                path,
                f"this layer's input and output at batch {batch} ({_size(batch * per_image)}, "
                f"{precision}) and the network's weights ({_size(weights)}) need more than the "
                f"{_size(capacity)} of main memory of {machine.name}"
                + (f"; fits up to batch {fits}" if fits else ""),
                layer=largest.name,
                field="batch" if fits else shape_field,
            )
    scale = cost_scale(machine, precision)
    for layer in network.layers:
        # the model's compute term counts FPU operations (MACs for conv/fc, one per tap of
        # a pool, ...): the largest product it forms
        if batch * layer.ops * scale >= COST_LIMIT:
            fits = (COST_LIMIT - 1) // (layer.ops * scale)
            raise InputError(
                path,
                f"batch {batch} x {layer.ops} operations is too large for the cost model's "
                f"64-bit "
                f"integers on {machine.name} ({precision})"
                + (f"; fits up to batch {fits}" if fits else ""),
                layer=layer.name,
                field="batch" if fits else shape_field,
            )


def _size(n: float) -> str:
    """Bytes for a message, in the largest binary unit that keeps a digit before the point."""
    for factor, unit in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if n >= factor:
            return f"{n / factor:.2f} {unit}"
    return f"{n:.0f} B"
