"""Execution: run a program on a model of main memory and the clusters' L1 scratchpads.

Main memory holds the input, the filters and the output as numpy arrays. Each cluster has an
arena of ``l1_bytes``; ``Alloc`` carves buffers out of it and fails past capacity. Data moves
only through the operations, always by copying into the destination (never by keeping a view
of the source). Every buffer remembers which region it holds where, so each operation can
check its preconditions cheaply before it runs: buffer allocated, region inside its tensor
and its buffer, data present and the one it needs (the right rows, halo included; the right
slice from the right neighbour), accumulators complete when stored. A wrong schedule raises
``ScheduleError`` naming the operation, the cluster and the reason.

What a convolution (or a window of a layer without weights) needs is derived here from the
output tile and the layer's geometry, not taken from ``autotune.tiling``, so a halo that tiling
got wrong would be caught too.

Every kind runs tile by tile with the same operations: ``Conv`` blocks for the kinds with
weights, ``Apply`` blocks for the others, accumulating into an output tile that a ``Store``
finishes. How a block combines into the accumulator is the kind's: a sum of products
(conv, fc), a max (maxpool; the accumulator starts at -inf, taps in the padding or past the
padded input in ceil mode are skipped), a sum of window averages (avgpool: the divisor is
the taps inside the input, or inside the padded input with ``count_include_pad``, never the
ceil-mode overhang, as ONNX and PyTorch define it), a sum of operands (add), a copy
(activation, upsample) or a running softmax over the channels (its maximum and sum kept with
the accumulator, the division done by the store). The store applies the epilogue once, after
all accumulation and any reduction: ``+ bias[c]``, ``+ residual``, the activation, then the
one rounding to the storage precision.

A 1×1 conv fused with the depthwise before it (``Layer.prologue``) adds one operation per
input step: a ``Depthwise`` computes the step's depthwise result over the output tile from
the loaded patch (checked as a block's: the rows and columns its windows read) and writes it
to L1, rounded to the storage precision, its bias and activation applied; the 1×1's ``Conv``
blocks then read that result (the same images, rows and columns as their accumulator).

A depthwise conv fused with the 1×1 before it (``Layer.expansion``) accumulates the 1×1's
``Conv`` blocks into a region of the ``expansion`` tensor over the input band (checked as
a block's: the patch holds the same images, rows and columns); once every input channel is
summed in, a ``Depthwise`` applies the expansion's bias and activation, rounds to the
storage precision, and computes the output tile (checked: the accumulator is complete and
holds the rows and columns the tile's windows read), which the store then finishes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from autotune.ir.layer import OPERAND_KINDS, WEIGHTED_KINDS, Expansion, Layer, Prologue
from autotune.ir.resample import source_range, source_taps
from autotune.verification.kernels import (
    activate,
    average_block,
    bilinear,
    combine_operands,
    conv_block,
    max_block,
    nearest,
    softmax_step,
)
from autotune.verification.program import (
    Alloc,
    Apply,
    Conv,
    Copy,
    Depthwise,
    Load,
    Multicast,
    Op,
    Program,
    Reduce,
    Region,
    Store,
    Zero,
    collector_paused,
)

#: Storage type of each precision: main memory and L1 data.
DTYPES = {"fp32": np.float32, "fp64": np.float64, "fp16": np.float16}
#: Accumulation type: fp16 is FP16.32 as on the MPPA3 coprocessor (seed 003 Sec. II: FP16
#: multiplicands, FP32 accumulators), so products and partial sums are float32 and the output
#: is rounded to fp16 when it is stored. The others accumulate in their own precision.
ACCUMULATOR_DTYPES = {"fp32": np.float32, "fp64": np.float64, "fp16": np.float32}


class ScheduleError(Exception):
    """A program that cannot run as written. ``reason`` says why; ``index`` and ``op`` say
    which operation failed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.index: int | None = None
        self.op: Op | None = None

    def __str__(self) -> str:
        if self.op is None:
            return self.reason
        return (
            f"op {self.index} ({type(self.op).__name__} on cluster {self.op.cluster}): "
            f"{self.reason}"
        )


class AllocationError(ScheduleError):
    """A buffer does not fit in what is left of a cluster's L1."""


@dataclass
class Stats:
    """What a run did: operations by kind, bytes moved per path, MACs computed."""

    op_counts: dict[str, int] = field(default_factory=dict)
    load_bytes: int = 0  # main memory -> L1
    store_bytes: int = 0  # L1 -> main memory
    intercluster_bytes: int = 0  # L1 -> another cluster's L1 (forwarding, reduction)
    local_bytes: int = 0  # L1 -> own L1 (publishing into the forwarding buffer)
    multicast_bytes: int = 0  # main memory -> L1 of the 2nd, 3rd ... multicast receiver
    epilogue_bytes: int = 0  # of load_bytes: the bias and residual words the stores read
    macs: int = 0

    def bytes_moved(self) -> dict[str, int]:
        moved = {
            "load": self.load_bytes,
            "store": self.store_bytes,
            "intercluster": self.intercluster_bytes,
            "local": self.local_bytes,
        }
        if self.multicast_bytes:
            moved["multicast_extra"] = self.multicast_bytes
        if self.epilogue_bytes:
            moved["epilogue"] = self.epilogue_bytes
        return moved


@dataclass(frozen=True)
class Outputs:
    """The output tensor as main memory holds it after the run, and the run's statistics."""

    output: np.ndarray
    stats: Stats


class _Content:
    """A region held at ``[start, end)`` words of a buffer (``data``: those words of L1);
    ``pairs`` >= 0 marks an accumulator and counts the (output channel, input channel) pairs
    summed into it. ``running``: a softmax accumulator's maximum and sum per image and pixel
    (kept beside the arena, as the FP16.32 partial sums are). ``view``: the same words shaped
    as the region (made once: blocks read a content many times)."""

    __slots__ = ("start", "end", "region", "pairs", "data", "view", "running")

    def __init__(self, start: int, data: np.ndarray, region: Region, pairs: int) -> None:
        self.start, self.end, self.data = start, start + data.size, data
        self.view = data.reshape(region.shape)
        self.region, self.pairs = region, pairs
        self.running: tuple[np.ndarray, np.ndarray] | None = None

    def describe(self) -> str:
        if self.pairs < 0:
            return str(self.region)
        return f"a partial sum of {self.region} ({self.pairs} pairs)"


class _Buffer:
    __slots__ = ("name", "data", "contents")

    def __init__(self, name: str, data: np.ndarray) -> None:
        self.name, self.data = name, data
        self.contents: list[_Content] = []

    def at(self, offset: int) -> _Content | None:
        for content in self.contents:
            if content.start == offset:
                return content
        return None

    def span(self, offset: int, words: int, region: Region) -> np.ndarray:
        """The ``words`` words at ``offset`` (a view into L1), checked against the buffer."""
        if offset < 0 or offset + words > self.data.size:
            raise ScheduleError(
                f"{region} ({words} words at word {offset}) does not fit in "
                f"buffer {self.name!r} of {self.data.size} words"
            )
        return self.data[offset : offset + words]

    def write(self, offset: int, data: np.ndarray, region: Region, pairs: int) -> _Content:
        """Record that ``data`` (the words at ``offset``) now holds ``region``; whatever it
        overlaps is gone."""
        end = offset + data.size
        kept = [c for c in self.contents if c.end <= offset or c.start >= end]
        content = _Content(offset, data, region, pairs)
        kept.append(content)
        self.contents = kept
        return content


class _Cluster:
    __slots__ = ("arena", "top", "buffers")

    def __init__(self, l1_bytes: int) -> None:
        self.arena = np.zeros(l1_bytes, dtype=np.uint8)
        self.top = 0
        self.buffers: dict[str, _Buffer] = {}


class _Machine:
    """Main memory and the clusters' L1, as one program sees them."""

    def __init__(self, program: Program, inputs: Mapping[str, np.ndarray]) -> None:
        layer = program.layer
        self.program, self.layer = program, layer
        if program.precision not in DTYPES:
            raise ValueError(
                f"the executor computes in {', '.join(DTYPES)}, not {program.precision}"
            )
        self.dtype = DTYPES[program.precision]
        self.acc_dtype = ACCUMULATOR_DTYPES[program.precision]
        self.wb = program.word_bytes
        self.clusters: dict[int, _Cluster] = {}
        shapes = expected_shapes(layer, program.batch)
        self.main: dict[str, np.ndarray] = {}
        extra = sorted(set(inputs) - set(shapes))
        if extra:
            raise ValueError(
                f"a {layer.kind} layer{_epilogue_words(layer)} reads no {', '.join(extra)} "
                f"(it reads {', '.join(n for n in shapes if n != 'output')})"
            )
        for name, shape in shapes.items():
            if name == "output":
                continue
            if name not in inputs:
                raise ValueError(f"the layer reads {name} {shape}, which is not given")
            array = np.asarray(inputs[name])
            if array.shape != shape:
                raise ValueError(f"{name} has shape {array.shape}, the layer needs {shape}")
            self.main[name] = np.array(array, dtype=self.dtype)  # own copy in main memory
        self.main["output"] = np.zeros(shapes["output"], dtype=self.dtype)
        self.stored = np.zeros(shapes["output"], dtype=bool)
        self.stats = Stats()

    def buffer(self, cluster: int, name: str) -> _Buffer:
        node = self.clusters.get(cluster)
        buffer = None if node is None else node.buffers.get(name)
        if buffer is None:
            raise ScheduleError(f"cluster {cluster} has no buffer {name!r} (never allocated)")
        return buffer

    def tensor(self, region: Region, readable: tuple[str, ...]) -> np.ndarray:
        if region.tensor not in readable or region.tensor not in self.main:
            have = tuple(name for name in readable if name in self.main)
            raise ScheduleError(f"{region} is not one of the tensors {have}")
        array = self.main[region.tensor]
        inside = len(region.box) == array.ndim
        for (a, b), n in zip(region.box, array.shape, strict=False):
            inside = inside and 0 <= a < b <= n
        if not inside:
            raise ScheduleError(f"{region} lies outside {region.tensor} of shape {array.shape}")
        return array


def expected_shapes(layer: Layer, batch: int) -> dict[str, tuple[int, ...]]:
    """Shapes of the main-memory tensors the layer has, inputs first (layout: see
    ``autotune.verification.program``): ``filter`` only with weights, ``bias`` and
    ``residual`` only when the epilogue reads them."""
    out = (batch, layer.c_out, layer.h_out, layer.w_out)
    shapes: dict[str, tuple[int, ...]] = {"input": (batch, layer.c_in, layer.h_in, layer.w_in)}
    if layer.kind in WEIGHTED_KINDS:
        side = 1 if layer.fuses else None
        shapes["filter"] = (
            layer.c_out,
            layer.cin_per_group,
            side or layer.kernel_h,
            side or layer.kernel_w,
        )
    fused = layer.prologue or layer.expansion
    if fused is not None:  # the depthwise's channels: the 1x1's input or its output
        filter_name, bias_name = fused_operand_names(layer)
        channels = layer.c_in if layer.prologue is not None else layer.c_out
        shapes[filter_name] = (channels, 1, layer.kernel_h, layer.kernel_w)
        if fused.bias:
            shapes[bias_name] = (channels,)
    if layer.epilogue.bias:
        shapes["bias"] = (layer.c_out,)
    if layer.epilogue.residual:
        shapes["residual"] = out
    shapes["output"] = out
    return shapes


def fused_operand_names(layer: Layer) -> tuple[str, str]:
    """(the depthwise's filter, the absorbed layer's bias) of a fused pair, as main memory
    names them (``expected_shapes``): ``prologue_filter`` and ``prologue_bias`` with a
    depthwise prologue, ``depthwise_filter`` and ``expansion_bias`` with an expansion. Its
    ``filter`` is the 1×1's either way. Raises ``ValueError`` for a layer that fuses
    nothing."""
    if layer.expansion is not None:
        return "depthwise_filter", "expansion_bias"
    if layer.prologue is not None:
        return "prologue_filter", "prologue_bias"
    raise ValueError(f"layer {layer.name!r} fuses nothing")


def _epilogue_words(layer: Layer) -> str:
    e = layer.epilogue
    parts = [name for name, on in (("bias", e.bias), ("residual", e.residual)) if on]
    return f" with {' and '.join(parts)}" if parts else ""


# -- operations ---------------------------------------------------------------------------------


def _alloc(m: _Machine, op: Alloc) -> None:
    program = m.program
    if not 0 <= op.cluster < program.clusters:
        raise ScheduleError(f"no cluster {op.cluster} (the machine has {program.clusters})")
    node = m.clusters.get(op.cluster)
    if node is None:
        node = m.clusters[op.cluster] = _Cluster(program.l1_bytes)
    if op.buffer in node.buffers:
        raise ScheduleError(f"buffer {op.buffer!r} is already allocated")
    align = program.l1_align_bytes
    start = -(-node.top // align) * align
    end = start + op.nbytes
    if end > program.l1_bytes:
        held = ", ".join(f"{name} {b.data.nbytes} B" for name, b in node.buffers.items())
        raise AllocationError(
            f"allocating buffer {op.buffer!r} of {op.nbytes} B at byte "
            f"{start} overflows the {program.l1_bytes} B of L1"
            + (f" (already allocated: {held})" if held else "")
        )
    words = op.nbytes // m.wb
    node.buffers[op.buffer] = _Buffer(
        op.buffer, node.arena[start : start + words * m.wb].view(m.dtype)
    )
    node.top = end


#: The main-memory tensors a DMA load may read (the epilogue's are read by the store).
LOADABLE = ("input", "filter", "prologue_filter", "depthwise_filter")


def _load(m: _Machine, op: Load) -> None:
    buffer = m.buffer(op.cluster, op.buffer)
    src = m.tensor(op.src, LOADABLE)
    words = op.src.words
    data = buffer.span(op.offset, words, op.src)
    buffer.write(op.offset, data, op.src, -1).view[...] = src[op.src.slices]
    m.stats.load_bytes += words * m.wb


def _multicast(m: _Machine, op: Multicast) -> None:
    """One main-memory read (counted once in ``load_bytes``) into every target's buffer."""
    clusters = [cluster for cluster, _ in op.targets]
    if not clusters:
        raise ScheduleError(f"multicast of {op.src} has no receivers")
    if len(set(clusters)) != len(clusters):
        raise ScheduleError(f"multicast of {op.src} names a receiver twice: {clusters}")
    if not m.program.multicast:
        raise ScheduleError(f"multicast of {op.src}, but the machine has no DMA multicast")
    src = m.tensor(op.src, LOADABLE)
    words = op.src.words
    block = src[op.src.slices]
    for cluster, offset in op.targets:
        buffer = m.buffer(cluster, op.buffer)
        data = buffer.span(offset, words, op.src)
        buffer.write(offset, data, op.src, -1).view[...] = block
    m.stats.load_bytes += words * m.wb
    m.stats.multicast_bytes += (len(op.targets) - 1) * words * m.wb


def _zero(m: _Machine, op: Zero) -> None:
    buffer = m.buffer(op.cluster, op.buffer)
    if op.region.tensor == "expansion":
        _check_expansion_region(m, op.region)
    else:
        m.tensor(op.region, ("output",))
    data = buffer.span(op.offset, op.region.words, op.region)
    if m.acc_dtype != m.dtype:
        # FP16.32: the partial sums are float32. They occupy the words the schedule gave the
        # output buffer (checked above); their extra width is kept beside the arena (the
        # model counts output buffers in fp16 words: see verification's docstring).
        data = np.empty(data.size, dtype=m.acc_dtype)
    data[...] = _combination(m.layer.kind)[0]
    content = buffer.write(op.offset, data, op.region, 0)
    if m.layer.kind == "softmax":
        images, _, rows, cols = op.region.shape
        pixels = (images, rows, cols)
        content.running = (
            np.full(pixels, -np.inf, dtype=m.acc_dtype),
            np.zeros(pixels, dtype=m.acc_dtype),
        )


def _held(
    m: _Machine, cluster: int, name: str, offset: int, accumulator: bool, tensor: str
) -> _Content:
    content = m.buffer(cluster, name).at(offset)
    if content is None:
        raise ScheduleError(
            f"buffer {name!r} of cluster {cluster} holds nothing at word "
            f"{offset} (never loaded there, or overwritten)"
        )
    if (content.pairs >= 0) != accumulator or content.region.tensor != tensor:
        kind = f"an accumulator of {tensor}" if accumulator else f"{tensor} data"
        raise ScheduleError(
            f"buffer {name!r} of cluster {cluster} holds "
            f"{content.describe()} at word {offset}, not {kind}"
        )
    return content


@lru_cache(maxsize=4096)
def extent(
    out: tuple[int, int],
    stride: int,
    pad: int,
    kernel: int,
    n_in: int,
    upscale: int = 1,
    mode: str = "nearest",
) -> tuple[int, int, int, int]:
    """Input rows (or columns) ``[lo, hi)`` that outputs ``out`` read (``kernel``: the rows a
    window spans, a dilated one's included), clipped to the input, and the rows before and
    after that lie outside it (the padding, and in ceil mode the overhang past the padded
    input). An upsample's outputs read the inputs ``autotune.ir.resample`` gives for its
    ``mode`` (kernel 1, stride 1, no padding)."""
    if upscale != 1 or mode != "nearest":
        lo_a, hi_a = source_range(mode, n_in, upscale, np.asarray(out[0]), np.asarray(out[1]))
        return int(lo_a), int(hi_a), 0, 0
    lo = out[0] * stride - pad
    hi = (out[1] - 1) * stride - pad + kernel
    lo_c, hi_c = min(max(lo, 0), n_in), min(max(hi, 0), n_in)
    return lo_c, hi_c, lo_c - lo, hi - hi_c


@lru_cache(maxsize=4096)
def tap_counts(
    out: tuple[int, int], stride: int, pad: int, kernel: int, n_in: int, include_pad: bool
) -> np.ndarray:
    """Taps an average of outputs ``out`` divides by, along one axis: those inside the input,
    or inside the padded input with ``count_include_pad``; never those of the ceil-mode
    overhang past the padded input (ONNX and PyTorch)."""
    start = np.arange(out[0], out[1]) * stride - pad
    first, last = (-pad, n_in + pad) if include_pad else (0, n_in)
    counts = np.minimum(start + kernel, last) - np.maximum(start, first)
    counts.flags.writeable = False
    return counts


@dataclass(frozen=True)
class _Block:
    """A ``Conv`` or ``Apply`` block, checked against what its buffers hold: the patch's and
    accumulator's contents, the patch's clipped extent and the rows and columns outside it
    (``(lo, hi, before, after)`` per axis), the block's input channels per group."""

    patch: _Content
    acc: _Content
    rows: tuple[int, int, int, int]
    cols: tuple[int, int, int, int]
    in_n: int


def _block(m: _Machine, op: Conv | Apply) -> _Block:
    """The checks every block needs, whatever its kind: the patch holds the input the output
    tile's windows read (images, rows and columns, halo included), the channels lie in the
    patch and the accumulator and form whole groups or part of one."""
    layer = m.layer
    patch = _held(m, op.cluster, op.in_buffer, op.in_offset, False, "input")
    acc = _held(m, op.cluster, op.out_buffer, op.out_offset, True, "output")
    images, out_ch, out_rows, out_cols = acc.region.box
    p_images, p_ch, p_rows, p_cols = patch.region.box
    (i0, i1), (o0, o1), groups = op.in_channels, op.out_channels, op.groups
    sh, sw = op.stride
    mode = layer.upsample_mode
    rows = extent(out_rows, sh, layer.pad_h, layer.span_h, layer.h_in, layer.upscale, mode)
    cols = extent(out_cols, sw, layer.pad_w, layer.span_w, layer.w_in, layer.upscale, mode)
    if p_rows != rows[:2] or p_cols != cols[:2] or p_images != images:
        raise ScheduleError(
            f"output tile {acc.region} with stride {op.stride} needs input images "
            f"{images[0]}:{images[1]}, rows {rows[0]}:{rows[1]}, columns {cols[0]}:{cols[1]}, "
            f"but buffer {op.in_buffer!r} holds {patch.region}"
            + _missing(p_rows, rows[:2], "rows")
            + _missing(p_cols, cols[:2], "columns")
        )
    if not (p_ch[0] <= i0 < i1 <= p_ch[1] and out_ch[0] <= o0 < o1 <= out_ch[1]):
        raise ScheduleError(
            f"block reads input channels {i0}:{i1} into output channels "
            f"{o0}:{o1}, but the patch holds {patch.region} and the "
            f"accumulator {acc.region}"
        )
    cin, cout = layer.cin_per_group, layer.cout_per_group
    if groups < 1 or (i1 - i0) % groups or (o1 - o0) % groups:
        raise ScheduleError(
            f"{groups} groups do not divide input channels {i0}:{i1} and output channels {o0}:{o1}"
        )
    in_n, group = (i1 - i0) // groups, i0 // cin
    whole = in_n == cin and i0 % cin == 0 and (o1 - o0) // groups == cout
    if (
        o0 // cout != group
        or (i1 - 1) // cin != group + groups - 1
        or (o1 - 1) // cout != group + groups - 1
        or (groups > 1 and not whole)
    ):
        raise ScheduleError(
            f"input channels {i0}:{i1} and output channels {o0}:{o1} are not "
            f"the same {groups} group(s) of {cin} inputs and {cout} outputs"
        )
    return _Block(patch, acc, rows, cols, in_n)


def _check_expansion_region(m: _Machine, region: Region) -> None:
    """``region`` must be a box of a fused expansion's result (the layer must have one)."""
    layer = m.layer
    full = (m.main["output"].shape[0], layer.c_out, layer.h_in, layer.w_in)
    if (
        layer.expansion is None
        or len(region.box) != 4
        or not all(0 <= a < b <= n for (a, b), n in zip(region.box, full, strict=True))
    ):
        raise ScheduleError(f"{region} is not a region of the expansion tensor {full}")


def _depthwise_window(
    m: _Machine, op: Depthwise, src: _Content, what: str, own_channels: bool
) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    """The rows and columns (``extent``) a fused depthwise's ``op.result`` reads, checked
    against what ``src`` holds: the same images, those rows and columns, the result's
    channels (exactly them when ``own_channels``), at the layer's stride."""
    layer = m.layer
    images, (c0, c1), out_rows, out_cols = op.result.box
    s_images, s_ch, s_rows, s_cols = src.region.box
    sh, sw = op.stride
    rows = extent(out_rows, sh, layer.pad_h, layer.span_h, layer.h_in)
    cols = extent(out_cols, sw, layer.pad_w, layer.span_w, layer.w_in)
    channels = s_ch == (c0, c1) if own_channels else s_ch[0] <= c0 < c1 <= s_ch[1]
    if (
        (sh, sw) != (layer.stride_h, layer.stride_w)
        or s_rows != rows[:2]
        or s_cols != cols[:2]
        or s_images != images
        or not channels
    ):
        raise ScheduleError(
            f"{op.result} with stride {op.stride} needs {what} images {images[0]}:{images[1]}, "
            f"channels {c0}:{c1}, rows {rows[0]}:{rows[1]}, columns {cols[0]}:{cols[1]}, but "
            f"buffer {op.in_buffer!r} holds {src.describe()}"
        )
    return rows, cols


def _depthwise_weights(m: _Machine, op: Depthwise, tensor: str) -> _Content:
    """The fused depthwise's weights of the result's channels, checked where ``op`` reads
    them (``tensor``: ``prologue_filter`` or ``depthwise_filter``)."""
    layer = m.layer
    filt = _held(m, op.cluster, op.filter_buffer, op.filter_offset, False, tensor)
    need = (op.result.box[1], (0, 1), (0, layer.kernel_h), (0, layer.kernel_w))
    if filt.region.box != need:
        raise ScheduleError(
            f"{op.result} needs {tensor}[{', '.join(f'{a}:{b}' for a, b in need)}] "
            f"but buffer {op.filter_buffer!r} holds {filt.region}"
        )
    return filt


def _finished(z: np.ndarray, fused: Prologue | Expansion, bias: np.ndarray | None) -> np.ndarray:
    """``z`` with a fused layer's inner bias (``bias``: its channels) and activation."""
    if fused.bias:
        assert bias is not None
        z = z + bias.astype(z.dtype)[None, :, None, None]
    act = fused.activation
    return z if act is None else activate(z, act.kind, act.alpha, act.low, act.high)


def _depthwise_of(
    m: _Machine,
    op: Depthwise,
    x: np.ndarray,
    w: np.ndarray,
    window: tuple[tuple[int, int, int, int], tuple[int, int, int, int]],
) -> np.ndarray:
    """The depthwise of ``x`` (the source, clipped) with ``w`` over the result's tile, in
    the accumulation precision; counted."""
    layer = m.layer
    if m.acc_dtype != m.dtype:  # FP16.32, as a Conv block
        x, w = x.astype(m.acc_dtype), w.astype(m.acc_dtype)
    rows, cols = window
    pads = (rows[2], rows[3], cols[2], cols[3])
    z = conv_block(x, w, x.shape[1], op.stride, pads, (layer.dilation_h, layer.dilation_w))
    m.stats.macs += z.size * layer.kernel_h * layer.kernel_w
    return z


def _expanded_depthwise(m: _Machine, op: Depthwise) -> None:
    """A fused expansion's depthwise: from the complete accumulator into the output tile."""
    layer = m.layer
    assert layer.expansion is not None
    src = _held(m, op.cluster, op.in_buffer, op.in_offset, True, "expansion")
    acc = _held(m, op.cluster, op.out_buffer, op.out_offset, True, "output")
    (c0, c1) = op.result.box[1]
    if acc.region != op.result:
        raise ScheduleError(f"depthwise into {op.result}, but the accumulator holds {acc.region}")
    window = _depthwise_window(m, op, src, "the expansion of", True)
    if src.pairs != (c1 - c0) * layer.c_in:
        raise ScheduleError(
            f"depthwise reads {src.describe()} with {src.pairs} of the {(c1 - c0) * layer.c_in} "
            f"(channel, input channel) pairs summed in"
        )
    filt = _depthwise_weights(m, op, "depthwise_filter")
    bias = m.main["expansion_bias"][c0:c1] if layer.expansion.bias else None
    e = _finished(src.view, layer.expansion, bias)
    # the expanded words, rounded as they would be stored
    z = _depthwise_of(m, op, e.astype(m.dtype), filt.view, window)
    if z.shape != acc.view.shape:
        raise ScheduleError(f"depthwise computes {z.shape} but the tile is {acc.view.shape}")
    acc.view[...] = z
    acc.pairs = src.pairs


def _depthwise(m: _Machine, op: Depthwise) -> None:
    """A fused depthwise's result over an output tile (module docstring)."""
    layer = m.layer
    if layer.expansion is not None:
        _expanded_depthwise(m, op)
        return
    prologue = layer.prologue
    if prologue is None:
        raise ScheduleError(f"layer {layer.name!r} has no fused depthwise to compute")
    result = op.result
    (c0, c1) = result.box[1]
    full = (m.main["output"].shape[0], layer.c_in, layer.h_out, layer.w_out)
    if result.tensor != "prologue" or not all(
        0 <= a < b <= n for (a, b), n in zip(result.box, full, strict=True)
    ):
        raise ScheduleError(f"{result} is not a region of the prologue tensor {full}")
    patch = _held(m, op.cluster, op.in_buffer, op.in_offset, False, "input")
    window = _depthwise_window(m, op, patch, "input", False)
    filt = _depthwise_weights(m, op, "prologue_filter")
    p0 = patch.region.box[1][0]
    z = _depthwise_of(m, op, patch.view[:, c0 - p0 : c1 - p0], filt.view, window)
    bias = m.main["prologue_bias"][c0:c1] if prologue.bias else None
    z = _finished(z, prologue, bias)
    out = m.buffer(op.cluster, op.out_buffer)
    data = out.span(op.out_offset, result.words, result)
    out.write(op.out_offset, data, result, -1).view[...] = z


def _pointwise(m: _Machine, op: Conv, source: str, target: str) -> None:
    """A 1×1 block of a fused pair: it sums its ``source`` channels (a fused depthwise's
    ``prologue`` result, or the ``input`` band of a fused expansion) into the ``target``
    accumulator (the ``output`` tile, or the ``expansion``) of the same images, rows and
    columns as the source."""
    patch = _held(m, op.cluster, op.in_buffer, op.in_offset, False, source)
    acc = _held(m, op.cluster, op.out_buffer, op.out_offset, True, target)
    filt = _held(m, op.cluster, op.filter_buffer, op.filter_offset, False, "filter")
    images, out_ch, out_rows, out_cols = acc.region.box
    p_images, p_ch, p_rows, p_cols = patch.region.box
    (i0, i1), (o0, o1) = op.in_channels, op.out_channels
    if (p_images, p_rows, p_cols) != (images, out_rows, out_cols) or op.stride != (1, 1):
        raise ScheduleError(
            f"a 1x1 block of {acc.region} reads the {source} of its own images, rows and "
            f"columns with stride (1, 1), but buffer {op.in_buffer!r} holds {patch.region} "
            f"(stride {op.stride})"
        )
    if op.groups != 1 or not (p_ch[0] <= i0 < i1 <= p_ch[1] and out_ch[0] <= o0 < o1 <= out_ch[1]):
        raise ScheduleError(
            f"block reads channels {i0}:{i1} into channels {o0}:{o1} ({op.groups} groups), "
            f"but buffer {op.in_buffer!r} holds {patch.region} and the accumulator {acc.region}"
        )
    _sum_pointwise(m, op, patch, acc, filt)


def _sum_pointwise(m: _Machine, op: Conv, patch: _Content, acc: _Content, filt: _Content) -> None:
    """Sum a 1×1 block (channels checked by the caller) of ``patch`` into ``acc``."""
    (i0, i1), (o0, o1) = op.in_channels, op.out_channels
    p_ch, out_ch = patch.region.box[1], acc.region.box[1]
    need = ((o0, o1), (i0, i1), (0, 1), (0, 1))
    if filt.region.box != need:
        raise ScheduleError(
            f"block needs filter[{', '.join(f'{a}:{b}' for a, b in need)}] "
            f"but buffer {op.filter_buffer!r} holds {filt.region}"
        )
    x, w = patch.view[:, i0 - p_ch[0] : i1 - p_ch[0]], filt.view
    if m.acc_dtype != m.dtype:
        x, w = x.astype(m.acc_dtype), w.astype(m.acc_dtype)
    result = conv_block(x, w, 1, (1, 1), (0, 0, 0, 0), (1, 1))
    y = acc.view[:, o0 - out_ch[0] : o1 - out_ch[0]]
    if result.shape != y.shape:
        raise ScheduleError(f"block computes {result.shape} but the tile is {y.shape}")
    y += result
    acc.pairs += (o1 - o0) * (i1 - i0)
    m.stats.macs += result.size * (i1 - i0)


def _conv(m: _Machine, op: Conv) -> None:
    layer = m.layer
    if layer.kind not in WEIGHTED_KINDS:
        raise ScheduleError(f"a {layer.kind} layer has no weights: its blocks are Apply, not Conv")
    if layer.prologue is not None:
        _pointwise(m, op, "prologue", "output")
        return
    if layer.expansion is not None:
        _pointwise(m, op, "input", "expansion")
        return
    block = _block(m, op)
    patch, acc, rows, cols, in_n = block.patch, block.acc, block.rows, block.cols, block.in_n
    filt = _held(m, op.cluster, op.filter_buffer, op.filter_offset, False, "filter")
    (i0, i1), (o0, o1) = op.in_channels, op.out_channels
    p_ch, out_ch = patch.region.box[1], acc.region.box[1]
    j0 = i0 - (i0 // layer.cin_per_group) * layer.cin_per_group
    need = ((o0, o1), (j0, j0 + in_n), (0, layer.kernel_h), (0, layer.kernel_w))
    if filt.region.box != need:
        raise ScheduleError(
            f"block needs filter[{', '.join(f'{a}:{b}' for a, b in need)}] "
            f"but buffer {op.filter_buffer!r} holds {filt.region}"
        )
    x = patch.view[:, i0 - p_ch[0] : i1 - p_ch[0]]
    w = filt.view
    if m.acc_dtype != m.dtype:  # FP16.32: fp16 products are exact in fp32, summed in fp32
        x, w = x.astype(m.acc_dtype), w.astype(m.acc_dtype)
    pads = (rows[2], rows[3], cols[2], cols[3])
    dilation = (layer.dilation_h, layer.dilation_w)
    result = conv_block(x, w, op.groups, op.stride, pads, dilation)
    y = acc.view[:, o0 - out_ch[0] : o1 - out_ch[0]]
    if result.shape != y.shape:
        raise ScheduleError(f"block computes {result.shape} but the tile is {y.shape}")
    y += result
    acc.pairs += (o1 - o0) * in_n
    m.stats.macs += result.size * in_n * layer.kernel_h * layer.kernel_w


def _apply(m: _Machine, op: Apply) -> None:
    """A block of a layer without weights: the kind's contribution of input channels
    ``in_channels`` combined into output channels ``out_channels`` (module docstring)."""
    layer = m.layer
    kind = layer.kind
    if kind in WEIGHTED_KINDS:
        raise ScheduleError(f"a {kind} layer has weights: its blocks are Conv, not Apply")
    block = _block(m, op)
    patch, acc, rows, cols = block.patch, block.acc, block.rows, block.cols
    (i0, i1), (o0, o1) = op.in_channels, op.out_channels
    p_ch, out_ch = patch.region.box[1], acc.region.box[1]
    x = patch.view[:, i0 - p_ch[0] : i1 - p_ch[0]]
    if m.acc_dtype != m.dtype:  # FP16.32: fp16 inputs, fp32 arithmetic
        x = x.astype(m.acc_dtype)
    tile = acc.view
    pads = (rows[2], rows[3], cols[2], cols[3])
    kernel = (layer.kernel_h, layer.kernel_w)
    if kind == "softmax":
        if (o0, o1) != out_ch or acc.running is None:
            raise ScheduleError(
                f"a softmax block updates its whole stack {out_ch[0]}:{out_ch[1]} "
                f"(its running maximum and sum are the stack's), not channels {o0}:{o1}"
            )
        lo = max(i0, o0)  # the step's channels that are the stack's: [lo, hi)
        hi = max(lo, min(i1, o1))
        peak, total = acc.running
        if x.shape[2:] != tile.shape[2:]:
            raise ScheduleError(f"block reads {x.shape} but the tile is {tile.shape}")
        softmax_step(tile, peak, total, x, slice(lo - i0, hi - i0), slice(lo - o0, hi - o0))
        acc.pairs += (o1 - o0) * (i1 - i0)
        return
    fold = _combination(kind)[1]
    if kind == "maxpool":
        result = max_block(x, kernel, op.stride, pads)
    elif kind == "avgpool":
        divisor = _divisor(layer, acc.region, op.stride)
        result = average_block(x, kernel, op.stride, pads, divisor)
    elif kind in OPERAND_KINDS:
        result = combine_operands(x, op.out_channels[1] - op.out_channels[0], fold)
    elif kind == "upsample":
        result = _upsample(layer, x, acc.region, rows[0], cols[0])
    else:  # activation: the body is the input itself, the store applies the function
        result = x
    y = tile[:, o0 - out_ch[0] : o1 - out_ch[0]]
    if result.shape != y.shape:
        raise ScheduleError(f"block computes {result.shape} but the tile is {y.shape}")
    fold(y, result, out=y)
    acc.pairs += (o1 - o0) * block.in_n


def _upsample(layer: Layer, x: np.ndarray, tile: Region, row0: int, col0: int) -> np.ndarray:
    """An upsample block: the tile's outputs from the patch ``x``, whose first row and column
    are input ``row0`` and ``col0`` (``autotune.ir.resample``)."""
    s, mode = layer.upscale, layer.upsample_mode
    (r0, r1), (c0, c1) = tile.box[2], tile.box[3]
    ys = source_taps(mode, layer.h_in, s, np.arange(r0, r1))
    xs = source_taps(mode, layer.w_in, s, np.arange(c0, c1))
    if mode == "nearest":
        return nearest(x, ys[0] - row0, xs[0] - col0)
    return bilinear(x, (ys[0] - row0, ys[1] - row0, ys[2]), (xs[0] - col0, xs[1] - col0, xs[2]))


def _divisor(layer: Layer, tile: Region, stride: tuple[int, int]) -> np.ndarray:
    """``(rows, columns)`` taps each average of an output tile divides by (``tap_counts``)."""
    include = layer.count_include_pad
    rows = tap_counts(tile.box[2], stride[0], layer.pad_h, layer.kernel_h, layer.h_in, include)
    cols = tap_counts(tile.box[3], stride[1], layer.pad_w, layer.kernel_w, layer.w_in, include)
    return np.outer(rows, cols)


def _missing(have: tuple[int, int], need: tuple[int, int], what: str) -> str:
    gaps = [
        f"{a}:{b}"
        for a, b in ((need[0], min(have[0], need[1])), (max(have[1], need[0]), need[1]))
        if a < b
    ]
    return f" (missing {what} {', '.join(gaps)})" if gaps else ""


def _copy(m: _Machine, op: Copy) -> None:
    src = m.buffer(op.src_cluster, op.src_buffer)
    content = src.at(op.src_offset)
    if content is None or content.pairs >= 0 or content.region != op.region:
        held = "nothing" if content is None else content.describe()
        raise ScheduleError(
            f"reads {op.region} from buffer {op.src_buffer!r} of cluster "
            f"{op.src_cluster} at word {op.src_offset}, which holds {held}: "
            f"that cluster never loaded this slice there"
        )
    words = op.region.words
    dst = m.buffer(op.cluster, op.buffer)
    data = dst.span(op.offset, words, op.region)
    data[...] = content.data
    dst.write(op.offset, data, op.region, -1)
    if op.src_cluster == op.cluster:
        m.stats.local_bytes += words * m.wb
    else:
        m.stats.intercluster_bytes += words * m.wb


def _reduce(m: _Machine, op: Reduce) -> None:
    if op.src_cluster == op.cluster:
        raise ScheduleError("a cluster cannot reduce its partial output with itself")
    mine = _held(m, op.cluster, op.buffer, op.offset, True, "output")
    theirs = _held(m, op.src_cluster, op.buffer, op.src_offset, True, "output")
    if mine.region != op.region or theirs.region != op.region:
        raise ScheduleError(
            f"reduces {op.region} but cluster {op.cluster} holds "
            f"{mine.describe()} and cluster {op.src_cluster} holds "
            f"{theirs.describe()}"
        )
    _combine(m.layer.kind, mine, theirs)
    mine.pairs += theirs.pairs
    m.stats.intercluster_bytes += op.region.words * m.wb


#: How the partial results of a kind combine (the identity an output tile starts from, and
#: the operation): a max for a max pool, a product for a mul, else a sum.
_COMBINATIONS: dict[str, tuple[float, np.ufunc]] = {
    "maxpool": (-np.inf, np.maximum),
    "mul": (1.0, np.multiply),
}


def _combination(kind: str) -> tuple[float, np.ufunc]:
    return _COMBINATIONS.get(kind, (0.0, np.add))


def _combine(kind: str, mine: _Content, theirs: _Content) -> None:
    """Fold another cluster's partial output of the same region into ``mine``, the kind's
    way (``_combination``), a softmax's running sums brought to a common maximum."""
    if kind == "softmax" and mine.running is not None and theirs.running is not None:
        (peak, total), (their_peak, their_total) = mine.running, theirs.running
        new_peak = np.maximum(peak, their_peak)
        mine_scale, their_scale = np.exp(peak - new_peak), np.exp(their_peak - new_peak)
        acc, other = mine.view, theirs.view
        acc *= mine_scale[:, None]
        acc += other * their_scale[:, None]
        total *= mine_scale
        total += their_total * their_scale
        peak[...] = new_peak
        return
    fold = _combination(kind)[1]
    fold(mine.data, theirs.data, out=mine.data)


def _epilogue(m: _Machine, content: _Content, region: Region) -> np.ndarray:
    """The stored words of an accumulator: a softmax divided by its sum, then the layer's
    epilogue (``+ bias[c]``, ``+ residual``, the activation) in the accumulation precision,
    rounded once to the storage precision. Reads the epilogue's operands of ``region``."""
    layer, stats = m.layer, m.stats
    z = content.view
    if content.running is not None:
        z = z / content.running[1][:, None]
    epilogue = layer.epilogue
    (c0, c1) = region.box[1]
    if epilogue.bias:
        z = z + m.main["bias"][c0:c1].astype(m.acc_dtype)[None, :, None, None]
        stats.epilogue_bytes += (c1 - c0) * m.wb
    act = epilogue.activation
    if act is not None and epilogue.activation_first:
        z = activate(z, act.kind, act.alpha, act.low, act.high)
    if epilogue.residual:
        z = z + m.main["residual"][region.slices].astype(m.acc_dtype)
        stats.epilogue_bytes += region.words * m.wb
    if act is not None and not epilogue.activation_first:
        z = activate(z, act.kind, act.alpha, act.low, act.high)
    return z


def _store(m: _Machine, op: Store) -> None:
    content = _held(m, op.cluster, op.buffer, op.offset, True, "output")
    if content.region != op.region:
        raise ScheduleError(
            f"stores {op.region} but buffer {op.buffer!r} holds {content.describe()}"
        )
    out = m.tensor(op.region, ("output",))
    expected = (op.region.box[1][1] - op.region.box[1][0]) * m.layer.cin_per_group
    if content.pairs != expected:
        how = (
            "missing: a skipped input step or reduction step"
            if content.pairs < expected
            else "too many: something was accumulated twice"
        )
        raise ScheduleError(
            f"stores {op.region} with {content.pairs} of the {expected} "
            f"(output channel, input channel) pairs summed in ({how})"
        )
    slices = op.region.slices
    if m.stored[slices].any():
        raise ScheduleError(f"{op.region} was already stored")
    read_before = m.stats.epilogue_bytes
    out[slices] = _epilogue(m, content, op.region)
    m.stored[slices] = True
    m.stats.load_bytes += m.stats.epilogue_bytes - read_before
    m.stats.store_bytes += op.region.words * m.wb


HANDLERS: dict[type, Callable[[_Machine, Any], None]] = {
    Alloc: _alloc,
    Load: _load,
    Multicast: _multicast,
    Zero: _zero,
    Conv: _conv,
    Depthwise: _depthwise,
    Apply: _apply,
    Copy: _copy,
    Reduce: _reduce,
    Store: _store,
}


def execute(program: Program, inputs: Mapping[str, np.ndarray]) -> Outputs:
    """Run ``program`` on ``inputs`` (the arrays ``expected_shapes`` names: ``"input"``, and
    ``"filter"``, ``"bias"``, ``"residual"`` when the layer has them; layout in
    ``autotune.verification.program``) and return the output main memory ends with.

    Raises ``ScheduleError`` (``AllocationError`` for L1 overflow) at the first operation
    whose preconditions do not hold, or at the end if some output was never stored.
    """
    m = _Machine(program, inputs)
    with collector_paused():
        _run(m, program.ops)
    if not m.stored.all():
        raise ScheduleError(_unstored(m.stored))
    m.stats.op_counts = dict(Counter(type(op).__name__ for op in program.ops))
    return Outputs(m.main["output"], m.stats)


def _run(m: _Machine, ops: tuple[Op, ...]) -> None:
    handlers = HANDLERS
    for index, op in enumerate(ops):
        try:
            handlers[type(op)](m, op)
        except ScheduleError as error:
            error.index, error.op = index, op
            raise
        except (ValueError, IndexError) as error:  # e.g. shapes of a mangled program
            wrapped = ScheduleError(f"cannot execute: {error}")
            wrapped.index, wrapped.op = index, op
            raise wrapped from error


def _unstored(stored: np.ndarray) -> str:
    missing = ~stored
    names = ("images", "channels", "rows", "columns")
    parts = []
    for axis, name in enumerate(names):
        other = tuple(a for a in range(missing.ndim) if a != axis)
        idx = np.flatnonzero(missing.any(axis=other))
        parts.append(f"{name} {idx[0]}:{idx[-1] + 1}")
    return (
        f"{int(missing.sum())} of {missing.size} output words were never stored, within "
        f"{', '.join(parts)} (a skipped stack, tile or phase)"
    )
