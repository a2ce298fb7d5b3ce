"""``network.yaml``: the layers to tune, validated with pydantic (unknown keys are errors).

```yaml
network: resnet50
batch: 1                # images per inference
precision: fp32         # fp32 | fp64 (| fp16 where the machine has it)
layers:
  - {name: conv1, kind: conv, in: [224, 224, 3], out_channels: 64, kernel: 7, stride: 2, padding: 3}
  - {name: fc, kind: fc, in: [1, 1, 2048], out_channels: 1000}
```
Parsing is read and compose within the input limits (``autotune.io.limits``) -> validate
(pydantic) -> normalise (ints to [h, w]) -> build (frozen ``Layer``s, each within the limits).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from autotune.io.bounded_yaml import load_yaml
from autotune.io.errors import InputError, first_validation_error
from autotune.io.limits import (
    MAX_LAYERS,
    MAX_YAML_BYTES,
    check_batch,
    check_count,
    check_layer,
    check_name,
    check_volume,
    read_text_bounded,
)
from autotune.io.onnx_import import ONNX_FIELDS, load_onnx_graph
from autotune.ir.graph import OP_KINDS, Graph, GraphError, Operator, Shape, make_operator
from autotune.ir.layer import LayerError
from autotune.ir.network import Network
from autotune.ir.resample import UpsampleMode

#: The name of the network input tensor in ``inputs``.
INPUT = "input"
OP_KINDS_LITERAL = Literal[OP_KINDS]  # type: ignore[valid-type]

PositiveInt = Annotated[int, Field(strict=True, ge=1)]
NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]


def _pair(value: Any, minimum: int) -> Any:
    """Accept ``n`` or ``[h, w]``; return ``[h, w]`` (pydantic checks the element types)."""
    if isinstance(value, bool):
        raise ValueError("expected an integer or [h, w], not a boolean")
    if isinstance(value, int):
        value = [value, value]
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError("expected an integer or a list [h, w]")
    for v in value:
        if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
            raise ValueError(f"entries must be integers >= {minimum}, got {v!r}")
    return value


class LayerSpec(BaseModel):
    """One operator as written in the file (fields as in its ONNX counterpart)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str = Field(min_length=1, description="unique layer name")
    kind: Literal[OP_KINDS_LITERAL] = Field(description="operator kind")  # type: ignore[valid-type]
    inputs: list[str] | None = Field(
        default=None,
        min_length=1,
        description="tensors read: layer names or 'input'; default: the previous layer's output",
    )
    in_: list[PositiveInt] | None = Field(
        default=None,
        alias="in",
        min_length=3,
        max_length=3,
        description="input volume [height, width, channels]: the network input's for the "
        "first layer, else checked against the producer's output",
    )
    out: list[PositiveInt] | None = Field(
        default=None, min_length=3, max_length=3, description="output volume, checked"
    )
    out_channels: PositiveInt | None = None
    kernel: Any = Field(default=None, description="int or [h, w]; conv and pools")
    stride: Any = Field(default=None, description="int or [h, w]; conv and pools")
    padding: Any = Field(
        default=None,
        description="int or [h, w] on each side; conv and pools; a conv also [top, left, "
        "bottom, right]",
    )
    dilation: Any = Field(default=None, description="int or [h, w]; conv")
    groups: PositiveInt | None = Field(
        default=None,
        description="grouped conv (groups = channels: depthwise); a shuffle's channel groups",
    )
    ceil_mode: StrictBool | None = None
    count_include_pad: StrictBool | None = None
    scale: PositiveInt | None = Field(default=None, description="upsample factor")
    mode: UpsampleMode | None = Field(
        default=None,
        description="upsample interpolation: nearest (default); bilinear (PyTorch's "
        "align_corners=False); bilinear_corners (align_corners=True)",
    )
    channels: list[NonNegativeInt] | None = Field(
        default=None,
        min_length=2,
        max_length=2,
        description="slice: [start, stop] of the channels kept (stop excluded)",
    )
    alpha: float | None = Field(default=None, description="leaky_relu slope")
    min: float | None = Field(default=None, description="clip lower bound (none: unbounded)")
    max: float | None = Field(default=None, description="clip upper bound (none: unbounded)")
    epsilon: float | None = Field(default=None, gt=0, description="batchnorm epsilon")
    bias: StrictBool | None = Field(default=None, description="conv or fc adds a bias")

    @field_validator("kernel", "stride", "dilation")
    @classmethod
    def _positive_pair(cls, value: Any) -> Any:
        return None if value is None else _pair(value, 1)

    @field_validator("padding")
    @classmethod
    def _padding_pair(cls, value: Any) -> Any:
        if isinstance(value, list) and len(value) == 4:  # [top, left, bottom, right]
            return _pair(value[:2], 0) + _pair(value[2:], 0)
        if isinstance(value, list) and len(value) != 2:
            raise ValueError("expected an integer, [h, w] or [top, left, bottom, right]")
        return None if value is None else _pair(value, 0)


class NetworkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    network: str = Field(min_length=1)
    batch: PositiveInt = 1
    precision: Literal["fp64", "fp32", "fp16"] = "fp32"
    layers: list[LayerSpec] = Field(min_length=1)


#: ``Layer`` field names -> the file's.
_FIELD_NAMES = {
    "kernel_h": "kernel",
    "kernel_w": "kernel",
    "pad_h": "padding",
    "pad_w": "padding",
    "stride_h": "stride",
    "stride_w": "stride",
    "dilation_h": "dilation",
    "dilation_w": "dilation",
    "c_in": "in",
    "c_out": "out_channels",
    "h_in": "in",
    "w_in": "in",
}
#: The fields each kind may have (besides name, kind, inputs, in, out).
_FIELDS: dict[str, frozenset[str]] = {
    "conv": frozenset(
        {"out_channels", "kernel", "stride", "padding", "dilation", "groups", "bias"}
    ),
    "fc": frozenset({"out_channels", "bias"}),
    "maxpool": frozenset({"kernel", "stride", "padding", "ceil_mode"}),
    "avgpool": frozenset({"kernel", "stride", "padding", "ceil_mode", "count_include_pad"}),
    "upsample": frozenset({"scale", "mode"}),
    "slice": frozenset({"channels"}),
    "shuffle": frozenset({"groups"}),
    "leaky_relu": frozenset({"alpha"}),
    "clip": frozenset({"min", "max"}),
    "batchnorm": frozenset({"epsilon"}),
}
_COMMON = frozenset({"name", "kind", "inputs", "in_", "out"})
#: Kinds a file written before graphs had; a file with only these and no ``inputs`` is a
#: list of independent layers where a layer whose ``in`` is not its predecessor's output
#: reads an input of its own.
_FLAT_KINDS = frozenset({"conv", "fc"})


def _clip_bounds(layer: LayerSpec) -> dict[str, float]:
    """A clip's bounds, one left out being none (as ONNX's ``Clip``); no other kind has
    them (the operator's defaults)."""
    if layer.kind != "clip":
        return {}
    low = -math.inf if layer.min is None else layer.min
    return {"low": low, "high": math.inf if layer.max is None else layer.max}


def _graph(spec: NetworkSpec, path: str) -> Graph:
    """The operators of the file, their inputs resolved and shapes inferred and checked."""
    flat = all(layer.inputs is None and layer.kind in _FLAT_KINDS for layer in spec.layers)
    inputs: list[tuple[str, Shape]] = []
    shapes: dict[str, Shape] = {}
    ops: list[Operator] = []
    previous: str | None = None
    for layer in spec.layers:
        name = layer.name
        for key in sorted(layer.model_fields_set - _COMMON - _FIELDS.get(layer.kind, frozenset())):
            shown = "in" if key == "in_" else key
            raise InputError(path, f"not allowed for a {layer.kind} layer", layer=name, field=shown)
        if name == INPUT:
            raise InputError(path, f"{INPUT!r} names the network input", layer=name, field="name")
        declared = None if layer.in_ is None else (layer.in_[0], layer.in_[1], layer.in_[2])
        if declared is not None:
            _check_volume(declared, path, name, "in")
        if layer.inputs is not None:
            sources = list(layer.inputs)
        elif previous is None or (flat and declared is not None and declared != shapes[previous]):
            if declared is None:
                raise InputError(
                    path, "required for the first layer: the network input", layer=name, field="in"
                )
            tensor = INPUT if not inputs else f"{name}.in"
            inputs.append((tensor, declared))
            shapes[tensor] = declared
            sources = [tensor]
        else:
            sources = [previous]
        for tensor in sources:
            if tensor not in shapes:
                later = any(other.name == tensor for other in spec.layers)
                why = "is defined later (the layers must be in order, without cycles)"
                raise InputError(
                    path,
                    f"input {tensor!r} {why if later else 'is not a layer of this network'}",
                    layer=name,
                    field="inputs",
                )
        if declared is not None and len(sources) == 1 and shapes[sources[0]] != declared:
            raise InputError(
                path,
                f"declared {list(declared)} but {sources[0]!r} gives {list(shapes[sources[0]])}",
                layer=name,
                field="in",
            )
        try:
            op = make_operator(
                name,
                layer.kind,
                sources,
                shapes,
                out_channels=layer.out_channels,
                kernel=layer.kernel,
                stride=layer.stride,
                padding=layer.padding,
                dilation=layer.dilation,
                groups=layer.groups or 1,
                ceil_mode=bool(layer.ceil_mode),
                count_include_pad=bool(layer.count_include_pad),
                scale=layer.scale,
                mode=layer.mode or "nearest",
                channels=layer.channels,
                alpha=0.01 if layer.alpha is None else layer.alpha,
                **_clip_bounds(layer),
                epsilon=1e-5 if layer.epsilon is None else layer.epsilon,
                bias=bool(layer.bias),
                shape=layer.out,
            )
        except GraphError as exc:
            raise _input_error(path, exc) from None
        if name in shapes:
            raise InputError(path, "duplicate layer name", layer=name, field="name")
        if op.kind != "flatten":  # a view: its producer's volume was checked
            field = "out_channels" if op.kind in ("conv", "fc") else "out"
            _check_volume(op.shape, path, name, field)
        ops.append(op)
        shapes[name] = op.shape
        previous = name
    try:
        return Graph(spec.network, tuple(inputs), tuple(ops))
    except GraphError as exc:
        raise _input_error(path, exc) from None


def _check_volume(shape: Shape, path: str, layer: str, field: str) -> None:
    try:
        check_volume(shape, path)
    except InputError as exc:
        raise InputError(path, exc.reason, layer=layer, field=field) from None


def _input_error(
    path: str, exc: GraphError, fields: Mapping[str, str] = _FIELD_NAMES
) -> InputError:
    """``exc`` as the file's error, its field by the name the file gives it (``fields``)."""
    reason = exc.reason
    if exc.producer is not None and exc.producer not in reason:
        reason += f" (input from {exc.producer!r})"
    return InputError(path, reason, layer=exc.op, field=fields.get(exc.field, exc.field))


def parse_network(raw: Any, path: str) -> Network:
    """Validate an already-parsed YAML document and build the ``Network`` (its graph, lowered
    to the layers the tuner maps)."""
    if not isinstance(raw, dict):
        raise InputError(
            path, "expected a mapping with keys 'network', 'batch', 'precision', 'layers'"
        )
    layer_names = (
        [
            entry.get("name") if isinstance(entry, dict) else None
            for entry in raw.get("layers", []) or []
        ]
        if isinstance(raw.get("layers"), list)
        else []
    )
    # Bounds first: pydantic's messages would repeat a long name, and the batch and the
    # layer count are cheap to refuse before validating ten thousand layers.
    check_count(len(layer_names), path)
    check_name(raw.get("network"), path, field="network")
    for index, name in enumerate(layer_names):
        check_name(name, path, layer=f"#{index}")
    batch = raw.get("batch")
    if isinstance(batch, int) and not isinstance(batch, bool):
        check_batch(batch, path)
    try:
        spec = NetworkSpec.model_validate(raw)
    except ValidationError as exc:
        raise first_validation_error(path, exc, layer_names) from None
    seen: set[str] = set()
    for layer in spec.layers:
        if layer.name in seen:
            raise InputError(path, "duplicate layer name", layer=layer.name, field="name")
        seen.add(layer.name)
    graph = _graph(spec, path)
    return network_of(graph, spec.batch, spec.precision, path)


def network_of(
    graph: Graph,
    batch: int,
    precision: str,
    path: str,
    weights: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    output_names: Mapping[str, str] | None = None,
    fields: Mapping[str, str] = _FIELD_NAMES,
) -> Network:
    """The network of a graph read from ``path``: lowered, every layer within the limits
    (``InputError`` naming the layer and field, by the file's name for it: ``fields``,
    otherwise)."""
    try:
        network = Network.of_graph(
            graph, batch, precision, source=path, weights=weights, output_names=output_names
        )
    except GraphError as exc:
        raise _input_error(path, exc, fields) from None
    for lowered in network.layers:
        try:
            check_layer(lowered)
        except LayerError as exc:
            field = _FIELD_NAMES.get(exc.field, exc.field)
            raise InputError(path, exc.reason, layer=exc.layer, field=field) from None
    return network


def load_network(path: str | Path) -> Network:
    """Load and validate a ``network.yaml``, or import an ``.onnx`` model with its whole graph
    (``load_onnx_graph``); either way the graph is lowered to the layers to tune.

    Raises ``InputError`` (a ``ValueError``) whose message is one line naming the file, the
    layer and the field.

    Example:
        >>> net = load_network("examples/resnet50.yaml")  # doctest: +SKIP
        >>> net.name, len(net.layers)                     # doctest: +SKIP
        ('resnet50', 56)
    """
    path = Path(path)
    if path.suffix.lower() == ".onnx":
        imported = load_onnx_graph(path)
        return network_of(
            imported.graph,
            imported.batch,
            imported.precision,
            str(path),
            imported.weights,
            imported.output_names,
            ONNX_FIELDS,
        )
    text = read_text_bounded(path, MAX_YAML_BYTES, "network file", "MAX_YAML_BYTES")
    raw = load_yaml(text, path, {("layers",): (MAX_LAYERS, "MAX_LAYERS")})
    return parse_network(raw, str(path))
