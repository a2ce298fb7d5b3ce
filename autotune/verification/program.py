"""A program: the explicit operations a mapped layer performs, per cluster, in order.

A program is plain data, so that it can be built once (``autotune.verification.build``), inspected,
mutated into a broken schedule (``autotune.verification.faults``) and executed
(``autotune.verification.executor``) without either side knowing how the other works.

Main memory holds the tensors the layer reads and writes, NCHW-like with the batch outermost:

``input``     ``(batch, c_in, h_in, w_in)`` (an ``add``: its ``n`` operands interleaved,
              channel ``g·n + i`` is channel ``g`` of operand ``i``)
``filter``    ``(c_out, c_in / groups, kernel_h, kernel_w)`` (an fc layer: kernel = input);
              only the kinds with weights (``conv``, ``fc``) have filters
``bias``      ``(c_out,)``, when the layer's epilogue adds a bias
``residual``  ``(batch, c_out, h_out, w_out)``, when the epilogue adds a residual operand
``output``    ``(batch, c_out, h_out, w_out)``

A 1×1 conv fused with the depthwise before it (``Layer.prologue``) reads two more:

``prologue_filter``  ``(c_in, 1, kernel_h, kernel_w)``, the depthwise's weights
``prologue_bias``    ``(c_in,)``, when the depthwise adds a bias

and its ``filter`` is the 1×1's, ``(c_out, c_in, 1, 1)``. The depthwise's result is the
``prologue`` tensor, ``(batch, c_in, h_out, w_out)``: it exists only in L1 (a ``Depthwise``
writes a region of it, the 1×1's ``Conv`` blocks read it), never in main memory.

A depthwise conv fused with the 1×1 before it (``Layer.expansion``) reads the narrow tensor
as ``input``, the 1×1's weights as ``filter`` ``(c_out, c_in, 1, 1)``, and two more:

``depthwise_filter``  ``(c_out, 1, kernel_h, kernel_w)``, the depthwise's weights
``expansion_bias``    ``(c_out,)``, when the 1×1 adds a bias

while ``bias`` is the depthwise's (the layer's epilogue). The 1×1's result is the
``expansion`` tensor, ``(batch, c_out, h_in, w_in)``: it exists only in L1 (the 1×1's
``Conv`` blocks accumulate a band of it, a ``Depthwise`` reads it), never in main memory.

``bias`` and ``residual`` are read by the output store, which applies the layer's epilogue
(``autotune.ir.layer.Epilogue``) once, after all accumulation: what the schedule decides is
only *which* output region a store writes, and the epilogue's operands are those of that
region, so they need no operations of their own.

A ``Region`` names a box of one of them. L1 is addressed per cluster by buffer name and a
word offset into that buffer; every operation that writes L1 records which region it wrote
there, and every operation that reads L1 states where it reads, so the executor can check
that the data is really there.
"""

from __future__ import annotations

import gc
import math
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from autotune.ir.layer import Layer
from autotune.ir.mapping import Mapping

Box = tuple[tuple[int, int], ...]

#: The buffers a cluster may allocate (the operands of ``autotune.tiling.declared_buffers``).
BUFFERS = ("input", "filter", "output", "share")


@dataclass(frozen=True, slots=True)
class Region:
    """A box ``[start, stop)`` per dimension of one main-memory tensor.

    ``shape``, ``words`` and ``slices`` are computed once: the executor reads them per op.
    """

    tensor: str
    box: Box
    shape: tuple[int, ...] = field(init=False, repr=False, compare=False)
    words: int = field(init=False, repr=False, compare=False)
    slices: tuple[slice, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        shape = tuple([b - a for a, b in self.box])
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "words", math.prod(shape))
        object.__setattr__(self, "slices", tuple([slice(a, b) for a, b in self.box]))

    def __str__(self) -> str:
        return f"{self.tensor}[{', '.join(f'{a}:{b}' for a, b in self.box)}]"


# -- operations: each names the cluster that issues it ----------------------------------------


@dataclass(frozen=True, slots=True)
class Alloc:
    """Reserve ``nbytes`` of the cluster's L1 arena for ``buffer``."""

    cluster: int
    buffer: str
    nbytes: int


@dataclass(frozen=True, slots=True)
class Load:
    """DMA ``src`` (main memory) into ``buffer`` at word ``offset`` (report ``DmaLoad``)."""

    cluster: int
    src: Region
    buffer: str
    offset: int


@dataclass(frozen=True, slots=True)
class Multicast:
    """One DMA read of ``src`` (main memory) written into ``buffer`` of every cluster of
    ``targets`` (``(cluster, word offset)`` pairs): the RDMA multicast of MPPA3 (seed 003
    Sec. IV, parameters "read once from the DDR memory and multicasted to all the target
    compute clusters"). ``cluster`` issues it; main memory is read once.
    """

    cluster: int
    src: Region
    buffer: str
    targets: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Zero:
    """Initialise an accumulator for output ``region`` (report: "initialize O"): to the
    identity of the layer's combination, zero for a sum and -inf for a max (a softmax also
    starts its running maximum and sum)."""

    cluster: int
    buffer: str
    offset: int
    region: Region


@dataclass(frozen=True, slots=True)
class Conv:
    """Accumulate one block of a tile: output channels ``out_channels`` of the accumulator at
    (``out_buffer``, ``out_offset``) += the convolution of input channels ``in_channels`` of
    the patch at (``in_buffer``, ``in_offset``) with the filters at (``filter_buffer``,
    ``filter_offset``), computed with ``stride``. ``groups`` > 1 runs that many whole groups
    of a grouped convolution at once (channels are then ``groups`` equal runs).
    """

    cluster: int
    in_buffer: str
    in_offset: int
    filter_buffer: str
    filter_offset: int
    out_buffer: str
    out_offset: int
    out_channels: tuple[int, int]
    in_channels: tuple[int, int]
    groups: int
    stride: tuple[int, int]


@dataclass(frozen=True, slots=True)
class Depthwise:
    """A fused depthwise (``Layer.prologue``): ``result``, a region of the ``prologue``
    tensor (images, channels, the output tile's rows and columns), computed from the patch at
    (``in_buffer``, ``in_offset``) with the depthwise weights at (``filter_buffer``,
    ``filter_offset``) and ``stride``, its bias and activation applied, rounded to the storage
    precision and written to ``out_buffer`` at ``out_offset``. The 1×1's ``Conv`` blocks
    then read it there (their stride 1).

    With a fused 1×1 before it (``Layer.expansion``): ``result`` is a region of the
    ``output`` (the task's output tile), computed from the ``expansion`` accumulator at
    (``in_buffer``, ``in_offset``), once all its input channels are summed in: the
    expansion's bias and activation applied, rounded to the storage precision, then the
    depthwise with the weights at (``filter_buffer``, ``filter_offset``), written over the
    output tile's accumulator at (``out_buffer``, ``out_offset``) for the store."""

    cluster: int
    in_buffer: str
    in_offset: int
    filter_buffer: str
    filter_offset: int
    out_buffer: str
    out_offset: int
    result: Region
    stride: tuple[int, int]


@dataclass(frozen=True, slots=True)
class Apply:
    """Accumulate one block of a tile of a layer without weights (a pool, an add, an
    activation, an upsample, a softmax): output channels ``out_channels`` of the accumulator
    at (``out_buffer``, ``out_offset``) take the contribution of input channels
    ``in_channels`` of the patch at (``in_buffer``, ``in_offset``), combined the layer's
    way (a max, a sum of window averages, a sum of operands, a copy, a running softmax).
    Channels and ``groups`` are as for ``Conv``; ``stride`` is the window's (an upsample:
    1, its scale is the layer's). It is ``Conv`` without filters, so a schedule checks the
    same way whatever the kind.
    """

    cluster: int
    in_buffer: str
    in_offset: int
    out_buffer: str
    out_offset: int
    out_channels: tuple[int, int]
    in_channels: tuple[int, int]
    groups: int
    stride: tuple[int, int]


@dataclass(frozen=True, slots=True)
class Copy:
    """DMA ``region`` from (``src_cluster``, ``src_buffer``, ``src_offset``) into this cluster's
    ``buffer`` at ``offset``: Alg. 3 forwarding when the clusters differ, publishing a slice
    into the own forwarding buffer when they are equal. The source must hold ``region``.
    """

    cluster: int
    src_cluster: int
    src_buffer: str
    src_offset: int
    region: Region
    buffer: str
    offset: int


@dataclass(frozen=True, slots=True)
class Reduce:
    """One tree-reduction step (report Sec. 3.1.3): add ``src_cluster``'s private partial
    output of ``region`` to this cluster's. Both must hold partials of ``region``.
    """

    cluster: int
    src_cluster: int
    buffer: str
    offset: int
    src_offset: int
    region: Region


@dataclass(frozen=True, slots=True)
class Store:
    """DMA the finished accumulator of output ``region`` to main memory (``DmaStore``),
    applying the layer's epilogue on the way (a softmax's normalisation first): ``+ bias``
    of the region's channels, ``+ residual`` of the region, the activation."""

    cluster: int
    buffer: str
    offset: int
    region: Region


Op = Alloc | Load | Multicast | Zero | Conv | Depthwise | Apply | Copy | Reduce | Store


@dataclass(frozen=True)
class Program:
    """Everything needed to execute a mapped layer: the problem, the machine's L1 and the ops.

    ``ops`` is one legal sequential interleaving of the clusters' programs (each cluster's
    operations appear in its own schedule order; operations that depend on another cluster,
    forwarding and reduction, come after the operations they read from).
    """

    layer: Layer
    mapping: Mapping
    batch: int
    precision: str
    word_bytes: int
    l1_bytes: int
    l1_align_bytes: int
    clusters: int
    ops: tuple[Op, ...]
    multicast: bool = False  # the machine's DMA can multicast (``Multicast`` ops allowed)

    def on_cluster(self, cluster: int) -> list[Op]:
        """The operations one cluster issues, in its schedule order."""
        return [op for op in self.ops if op.cluster == cluster]

    def op_counts(self) -> dict[str, int]:
        return dict(Counter(type(op).__name__ for op in self.ops))

    def replace_ops(self, ops: list[Op] | tuple[Op, ...]) -> Program:
        """The same program with other operations (used to build broken schedules)."""
        return replace(self, ops=tuple(ops))


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a program is built or run.

    Programs are hundreds of thousands of small acyclic objects; without this the collector
    rescans them again and again (about 40% of the build time of ResNet-50's programs).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
