"""``network.yaml``: the layers to tune, validated with pydantic (unknown keys are errors).

```yaml
network: resnet50
batch: 1                # images per inference
precision: fp32         # fp32 | fp64 (| fp16 where the machine has it)
layers:
  - {name: conv1, kind: conv, in: [224, 224, 3], out_channels: 64, kernel: 7, stride: 2, padding: 3}
  - {name: fc, kind: fc, in: [1, 1, 2048], out_channels: 1000}
```
Parsing is validate (pydantic) -> normalise (ints to [h, w]) -> build (frozen ``Layer``s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from autotune.io.errors import InputError, first_validation_error
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
            return Layer.fc(spec.name, h, w, c, spec.out_channels)
        if spec.kernel is None:
            raise InputError(path, "required for a conv layer", layer=spec.name, field="kernel")
        return Layer(
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
    except LayerError as exc:
        field = {
            "kernel_h": "kernel",
            "kernel_w": "kernel",
            "pad_h": "padding",
            "pad_w": "padding",
            "stride_h": "stride",
            "stride_w": "stride",
            "c_in": "in",
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
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(path, f"cannot read network file: {exc.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise InputError(path, f"not valid YAML{where}") from None
    return parse_network(raw, str(path))
