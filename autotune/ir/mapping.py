"""A mapping: which algorithm runs a layer and with which tiling and buffers.

The report (seed 000) gives five algorithms; autotune runs three generalised programs:

``output_stack``         Algorithms 1 and 2: tasks are stacks of ``delta_o`` output depth slices
                         (Alg. 1 is ``delta_o = 1``); each task streams the input depth slices.
``output_stack_shared``  Algorithm 3: as ``output_stack``, but the clusters of a quadrant of
                         ``share_group`` clusters forward input slices to each other and load
                         each from main memory once per group.
``input_parallel``       Algorithms 4 and 5 (fully-connected): input depth slices are spread over
                         the clusters, each keeping a private partial output of ``delta_o``
                         output slices, which a tree reduction sums (Alg. 4 is one stack).

The generalisations the report lacks are fields of the mapping: ``tile`` splits the output
into spatial tiles (with halo) and the input depth into steps, ``batch_tile`` sets the images
per task, ``buffers`` sets the bytes and buffering depth of each L1 buffer.

On a package of several chiplets (seed 002, Chiplet Architecture) ``chiplet_split`` says how
the layer is divided among the chiplets (``autotune/chiplets.py``); the rest of the mapping
then describes what *each* chiplet runs on its part.

``multicast`` (``output_stack`` only, on machines with ``Machine.dma_multicast``: MPPA3's RDMA
NoC, seed 003 Sec. IV) runs each wave's tasks in lockstep and delivers every main-memory datum
the wave needs (a stack's filter slices, a spatial/batch tile's input band) with ONE read that
the DMA multicasts to every task of the wave that needs it. ``tiling.TaskGrid`` fixes which
tasks share a wave (a rectangle of tiles x stacks, see there). KaNN's two strategies
(seed 003 Sec. IV) are these options:

* *spatial splitting* ("each compute cluster only accesses an input activation tile and its
  shadow region, while all the operator parameters are required; these are read once from
  the DDR memory and multicasted"): ``output_stack`` with one stack (``delta_o = C_out``) or
  few, spatial tiles (``tile.out_h``/``out_w``; the halo is the shadow region) and
  ``multicast=True``: the weights are read once per wave instead of once per tile;
* *channel splitting* ("the full input layer must be replicated in the local memory of each
  compute cluster, but only the corresponding slice of parameters is read"): ``output_stack``
  with stacks of channels and whole-map tiles; the replicated input is read once per wave with
  ``multicast=True``, once per stack without it (plain Alg. 2).

``search.space.kann_spatial`` and ``search.space.kann_channel`` build the two for a layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

#: Stable algorithm ids, with the report algorithm(s) each generalises.
ALGORITHMS: dict[str, str] = {
    "output_stack": "Alg. 1 (delta_o = 1) and Alg. 2: stacks of output depth slices per task",
    "output_stack_shared": "Alg. 3: Alg. 2 with input slices forwarded within a quadrant",
    "input_parallel": "Alg. 4 (one stack) and Alg. 5: input depth slices over clusters + "
    "tree reduction of private outputs",
}

#: How a layer is divided among the chiplets of a package, in tie-break order (seed 002).
CHIPLET_SPLITS: dict[str, str] = {
    "none": "the whole layer on one chiplet",
    "output_channels": "each chiplet computes a block of output channels (whole groups)",
    "spatial": "each chiplet computes a band of output rows (its input band with halo)",
    "images": "each chiplet computes a block of the batch's images",
}

KIB = 1024


@dataclass(frozen=True)
class Tile:
    """How one task's share of a layer is cut.

    ``out_h``/``out_w`` are output rows/columns per task (``None``: the whole extent; the task
    loads the input rows and columns its outputs need, halo included). ``in_c`` is the number of
    input depth slices loaded and consumed per step (the report steps one slice at a time);
    for ``input_parallel`` it is also the number of input depth slices per task.
    """

    out_h: int | None = None
    out_w: int | None = None
    in_c: int = 1

    def __post_init__(self) -> None:
        for name in ("out_h", "out_w"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"tile.{name} must be a positive integer or None, got {value!r}")
        if not isinstance(self.in_c, int) or self.in_c < 1:
            raise ValueError(f"tile.in_c must be a positive integer, got {self.in_c!r}")


@dataclass(frozen=True)
class Buffers:
    """L1 buffers of a task: bytes given to each operand and how deep each is buffered.

    A ``*_bytes`` of ``None`` allocates exactly ``depth × tile`` bytes; an explicit number
    reserves that many bytes (it must hold ``depth`` tiles), and bytes beyond one tile let the
    DMA keep that much data in flight, which is what hides main-memory latency (report Sec.
    2.1.2: 256 cycles × 64 B/cycle = 16 KiB in flight). Depth 1 serialises load and compute;
    depth 2 is double buffering (the report prefetches slice ``d_i + 1`` while computing ``d_i``).
    ``output_depth`` 2 lets a task's store overlap the next task's compute.
    """

    input_bytes: int | None = None
    filter_bytes: int | None = None
    output_bytes: int | None = None
    share_bytes: int | None = None
    input_depth: int = 2
    filter_depth: int = 2
    output_depth: int = 1

    def __post_init__(self) -> None:
        for name in ("input_bytes", "filter_bytes", "output_bytes", "share_bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ValueError(f"buffers.{name} must be a non-negative integer or None")
        for name in ("input_depth", "filter_depth", "output_depth"):
            value = getattr(self, name)
            if value not in (1, 2):
                raise ValueError(f"buffers.{name} must be 1 (single) or 2 (double), got {value!r}")


@dataclass(frozen=True)
class Mapping:
    """How one layer runs on the machine.

    Example:
        >>> m = Mapping.from_report(2, delta_o=24)
        >>> m.algorithm, m.report_algorithm, m.delta_o
        ('output_stack', 2, 24)
    """

    algorithm: str
    delta_o: int = 1
    batch_tile: int = 1
    share_group: int = 1
    tile: Tile = field(default_factory=Tile)
    buffers: Buffers = field(default_factory=Buffers)
    #: How the layer is divided among a package's chiplets (``CHIPLET_SPLITS``); single-chiplet
    #: machines accept only "none".
    chiplet_split: str = "none"
    #: One main-memory read per datum and wave, multicast to the wave's tasks (see module doc).
    multicast: bool = False

    def __post_init__(self) -> None:
        if self.chiplet_split not in CHIPLET_SPLITS:
            known = ", ".join(CHIPLET_SPLITS)
            raise ValueError(f"unknown chiplet_split {self.chiplet_split!r} (known: {known})")
        if self.algorithm not in ALGORITHMS:
            known = ", ".join(ALGORITHMS)
            raise ValueError(f"unknown algorithm {self.algorithm!r} (known: {known})")
        for name in ("delta_o", "batch_tile", "share_group"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.algorithm != "output_stack_shared" and self.share_group != 1:
            raise ValueError(
                f"share_group applies to output_stack_shared only, not to {self.algorithm}"
            )
        if not isinstance(self.multicast, bool):
            raise ValueError(f"multicast must be a boolean, got {self.multicast!r}")
        if self.multicast and self.algorithm != "output_stack":
            raise ValueError(
                f"multicast applies to output_stack only, not to {self.algorithm} "
                f"(Alg. 3 forwards instead; Alg. 4/5 tasks share no data)"
            )

    @property
    def report_algorithm(self) -> int | None:
        """The report's algorithm this mapping instantiates (1–5), or None for an extension.

        A mapping is one of the report's algorithms when it uses none of autotune's
        generalisations (spatial tiles, multi-slice steps, batch tiles for convolutions);
        for ``input_parallel`` the batch is part of the report's algorithm, so a mapping
        is Alg. 4 when ``delta_o`` covers the layer and Alg. 5 otherwise (that needs the
        layer, see ``report_algorithm_for``); this property answers 5 for it.
        """
        return self.report_algorithm_for(None)

    def report_algorithm_for(self, c_out: int | None) -> int | None:
        """As ``report_algorithm``, telling Alg. 4 from Alg. 5 when ``c_out`` is given."""
        untiled = self.tile.out_h is None and self.tile.out_w is None and self.tile.in_c == 1
        if self.algorithm == "input_parallel":
            if self.tile.in_c != 1:
                return None
            return 4 if c_out is not None and self.delta_o >= c_out else 5
        if not untiled or self.batch_tile != 1 or self.multicast:
            return None
        if self.algorithm == "output_stack":
            return 1 if self.delta_o == 1 else 2
        return 3 if self.share_group > 1 else 2

    def with_(self, **changes: object) -> Mapping:
        """A copy with some fields changed (validation runs again)."""
        return replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_report(cls, n: int, **params: object) -> Mapping:
        """The report's Algorithm ``n`` with its fixed buffers (seed 000).

        Algorithms 1–3 reserve 16 KiB for the input-slice buffer and 16 KiB for the filter
        buffer (Sec. 2.1.2, 2.2.2); Alg. 1 adds a 16 KiB output buffer (48 KiB in all);
        Alg. 2 and 3 give the output stack what it needs; Alg. 3 adds a forwarding buffer of
        one input slice (Sec. 2.3.2) and shares within an L2 quadrant of 16 clusters.
        Algorithms 4–5 reserve 16 KiB for the input batch and 16 KiB for filters (Sec. 3.1.2)
        and use the whole batch per task (pass ``batch_tile=B``).

        ``params`` override ``delta_o``, ``batch_tile``, ``share_group``, ``tile`` or
        ``buffers``; Alg. 4 needs ``delta_o`` = D_O of the layer.
        """
        report_buffers = dict(input_bytes=16 * KIB, filter_bytes=16 * KIB)
        if n == 1:
            base = cls(
                "output_stack", delta_o=1, buffers=Buffers(**report_buffers, output_bytes=16 * KIB)
            )
        elif n == 2:
            base = cls("output_stack", buffers=Buffers(**report_buffers))
        elif n == 3:
            base = cls("output_stack_shared", share_group=16, buffers=Buffers(**report_buffers))
        elif n in (4, 5):
            # Alg. 4/5 load the input batch once per task (no prefetch) and stream filters.
            base = cls("input_parallel", buffers=Buffers(**report_buffers, input_depth=1))
        else:
            raise ValueError(f"the report has Algorithms 1-5, not {n!r}")
        if n == 1 and params.get("delta_o", 1) != 1:
            raise ValueError("Algorithm 1 has delta_o = 1 by definition")
        return replace(base, **params)  # type: ignore[arg-type]
