"""Program construction: turn a mapping's tasks into explicit operations per cluster.

What the tasks are comes from ``autotune.tiling`` (stacks, spatial tiles with their clipped
halo, batch tiles, input steps, task order, cluster slots, share groups, phases); how many
bytes each L1 buffer gets is what the mapping *declares* (``tiling.declared_buffers``, the
same definition the simulator reads). Nothing of the cost model is used: the executor then
checks independently that the data really fits those buffers and that every read finds its
data.

Buffers are rings of ``depth`` equal slots (``Buffers.*_depth``): consecutive loads into a
buffer alternate slots, which is how double buffering looks in a sequential program. A
filter slot holds as many output channels' filter slices of the current input step as fit,
so a stack streams through the filter buffer in chunks (the report streams one output
channel at a time, Alg. 2; a larger buffer keeps more of them in flight).

A layer without weights (pools, add, activation, upsample, softmax) has the same tasks and
steps; each step's blocks are ``Apply`` operations on the loaded patch, with no filters to
stream. The epilogue needs no operations: the store applies it (``program``).

A 1×1 conv fused with the depthwise before it (``Layer.prologue``) has the tasks and steps
of a dense conv with the depthwise's window. After each input step arrives, its depthwise
weights pass through a filter slot and a ``Depthwise`` writes the step's result over the
output tile into the input slot, after the band (``tiling.prologue_tile_words``); the 1×1's
blocks then read it there with stride 1.

A depthwise conv fused with the 1×1 before it (``Layer.expansion``) has the tasks and steps
of a dense conv with the depthwise's window. Its task zeroes the output tile and, after it
in the output slot, the ``expansion`` accumulator over the input band
(``tiling.expansion_tile_words``); the steps' 1×1 blocks accumulate into that at stride 1;
after the last step the stack's depthwise weights pass through a filter slot and a
``Depthwise`` writes the output tile from the accumulator.
"""

from __future__ import annotations

import numpy as np

from autotune.ir.layer import WEIGHTED_KINDS, Layer
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.ir.precision import word_bytes
from autotune.tiling import (
    MappingError,
    TaskGrid,
    chunks,
    declared_buffers,
    task_clusters,
    task_grid,
)
from autotune.verification.program import (
    BUFFERS,
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

Span = tuple[int, int]
#: One convolution block: output channels, input channels, whole groups at once.
Block = tuple[int, int, int, int, int]


def build_program(
    layer: Layer, mapping: Mapping, machine: Machine, precision: str = "fp32", batch: int = 1
) -> Program:
    """The operations every cluster performs to run ``layer`` for ``batch`` images.

    Raises ``MappingError`` when the mapping does not apply to the layer. A mapping that
    overflows L1 still builds: its ``Alloc`` operations fail when executed.

    Example:
        >>> from autotune import Layer, Machine, Mapping
        >>> conv = Layer("c", "conv", 8, 8, 4, 6, 3, 3, pad_h=1, pad_w=1)
        >>> p = build_program(conv, Mapping.from_report(2, delta_o=4), Machine.preset())
        >>> p.op_counts()["Store"]      # two stacks: 4 + the remainder 2
        2
    """
    machine.check_precision(precision)
    wb = word_bytes(precision)
    grid = task_grid(layer, mapping, batch, machine)
    buffers = declared_buffers(grid, wb, machine.l1_bank_bytes)
    builder = _Builder(grid, buffers.allocated_bytes, buffers.depth, machine, wb)
    with collector_paused():
        if mapping.algorithm == "input_parallel":
            builder.input_parallel()
        elif mapping.algorithm == "output_stack_shared":
            builder.output_stack_shared()
        elif mapping.multicast:
            builder.output_stack_multicast()
        else:
            builder.output_stack()
    return Program(
        layer,
        mapping,
        batch,
        precision,
        wb,
        machine.l1_bytes,
        machine.l1_bank_bytes,
        machine.clusters,
        tuple(builder.ops),
        machine.dma_multicast,
    )


def _spans(starts: np.ndarray, sizes: np.ndarray) -> list[Span]:
    return [(int(a), int(a + n)) for a, n in zip(starts, sizes, strict=True)]


def _chunk_spans(start: int, total: int, size: int) -> list[Span]:
    sizes = chunks(total, size)
    return _spans(start + np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)


class _Builder:
    """Emits the operations of one program; tracks which slot each buffer fills next."""

    def __init__(
        self,
        grid: TaskGrid,
        allocated: dict[str, int],
        depth: dict[str, int],
        machine: Machine,
        wb: int,
    ) -> None:
        self.grid = grid
        self.layer = layer = grid.layer
        self.machine = machine
        self.clusters = machine.clusters
        self.allocated = {op: n for op, n in allocated.items() if n > 0}
        self.depth = depth
        self.slot_words = {op: n // wb // depth[op] for op, n in self.allocated.items()}
        self.stride = (layer.stride_h, layer.stride_w)
        self.weighted = layer.kind in WEIGHTED_KINDS
        self.fused = layer.prologue is not None
        self.expansion = layer.expansion is not None
        # a fused pair's blocks are its 1x1's: a 1x1 kernel at stride 1 over the result (a
        # fused depthwise's) or the band (a fused expansion's)
        self.kernel = (1, 1) if layer.fuses else (layer.kernel_h, layer.kernel_w)
        self.block_stride = (1, 1) if layer.fuses else self.stride
        self.ops: list[Op] = []
        self._next_slot: dict[tuple[int, str], int] = {}
        self._blocks: dict[tuple[Span, Span], list[Block]] = {}
        images = grid.batch_tiles
        self.images = _chunk_spans(0, int(images.sum()), int(images[0]))
        self.stack_out = _spans(grid.stacks.out_start, grid.stacks.out_size)
        in_c = grid.mapping.tile.in_c
        self.stack_steps = [
            _chunk_spans(int(a), int(n), in_c)
            for a, n in zip(grid.stacks.in_start, grid.stacks.in_size, strict=True)
        ]
        self.rows_out = _spans(grid.rows.out_start, grid.rows.out_size)
        self.rows_in = _spans(grid.rows.in_start, grid.rows.in_size)
        self.cols_out = _spans(grid.cols.out_start, grid.cols.out_size)
        self.cols_in = _spans(grid.cols.in_start, grid.cols.in_size)

    # -- buffers ----------------------------------------------------------------------------
    def alloc(self, clusters: list[int]) -> None:
        for cluster in clusters:
            for name in BUFFERS:
                if name in self.allocated:
                    self.ops.append(Alloc(cluster, name, self.allocated[name]))

    def slot(self, cluster: int, buffer: str) -> int:
        """Word offset of the next slot of ``buffer`` on ``cluster`` (ring of ``depth``)."""
        key = (cluster, buffer)
        k = self._next_slot.get(key, 0)
        self._next_slot[key] = k + 1
        return (k % self.depth[buffer]) * self.slot_words[buffer]

    # -- compute of one input step ----------------------------------------------------------
    def convs(self, cluster: int, in_offset: int, out_offset: int, stack: Span, step: Span) -> None:
        """Stream the step's filters through the filter buffer and accumulate each block
        (a layer without weights: apply each block to the patch)."""
        if not self.weighted:
            for oc0, oc1, ic0, ic1, ng in self.blocks(stack, step):
                self.ops.append(
                    self.apply(cluster, in_offset, out_offset, (oc0, oc1, ic0, ic1, ng))
                )
            return
        kh, kw = self.kernel
        cin = self.layer.cin_per_group
        for oc0, oc1, ic0, ic1, ng in self.blocks(stack, step):
            j0 = ic0 - (ic0 // cin) * cin
            in_n = (ic1 - ic0) // ng
            f_offset = self.slot(cluster, "filter")
            self.ops.append(
                Load(
                    cluster,
                    Region("filter", ((oc0, oc1), (j0, j0 + in_n), (0, kh), (0, kw))),
                    "filter",
                    f_offset,
                )
            )
            self.ops.append(
                Conv(
                    cluster,
                    "input",
                    in_offset,
                    "filter",
                    f_offset,
                    "output",
                    out_offset,
                    (oc0, oc1),
                    (ic0, ic1),
                    ng,
                    self.block_stride,
                )
            )

    def depthwise(
        self, cluster: int, in_offset: int, patch: Region, rows_out: Span, cols_out: Span
    ) -> int:
        """A fused pair's depthwise of the step whose ``patch`` is at ``in_offset``: its
        weights through a filter slot, its result over the output tile after the band. The
        offset of the result (what the step's blocks read); ``in_offset`` without a prologue."""
        if not self.fused:
            return in_offset
        layer = self.layer
        images, step = patch.box[0], patch.box[1]
        f_offset = self.slot(cluster, "filter")
        weights = Region(
            "prologue_filter", (step, (0, 1), (0, layer.kernel_h), (0, layer.kernel_w))
        )
        self.ops.append(Load(cluster, weights, "filter", f_offset))
        result = Region("prologue", (images, step, rows_out, cols_out))
        out_offset = in_offset + patch.words
        self.ops.append(
            Depthwise(
                cluster,
                "input",
                in_offset,
                "filter",
                f_offset,
                "input",
                out_offset,
                result,
                self.stride,
            )
        )
        return out_offset

    def start_tile(
        self, cluster: int, out: Region, out_offset: int, rows_in: Span, cols_in: Span
    ) -> int:
        """Zero a task's output tile at ``out_offset``; with a fused expansion, also its
        accumulator over the input band after it. The offset the step's blocks sum into."""
        self.ops.append(Zero(cluster, "output", out_offset, out))
        if not self.expansion:
            return out_offset
        images, stack = out.box[0], out.box[1]
        acc = Region("expansion", (images, stack, rows_in, cols_in))
        self.ops.append(Zero(cluster, "output", out_offset + out.words, acc))
        return out_offset + out.words

    def finish_tile(self, cluster: int, out: Region, out_offset: int) -> None:
        """With a fused expansion: the stack's depthwise weights through a filter slot and the
        ``Depthwise`` from the accumulator into the output tile; then the store."""
        if self.expansion:
            layer = self.layer
            f_offset = self.slot(cluster, "filter")
            weights = Region(
                "depthwise_filter", (out.box[1], (0, 1), (0, layer.kernel_h), (0, layer.kernel_w))
            )
            self.ops.append(Load(cluster, weights, "filter", f_offset))
            self.ops.append(
                Depthwise(
                    cluster,
                    "output",
                    out_offset + out.words,
                    "filter",
                    f_offset,
                    "output",
                    out_offset,
                    out,
                    self.stride,
                )
            )
        self.ops.append(Store(cluster, "output", out_offset, out))

    def apply(self, cluster: int, in_offset: int, out_offset: int, block: Block) -> Apply:
        oc0, oc1, ic0, ic1, ng = block
        return Apply(
            cluster,
            "input",
            in_offset,
            "output",
            out_offset,
            (oc0, oc1),
            (ic0, ic1),
            ng,
            self.stride,
        )

    def blocks(self, stack: Span, step: Span) -> list[Block]:
        key = (stack, step)
        found = self._blocks.get(key)
        if found is None:
            found = self._blocks[key] = self._cut_blocks(stack, step)
        return found

    def _cut_blocks(self, stack: Span, step: Span) -> list[Block]:
        """Blocks of (output channels x input channels) one step of a stack computes.

        A stack inside one group is one block. A stack of whole groups gives one block per
        run of groups the step covers completely (computed as a batch of groups) and one per
        group it covers partly (a step covers a group partly only at its ends). Blocks are
        then cut so that their filters fit one filter slot.
        """
        layer = self.layer
        cin, cout = layer.cin_per_group, layer.cout_per_group
        o0, o1 = stack
        a, b = step
        fit = self._fit_filter_slot if self.weighted else (lambda block: [block])
        if o0 // cout == (o1 - 1) // cout:  # a stack inside one group: one dense block
            return fit((o0, o1, a, b, 1))
        segments: list[Block] = []
        for g in range(a // cin, (b - 1) // cin + 1):
            lo, hi = max(a, g * cin), min(b, (g + 1) * cin)
            prev = segments[-1] if segments else None
            if hi - lo == cin and prev is not None and prev[3] - prev[2] == prev[4] * cin:
                segments[-1] = (prev[0], (g + 1) * cout, prev[2], hi, prev[4] + 1)
            else:
                segments.append((g * cout, (g + 1) * cout, lo, hi, 1))
        return [block for segment in segments for block in fit(segment)]

    def _fit_filter_slot(self, segment: Block) -> list[Block]:
        layer = self.layer
        k2 = self.kernel[0] * self.kernel[1]
        cin, cout = layer.cin_per_group, layer.cout_per_group
        capacity = self.slot_words["filter"]
        oc0, oc1, ic0, ic1, ng = segment
        if ng > 1:
            per_slot = capacity // (cout * cin * k2)
            if per_slot >= 1:
                return [
                    (
                        oc0 + g * cout,
                        oc0 + min(g + per_slot, ng) * cout,
                        ic0 + g * cin,
                        ic0 + min(g + per_slot, ng) * cin,
                        min(per_slot, ng - g),
                    )
                    for g in range(0, ng, per_slot)
                ]
            singles = [
                (oc0 + g * cout, oc0 + (g + 1) * cout, ic0 + g * cin, ic0 + (g + 1) * cin)
                for g in range(ng)
            ]
        else:
            singles = [(oc0, oc1, ic0, ic1)]
        out: list[Block] = []
        for s0, s1, i0, i1 in singles:
            # At least one channel per block: a slot too small for it fails when executed.
            per_slot = max(1, capacity // ((i1 - i0) * k2))
            out.extend((o, min(o + per_slot, s1), i0, i1, 1) for o in range(s0, s1, per_slot))
        return out

    # -- Alg. 1/2: independent stacks -------------------------------------------------------
    def output_stack(self) -> None:
        grid = self.grid
        b, r, c, s, _ = (ix.tolist() for ix in grid.task_index)
        cluster = task_clusters(grid, self.machine).tolist()
        self.alloc(sorted(set(cluster)))
        for t in range(grid.n_tasks):
            self.task(cluster[t], b[t], r[t], c[t], s[t])

    def task(self, cluster: int, bt: int, rt: int, ct: int, st: int) -> None:
        images, stack = self.images[bt], self.stack_out[st]
        rows_in, cols_in = self.rows_in[rt], self.cols_in[ct]
        out = Region("output", (images, stack, self.rows_out[rt], self.cols_out[ct]))
        out_offset = self.slot(cluster, "output")
        acc_offset = self.start_tile(cluster, out, out_offset, rows_in, cols_in)
        for step in self.stack_steps[st]:
            in_offset = self.slot(cluster, "input")
            patch = Region("input", (images, step, rows_in, cols_in))
            self.ops.append(Load(cluster, patch, "input", in_offset))
            block_offset = self.depthwise(
                cluster, in_offset, patch, self.rows_out[rt], self.cols_out[ct]
            )
            self.convs(cluster, block_offset, acc_offset, stack, step)
        self.finish_tile(cluster, out, out_offset)

    # -- multicast waves (MPPA3, seed 003 Sec. IV) -------------------------------------------
    def output_stack_multicast(self) -> None:
        """Each wave (``tiling``: a tiles x b stacks) runs in lockstep: per input step, each
        tile's input band is one ``Multicast`` to the wave's tasks of that tile (groups = 1),
        and each filter block of a stack one ``Multicast`` to the wave's tasks of that stack.
        With groups > 1 the stacks read different input slices: inputs are loaded per task.
        A datum with a single receiver is a plain ``Load``.
        """
        grid = self.grid
        b, r, c, s, _ = (ix.tolist() for ix in grid.task_index)
        slots = grid.task_slot
        cluster = (slots % self.clusters).tolist()
        self.alloc(sorted(set(cluster)))
        order = np.argsort(slots, kind="stable").tolist()
        waves: dict[int, list[int]] = {}
        for t in order:
            waves.setdefault(int(slots[t]) // self.clusters, []).append(t)
        for tasks in waves.values():
            tiles = list(dict.fromkeys((b[t], r[t], c[t]) for t in tasks))
            stacks = list(dict.fromkeys(s[t] for t in tasks))
            out_offset: dict[int, int] = {}
            for t in tasks:
                out = Region(
                    "output",
                    (
                        self.images[b[t]],
                        self.stack_out[s[t]],
                        self.rows_out[r[t]],
                        self.cols_out[c[t]],
                    ),
                )
                out_offset[t] = self.slot(cluster[t], "output")
                self.ops.append(Zero(cluster[t], "output", out_offset[t], out))
            if self.layer.groups == 1:  # every stack reads every input slice, in equal steps
                for k, step in enumerate(self.stack_steps[stacks[0]]):
                    in_offset: dict[int, int] = {}
                    for tile in tiles:
                        receivers = [t for t in tasks if (b[t], r[t], c[t]) == tile]
                        offsets = [self.slot(cluster[t], "input") for t in receivers]
                        in_offset.update(zip(receivers, offsets, strict=True))
                        self.deliver(
                            self.input_region(tile, step),
                            "input",
                            [cluster[t] for t in receivers],
                            offsets,
                        )
                    for st in stacks:
                        receivers = [t for t in tasks if s[t] == st]
                        self.multicast_convs(
                            [(cluster[t], in_offset[t], out_offset[t]) for t in receivers],
                            self.stack_out[st],
                            self.stack_steps[st][k],
                        )
            else:
                for st in stacks:
                    receivers = [t for t in tasks if s[t] == st]
                    for step in self.stack_steps[st]:
                        in_offset = {}
                        for t in receivers:
                            in_offset[t] = self.slot(cluster[t], "input")
                            self.ops.append(
                                Load(
                                    cluster[t],
                                    self.input_region((b[t], r[t], c[t]), step),
                                    "input",
                                    in_offset[t],
                                )
                            )
                        self.multicast_convs(
                            [(cluster[t], in_offset[t], out_offset[t]) for t in receivers],
                            self.stack_out[st],
                            step,
                        )
            for t in tasks:
                out = Region(
                    "output",
                    (
                        self.images[b[t]],
                        self.stack_out[s[t]],
                        self.rows_out[r[t]],
                        self.cols_out[c[t]],
                    ),
                )
                self.ops.append(Store(cluster[t], "output", out_offset[t], out))

    def input_region(self, tile: tuple[int, int, int], step: Span) -> Region:
        bt, rt, ct = tile
        return Region("input", (self.images[bt], step, self.rows_in[rt], self.cols_in[ct]))

    def deliver(self, src: Region, buffer: str, clusters: list[int], offsets: list[int]) -> None:
        """One main-memory read of ``src`` into ``buffer`` of each cluster (a Load if one)."""
        if len(clusters) == 1:
            self.ops.append(Load(clusters[0], src, buffer, offsets[0]))
        else:
            self.ops.append(
                Multicast(clusters[0], src, buffer, tuple(zip(clusters, offsets, strict=True)))
            )

    def multicast_convs(
        self, receivers: list[tuple[int, int, int]], stack: Span, step: Span
    ) -> None:
        """``convs`` for the tasks of one stack in a wave: each filter block read once and
        multicast to them all. ``receivers``: (cluster, input offset, output offset)."""
        if not self.weighted:
            for block in self.blocks(stack, step):
                for cl, in_offset, out_offset in receivers:
                    self.ops.append(self.apply(cl, in_offset, out_offset, block))
            return
        kh, kw = self.layer.kernel_h, self.layer.kernel_w
        cin = self.layer.cin_per_group
        for oc0, oc1, ic0, ic1, ng in self.blocks(stack, step):
            j0 = ic0 - (ic0 // cin) * cin
            in_n = (ic1 - ic0) // ng
            offsets = [self.slot(cl, "filter") for cl, _, _ in receivers]
            self.deliver(
                Region("filter", ((oc0, oc1), (j0, j0 + in_n), (0, kh), (0, kw))),
                "filter",
                [cl for cl, _, _ in receivers],
                offsets,
            )
            for (cl, in_offset, out_offset), f_offset in zip(receivers, offsets, strict=True):
                self.ops.append(
                    Conv(
                        cl,
                        "input",
                        in_offset,
                        "filter",
                        f_offset,
                        "output",
                        out_offset,
                        (oc0, oc1),
                        (ic0, ic1),
                        ng,
                        self.stride,
                    )
                )

    # -- Alg. 3: stacks of a share group forward input slices -------------------------------
    def output_stack_shared(self) -> None:
        """Each share group runs its members in lockstep rounds (the report's epochs).

        Member ``m`` of ``n`` handles step ``(m + t) mod S`` in round ``t``, so the slice it
        needs next is the one member ``m + 1`` holds now: ``m`` copies it from ``m + 1``'s
        forwarding buffer, where ``m + 1`` published it. The last member, whose successor
        does not hold it, loads from main memory. (The report's Alg. 3 reads from cluster
        ``CID - 1``, which in lockstep has not loaded that slice yet; see ``faults``.)
        """
        grid = self.grid
        size = grid.mapping.share_group
        b, r, c, s, _ = (ix.tolist() for ix in grid.task_index)
        slots = grid.task_slot.tolist()
        self.alloc(sorted({slot % self.clusters for slot in slots}))
        t = 0
        while t < grid.n_tasks:
            key = (b[t], r[t], c[t], s[t] // size)
            u = t
            while u < grid.n_tasks and (b[u], r[u], c[u], s[u] // size) == key:
                u += 1
            if slots[t] // self.clusters != slots[u - 1] // self.clusters:
                raise MappingError(
                    f"share group of {size} clusters spans two waves of "
                    f"{self.clusters} clusters: its members cannot forward"
                )
            members = [(slots[k] % self.clusters, s[k]) for k in range(t, u)]
            self.share_group(members, b[t], r[t], c[t])
            t = u

    def share_group(self, members: list[tuple[int, int]], bt: int, rt: int, ct: int) -> None:
        images, rows_in, cols_in = self.images[bt], self.rows_in[rt], self.cols_in[ct]
        steps = self.stack_steps[members[0][1]]  # groups = 1: every stack reads all slices
        n, n_steps = len(members), len(steps)

        def patch(m: int, t: int) -> Region:
            return Region("input", (images, steps[(m + t) % n_steps], rows_in, cols_in))

        outs = [
            Region("output", (images, self.stack_out[st], self.rows_out[rt], self.cols_out[ct]))
            for _, st in members
        ]
        out_offsets = [self.slot(cl, "output") for cl, _ in members]
        acc_offsets = []
        current = []
        for m, (cl, _) in enumerate(members):
            acc_offsets.append(self.start_tile(cl, outs[m], out_offsets[m], rows_in, cols_in))
            current.append(self.slot(cl, "input"))
            self.ops.append(Load(cl, patch(m, 0), "input", current[m]))
        for t in range(n_steps):
            last_round = t + 1 == n_steps
            if not last_round:  # publish this round's slice for the predecessor
                for m in range(1, n):
                    cl = members[m][0]
                    self.ops.append(Copy(cl, cl, "input", current[m], patch(m, t), "share", 0))
            for m, (cl, st) in enumerate(members):
                block_offset = self.depthwise(
                    cl, current[m], patch(m, t), self.rows_out[rt], self.cols_out[ct]
                )
                self.convs(
                    cl, block_offset, acc_offsets[m], self.stack_out[st], steps[(m + t) % n_steps]
                )
            if last_round:
                break
            for m, (cl, _) in enumerate(members):
                current[m] = self.slot(cl, "input")
                if m == n - 1:
                    self.ops.append(Load(cl, patch(m, t + 1), "input", current[m]))
                else:
                    self.ops.append(
                        Copy(
                            cl, members[m + 1][0], "share", 0, patch(m + 1, t), "input", current[m]
                        )
                    )
        for m, (cl, _) in enumerate(members):
            self.finish_tile(cl, outs[m], out_offsets[m])

    # -- Alg. 4/5: input slices over clusters, private partials, tree reduction -------------
    def input_parallel(self) -> None:
        grid, layer = self.grid, self.layer
        steps = _chunk_spans(0, layer.c_in, int(grid.in_steps[0]))
        active = min(len(steps), self.clusters)
        self.alloc(list(range(active)))
        spatial = ((0, layer.h_in), (0, layer.w_in))
        for images in self.images:  # phase order: batch tile, then stack
            for stack in self.stack_out:
                out = Region("output", (images, stack, (0, 1), (0, 1)))
                offsets = [self.slot(cl, "output") for cl in range(active)]
                for cl in range(active):
                    self.ops.append(Zero(cl, "output", offsets[cl], out))
                for k, step in enumerate(steps):
                    cl = k % self.clusters
                    in_offset = self.slot(cl, "input")
                    self.ops.append(
                        Load(cl, Region("input", (images, step) + spatial), "input", in_offset)
                    )
                    self.convs(cl, in_offset, offsets[cl], stack, step)
                self.reduce(active, offsets, out)
                self.ops.append(Store(0, "output", offsets[0], out))

    def reduce(self, active: int, offsets: list[int], out: Region) -> None:
        """Tree reduction (report Sec. 3.1.3): pairs within an L1 quadrant first, then
        pairs of those, and so on, so cluster 0 ends with the sum."""
        stride = 1
        while stride < active:
            for dst in range(0, active - stride, 2 * stride):
                self.ops.append(
                    Reduce(dst, dst + stride, "output", offsets[dst], offsets[dst + stride], out)
                )
            stride *= 2
