"""Layers and networks: the shapes the tuner maps, as plain frozen dataclasses.

Notation follows the report (seed 000, Table 1) generalised to non-square volumes:
``h_in × w_in × c_in`` is the input volume (W_I × W_I × D_I in the report), ``c_out`` is D_O,
``kernel_h × kernel_w`` is F × F, ``stride_*`` is S and ``pad_*`` is P: ``pad_h`` rows of zeros
above and ``pad_w`` columns to the left, and as many below and to the right unless
``pad_bottom``/``pad_right`` say otherwise (a conv only: TensorFlow's ``SAME`` padding of a
stride-2 conv puts the odd row at the end). A fully-connected layer is
the convolution whose kernel covers the whole input (report Sec. 1.1: F = W_I, S = 1, P = 0).
A conv may be dilated (``dilation_h``, ``dilation_w``: its taps that many pixels apart, as
DeepLab's and FCN's are): its window then spans ``(F − 1)·d + 1`` pixels (``span_h``,
``span_w``), which is what its output size and every tile's input halo follow; its MACs are
still F × F per output and input channel.

The other operators a network keeps after folding and fusion (``autotune.ir.lowering``) are
layers of the same shape language, so that one tiling, one cost model, one simulator and one
executor serve them all:

- ``maxpool`` / ``avgpool``: a depthwise window (``groups = c_in = c_out``) without weights;
  a global average pool is the ``avgpool`` whose kernel covers the input (as ``fc`` is to
  ``conv``). ``ceil_mode`` rounds the output size up (the last window may overhang the
  padded input: its missing taps are skipped); ``count_include_pad`` says whether an average
  divides by the padded taps (ONNX's default: no).
- ``add``: an elementwise sum of ``n`` tensors of ``c_out`` channels, as a grouped 1×1 layer
  with ``groups = c_out`` and ``c_in = n · c_out``: group ``g`` reads input channels
  ``g·n … g·n + n − 1``, i.e. the input volume interleaves the operands (channel ``g·n + i``
  is channel ``g`` of operand ``i``). Traffic and tiling are those of the ``n`` operands.
- ``mul``: the elementwise product of ``n`` tensors, laid out as ``add``'s operands.
- ``activation``: an elementwise function alone (its ``epilogue.activation``), a depthwise
  1×1 layer without weights.
- ``upsample``: by the integer ``upscale``, nearest-neighbour (each input pixel becomes an
  ``upscale × upscale`` block) or bilinear (``upsample_mode``, ``autotune.ir.resample``:
  each output a weighted sum of the 2 × 2 inputs around its source point), depthwise,
  without weights.
- ``softmax``: over the channels of each pixel; every output channel reads every input
  channel of its pixel (``groups = 1``), so a mapping keeps all channels in one stack.

Every layer may carry an ``Epilogue``: what its output store applies, in order: a per-channel
bias (a folded batch norm), a residual operand of the output's shape added elementwise, an
activation.

A 1×1 conv may carry a ``Prologue``: the depthwise conv before it, fused (MobileNet's
depthwise-separable pair). The layer's window fields (kernel, stride, padding, dilation) are
then the depthwise's, so its data movement is a dense k×k conv's (input bands with their
halo, every stack reading every channel), while its filters are the 1×1's (``filter_pixels``)
plus the depthwise's ``c_in × k²`` (``prologue_words``). Each task computes the depthwise
result of its tile and step in L1 and the 1×1 reads it there: the inner tensor never leaves
the cluster, at the price of recomputing it once per output stack.

A dense conv may instead carry an ``Expansion``: the 1×1 conv before a depthwise conv, fused
(MobileNetV2's expansion). The layer is then the 1×1 from the narrow tensor (``c_in``) to the
expanded one (``c_out``) with the depthwise's window: its data movement is again a dense
k×k conv's, its filters the 1×1's (``filter_pixels`` 1) plus the depthwise's ``c_out × k²``
(``expansion_pixels``). Each task accumulates the 1×1 over its input band (the halo too) in
L1, applies the expansion's bias and activation, and runs the depthwise from there: the
expanded tensor never leaves the cluster, at the price of computing the halo's 1×1 twice
(neighbouring tiles overlap); no output stack recomputes another's channels.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, get_args

from autotune.ir.errors import ArgumentsError
from autotune.ir.resample import UPSAMPLE_MODES

LayerKind = Literal[
    "conv", "fc", "maxpool", "avgpool", "add", "mul", "activation", "upsample", "softmax"
]
#: Every layer kind, in the order documentation lists them.
LAYER_KINDS: tuple[str, ...] = get_args(LayerKind)
#: Kinds with weights (filters); the others read only activations.
WEIGHTED_KINDS = frozenset({"conv", "fc"})
#: Kinds that are depthwise by construction: ``groups == c_out`` (``add``, ``mul``:
#: ``c_in = n·c_out``).
DEPTHWISE_KINDS = frozenset({"maxpool", "avgpool", "add", "mul", "activation", "upsample"})
#: Kinds whose input volume interleaves ``n`` operands of the output's shape.
OPERAND_KINDS = frozenset({"add", "mul"})

ActivationKind = Literal[
    "relu", "clip", "leaky_relu", "sigmoid", "silu", "hardswish", "hardsigmoid", "tanh", "gelu"
]
#: FPU operations one output word of each activation costs. ASSUMPTION (no seed gives them):
#: a compare or a multiply-add per simple step; sigmoid and silu are counted as an exp by a
#: short polynomial (about 8 operations) plus a division, as Snitch-class cores have no
#: transcendental unit; tanh as sigmoid's exp and division plus the scale and shift of
#: ``tanh(z) = 2·sigmoid(2z) − 1``; gelu as an erf by a short rational polynomial (about 9
#: operations) plus the scale, add and multiply of ``z·(1 + erf(z/√2))/2``.
ACTIVATION_OPS: dict[str, int] = {
    "relu": 1,
    "clip": 2,
    "leaky_relu": 2,
    "sigmoid": 10,
    "silu": 11,
    "hardswish": 4,
    "hardsigmoid": 3,
    "tanh": 11,
    "gelu": 12,
}
#: FPU operations per output word of a softmax: the exp (as for sigmoid), the running sum
#: and the final scale. ASSUMPTION, as ``ACTIVATION_OPS``.
SOFTMAX_OPS = 10


@dataclass(frozen=True)
class Activation:
    """An elementwise function: ``relu``; ``clip`` to ``[low, high]`` (ReLU6 is ``clip`` 0..6);
    ``leaky_relu`` with slope ``alpha`` below zero; ``sigmoid``; ``silu`` (x·sigmoid(x));
    ``hardswish`` (x·clip(x + 3, 0, 6) / 6); ``hardsigmoid`` (clip(x + 3, 0, 6) / 6, as
    PyTorch's: ONNX ``HardSigmoid`` with alpha 1/6, beta 1/2); ``tanh``; ``gelu``
    (z·Φ(z), Φ the standard normal's distribution: ``z·(1 + erf(z/√2))/2``, PyTorch's
    ``nn.GELU()``)."""

    kind: ActivationKind
    alpha: float = 0.01
    low: float = 0.0
    high: float = 6.0

    def __post_init__(self) -> None:
        if self.kind not in ACTIVATION_OPS:
            raise ValueError(f"unknown activation {self.kind!r}")
        if self.kind == "clip" and not self.low <= self.high:
            raise ValueError(f"clip needs low <= high, got {self.low} > {self.high}")

    @property
    def ops(self) -> int:
        return ACTIVATION_OPS[self.kind]


@dataclass(frozen=True)
class Epilogue:
    """What a layer's output store applies to each output word, in this order: ``+ bias[c]``
    (a batch norm folded into the weights leaves a bias), ``+ residual`` (one more operand of
    the output's shape, read from memory: a fused elementwise add), ``activation``; with
    ``activation_first`` the residual is added after the activation (a shortcut that adds
    activated outputs, as YOLOv3's)."""

    bias: bool = False
    residual: bool = False
    activation: Activation | None = None
    activation_first: bool = False

    def __post_init__(self) -> None:
        if self.activation_first and (not self.residual or self.activation is None):
            raise ValueError("activation_first orders a residual after an activation")

    @property
    def ops(self) -> int:
        """FPU operations per output word."""
        act = self.activation.ops if self.activation is not None else 0
        return int(self.bias) + int(self.residual) + act

    def key(self) -> tuple[object, ...]:
        """The epilogue as plain values (JSON-serialisable, hashable)."""
        act = self.activation
        if act is None:
            return (self.bias, self.residual, None, 0.0, 0.0, 0.0, False)
        return (
            self.bias,
            self.residual,
            act.kind,
            act.alpha,
            act.low,
            act.high,
            self.activation_first,
        )

    @property
    def is_identity(self) -> bool:
        return not self.bias and not self.residual and self.activation is None


@dataclass(frozen=True)
class _Fused:
    """What a fused pair applies to its inner result in L1 (``Prologue``, ``Expansion``)."""

    bias: bool = False
    activation: Activation | None = None

    @property
    def ops(self) -> int:
        """FPU operations per result word beyond the taps or MACs: the bias and the
        activation."""
        act = self.activation.ops if self.activation is not None else 0
        return int(self.bias) + act

    def key(self) -> tuple[object, ...]:
        """As plain values (as ``Epilogue.key``)."""
        act = self.activation
        if act is None:
            return (self.bias, None, 0.0, 0.0, 0.0)
        return (self.bias, act.kind, act.alpha, act.low, act.high)


@dataclass(frozen=True)
class Prologue(_Fused):
    """The depthwise conv fused before a 1×1 conv (``Layer.prologue``, module docstring): its
    window is the layer's, its channels the layer's ``c_in``; ``bias`` (a folded batch norm)
    and ``activation`` apply to its result in L1, before the 1×1 reads it."""


@dataclass(frozen=True)
class Expansion(_Fused):
    """The 1×1 conv fused before a depthwise conv (``Layer.expansion``, module docstring):
    its weights are the layer's filter, its result (``c_out`` channels over the input band)
    stays in L1, where ``bias`` (a folded batch norm) and ``activation`` apply before the
    depthwise (the layer's window, ``c_out × k²`` weights, the layer's epilogue) reads it."""


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
    upscale: int = 1
    ceil_mode: bool = False
    count_include_pad: bool = False
    epilogue: Epilogue = field(default_factory=Epilogue)
    dilation_h: int = 1
    dilation_w: int = 1
    upsample_mode: str = "nearest"
    pad_bottom: int | None = None
    pad_right: int | None = None
    prologue: Prologue | None = None
    expansion: Expansion | None = None

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
            "upscale",
            "dilation_h",
            "dilation_w",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise LayerError(self.name, name, f"must be a positive integer, got {value!r}")
        for name in ("pad_h", "pad_w", "pad_bottom", "pad_right"):
            value = getattr(self, name)
            if value is None and name in ("pad_bottom", "pad_right"):
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise LayerError(self.name, name, f"must be a non-negative integer, got {value!r}")
        # one spelling of symmetric padding (None), so that equal layers compare equal
        if self.pad_bottom == self.pad_h:
            object.__setattr__(self, "pad_bottom", None)
        if self.pad_right == self.pad_w:
            object.__setattr__(self, "pad_right", None)
        if self.kind != "conv" and (self.pad_bottom, self.pad_right) != (None, None):
            raise LayerError(self.name, "padding", "only a conv layer is padded unequally")
        if self.kind not in LAYER_KINDS:
            raise LayerError(
                self.name, "kind", f"must be one of {', '.join(LAYER_KINDS)}, got {self.kind!r}"
            )
        if not isinstance(self.epilogue, Epilogue):
            raise LayerError(self.name, "epilogue", f"must be an Epilogue, got {self.epilogue!r}")
        self._check_kind()
        self._check_prologue()
        self._check_expansion()
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
        if self.span_h > self.h_in + self.pad_h + self.pad_end_h:
            raise LayerError(
                self.name,
                "kernel",
                f"kernel height {self.span_h} exceeds padded input height "
                f"{self.h_in + self.pad_h + self.pad_end_h}",
            )
        if self.span_w > self.w_in + self.pad_w + self.pad_end_w:
            raise LayerError(
                self.name,
                "kernel",
                f"kernel width {self.span_w} exceeds padded input width "
                f"{self.w_in + self.pad_w + self.pad_end_w}",
            )
        if (
            max(self.pad_h, self.pad_end_h) >= self.span_h
            or max(self.pad_w, self.pad_end_w) >= self.span_w
        ):
            # A padding at least as wide as the kernel yields output pixels that see only zeros.
            raise LayerError(self.name, "padding", "padding must be smaller than the kernel")

    def _check_prologue(self) -> None:
        """A prologue is a depthwise conv before a dense 1×1 conv (module docstring)."""
        if self.prologue is None:
            return
        if not isinstance(self.prologue, Prologue):
            raise LayerError(self.name, "prologue", f"must be a Prologue, got {self.prologue!r}")
        if self.kind != "conv" or self.groups != 1:
            raise LayerError(
                self.name, "prologue", "only a dense conv (groups 1) reads a fused depthwise"
            )

    def _check_expansion(self) -> None:
        """An expansion is a 1×1 conv before a depthwise conv, as a dense conv (docstring)."""
        if self.expansion is None:
            return
        if not isinstance(self.expansion, Expansion):
            raise LayerError(
                self.name, "expansion", f"must be an Expansion, got {self.expansion!r}"
            )
        if self.kind != "conv" or self.groups != 1:
            raise LayerError(
                self.name, "expansion", "only a dense conv (groups 1) stands for a fused 1x1"
            )
        if self.prologue is not None:
            raise LayerError(self.name, "expansion", "a layer fuses one neighbour, not two")

    def _check_kind(self) -> None:
        """The structure each non-conv kind has by definition (module docstring)."""
        kind = self.kind
        if kind != "upsample" and self.upscale != 1:
            raise LayerError(self.name, "upscale", "only an upsample layer has a scale")
        if self.upsample_mode not in UPSAMPLE_MODES:
            raise LayerError(
                self.name,
                "upsample_mode",
                f"must be one of {', '.join(UPSAMPLE_MODES)}, got {self.upsample_mode!r}",
            )
        if kind != "upsample" and self.upsample_mode != "nearest":
            raise LayerError(self.name, "upsample_mode", "only an upsample layer interpolates")
        if kind not in ("maxpool", "avgpool") and self.ceil_mode:
            raise LayerError(self.name, "ceil_mode", "only a pooling layer has a ceil mode")
        if kind != "conv" and (self.dilation_h, self.dilation_w) != (1, 1):
            raise LayerError(self.name, "dilation", "only a conv layer is dilated")
        if kind in WEIGHTED_KINDS:
            return
        if kind in DEPTHWISE_KINDS and self.groups != self.c_out:
            raise LayerError(
                self.name, "groups", f"a {kind} layer is depthwise: groups must be {self.c_out}"
            )
        if kind in OPERAND_KINDS:
            if self.c_in < 2 * self.c_out or self.c_in % self.c_out:
                raise LayerError(
                    self.name, "c_in", f"a {kind} layer reads n >= 2 operands: c_in = n * c_out"
                )
        elif self.c_in != self.c_out:
            raise LayerError(self.name, "c_out", f"a {kind} layer keeps the channel count")
        if kind == "softmax" and self.groups != 1:
            raise LayerError(self.name, "groups", "a softmax reads all channels: groups = 1")
        if kind not in ("maxpool", "avgpool") and (
            self.kernel_h,
            self.kernel_w,
            self.stride_h,
            self.stride_w,
            self.pad_h,
            self.pad_w,
        ) != (1, 1, 1, 1, 0, 0):
            raise LayerError(self.name, "kernel", f"a {kind} layer is 1x1 with stride 1")
        if kind == "activation" and self.epilogue.activation is None:
            raise LayerError(self.name, "epilogue", "an activation layer needs its function")
        if self.epilogue.bias:
            raise LayerError(self.name, "epilogue", f"a {kind} layer has no bias")

    @classmethod
    def fc(cls, name: str, h_in: int, w_in: int, c_in: int, c_out: int) -> Layer:
        """A fully-connected layer over an ``h_in × w_in × c_in`` volume (report Sec. 1.1)."""
        return cls(name, "fc", h_in, w_in, c_in, c_out, kernel_h=h_in, kernel_w=w_in)

    # -- derived shape -------------------------------------------------------------------
    @property
    def pad_end_h(self) -> int:
        """Rows of zeros below the input: ``pad_bottom``, else ``pad_h``."""
        return self.pad_h if self.pad_bottom is None else self.pad_bottom

    @property
    def pad_end_w(self) -> int:
        """Columns of zeros right of the input: ``pad_right``, else ``pad_w``."""
        return self.pad_w if self.pad_right is None else self.pad_right

    @property
    def span_h(self) -> int:
        """Input rows one output's window covers: ``(F - 1)·d + 1`` for a kernel of height F
        dilated by d (its taps ``d`` rows apart), F undilated."""
        return (self.kernel_h - 1) * self.dilation_h + 1

    @property
    def span_w(self) -> int:
        """As ``span_h``, for columns."""
        return (self.kernel_w - 1) * self.dilation_w + 1

    @property
    def h_out(self) -> int:
        """Output height, W_O = (W_I + 2P - F)/S + 1 (report Sec. 1.1), F the window's span
        (the two P's the top and bottom padding)."""
        return out_size(
            self.h_in,
            self.span_h,
            self.stride_h,
            self.pad_h,
            self.ceil_mode,
            self.upscale,
            self.pad_end_h,
        )

    @property
    def w_out(self) -> int:
        return out_size(
            self.w_in,
            self.span_w,
            self.stride_w,
            self.pad_w,
            self.ceil_mode,
            self.upscale,
            self.pad_end_w,
        )

    @property
    def cin_per_group(self) -> int:
        return self.c_in // self.groups

    @property
    def cout_per_group(self) -> int:
        return self.c_out // self.groups

    @property
    def is_depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.c_in == self.c_out

    @property
    def operands(self) -> int:
        """Input tensors the layer reads: ``n`` for an add or a mul, else 1 (a residual not
        counted)."""
        return self.c_in // self.c_out if self.kind in OPERAND_KINDS else 1

    # -- sizes in words, per image ---------------------------------------------------------
    @property
    def ops_per_output(self) -> int:
        """FPU operations per output word: the MACs of a conv or fc (every output sums over
        its group's inputs and the kernel), one compare or add per tap of a pool, ``n - 1``
        adds of an add or multiplies of a mul (at least one), the elementwise function, a
        move per upsampled word (a multiply-add per tap of a bilinear one's 2 × 2), the
        softmax's exp, sum and scale; plus the epilogue's operations."""
        kind = self.kind
        if self.expansion is not None:  # the depthwise's taps (the 1x1's: expansion_ops)
            body = self.kernel_h * self.kernel_w
        elif kind in WEIGHTED_KINDS:
            body = self.cin_per_group * self.filter_pixels
        elif kind in ("maxpool", "avgpool"):
            body = self.kernel_h * self.kernel_w
        elif kind in OPERAND_KINDS:
            body = self.operands - 1
        elif kind == "softmax":
            body = SOFTMAX_OPS
        elif kind == "upsample" and self.upsample_mode != "nearest":
            body = 4
        else:  # activation (its function is the epilogue's), upsample (a move)
            body = 0 if kind == "activation" else 1
        return body + self.epilogue.ops

    @property
    def ops(self) -> int:
        """FPU operations for one image (``ops_per_output`` per output word, and a fused
        depthwise's ``prologue_ops`` per word of its result, computed once; a fused 1×1's
        ``expansion_ops`` per word of its result, computed once)."""
        return (
            self.output_words * self.ops_per_output
            + self.prologue_result_words * self.prologue_ops
            + self.expansion_result_words * self.expansion_ops
        )

    @property
    def filter_pixels(self) -> int:
        """The filter's pixels per input and output channel: the kernel's, 1 for the 1×1 conv
        of a fused pair (its window is the depthwise's)."""
        if self.prologue is not None or self.expansion is not None:
            return 1
        return self.kernel_h * self.kernel_w

    @property
    def filter_words_per_output(self) -> int:
        """Filter words one output channel reads per input slice step: the kernel of a conv or
        fc, nothing for the kinds without weights."""
        if self.kind not in WEIGHTED_KINDS:
            return 0
        return self.cin_per_group * self.filter_pixels

    @property
    def prologue_pixels(self) -> int:
        """Weights of the fused depthwise per input channel (its kernel), 0 without one."""
        return 0 if self.prologue is None else self.kernel_h * self.kernel_w

    @property
    def prologue_ops(self) -> int:
        """FPU operations per word of the fused depthwise's result: its taps, bias and
        activation (0 without one)."""
        return 0 if self.prologue is None else self.prologue_pixels + self.prologue.ops

    @property
    def prologue_result_words(self) -> int:
        """Words of the fused depthwise's result, per image (0 without one)."""
        return 0 if self.prologue is None else self.h_out * self.w_out * self.c_in

    @property
    def fuses(self) -> bool:
        """Whether the layer is a fused pair (a prologue or an expansion)."""
        return self.prologue is not None or self.expansion is not None

    @property
    def expansion_pixels(self) -> int:
        """Weights of the depthwise after a fused 1×1 per output channel (its kernel), 0
        without one."""
        return 0 if self.expansion is None else self.kernel_h * self.kernel_w

    @property
    def expansion_ops(self) -> int:
        """FPU operations per word of a fused 1×1's result: its ``c_in`` MACs, bias and
        activation (0 without one)."""
        return 0 if self.expansion is None else self.c_in + self.expansion.ops

    @property
    def expansion_result_words(self) -> int:
        """Words of a fused 1×1's result (the expanded tensor), per image (0 without one)."""
        return 0 if self.expansion is None else self.h_in * self.w_in * self.c_out

    @property
    def macs(self) -> int:
        """MACs for one image: every output word sums over its group's inputs and the kernel,
        and a fused depthwise's result words their taps (0 for the kinds without weights:
        their work is ``ops``)."""
        if self.kind not in WEIGHTED_KINDS:
            return 0
        if self.expansion is not None:  # the depthwise's taps, the 1x1's MACs once
            return self.output_words * self.expansion_pixels + self.expansion_result_words * (
                self.c_in
            )
        own = self.output_words * self.cin_per_group * self.filter_pixels
        return own + self.prologue_result_words * self.prologue_pixels

    @property
    def input_words(self) -> int:
        return self.h_in * self.w_in * self.c_in

    @property
    def output_words(self) -> int:
        return self.h_out * self.w_out * self.c_out

    @property
    def weight_words(self) -> int:
        """Filter parameters, F·F·D_I·D_O for a dense layer (report Sec. 1.1), per group; 0 for
        the kinds without weights; a fused depthwise adds its ``c_in × k²``, the depthwise
        after a fused 1×1 its ``c_out × k²``. (A folded bias, ``c_out`` words, is not
        counted: it is read once per stack with the epilogue and is below 0.1 % of the
        weights of the example networks; so is a fused layer's other one.)"""
        return (
            self.c_out * self.filter_words_per_output
            + self.c_in * self.prologue_pixels
            + self.c_out * self.expansion_pixels
        )

    @property
    def residual_words(self) -> int:
        """Words of the residual operand the epilogue reads, per image (0 without one)."""
        return self.output_words if self.epilogue.residual else 0

    def unfused(self) -> tuple[Layer, Layer]:
        """A fused pair as its two layers, in order. With a prologue: the depthwise (named
        ``<name>/depthwise``, its bias and activation its epilogue) and the 1×1 (this
        layer's name and epilogue). With an expansion: the 1×1 (named ``<name>/expansion``,
        the expansion's bias and activation its epilogue) and the depthwise (this layer's
        name, window and epilogue). Raises ``ValueError`` for a layer that fuses nothing."""
        if self.expansion is not None:
            pointwise = Layer(
                f"{self.name}/expansion",
                "conv",
                self.h_in,
                self.w_in,
                self.c_in,
                self.c_out,
                epilogue=Epilogue(self.expansion.bias, activation=self.expansion.activation),
            )
            depthwise = replace(self, c_in=self.c_out, groups=self.c_out, expansion=None)
            return pointwise, depthwise
        if self.prologue is None:
            raise ValueError(f"layer {self.name!r} has no fused depthwise")
        depthwise = replace(
            self,
            name=f"{self.name}/depthwise",
            c_out=self.c_in,
            groups=self.c_in,
            epilogue=Epilogue(self.prologue.bias, activation=self.prologue.activation),
            prologue=None,
        )
        pointwise = Layer(
            self.name,
            "conv",
            self.h_out,
            self.w_out,
            self.c_in,
            self.c_out,
            epilogue=self.epilogue,
        )
        return depthwise, pointwise

    def shape_key(self) -> tuple[object, ...]:
        """Everything but the name, as plain values: layers with equal keys have equal
        mappings and costs. (A dilation and an interpolation are appended only where they
        are not the default, so the keys of other layers, and the names of the refinement
        studies made from them, are what they were; so is unequal padding.)"""
        extra: tuple[object, ...] = ()
        if (self.dilation_h, self.dilation_w, self.upsample_mode) != (1, 1, "nearest"):
            extra = (self.dilation_h, self.dilation_w, self.upsample_mode)
        if (self.pad_bottom, self.pad_right) != (None, None):
            extra = (*extra, "pad_end", self.pad_end_h, self.pad_end_w)
        if self.prologue is not None:
            extra = (*extra, "prologue", *self.prologue.key())
        if self.expansion is not None:
            extra = (*extra, "expansion", *self.expansion.key())
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
            self.kind,
            self.upscale,
            self.ceil_mode,
            self.count_include_pad,
            *self.epilogue.key(),
            *extra,
        )


def out_size(
    n_in: int,
    kernel: int,
    stride: int,
    pad: int,
    ceil_mode: bool,
    upscale: int,
    pad_end: int | None = None,
) -> int:
    """Output extent along one axis: (n + 2P - F)/S + 1 rounded down (report Sec. 1.1; the
    two P's ``pad`` before and ``pad_end`` after, equal unless given), or up in ceil mode
    with the last window starting inside the input or its left padding (as ONNX and PyTorch
    define it); ``n · upscale`` for an upsample."""
    if upscale != 1:
        return n_in * upscale
    span = n_in + pad + (pad if pad_end is None else pad_end) - kernel
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= n_in + pad:
        out -= 1
    return out


class LayerError(ArgumentsError, ValueError):
    """A layer's field has a value no layer can have; names the layer and the field."""

    def __init__(self, layer: str, field_name: str, message: str) -> None:
        super().__init__(f"layer {layer!r}, field {field_name!r}: {message}")
        self.layer = layer
        self.field = field_name
        self.reason = message
