"""The one definition of how a mapping cuts a layer into tasks, tiles and steps.

Every later stage (cost model, simulator, executor) reads the task structure from here, so
they agree on what a mapping *means*; they differ only in how they cost or run it.

A task of ``output_stack`` / ``output_stack_shared`` (report Alg. 1–3) computes one stack of
output depth slices for one spatial tile and one batch tile, stepping through the input depth
slices the stack needs, ``tile.in_c`` slices per step. A task of ``input_parallel`` (Alg. 4/5)
consumes ``tile.in_c`` input depth slices for one stack of output slices and one batch tile,
accumulating a private partial output; the tasks of one (stack, batch tile) *phase* are
reduced by a tree reduction before the next phase starts (the outer loop of Alg. 5).

A ``multicast`` mapping (``output_stack`` only, MPPA3's RDMA multicast, seed 003 Sec. IV)
places its tasks in *waves* of C cluster slots that each read every datum once: a wave is a
rectangle of ``a`` consecutive spatial/batch tiles x ``b`` consecutive stacks, with
``b = min(stacks, C)`` and ``a = floor(C / b)``; waves run tile chunk by tile chunk, stack
chunk fastest, and inside a wave the slot of (tile ``i``, stack ``j``) is ``i * b + j``. Slots
of a wave that the rectangle does not fill (``C - a*b``, or a ragged last chunk) stay idle.
Hence the exact traffic: every wave reads the filters of its ``b`` stacks once, so the filters
are read once per tile chunk (``ceil(T / a) x weights``), and every wave reads each of its
tiles' input once (``groups = 1``: all stacks read all input slices), so the input is read
once per stack chunk (``ceil(S / b) x`` one input pass). With ``groups > 1`` different
stacks read different input slices, and inputs are loaded per task as without multicast.
KaNN's spatial splitting is ``b = 1`` (one stack, C tiles per wave), its channel splitting
``a = 1`` (one whole-map tile, C stacks per wave).

Axes are described by small integer arrays (one entry per chunk), so totals are separable
sums and per-task arrays are outer products: both cheap with numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.ir.resample import source_range

#: Integer arrays (one entry per chunk, per task or per candidate), int64.
IntArray = npt.NDArray[np.int64]


class MappingError(ValueError):
    """The mapping does not apply to the layer (not a capacity problem: see ``fits``)."""


@dataclass(frozen=True)
class SpatialAxis:
    """Output tiles along one spatial axis and the input extent each one loads.

    ``out_start/out_size``: output rows (or columns) of each tile. ``in_start/in_size``: the
    input rows the tile needs, clipped to the unpadded input (zero padding is not loaded;
    the kernel skips taps outside the input). The unclipped extent is
    ``(out_size - 1) * stride + kernel`` starting at ``out_start * stride - pad``.
    """

    out_start: IntArray
    out_size: IntArray
    in_start: IntArray
    in_size: IntArray

    @property
    def count(self) -> int:
        return len(self.out_size)


def spatial_axis(
    n_out: int,
    tile: int | None,
    n_in: int,
    kernel: int,
    stride: int,
    pad: int,
    upscale: int = 1,
    mode: str = "nearest",
) -> SpatialAxis:
    """Split ``n_out`` outputs into tiles of ``tile`` (last one ragged) with their input halo
    (``kernel``: the rows one window spans, a dilated one's included).

    ``upscale``: an upsample's factor (kernel 1, stride 1, no padding): its outputs read the
    inputs ``autotune.ir.resample`` gives for its ``mode`` (nearest: output ``i`` reads
    input ``i // upscale``; bilinear: the two around its source point)."""
    size = n_out if tile is None else min(tile, n_out)
    starts = np.arange(0, n_out, size, dtype=np.int64)
    sizes = np.minimum(size, n_out - starts)
    if upscale != 1 or mode != "nearest":
        lo, hi = source_range(mode, n_in, upscale, starts, starts + sizes)
    else:
        lo = starts * stride - pad
        hi = lo + (sizes - 1) * stride + kernel
    lo_c = np.clip(lo, 0, n_in)
    hi_c = np.clip(hi, 0, n_in)
    return SpatialAxis(starts, sizes, lo_c, hi_c - lo_c)


def row_axis(layer: Layer, tile: int | None) -> SpatialAxis:
    """The layer's output rows cut in tiles of ``tile`` rows, with the input rows each reads."""
    return spatial_axis(
        layer.h_out,
        tile,
        layer.h_in,
        layer.span_h,
        layer.stride_h,
        layer.pad_h,
        layer.upscale,
        layer.upsample_mode,
    )


def col_axis(layer: Layer, tile: int | None) -> SpatialAxis:
    """As ``row_axis``, for columns."""
    return spatial_axis(
        layer.w_out,
        tile,
        layer.w_in,
        layer.span_w,
        layer.stride_w,
        layer.pad_w,
        layer.upscale,
        layer.upsample_mode,
    )


def used_extent(
    n_out: int, n_in: int, kernel: int, stride: int, pad: int, dilation: int = 1
) -> int:
    """Input rows (or columns) some output actually reads: the compulsory extent."""
    offsets = np.arange(kernel)[None, :] * dilation
    taps = (np.arange(n_out)[:, None] * stride - pad + offsets).ravel()
    taps = taps[(taps >= 0) & (taps < n_in)]
    return int(np.unique(taps).size)


def used_input(layer: Layer) -> tuple[int, int]:
    """(rows, columns) of the input some output reads (an upsample reads all of it)."""
    if layer.upscale != 1:
        return layer.h_in, layer.w_in
    return (
        used_extent(
            layer.h_out, layer.h_in, layer.kernel_h, layer.stride_h, layer.pad_h, layer.dilation_h
        ),
        used_extent(
            layer.w_out, layer.w_in, layer.kernel_w, layer.stride_w, layer.pad_w, layer.dilation_w
        ),
    )


def chunks(total: int, size: int) -> IntArray:
    """Sizes of ``ceil(total/size)`` consecutive chunks of ``size`` (the last one ragged)."""
    size = min(size, total)
    n = -(-total // size)
    out = np.full(n, size, dtype=np.int64)
    out[-1] = total - size * (n - 1)
    return out


@dataclass(frozen=True)
class Stacks:
    """Stacks of output depth slices and the input depth slices each stack reads.

    ``out_start/out_size``: output channels of each stack; ``in_start/in_size``: the
    contiguous input channels the stack's groups span. A stack lies within one group when
    ``delta_o <= C_out/groups`` (the group's outputs are cut into ceil((C_out/g)/delta_o)
    stacks), or covers ``delta_o / (C_out/groups)`` whole groups otherwise.
    """

    out_start: IntArray
    out_size: IntArray
    in_start: IntArray
    in_size: IntArray

    @property
    def count(self) -> int:
        return len(self.out_size)


def output_stacks(layer: Layer, delta_o: int) -> Stacks:
    cpg_out, cpg_in, groups = layer.cout_per_group, layer.cin_per_group, layer.groups
    if delta_o <= cpg_out:
        per_group = chunks(cpg_out, delta_o)
        starts_in_group = np.concatenate([[0], np.cumsum(per_group)[:-1]])
        g = np.repeat(np.arange(groups, dtype=np.int64), len(per_group))
        out_size = np.tile(per_group, groups)
        out_start = g * cpg_out + np.tile(starts_in_group, groups)
        return Stacks(out_start, out_size, g * cpg_in, np.full_like(g, cpg_in))
    if delta_o > layer.c_out:
        raise MappingError(f"delta_o {delta_o} exceeds the layer's {layer.c_out} output channels")
    if delta_o % cpg_out:
        raise MappingError(
            f"delta_o {delta_o} spans groups: it must divide the "
            f"{cpg_out} output channels of a group or be a multiple of them"
        )
    groups_per_stack = chunks(groups, delta_o // cpg_out)
    g0 = np.concatenate([[0], np.cumsum(groups_per_stack)[:-1]])
    return Stacks(g0 * cpg_out, groups_per_stack * cpg_out, g0 * cpg_in, groups_per_stack * cpg_in)


@dataclass(frozen=True)
class TaskGrid:
    """The tasks a mapping cuts a layer into, for a batch of ``batch`` images.

    Task order (the schedule's order; task ``t`` takes slot ``slot(t) mod C`` of wave
    ``slot(t) // C``, on the cluster ``task_clusters`` gives): batch tile, then row tile,
    then column tile, then stack (fastest).
    ``output_stack_shared`` packs the stacks of each spatial/batch tile into share groups of
    ``share_group`` consecutive stacks that occupy ``share_group`` aligned cluster slots
    (a quadrant), leaving slots idle when the stacks do not fill the last group.
    ``input_parallel`` runs one phase per (batch tile, stack); within a phase task ``k``
    takes input slices ``[k*in_c, (k+1)*in_c)`` and runs on cluster ``k mod C``.
    A ``multicast`` mapping places the same tasks in the waves of the module docstring
    (``clusters`` = C is then known; None otherwise).
    """

    layer: Layer
    mapping: Mapping
    batch: int
    stacks: Stacks
    rows: SpatialAxis
    cols: SpatialAxis
    batch_tiles: IntArray
    in_steps: IntArray  # input_parallel: input slices per task of a phase
    clusters: int | None = None  # C, for multicast mappings (their waves depend on it)

    @property
    def algorithm(self) -> str:
        return self.mapping.algorithm

    # -- counts ----------------------------------------------------------------------------
    @property
    def n_spatial(self) -> int:
        return self.rows.count * self.cols.count

    @property
    def n_tasks(self) -> int:
        if self.algorithm == "input_parallel":
            return len(self.batch_tiles) * self.stacks.count * len(self.in_steps)
        return len(self.batch_tiles) * self.n_spatial * self.stacks.count

    @property
    def n_phases(self) -> int:
        """Sequential phases separated by a reduction (input_parallel) or 1."""
        if self.algorithm == "input_parallel":
            return len(self.batch_tiles) * self.stacks.count
        return 1

    @property
    def share_groups_per_tile(self) -> int:
        """Share groups per spatial/batch tile (``output_stack_shared``), else stacks."""
        g = self.mapping.share_group
        return -(-self.stacks.count // g)

    @property
    def multicast_wave(self) -> tuple[int, int]:
        """(tiles ``a``, stacks ``b``) of a multicast wave: ``b = min(S, C)``, ``a = C // b``."""
        assert self.mapping.multicast and self.clusters is not None
        b = min(self.stacks.count, self.clusters)
        return self.clusters // b, b

    @property
    def n_tiles(self) -> int:
        """Spatial/batch tiles (``T``): batch tiles x row tiles x column tiles."""
        return len(self.batch_tiles) * self.n_spatial

    def task_tile(self) -> IntArray:
        """Per task: its spatial/batch tile in task order ``(b * rows + r) * cols + c``."""
        b, r, c, _, _ = self._index
        return (b * self.rows.count + r) * self.cols.count + c

    # -- per-task arrays (task order above) ------------------------------------------------
    @cached_property
    def _index(self) -> tuple[IntArray, ...]:
        """Per task: (batch tile, row tile, col tile, stack, input step) indices."""
        nb, ns = len(self.batch_tiles), self.stacks.count
        if self.algorithm == "input_parallel":
            nk = len(self.in_steps)
            b, s, k = np.meshgrid(np.arange(nb), np.arange(ns), np.arange(nk), indexing="ij")
            zero = np.zeros(b.size, dtype=np.int64)
            return b.ravel(), zero, zero, s.ravel(), k.ravel()
        nr, nc = self.rows.count, self.cols.count
        b, r, c, s = np.meshgrid(
            np.arange(nb), np.arange(nr), np.arange(nc), np.arange(ns), indexing="ij"
        )
        return b.ravel(), r.ravel(), c.ravel(), s.ravel(), np.zeros(b.size, dtype=np.int64)

    @property
    def task_index(self) -> tuple[IntArray, ...]:
        """Per task, in task order: (batch tile, row tile, col tile, stack, input step) indices.

        Public for stages that must know *which* tile a task covers, not only its sizes:
        the executor of ``autotune.verification`` loads and stores exactly those regions, the
        simulator shapes DMA transfers by a tile's rows and columns separately.
        """
        return self._index

    @cached_property
    def task_images(self) -> IntArray:
        return self.batch_tiles[self._index[0]]

    @cached_property
    def task_out_channels(self) -> IntArray:
        return self.stacks.out_size[self._index[3]]

    @cached_property
    def task_in_channels(self) -> IntArray:
        """Input depth slices a task loads (all of its stack's for output_stack)."""
        if self.algorithm == "input_parallel":
            return self.in_steps[self._index[4]]
        return self.stacks.in_size[self._index[3]]

    @cached_property
    def task_slot(self) -> IntArray:
        """Slot of each task within its phase (wave = slot // C; ``task_clusters``: its cluster)."""
        b, r, c, s, k = self._index
        if self.algorithm == "input_parallel":
            return k
        if self.mapping.multicast:
            a, nb = self.multicast_wave
            assert self.clusters is not None  # set for multicast mappings (task_grid)
            tile = self.task_tile()
            wave = (tile // a) * (-(-self.stacks.count // nb)) + s // nb
            return wave * self.clusters + (tile % a) * nb + s % nb
        if self.algorithm == "output_stack_shared":
            g = self.mapping.share_group
            per_tile = self.share_groups_per_tile * g
            tile = (b * self.rows.count + r) * self.cols.count + c
            return tile * per_tile + s
        return np.arange(b.size, dtype=np.int64)

    def share_members(self) -> IntArray:
        """Per task: how many tasks of its share group (including itself) read its input."""
        if self.algorithm != "output_stack_shared":
            return np.ones(self.n_tasks, dtype=np.int64)
        g = self.mapping.share_group
        s = self._index[3]
        n = self.stacks.count
        group = s // g
        return np.minimum(g, n - group * g)


# -- contiguous runs in main memory ------------------------------------------------------------
#
# The layout every stage assumes follows the report's indexing, innermost first: a depth
# slice of the input ``I[x, y, d]`` is row-major (a row of ``w_in`` words is contiguous),
# the slices of an image are consecutive, images are outermost; filters are
# ``F[x, y, d_i, d_o]`` (the ``cin/groups * kh * kw`` words of one output channel are
# contiguous); the output is ``O[x, y, d_o]`` with images outermost. A transfer of a tile is
# a set of equal *runs* (contiguous blocks): their length decides both the DMA's bus beats
# (the simulator) and the fraction of the main-memory bandwidth it reaches (swDNN's measured
# block-size dependence, seed 004 Sec. III-D and Table II), so the model and the simulator
# read it from here.


def volume_runs(
    rows: IntArray | int,
    cols: IntArray | int,
    slices: IntArray | int,
    full_rows: int,
    full_cols: int,
) -> tuple[IntArray, IntArray]:
    """(run words, runs) of one image's ``slices x rows x cols`` box of a row-major volume of
    ``full_rows x full_cols`` slices: the whole box is one run when it covers whole slices,
    one run per slice when it covers whole rows, else one run per row of every slice."""
    rows, cols, slices = (np.asarray(v, dtype=np.int64) for v in (rows, cols, slices))
    whole_rows = cols == full_cols
    whole = whole_rows & (rows == full_rows)
    pixels = rows * cols
    run = np.where(whole, slices * pixels, np.where(whole_rows, pixels, cols))
    count = np.where(whole, 1, np.where(whole_rows, slices, slices * rows))
    return run, count


def input_runs(
    layer: Layer, rows: IntArray | int, cols: IntArray | int, slices: IntArray | int
) -> tuple[IntArray, IntArray]:
    """(run words, runs) of loading ``slices`` input slices of a ``rows x cols`` band, per
    image (an fc task's input of ``in_c`` slices is the whole-slice case)."""
    return volume_runs(rows, cols, slices, layer.h_in, layer.w_in)


def filter_runs(layer: Layer, slices: IntArray | int) -> IntArray:
    """Run words of one filter tile ``F[:, :, d_i:d_i+slices, d_o]`` (one run per tile)."""
    return np.asarray(slices, dtype=np.int64) * layer.filter_pixels


def output_runs(
    layer: Layer, rows: IntArray | int, cols: IntArray | int, channels: IntArray | int
) -> tuple[IntArray, IntArray]:
    """(run words, runs) of storing ``channels`` output slices of a ``rows x cols`` tile,
    per image."""
    return volume_runs(rows, cols, channels, layer.h_out, layer.w_out)


def input_transfers(
    layer: Layer,
    rows: IntArray | int,
    cols: IntArray | int,
    images: IntArray | int,
    steps: IntArray | int,
    slices: IntArray | int,
) -> IntArray:
    """2D DMA transfers (each paying one set-up) to load a task's input: ``steps`` steps of a
    ``rows x cols`` band for ``images`` images, ``slices`` slices in all.

    The cluster DMA moves 2D transfers (runs at a fixed stride) in hardware. When the band is
    the whole slice, a step's slices of one image are one run and the images are a stride
    apart: one transfer per step. A band of whole rows is one run per slice: one transfer per
    image and step. Partial rows: one transfer (one run per row) per slice and image.
    """
    whole_rows = np.asarray(cols) == layer.w_in
    whole_slice = whole_rows & (np.asarray(rows) == layer.h_in)
    return np.where(
        whole_slice, steps, np.asarray(images) * np.where(whole_rows, steps, slices)
    ).astype(np.int64)


def output_transfers(
    layer: Layer,
    rows: IntArray | int,
    cols: IntArray | int,
    images: IntArray | int,
    channels: IntArray | int,
) -> IntArray:
    """2D DMA transfers to store a task's ``channels`` output slices of a ``rows x cols`` tile
    for ``images`` images (the same rule as ``input_transfers``, with one step)."""
    whole_rows = np.asarray(cols) == layer.w_out
    whole_slice = whole_rows & (np.asarray(rows) == layer.h_out)
    return np.where(whole_slice, 1, np.asarray(images) * np.where(whole_rows, 1, channels)).astype(
        np.int64
    )


def dma_efficiency(
    machine: Machine, run_bytes: IntArray | int, write: bool = False
) -> npt.NDArray[np.float64]:
    """``machine.dma_efficiency`` over an array of run lengths (1.0 without a table)."""
    run = np.asarray(run_bytes, dtype=np.int64)
    table = machine.dma_write_efficiency if write else machine.dma_read_efficiency
    if not table:
        return np.ones(run.shape)
    sizes = np.asarray([size for size, _ in table], dtype=np.int64)
    fractions = np.asarray([fraction for _, fraction in table], dtype=np.float64)
    return fractions[np.maximum(np.searchsorted(sizes, run, side="right") - 1, 0)]


def _check_one_chiplet(mapping: Mapping, machine: Machine | None) -> None:
    """A task grid is one chiplet's: a package's layers reach it as their parts
    (``autotune.chiplets`` splits them and calls the single-chiplet stages)."""
    if machine is not None and machine.chiplets > 1:
        raise MappingError(
            f"machine {machine.name!r} is a package of {machine.chiplets} chiplets: the "
            f"single-chiplet stages take one part of a split (use autotune.analyze, simulate "
            f"or verify, which split through autotune.chiplets)"
        )
    if mapping.chiplet_split != "none":
        has_one = "" if machine is None else f"; {machine.name!r} has one"
        raise MappingError(
            f"chiplet_split {mapping.chiplet_split!r} needs a package of several chiplets{has_one}"
        )


def task_grid(
    layer: Layer, mapping: Mapping, batch: int, machine: Machine | None = None
) -> TaskGrid:
    """Cut ``layer`` (for ``batch`` images) into the tasks ``mapping`` describes.

    A ``multicast`` mapping needs the ``machine`` (its waves depend on the cluster count, and
    the machine must multicast). Raises ``MappingError`` when the mapping does not apply to the
    layer or the machine.
    """
    if batch < 1:
        raise MappingError(f"batch must be >= 1, got {batch}")
    _check_one_chiplet(mapping, machine)
    if machine is not None and mapping.share_group > 1:
        try:
            machine.share_group_level(mapping.share_group)  # a subtree of the quadrant tree
        except ValueError as exc:
            raise MappingError(str(exc)) from None
    clusters = None
    if mapping.multicast:
        if machine is None:
            raise MappingError(
                "a multicast mapping needs the machine: its waves depend on the number of clusters"
            )
        if not machine.dma_multicast:
            raise MappingError(
                f"machine {machine.name!r} has no DMA multicast "
                f"(dma_multicast is false): multicast mappings do not apply"
            )
        clusters = machine.clusters
        if layer.fuses:
            # A wave's tasks would each compute the fused layer of the multicast band: not
            # modelled (the MPPA3's KaNN strategies do not fuse either).
            raise MappingError("a fused depthwise and 1x1 pair does not multicast")
    tile = mapping.tile
    if mapping.algorithm == "input_parallel":
        if layer.kind != "fc":
            raise MappingError("input_parallel (Alg. 4/5) maps fully-connected layers only")
        if tile.out_h not in (None, 1) or tile.out_w not in (None, 1):
            raise MappingError("an fc layer has a 1x1 output: no spatial tiles")
        if tile.in_c > layer.c_in:
            raise MappingError(f"tile.in_c {tile.in_c} exceeds the {layer.c_in} input channels")
        in_steps = chunks(layer.c_in, tile.in_c)
    else:
        in_steps = np.ones(1, dtype=np.int64)
        if mapping.algorithm == "output_stack_shared" and layer.groups > 1:
            raise MappingError(
                "output_stack_shared (Alg. 3) needs groups = 1: stacks of "
                "different groups read different input slices"
            )
    if mapping.batch_tile > batch:
        raise MappingError(f"batch_tile {mapping.batch_tile} exceeds the batch of {batch}")
    if layer.kind == "softmax" and (mapping.delta_o != layer.c_out or tile.in_c != layer.c_in):
        # Every output channel of a pixel divides by the sum over all its input channels.
        raise MappingError(
            f"a softmax needs all channels of a pixel in one task and one step: "
            f"delta_o = {layer.c_out} and tile.in_c = {layer.c_in} "
            f"(not {mapping.delta_o} and {tile.in_c})"
        )
    stacks = output_stacks(layer, mapping.delta_o)
    if mapping.algorithm != "input_parallel" and tile.in_c > int(stacks.in_size.max()):
        raise MappingError(
            f"tile.in_c {tile.in_c} exceeds the {int(stacks.in_size.max())} "
            f"input slices a stack reads"
        )
    rows = row_axis(layer, tile.out_h)
    cols = col_axis(layer, tile.out_w)
    return TaskGrid(
        layer,
        mapping,
        batch,
        stacks,
        rows,
        cols,
        chunks(batch, mapping.batch_tile),
        in_steps,
        clusters,
    )


def task_clusters(grid: TaskGrid, machine: Machine) -> IntArray:
    """The cluster each task runs on: slot mod C, except an ``output_stack`` mapping of one
    wave of fewer than C tasks, whose slots take the machine's ``wave_order`` so that they
    spread over the tree's uplinks instead of crowding one quadrant's (its tasks are
    independent). The others keep their clusters in order: Alg. 3's share groups fill
    aligned quadrants, Alg. 4/5's private outputs are reduced up the tree by cluster id, a
    multicast wave is one rectangle, and a layer of several waves keeps the same share of
    the tree in its last wave as in the others (as the model costs every wave)."""
    slots = grid.task_slot % machine.clusters
    one_wave = grid.n_tasks and int(grid.task_slot.max()) < machine.clusters
    if grid.algorithm == "output_stack" and not grid.mapping.multicast and one_wave:
        return np.asarray(machine.wave_order(), dtype=np.int64)[slots]
    return slots


#: The L1 buffers of a cluster, in allocation order: input tiles, filter tiles, output stack,
#: Alg. 3's forwarding buffer, the residual operand of an epilogue (a tile of the output's
#: size, read before the store; buffered as deep as the output).
OPERANDS = ("input", "filter", "output", "share", "residual")


@dataclass(frozen=True)
class DeclaredBuffers:
    """What a mapping declares for each L1 buffer: the largest task's tile, the buffering
    depth, the bytes it asked for (None: depth tiles) and the bytes allocated."""

    tile_bytes: dict[str, int]
    depth: dict[str, int]
    given_bytes: dict[str, int | None]
    allocated_bytes: dict[str, int]


def filter_pixels(layer: Layer) -> int:
    """Filter words per input slice and output channel: the kernel's pixels (a fused pair's
    1×1: ``Layer.filter_pixels``), 0 for the kinds without weights (they load no filters and
    have no filter buffer)."""
    return layer.filter_pixels if layer.weight_words else 0


def prologue_tile_words(layer: Layer, in_c: int, images: int, out_pixels: int) -> tuple[int, int]:
    """(result words, weight words) of one input step of a fused depthwise (0, 0 without
    one): its result over the output tile, ``images × in_c × out_pixels``, which the step's
    input slot holds beside the band (the 1×1 reads it there); its weights ``in_c × k²``,
    loaded into a filter slot, used, then overwritten by the 1×1's filter slices."""
    if layer.prologue is None:
        return 0, 0
    return images * in_c * out_pixels, in_c * layer.prologue_pixels


def expansion_tile_words(
    layer: Layer, out_stack: int, images: int, in_pixels: int
) -> tuple[int, int]:
    """(accumulator words, weight words) of a task of a fused 1×1 and depthwise (0, 0
    without one): the 1×1's result over the input band, ``images × out_stack × in_pixels``,
    accumulated over the steps in the output slot before the output tile (the depthwise reads
    it there at the end of the task); the depthwise's weights of the stack, ``out_stack ×
    k²``, loaded into a filter slot after the last step's slices."""
    if layer.expansion is None:
        return 0, 0
    return images * out_stack * in_pixels, out_stack * layer.expansion_pixels


def largest_tile_words(grid: TaskGrid) -> dict[str, int]:
    """Words of the largest tile of each operand: what a buffer of depth 1 must hold. The
    residual operand's tile is the output tile (``input_parallel``: the phase's stack, which
    the reduction's root reads before its store)."""
    layer, tile = grid.layer, grid.mapping.tile
    images = int(grid.batch_tiles.max())
    out_stack = int(grid.stacks.out_size.max())
    residual = int(layer.epilogue.residual)
    if grid.algorithm == "input_parallel":
        slices, pixels = int(grid.in_steps.max()), layer.h_in * layer.w_in
        return dict(
            input=images * slices * pixels,
            filter=slices * pixels,
            output=out_stack * images,
            share=0,
            residual=residual * out_stack * images,
        )
    rows_in, cols_in = int(grid.rows.in_size.max()), int(grid.cols.in_size.max())
    rows_out, cols_out = int(grid.rows.out_size.max()), int(grid.cols.out_size.max())
    band = images * tile.in_c * rows_in * cols_in
    output = out_stack * rows_out * cols_out * images
    # A fused depthwise (``prologue_tile_words``): its result beside the band it is computed
    # from; its weights through a filter slot, before the 1x1's slices stream through it.
    result, dw_weights = prologue_tile_words(layer, tile.in_c, images, rows_out * cols_out)
    # A fused 1x1 (``expansion_tile_words``): its accumulator before the output tile.
    expanded, ex_weights = expansion_tile_words(layer, out_stack, images, rows_in * cols_in)
    return dict(
        input=band + result,
        filter=max(
            min(tile.in_c, layer.cin_per_group) * filter_pixels(layer), dw_weights, ex_weights
        ),
        output=output + expanded,
        share=band if grid.algorithm == "output_stack_shared" else 0,
        residual=residual * output,
    )


def declared_buffers(grid: TaskGrid, word_bytes: int, bank_bytes: int) -> DeclaredBuffers:
    """The L1 buffers as ``Buffers`` documents them: a buffer without explicit bytes gets
    ``depth`` tiles; one with explicit bytes gets those (whether they hold ``depth`` tiles is
    for the simulator and the executor to check). The forwarding buffer of Alg. 3 holds one
    input tile; the residual buffer (no ``Buffers`` field: it follows the output) holds
    ``output_depth`` residual tiles. Each buffer starts on an L1 bank word, so sizes round up
    to the bank width; an operand without tiles gets nothing."""
    b = grid.mapping.buffers
    tiles = {op: n * word_bytes for op, n in largest_tile_words(grid).items()}
    depth = dict(
        input=b.input_depth,
        filter=b.filter_depth,
        output=b.output_depth,
        share=1,
        residual=b.output_depth,
    )
    given = dict(
        input=b.input_bytes,
        filter=b.filter_bytes,
        output=b.output_bytes,
        share=b.share_bytes,
        residual=None,
    )
    allocated = {}
    for op in OPERANDS:
        size = given[op]
        if tiles[op] == 0:
            allocated[op] = 0
        else:
            size = depth[op] * tiles[op] if size is None else size
            allocated[op] = -(-size // bank_bytes) * bank_bytes
    return DeclaredBuffers(tiles, depth, given, allocated)
