"""Layers and networks: the shapes the tuner maps, as plain frozen dataclasses.

Notation follows the report (seed 000, Table 1) generalised to non-square volumes:
``h_in × w_in × c_in`` is the input volume (W_I × W_I × D_I in the report), ``c_out`` is D_O,
``kernel_h × kernel_w`` is F × F, ``stride_*`` is S and ``pad_*`` is P. A fully-connected layer is
the convolution whose kernel covers the whole input (report Sec. 1.1: F = W_I, S = 1, P = 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

LayerKind = Literal["conv", "fc"]


@dataclass(frozen=True)
class Layer:
    """One convolutional or fully-connected layer, per image.

    Example:
        >>> conv = Layer("conv", "conv", h_in=32, w_in=32, c_in=128, c_out=128,
        ...              kernel_h=3, kernel_w=3, pad_h=1, pad_w=1)
        >>> conv.h_out, conv.macs
        (32, 150994944)
    """

    name: str
    kind: LayerKind
    h_in: int
    w_in: int
    c_in: int
    c_out: int
    kernel_h: int = 1
    kernel_w: int = 1
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    groups: int = 1

    def __post_init__(self) -> None:
        for name in (
            "h_in",
            "w_in",
            "c_in",
            "c_out",
            "kernel_h",
            "kernel_w",
            "stride_h",
            "stride_w",
            "groups",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise LayerError(self.name, name, f"must be a positive integer, got {value!r}")
        for name in ("pad_h", "pad_w"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise LayerError(self.name, name, f"must be a non-negative integer, got {value!r}")
        if self.kind not in ("conv", "fc"):
            raise LayerError(self.name, "kind", f"must be 'conv' or 'fc', got {self.kind!r}")
        if self.kind == "fc":
            expected = dict(
                kernel_h=self.h_in,
                kernel_w=self.w_in,
                stride_h=1,
                stride_w=1,
                pad_h=0,
                pad_w=0,
                groups=1,
            )
            for name, value in expected.items():
                if getattr(self, name) != value:
                    raise LayerError(
                        self.name,
                        name,
                        f"an fc layer needs {name}={value} (kernel covers the input)",
                    )
        if self.c_in % self.groups:
            raise LayerError(
                self.name,
                "groups",
                f"in channels {self.c_in} not divisible by groups {self.groups}",
            )
        if self.c_out % self.groups:
            raise LayerError(
                self.name,
                "groups",
                f"out channels {self.c_out} not divisible by groups {self.groups}",
            )
        if self.kernel_h > self.h_in + 2 * self.pad_h:
            raise LayerError(
                self.name,
                "kernel",
                f"kernel height {self.kernel_h} exceeds padded input height "
                f"{self.h_in + 2 * self.pad_h}",
            )
        if self.kernel_w > self.w_in + 2 * self.pad_w:
            raise LayerError(
                self.name,
                "kernel",
                f"kernel width {self.kernel_w} exceeds padded input width "
                f"{self.w_in + 2 * self.pad_w}",
            )
        if self.pad_h >= self.kernel_h or self.pad_w >= self.kernel_w:
            # A padding at least as wide as the kernel yields output pixels that see only zeros.
            raise LayerError(self.name, "padding", "padding must be smaller than the kernel")

    @classmethod
    def fc(cls, name: str, h_in: int, w_in: int, c_in: int, c_out: int) -> Layer:
        """A fully-connected layer over an ``h_in × w_in × c_in`` volume (report Sec. 1.1)."""
        return cls(name, "fc", h_in, w_in, c_in, c_out, kernel_h=h_in, kernel_w=w_in)

    # -- derived shape -------------------------------------------------------------------
    @property
    def h_out(self) -> int:
        """Output height, W_O = (W_I + 2P - F)/S + 1 (report Sec. 1.1)."""
        return (self.h_in + 2 * self.pad_h - self.kernel_h) // self.stride_h + 1

    @property
    def w_out(self) -> int:
        return (self.w_in + 2 * self.pad_w - self.kernel_w) // self.stride_w + 1

    @property
    def cin_per_group(self) -> int:
        return self.c_in // self.groups

    @property
    def cout_per_group(self) -> int:
        return self.c_out // self.groups

    @property
    def is_depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.c_in == self.c_out

    # -- sizes in words, per image ---------------------------------------------------------
    @property
    def macs(self) -> int:
        """MACs for one image: every output word sums over its group's inputs and the kernel."""
        return (
            self.h_out
            * self.w_out
            * self.c_out
            * self.cin_per_group
            * self.kernel_h
            * self.kernel_w
        )

    @property
    def input_words(self) -> int:
        return self.h_in * self.w_in * self.c_in

    @property
    def output_words(self) -> int:
        return self.h_out * self.w_out * self.c_out

    @property
    def weight_words(self) -> int:
        """Filter parameters, F·F·D_I·D_O for a dense layer (report Sec. 1.1), per group."""
        return self.c_out * self.cin_per_group * self.kernel_h * self.kernel_w

    def shape_key(self) -> tuple[int, ...]:
        """Everything but the name: layers with equal keys have equal mappings and costs."""
        return (
            self.h_in,
            self.w_in,
            self.c_in,
            self.c_out,
            self.kernel_h,
            self.kernel_w,
            self.stride_h,
            self.stride_w,
            self.pad_h,
            self.pad_w,
            self.groups,
            int(self.kind == "fc"),
        )


class LayerError(ValueError):
    """A layer's field has a value no layer can have; names the layer and the field."""

    def __init__(self, layer: str, field_name: str, message: str) -> None:
        super().__init__(f"layer {layer!r}, field {field_name!r}: {message}")
        self.layer = layer
        self.field = field_name
        self.reason = message


@dataclass(frozen=True)
class Network:
    """A named sequence of layers with the batch and precision they are run at.

    ``skipped`` lists the imported operations that are not layers (ONNX: ``"Relu relu1"``,
    op type and node name), in graph order.
    """

    name: str
    layers: tuple[Layer, ...]
    batch: int = 1
    precision: str = "fp32"
    source: str | None = field(default=None, compare=False)
    skipped: tuple[str, ...] = field(default=(), compare=False)

    @property
    def macs(self) -> int:
        """MACs of the whole network for the whole batch."""
        return self.batch * sum(layer.macs for layer in self.layers)

    def layer(self, name: str) -> Layer:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(f"no layer named {name!r} in network {self.name!r}")
