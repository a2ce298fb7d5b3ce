"""Hypothesis strategies for layers and mappings (shared by the property tests).

``layers()`` draws convolutions and fully-connected layers without an epilogue (what the
executor of ``autotune.verification`` runs); ``every_layer()`` adds epilogues and every other
layer kind, for the stages that cost them (model, search, simulator).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace

from hypothesis import strategies as st

from autotune import Buffers, Layer, Mapping, Tile
from autotune.ir.layer import (
    ACTIVATION_OPS,
    LAYER_KINDS,
    Activation,
    Epilogue,
    Expansion,
    Prologue,
)
from autotune.ir.resample import UPSAMPLE_MODES
from autotune.search.space import algorithms_for, delta_o_values


@st.composite
def conv_layers(draw, max_hw: int = 40, max_c: int = 96) -> Layer:
    groups = draw(st.sampled_from([1, 1, 1, 2, 4, "depthwise"]))
    if groups == "depthwise":
        c = draw(st.integers(1, max_c))
        c_in = c_out = groups = c
    else:
        c_in = groups * draw(st.integers(1, max_c // groups))
        c_out = groups * draw(st.integers(1, max_c // groups))
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    # dilated taps (DeepLab's, FCN's), mostly not
    dh, dw = (draw(st.sampled_from([1, 1, 1, 2, 3])) for _ in range(2))
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    ph, pw = draw(st.integers(0, span_h - 1)), draw(st.integers(0, span_w - 1))
    # the end's padding: mostly the start's, sometimes its own (TensorFlow's SAME)
    pb = draw(st.sampled_from([ph, ph]) | st.integers(0, span_h - 1))
    pr = draw(st.sampled_from([pw, pw]) | st.integers(0, span_w - 1))
    h = draw(st.integers(max(1, span_h - ph - pb), max(max_hw, span_h)))
    w = draw(st.integers(max(1, span_w - pw - pr), max(max_hw, span_w)))
    # a dense conv may be a fused depthwise and 1x1 pair, or a fused 1x1 and depthwise pair
    # (its window the depthwise's)
    prologue, expansion = None, None
    fused = draw(st.integers(0, 7)) if groups == 1 else 7
    if fused < 2:
        act = draw(st.none() | activations())
        if fused == 0:
            prologue = Prologue(bias=draw(st.booleans()), activation=act)
        else:
            expansion = Expansion(bias=draw(st.booleans()), activation=act)
    return Layer(
        "conv",
        "conv",
        h,
        w,
        c_in,
        c_out,
        kh,
        kw,
        draw(st.integers(1, 3)),
        draw(st.integers(1, 3)),
        ph,
        pw,
        groups,
        dilation_h=dh,
        dilation_w=dw,
        pad_bottom=pb,
        pad_right=pr,
        prologue=prologue,
        expansion=expansion,
    )


@st.composite
def fc_layers(draw, max_c: int = 300) -> Layer:
    h = draw(st.integers(1, 7))
    w = draw(st.integers(1, 7))
    return Layer.fc("fc", h, w, draw(st.integers(1, max_c)), draw(st.integers(1, max_c)))


def layers() -> st.SearchStrategy[Layer]:
    return st.one_of(conv_layers(), fc_layers())


def activations() -> st.SearchStrategy[Activation]:
    return st.sampled_from(sorted(ACTIVATION_OPS)).map(Activation)


@st.composite
def epilogues(draw, bias: bool = True, activation: bool = False) -> Epilogue:
    """An epilogue (``bias``: may have one; ``activation``: must have one)."""
    act = draw(activations()) if activation else draw(st.none() | activations())
    return Epilogue(bias=bias and draw(st.booleans()), residual=draw(st.booleans()), activation=act)


def with_epilogues(layer_strategy: st.SearchStrategy[Layer]) -> st.SearchStrategy[Layer]:
    """Layers of ``layer_strategy`` with a drawn epilogue."""
    return st.tuples(layer_strategy, epilogues()).map(lambda le: replace(le[0], epilogue=le[1]))


@st.composite
def kind_layers(draw, max_hw: int = 40, max_c: int = 96) -> Layer:
    """A layer of a kind other than conv and fc (``ir.layer``), with a drawn epilogue."""
    kinds = ["maxpool", "avgpool", "add", "mul", "activation", "upsample", "softmax"]
    kind = draw(st.sampled_from(kinds))
    c = draw(st.integers(1, max_c))
    epilogue = draw(epilogues(bias=False, activation=kind == "activation"))
    if kind in ("maxpool", "avgpool"):
        if draw(st.integers(0, 4)) == 0:  # a global pool: the kernel covers the input
            h, w = draw(st.integers(1, 9)), draw(st.integers(1, 9))
            return Layer("pool", kind, h, w, c, c, h, w, groups=c, epilogue=epilogue)
        kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
        ph, pw = draw(st.integers(0, (kh - 1) // 2)), draw(st.integers(0, (kw - 1) // 2))
        h = draw(st.integers(max(1, kh - 2 * ph), max_hw))
        w = draw(st.integers(max(1, kw - 2 * pw), max_hw))
        return Layer(
            "pool",
            kind,
            h,
            w,
            c,
            c,
            kh,
            kw,
            draw(st.integers(1, 3)),
            draw(st.integers(1, 3)),
            ph,
            pw,
            groups=c,
            ceil_mode=draw(st.booleans()),
            count_include_pad=draw(st.booleans()),
            epilogue=epilogue,
        )
    h, w = draw(st.integers(1, max_hw)), draw(st.integers(1, max_hw))
    if kind in ("add", "mul"):
        n = draw(st.integers(2, 3))
        return Layer(kind, kind, h, w, n * c, c, groups=c, epilogue=epilogue)
    if kind == "upsample":
        scale = draw(st.integers(2, 3))
        h, w = -(-h // scale), -(-w // scale)
        mode = draw(st.sampled_from(UPSAMPLE_MODES))
        return Layer(
            "up",
            kind,
            h,
            w,
            c,
            c,
            groups=c,
            upscale=scale,
            epilogue=epilogue,
            upsample_mode=mode,
        )
    if kind == "softmax":
        return Layer("softmax", kind, h, w, c, c, epilogue=epilogue)
    return Layer("act", kind, h, w, c, c, groups=c, epilogue=epilogue)


def every_layer(max_hw: int = 40, max_c: int = 96) -> st.SearchStrategy[Layer]:
    """Layers of every kind: conv and fc with and without an epilogue, and the others."""
    weighted = st.one_of(conv_layers(max_hw, max_c), fc_layers(max(max_c, 8) * 3))
    return st.one_of(weighted, with_epilogues(weighted), kind_layers(max_hw, max_c))


@st.composite
def mappings(draw, layer: Layer, batch: int) -> Mapping:
    algorithm = draw(st.sampled_from(algorithms_for(layer)))
    delta_o = draw(st.sampled_from(delta_o_values(layer)))
    depth = st.sampled_from([1, 2])
    buffers = Buffers(input_depth=draw(depth), filter_depth=draw(depth), output_depth=draw(depth))
    batch_tile = draw(st.integers(1, batch))
    if algorithm == "input_parallel":
        tile = Tile(in_c=draw(st.integers(1, layer.c_in)))
        return Mapping(
            algorithm, delta_o=delta_o, batch_tile=batch_tile, tile=tile, buffers=buffers
        )
    max_in_c = layer.cin_per_group * max(1, delta_o // layer.cout_per_group)
    tile = Tile(
        out_h=draw(st.none() | st.integers(1, layer.h_out)),
        out_w=draw(st.none() | st.integers(1, layer.w_out)),
        # a softmax steps through all its channels at once (``tiling``)
        in_c=layer.c_in
        if layer.kind == "softmax"
        else draw(st.integers(1, min(max_in_c, layer.c_in))),
    )
    share_group = 1
    if algorithm == "output_stack_shared":
        share_group = draw(st.sampled_from([4, 16, 64]))
    return Mapping(
        algorithm,
        delta_o=delta_o,
        batch_tile=batch_tile,
        share_group=share_group,
        tile=tile,
        buffers=buffers,
    )


@st.composite
def mapped_layers(draw) -> tuple[Layer, Mapping, int, str]:
    """A layer of any kind, a mapping that applies to it, a batch and a precision."""
    layer = draw(every_layer())
    batch = draw(st.integers(1, 4))
    mapping = draw(mappings(layer, batch))
    return layer, mapping, batch, draw(st.sampled_from(["fp32", "fp64"]))


@st.composite
def multicast_mapped_layers(draw, every_kind: bool = False) -> tuple[Layer, Mapping, int, str]:
    """Output-stack mappings with DMA multicast (MPPA3-like machines compute fp16), of conv
    and fc layers (``every_kind``: of every kind, with epilogues)."""
    # a fused pair does not multicast (``tiling.task_grid``)
    layer = replace(draw(every_layer() if every_kind else layers()), prologue=None, expansion=None)
    batch = draw(st.integers(1, 4))
    mapping = draw(mappings(layer, batch))
    mapping = Mapping(
        "output_stack",
        delta_o=mapping.delta_o,
        batch_tile=mapping.batch_tile,
        tile=mapping.tile if mapping.algorithm != "input_parallel" else Tile(),
        buffers=mapping.buffers,
        multicast=True,
    )
    return layer, mapping, batch, "fp16"


# -- layer kinds beyond conv/fc, and epilogues (verification side) ----------------------------
#
# Kept apart from the strategies above: other stages may add their own for the same kinds.


def any_activation() -> st.SearchStrategy[Activation]:
    """Any epilogue activation, with the parameters its definition allows."""
    return st.one_of(
        st.builds(
            Activation,
            st.sampled_from(
                ["relu", "sigmoid", "silu", "hardswish", "hardsigmoid", "tanh", "gelu"]
            ),
        ),
        st.builds(Activation, st.just("leaky_relu"), alpha=st.sampled_from([0.01, 0.1, 0.2, 1.5])),
        # a bound left out is infinite (ONNX's Clip; a schedule file writes "Infinity")
        st.tuples(
            st.floats(-1.0, 0.5) | st.just(-math.inf), st.floats(0.0, 6.0) | st.just(math.inf)
        ).map(lambda lh: Activation("clip", low=min(lh), high=max(lh))),
    )


@st.composite
def any_epilogue(draw, bias: bool = True) -> Epilogue:
    """A random epilogue (``bias=False``: none with a bias, as the kinds without weights)."""
    residual = draw(st.booleans())
    activation = draw(st.none() | any_activation())
    return Epilogue(
        bias=bias and draw(st.booleans()),
        residual=residual,
        activation=activation,
        activation_first=residual and activation is not None and draw(st.booleans()),
    )


@st.composite
def window_layers(draw, kind: str, max_hw: int = 12, max_c: int = 8) -> Layer:
    """A max or average pool: any kernel, stride and padding a layer may have, ceil mode
    and ``count_include_pad``; sometimes global (the kernel covers the input)."""
    c = draw(st.integers(1, max_c))
    if draw(st.integers(0, 5)) == 0:  # global
        h, w = draw(st.integers(1, max_hw)), draw(st.integers(1, max_hw))
        kh, kw, sh, sw, ph, pw = h, w, 1, 1, 0, 0
    else:
        kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        ph, pw = draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1))
        h = draw(st.integers(max(1, kh - 2 * ph), max_hw))
        w = draw(st.integers(max(1, kw - 2 * pw), max_hw))
        sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    return Layer(
        kind,
        kind,  # type: ignore[arg-type]
        h,
        w,
        c,
        c,
        kh,
        kw,
        sh,
        sw,
        ph,
        pw,
        groups=c,
        ceil_mode=draw(st.booleans()),
        count_include_pad=kind == "avgpool" and draw(st.booleans()),
        epilogue=draw(any_epilogue(bias=False)),
    )


@st.composite
def elementwise_layers(draw, kind: str | None = None, max_hw: int = 10, max_c: int = 12) -> Layer:
    """An add of 2-3 operands, an activation, an upsample or a softmax (``kind``, or any of
    them), any epilogue."""
    if kind is None:
        kind = draw(st.sampled_from(["add", "mul", "activation", "upsample", "softmax"]))
    h, w, c = (
        draw(st.integers(1, max_hw)),
        draw(st.integers(1, max_hw)),
        draw(st.integers(1, max_c)),
    )
    epilogue = draw(any_epilogue(bias=False))
    if kind == "activation":
        epilogue = Epilogue(residual=epilogue.residual, activation=draw(any_activation()))
    c_in = c * draw(st.integers(2, 3)) if kind in ("add", "mul") else c
    return Layer(
        kind,
        kind,  # type: ignore[arg-type]
        h,
        w,
        c_in,
        c,
        groups=1 if kind == "softmax" else c,
        upscale=draw(st.integers(1, 3)) if kind == "upsample" else 1,
        epilogue=epilogue,
    )


@st.composite
def any_kind_layers(draw) -> Layer:
    """A layer of any kind; a conv or fc with a random epilogue (bias included)."""
    which = draw(st.sampled_from(LAYER_KINDS))
    if which in ("maxpool", "avgpool"):
        return draw(window_layers(which))
    if which not in ("conv", "fc"):
        return draw(elementwise_layers(which))
    base = draw(conv_layers(max_hw=10, max_c=12) if which == "conv" else fc_layers(max_c=40))
    return dataclasses.replace(base, epilogue=draw(any_epilogue()))
