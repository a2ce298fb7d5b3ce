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

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from autotune.io.bounded_yaml import load_yaml
from autotune.io.errors import InputError, first_validation_error
from autotune.io.limits import (
    MAX_LAYERS,
    MAX_YAML_BYTES,
    check_batch,
    check_count,
    check_layer,
    check_name,
    read_text_bounded,
)
from autotune.io.onnx_import import load_onnx
from autotune.ir.layer import Layer, LayerError, Network

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
    """One layer as written in the file."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str = Field(min_length=1, description="unique layer name")
    kind: Literal["conv", "fc"] = Field(description="conv or fc (fully connected)")
    in_: list[PositiveInt] = Field(
        alias="in", min_length=3, max_length=3, description="input volume [height, width, channels]"
    )
    out_channels: PositiveInt
    kernel: Any = Field(default=None, description="int or [h, w]; conv only")
    stride: Any = Field(default=1, validate_default=True, description="int or [h, w]; conv only")
    padding: Any = Field(
        default=0, validate_default=True, description="int or [h, w] zeros on each side; conv only"
    )
    groups: PositiveInt = Field(default=1, description="grouped conv; groups = channels: depthwise")

    @field_validator("kernel", "stride")
    @classmethod
    def _positive_pair(cls, value: Any) -> Any:
        return None if value is None else _pair(value, 1)

    @field_validator("padding")
    @classmethod
    def _padding_pair(cls, value: Any) -> Any:
        return _pair(value, 0)


class NetworkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    network: str = Field(min_length=1)
    batch: PositiveInt = 1
    precision: Literal["fp64", "fp32", "fp16"] = "fp32"
    layers: list[LayerSpec] = Field(min_length=1)


def build_layer(spec: LayerSpec, path: str) -> Layer:
    """Normalise one validated layer spec into a ``Layer`` (shape errors name the field)."""
    h, w, c = spec.in_
    try:
        if spec.kind == "fc":
            for key in ("kernel", "groups"):
                if key in spec.model_fields_set:
                    raise InputError(
                        path,
                        "not allowed for an fc layer (its kernel is the whole input)",
                        layer=spec.name,
                        field=key,
                    )
            for key in ("stride", "padding"):
                if key in spec.model_fields_set:
                    raise InputError(
                        path, "not allowed for an fc layer", layer=spec.name, field=key
                    )
            layer = Layer.fc(spec.name, h, w, c, spec.out_channels)
            check_layer(layer)
            return layer
        if spec.kernel is None:
            raise InputError(path, "required for a conv layer", layer=spec.name, field="kernel")
        layer = Layer(
            spec.name,
            "conv",
            h,
            w,
            c,
            spec.out_channels,
            kernel_h=spec.kernel[0],
            kernel_w=spec.kernel[1],
            stride_h=spec.stride[0],
            stride_w=spec.stride[1],
            pad_h=spec.padding[0],
            pad_w=spec.padding[1],
            groups=spec.groups,
        )
        check_layer(layer)
        return layer
    except LayerError as exc:
        field = {
            "kernel_h": "kernel",
            "kernel_w": "kernel",
            "pad_h": "padding",
            "pad_w": "padding",
            "stride_h": "stride",
            "stride_w": "stride",
            "c_in": "in",
            "c_out": "out_channels",
            "h_in": "in",
            "w_in": "in",
        }.get(exc.field, exc.field)
        raise InputError(path, exc.reason, layer=spec.name, field=field) from None


def parse_network(raw: Any, path: str) -> Network:
    """Validate an already-parsed YAML document and build the ``Network``."""
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
    layers = tuple(build_layer(layer, path) for layer in spec.layers)
    return Network(
        name=spec.network, layers=layers, batch=spec.batch, precision=spec.precision, source=path
    )


def load_network(path: str | Path) -> Network:
    """Load and validate a ``network.yaml``, or import an ``.onnx`` model (``load_onnx``).

    Raises ``InputError`` (a ``ValueError``) whose message is one line naming the file, the
    layer and the field.

    Example:
        >>> net = load_network("examples/resnet50.yaml")  # doctest: +SKIP
        >>> net.name, len(net.layers)                     # doctest: +SKIP
        ('resnet50', 54)
    """
    path = Path(path)
    if path.suffix.lower() == ".onnx":
        return load_onnx(path)
    text = read_text_bounded(path, MAX_YAML_BYTES, "network file", "MAX_YAML_BYTES")
    raw = load_yaml(text, path, {("layers",): (MAX_LAYERS, "MAX_LAYERS")})
    return parse_network(raw, str(path))
