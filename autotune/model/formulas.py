"""The analytical cost model as one closed-form formula over a mapping's quantities.

Written once against the ``ops`` interface (``model/ops.py``) so that ``analyze`` (Python
ints), exhaustive search (numpy arrays over all candidates) and the integer program (CP-SAT
constraints) evaluate *the same* model. Inputs are the ``Quantities`` ``tiling.TaskGrid``
defines (stack counts and sizes, tile extents, batch tiles; see ``quantities.py``); outputs are
footprint, traffic and cycles. ``evaluate`` composes the steps below in this order: L1
footprint, what the largest task computes and moves, tasks and waves, DMA and compute time,
their overlap into task, phase and layer latency, traffic per memory level, memory floor and
energy.

Algorithms: 0 = ``output_stack`` (Alg. 1/2), 1 = ``output_stack_shared`` (Alg. 3),
2 = ``input_parallel`` (Alg. 4/5).

Layer kinds (``ir.layer``): the work of a task is its FPU operations, ``ops_per_output`` per
output word (a conv's or fc's MACs, a pool's taps, an add's adds, ..., plus the epilogue's),
at the cluster's MAC rate: ASSUMPTION (the seeds rate the FPUs in MACs only), an operation
takes one MAC slot and a MAC's energy. The filter stream carries ``filter_words_per_output``
words per output channel; the kinds without weights have none, and the formula is built
without it (no filter tile, buffer, set-up or round trip). An epilogue with a residual
operand reads, per task, a tile of the output's size before the store (``dma_cycles``): one
more read stream and L1 buffer (as deep as the output's), and the residual once in the
off-chip traffic. These are constants of the layer: for conv and fc layers without an
epilogue the formula is exactly the report's.

Latency (cycles), per phase (``input_parallel`` runs one phase per stack and batch tile,
Alg. 5's outer loop; the others run one):

    phase  = task + (waves - 1) x (later + handover) + reduction     waves = ceil(slots / C)
    task   = L + prologue + max(compute, overlapped_dma) + exposed_dma + exposed_store
    later  = task, its stream beside what is left of the wave before's store (beside_store)
    cycles = max(phases x phase + store_tail, max(memory_floor + waits, fill) + last_stores)
    memory_floor = max(HBM occupancy / HBM bandwidth, l2_bytes / L2 bandwidth,
                       loads / tree cut, stores / tree cut)
    waits        = a task's round trips for its single-buffered tiles (the first wave's
                   clusters wait for them at once, the memories idle)
    fill         = the first wave's first output + every byte not loaded by the first wave's
                   tasks / each memory's bandwidth (none of it is asked for before)
    last_stores  = store bytes x (the last wave's path - its share of memory or cut), per cluster

An ``output_stack`` mapping whose input and filter buffers are double loads each task's
successor's first tiles beside it instead (``follower_cycles``): with two waves or more,
the first task's prologue, then the first task carrying the second's first tiles, the
followers each carrying the next one's (no prologue, no round trip of their own), and the
last carrying none.

``task`` is the largest task (full stack, full tile, full batch tile), so a wave lasts as long
as its largest task: remainders cost a whole wave, as on the machine. Waves run in lockstep, so
a wave's double-buffered stores leave while the next wave's first tiles arrive: that prologue
lasts longer by ``handover``, what the store takes of the shared bandwidth until the first
tiles are in (at most the prologue again; ``dma_cycles``). ``compute`` runs at the cluster's
MAC rate times the FPU utilisation. A cluster's streaming rate is the smallest of its DMA port,
its fair share of HBM and of each uplink above it when ``active_clusters`` stream
(``stream_cycles_per_byte``; the clusters of an Alg. 1/2 layer of one wave of fewer than C
tasks are spread over the tree, ``Machine.wave_order``), and Little's law for what each double
buffer keeps in flight (report Sec. 2.1.2: 256 cycles x 64 B/cycle = 16 KiB in flight), per
stream. The first tile of each double-buffered stream precedes the first iteration, so nothing
hides it (``prologue``: the pipeline's fill, paid before compute starts); the rest overlaps
compute. Single-buffered streams serialise with compute (``exposed_dma``) and pay the
round-trip latency ``L`` per load; each transfer pays the DMA set-up. A task pays ``L`` to
start and, unless its output is double buffered, ``L`` plus the transfer to store.
``input_parallel`` phases end with the tree reduction of Sec. 3.1.3 and one store.

DMA efficiency (machines with ``dma_read_efficiency``/``dma_write_efficiency`` tables, e.g.
the SW26010 core group: swDNN, seed 004 Sec. III-D and Table II, 4 GB/s with 32 B blocks up
to 32 GB/s with 4 KB of 36 GB/s): the per-candidate quantities ``input_inverse_efficiency``,
``filter_inverse_efficiency`` and ``output_inverse_efficiency`` are SCALE / efficiency of the
contiguous runs of the largest task's input step, filter tile and output store (layout in
``tiling``). A stream's time is then the larger of its payload over the ports and links
(``stream_net_cycles_per_byte``) and its main-memory occupancy ``bytes x inverse efficiency``
over its share of the HBM (``stream_hbm_cycles_per_byte``), and ``memory_floor`` is the total
occupancy over the HBM bandwidth. Traffic in bytes does not change. Without tables every
inverse efficiency is SCALE and the formula is built exactly as before (same numbers, same
constraints). The fc reduction's root store and forwarded tiles are costed at the DMA port, as
before.

Multicast (``multicast = 1``; ``output_stack`` on a machine with ``dma_multicast``, MPPA3's
RDMA NoC, seed 003 Sec. IV). A wave is a rectangle of ``a`` tiles x ``b`` stacks (``tiling``:
``b = min(stacks, C)``, ``a = floor(C / b)``), so, with ``T`` = batch tiles x spatial tiles:

    waves        = ceil(T / a) x ceil(stacks / b)   (slots = waves x C; unfilled slots idle)
    filter_load  = ceil(T / a) x weights            (a wave reads its b stacks' filters once)
    input_load   = ceil(stacks / b) x B x C_in x tile_in_pixels_sum   (groups = 1; else as
                                                                        without multicast)

Each receiving cluster's DMA port still receives every byte of its task, but the shared DDR/HBM
(and the NoC links above the clusters) carry each multicast datum once. So a multicast stream
of ``x`` bytes per cluster takes ``max(x / port, wave_bytes / shared)`` where ``wave_bytes`` is
what the whole wave reads (``a'`` tiles' inputs + ``b`` stacks' filters, ``a'`` = tiles in the
wave; stores are never shared) and ``shared`` is the slowest of the HBM and the level links:
exact for MPPA3's one-level NoC, pessimistic for deeper trees (their lower links carry only
their subtree's data). ``memory_floor`` uses the reduced off-chip bytes. A multicast stream in
the L2 (below) is the same read from the other memory: the wave's distinct bytes load the L2
and the links below the root, not the HBM nor the root's uplink; a wave that mixes levels
takes as long as its busiest resource (each carrying the wave bytes that cross it).

Memory levels (``ir.placement``): each stream of a layer (input, weights, the epilogue's
residual, output) lives in the chiplet's HBM or in its shared L2, which sits at the chiplet
root beside the HBM controller (MPPA3's L2, the clusters' shares of their local memories, is
taken the same way: transfers between clusters that never take the path to the DDR). An L2
stream crosses the quadrant tree like an HBM stream but not the root's uplink (the last of
``machine.levels``, the link to the HBM controller), and
shares the L2's bandwidth (one capacity for reads and writes) instead of the HBM's; its round
trip is the L2's latency, and the DMA efficiency tables (the HBM's behaviour) do not apply to
it. A transfer that mixes levels (an input step from the L2 with a filter tile from the HBM)
takes as long as its busiest resource: each of the DMA port and the links below the root,
the root's uplink, the HBM and the L2 carries the bytes that cross it (the rule a single
level's rate already follows: its bytes cross every resource of its path). ``offchip_bytes``
counts the HBM streams, ``l2_bytes`` the L2 streams; the memory floor is the slower of the
two memories, and each byte costs its memory's energy. With every stream in HBM
(``HBM_ONLY``) the formula is built exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from autotune.ir.layer import Layer
from autotune.ir.machine import STATIC_ENERGY, Machine, whole_pj
from autotune.ir.placement import HBM_ONLY, MemoryLevel, Placement
from autotune.model.ops import Ops, Table, Value
from autotune.tiling import OPERANDS, filter_pixels

OUTPUT_STACK, SHARED, INPUT_PARALLEL = 0, 1, 2
ALGORITHM_CODES = {
    "output_stack": OUTPUT_STACK,
    "output_stack_shared": SHARED,
    "input_parallel": INPUT_PARALLEL,
}
#: Fixed-point scale for rates: times are ceil(bytes * SCALE / (bytes per cycle * SCALE)).
#: Names ending in ``_scaled`` are in this fixed point.
SCALE = 1000


@dataclass(frozen=True)
class Quantities:
    """The per-mapping quantities the formula reads (``quantities.py`` takes them from
    ``tiling``). Each is an int, an array over candidates or a CP-SAT expression. "Largest"
    means the largest chunk along its axis: the formula costs the largest task."""

    algorithm: Value  # ALGORITHM_CODES
    stacks: Value  # output stacks (chunks of delta_o output channels)
    stack_out_channels_max: Value  # output channels of the largest stack
    stack_in_channels_sum: Value  # input channels each stack reads, summed over the stacks
    stack_in_channels_max: Value  # input channels the largest stack reads
    stacks_largest: Value  # stacks with the largest stack's output channels
    stack_mean_share: Value  # SCALE x the stacks' mean output channels / the largest's
    spatial_tiles: Value  # row tiles x column tiles
    tile_out_pixels_max: Value  # output pixels of the largest spatial tile
    tile_in_pixels_max: Value  # input pixels (halo included) of the largest spatial tile
    tile_in_pixels_sum: Value  # input pixels summed over the spatial tiles (halos repeat)
    tiles_out_largest: Value  # spatial tiles as large as the largest's output on both axes
    tiles_in_largest: Value  # spatial tiles whose input band is as large as the largest's
    tile_out_min_share: Value  # SCALE x the smallest tile's output pixels / the tiles' mean
    tile_in_min_share: Value  # SCALE x the smallest tile's input pixels / the tiles' mean
    #: the same of the first row of tiles' smallest, which the first slots hold
    tile_out_first_min_share: Value
    tile_in_first_min_share: Value
    #: 1 when the first tile (the first slots' of a wave in order) is as large as the
    #: largest, in output and in input (an edge tile's band lacks the padding's rows)
    tile_first_largest_out: Value
    tile_first_largest_in: Value
    tile_out_mean_share: Value  # SCALE x the tiles' mean output pixels / the largest's
    tile_in_mean_share: Value  # SCALE x the tiles' mean input pixels / the largest's
    batch_tiles: Value
    batch_tile_images_max: Value  # images of the largest batch tile
    batch_tiles_largest: Value  # batch tiles with as many images
    batch_mean_share: Value  # SCALE x the batch tiles' mean images / the largest's
    batch_last_share: Value  # SCALE x the last batch tile's images / the largest's
    tile_out_last_share: Value  # SCALE x the last spatial tile's output pixels / the largest's
    input_partial_rows: Value  # 1: the largest tile's input band is of partial rows
    output_partial_rows: Value  # 1: the largest output tile is of partial rows
    step_in_channels: Value  # input channels per step (per task for input_parallel): in_c
    step_filter_channels: Value  # filter slices per output channel and step (<= cin/groups)
    filter_steps: Value  # filter tiles per output channel: ceil(cin/groups / those slices)
    in_steps: Value  # ceil(C_in / in_c): the tasks of an input_parallel phase
    share_group: Value  # stacks sharing one input read (Alg. 3; else 1)
    input_buffer_depth: Value  # 1 single-, 2 double-buffered
    filter_buffer_depth: Value
    output_buffer_depth: Value
    input_inverse_efficiency: Value  # SCALE / DMA efficiency of the input step's runs
    filter_inverse_efficiency: Value  # ... of the filter tile's runs
    output_inverse_efficiency: Value  # ... of the output store's runs
    #: DMA engine cycles of one image's input step beyond its payload at the port: a set-up
    #: per 2D transfer, idle ends of the runs' last beats (``quantities.dma_overhead_cycles``)
    input_step_dma_overhead: Value
    #: the set-ups of an input step's transfers that all its images share (a band of the
    #: whole slice: one 2D transfer, the images a stride apart)
    input_step_setup_cycles: Value
    #: The DMA engine's cycles per byte (x SCALE) of the output tile's transfers (the
    #: store's and the residual read's): set-ups and whole beats per run
    output_engine_scaled: Value
    #: SCALE x the idle end of a filter tile's last bus beat (``quantities.idle_beat_scaled``)
    filter_tile_idle_scaled: Value
    multicast: Value  # 1: the waves multicast their reads (output_stack only)
    #: SCALE / DMA read efficiency of the residual tile's runs (those of the output store)
    residual_inverse_efficiency: Value
    #: bytes given to a double filter buffer beyond its two tiles (0: two tiles; the search's
    #: deep option, ``space.FILTER_WINDOW_BYTES``), so that more tiles are in flight
    filter_bytes_given: Value = 0


#: The names of the per-mapping quantities the formula reads (see ``quantities.py``).
QUANTITIES = tuple(f.name for f in fields(Quantities))


@dataclass(frozen=True)
class Consts:
    """Integer constants of one layer on one machine at one precision and batch."""

    batch: int  # images
    in_channels: int
    out_channels: int
    in_pixels: int  # input pixels per depth slice
    #: FPU operations per output word (``Layer.ops_per_output``): the MACs of a conv or fc
    #: (cin_per_group * kernel_h * kernel_w), a pool's taps, ..., plus the epilogue's
    ops_per_output: int
    #: filter words one output channel reads over all its input slices (0 without weights)
    filter_words_per_output: int
    filter_pixels: int  # filter words per slice and output channel: kh * kw, 0 without weights
    weight_words: int
    output_words: int  # per image
    word_bytes: int
    clusters: int
    latency_cycles: int  # round trip to the HBM
    dma_bytes_per_cycle: int
    dma_setup_cycles: int  # per DMA transfer
    bank_bytes: int  # L1 bank width (allocation granularity)
    l1_bytes: int
    macs_per_cycle_scaled: int  # cluster MACs per cycle x utilisation x SCALE
    hbm_bytes_per_cycle_scaled: int
    #: [active - 1 (+ C: in order), ``link_tables``] -> cycles per byte x SCALE for one of
    #: ``active`` streaming clusters
    stream_cycles_per_byte_scaled: Table
    reduction_latency_cycles: Table  # [active - 1] -> sum over levels of steps x latency
    reduction_steps: tuple[Table, ...]  # per level: [active - 1] -> reduction steps
    link_bytes_per_cycle_scaled: tuple[int, ...]  # per level: min(DMA port, uplink) x SCALE
    # energies as integers (``ir.machine.whole_pj``: pJ) for the integer program
    op_energy_fj: int = 0  # per FPU operation, in fJ (the machine's energy of a MAC)
    hbm_word_energy: int = 0  # per off-chip word
    noc_word_energy: int = 0  # per inter-cluster word
    #: The machine has DMA efficiency tables: main-memory time per byte depends on the runs
    #: (the ``*_inverse_efficiency`` quantities); the HBM's share of the stream rate is then
    #: applied separately.
    has_dma_efficiency: bool = False
    #: As ``stream_cycles_per_byte_scaled``, without the HBM term
    stream_net_cycles_per_byte_scaled: Table | None = None
    #: As ``stream_cycles_per_byte_scaled``: the HBM term, active / HBM bytes per cycle x SCALE
    stream_hbm_cycles_per_byte_scaled: Table | None = None
    groups: int = 1
    can_multicast: bool = False  # the machine multicasts: the multicast = 1 branch is built
    port_cycles_per_byte_scaled: int = 0  # one cluster's DMA port
    #: Per level of the tree: (clusters below one uplink, its cycles per byte x SCALE)
    uplinks: tuple[tuple[int, int], ...] = ()
    #: ``group_tables`` of each ``StreamRates.TABLES`` name the placement uses: an Alg. 3
    #: wave with idle group members
    group_rates: dict[str, tuple[Table, Table]] = field(default_factory=dict)
    #: Per level of the tree, bottom up: (clusters in one of its subtrees, the round trip of a
    #: read between two of them that meet at that level), for Alg. 3's ring
    ring_latencies: tuple[tuple[int, int], ...] = ()
    shared_cycles_per_byte_scaled: int = 0  # multicast: the slowest of the HBM and the links
    #: Multicast with an L2 stream (``multicast_constants``): the slowest of the L2 and the
    #: links below the root; of the HBM and the root's uplink; of the links below the root
    #: (0: the tree has no level below the root)
    l2_shared_cycles_per_byte_scaled: int = 0
    root_shared_cycles_per_byte_scaled: int = 0
    tree_shared_cycles_per_byte_scaled: int = 0
    #: The epilogue reads a residual operand (one tile of the output's size per task)
    has_residual: bool = False
    epilogue_ops: int = 0  # FPU operations per output word of the epilogue
    #: The memory level of each stream (a stream the layer lacks is in HBM: ``of_layer``)
    placement: Placement = HBM_ONLY
    l2_latency_cycles: int = 0  # round trip to the L2
    l2_bytes_per_cycle_scaled: int = 0
    l2_word_energy: int = 0  # per L2 word
    static_energy_per_cycle: int = 0  # drawn every cycle whatever runs (leakage, idle)
    #: Placements with an L2 stream, indexed as ``link_tables`` -> cycles per byte x SCALE:
    #: an L2 stream's path (port, links below the root, L2 share), and for transfers that mix
    #: levels each resource apart: port and links below the root, the root's uplink, L2 share.
    stream_l2_cycles_per_byte_scaled: Table | None = None
    #: (every placement) the port and the links below the root: a stream's share of its
    #: subtree's uplinks, whichever memory it reaches
    stream_tree_cycles_per_byte_scaled: Table | None = None
    stream_root_cycles_per_byte_scaled: Table | None = None
    stream_l2_share_cycles_per_byte_scaled: Table | None = None
    #: Indexed as ``link_tables`` -> cycles per byte x SCALE an output store's path (port and
    #: links to its memory level) takes beyond that memory's share (``last_stores_cycles``)
    store_excess_cycles_per_byte_scaled: Table | None = None
    #: Bytes per cycle x SCALE of the narrowest cut of the tree below the root, one direction
    #: (all its uplinks at one level; 0: no level below the root). A rate, divided by as the
    #: memories' are: an inverse rate in this fixed point rounds 1/256 up by 2.4 %.
    tree_cut_bytes_per_cycle_scaled: int = 0
    #: A fused depthwise (``Layer.prologue``; 0 without one): its weights per input channel
    #: (k x k), and its FPU operations per result word (taps, bias, activation)
    prologue_pixels: int = 0
    prologue_ops: int = 0
    #: A fused 1x1 before a depthwise (``Layer.expansion``; 0 without one): the depthwise's
    #: weights per output channel (k x k), and the FPU operations per word of the 1x1's
    #: result (its c_in MACs, bias, activation)
    expansion_pixels: int = 0
    expansion_ops: int = 0

    @property
    def has_filters(self) -> bool:
        """The layer has weights: without them no filter is loaded or buffered, and the
        formula is built without the filter stream."""
        return self.filter_words_per_output > 0

    def level(self, stream: str) -> MemoryLevel:
        """The memory level of ``stream`` (``ir.placement.STREAMS``)."""
        return self.placement.level(stream)

    def round_trip(self, stream: str) -> int:
        """The round-trip latency of ``stream``'s memory level (the HBM's or the L2's)."""
        return self.l2_latency_cycles if self.level(stream) == "l2" else self.latency_cycles

    @property
    def start_latency_cycles(self) -> int:
        """A task starts once its first tiles arrive: the slower round trip of its loads."""
        if not self.has_filters:
            return self.round_trip("input")
        return max(self.round_trip("input"), self.round_trip("weights"))


def ceil_int64(values: Any) -> Table:
    """``ceil(values)`` as int64, forgiving float noise below 1e-9."""
    return np.ceil(np.asarray(values) - 1e-9).astype(np.int64)


def link_tables(machine: Machine) -> tuple[Table, Table]:
    """Cycles per byte x SCALE of one of ``active`` streaming clusters, indexed by
    ``active - 1``, plus C when the wave's clusters are in order (``stream_rates``): (its
    DMA port and the uplinks below the root, the root's uplink). A cluster gets the smallest
    of its DMA port and its fair share of each uplink above it (report Sec. 2.1.2), shared
    with the wave's clusters below that uplink: ``ceil(active x below / C)`` of them when the
    wave is spread over the tree (``Machine.wave_order``: Alg. 1/2), ``min(active, below)``
    when it fills the clusters in order (Alg. 3's aligned groups, Alg. 4/5, multicast
    rectangles). The root's uplink is the link to the HBM controller, which an L2 stream
    does not cross."""
    c = machine.clusters
    active = np.arange(1, c + 1, dtype=np.float64)
    trees, roots = [], []
    for spread in (True, False):
        tree = np.full(c, 1.0 / machine.dma_bytes_per_cycle)
        root = np.zeros(c)
        below = 1
        for depth, level in enumerate(machine.levels):
            below *= level.fanout
            busy = ceil_int64(active * below / c) if spread else np.minimum(active, below)
            share = busy / level.uplink_bytes_per_cycle
            if depth == len(machine.levels) - 1:
                root = share
            else:
                tree = np.maximum(tree, share)
        trees.append(tree)
        roots.append(root)
    return ceil_int64(np.concatenate(trees) * SCALE), ceil_int64(np.concatenate(roots) * SCALE)


def uplinks(machine: Machine) -> tuple[tuple[int, int], ...]:
    """Per level of the tree, bottom up: (clusters below one of its uplinks, the uplink's
    cycles per byte x SCALE)."""
    below = (*machine.share_group_sizes(), machine.clusters)
    return tuple(
        (n, int(ceil_int64(SCALE / level.uplink_bytes_per_cycle)))
        for n, level in zip(below, machine.levels, strict=True)
    )


def memory_share_table(clusters: int, bytes_per_cycle: float) -> Table:
    """Cycles per byte x SCALE of one of ``active`` clusters sharing a memory's bandwidth,
    indexed as ``link_tables`` (wherever the clusters sit, they share the memory)."""
    active = np.arange(1, clusters + 1, dtype=np.float64)
    return ceil_int64(np.tile(active, 2) / bytes_per_cycle * SCALE)


def group_tables(
    machine: Machine, tree: bool, root: bool, memory_bytes_per_cycle: float | None
) -> tuple[Table, Table]:
    """An Alg. 3 wave whose groups of ``g`` aligned slots have ``m < g`` members (fewer
    stacks than slots: the idle members load nothing) splits a rate table's terms in two
    (``StreamRates``): the DMA port and the uplinks of subtrees smaller than a group, which
    carry ``min(below, m)`` streams whatever the wave (``low``, indexed by the layout's rank
    among ``(g, m)`` with ``m`` in ``1 .. g - 1``, ``g`` in ``share_group_sizes``), and those of
    larger subtrees and the memory, which carry ``m / g`` of the wave's streams (``high``:
    with every member busy, indexed by ``g``'s rank x C + active - 1; the rate scales it by
    ``m / g``). ``tree``: the port and the links below the root; ``root``: the root's uplink;
    ``memory_bytes_per_cycle``: a memory's share (None: none)."""
    c = machine.clusters
    active = np.arange(1, c + 1, dtype=np.float64)
    sizes = machine.share_group_sizes()
    low, high = [], []
    for g in sizes:
        members = np.arange(1, g, dtype=np.float64)
        lo = np.full(g - 1, 1.0 / machine.dma_bytes_per_cycle if tree else 0.0)
        hi = np.zeros(c) if memory_bytes_per_cycle is None else active / memory_bytes_per_cycle
        below = 1
        for depth, level in enumerate(machine.levels):
            below *= level.fanout
            is_root = depth == len(machine.levels) - 1
            if not (root if is_root else tree):
                continue
            if below < g:
                lo = np.maximum(lo, np.minimum(members, below) / level.uplink_bytes_per_cycle)
            else:
                hi = np.maximum(hi, np.minimum(active, below) / level.uplink_bytes_per_cycle)
        low.append(lo)
        high.append(hi)
    if not sizes:
        return np.zeros(1, dtype=np.int64), np.zeros(c, dtype=np.int64)
    return ceil_int64(np.concatenate(low) * SCALE), ceil_int64(np.concatenate(high) * SCALE)


#: Per ``StreamRates.TABLES`` name: (the port and the links below the root, the root's
#: uplink, the memory whose share it includes: "hbm", "l2" or None)
RATE_TERMS: dict[str, tuple[bool, bool, str | None]] = {
    "hbm_path": (True, True, "hbm"),
    "net": (True, True, None),
    "hbm": (False, False, "hbm"),
    "l2_path": (True, False, "l2"),
    "tree": (True, False, None),
    "root": (False, True, None),
    "l2_share": (False, False, "l2"),
}


def group_rate_tables(machine: Machine, placement: Placement) -> dict[str, tuple[Table, Table]]:
    """``group_tables`` of every rate the placement's formula may read."""
    memories = {"hbm": machine.hbm_bytes_per_cycle, "l2": machine.l2_bytes_per_cycle}
    names = ["hbm_path", "net", "hbm", "tree"]
    if placement.uses_l2:
        names += ["l2_path", "root", "l2_share"]
    tables = {}
    for name in names:
        tree, root, memory = RATE_TERMS[name]
        rate = None if memory is None else memories[memory]
        tables[name] = group_tables(machine, tree, root, rate)
    return tables


def stream_tables(machine: Machine) -> tuple[Table, Table]:
    """Cycles per byte x SCALE of one of ``active`` clusters streaming from or to the HBM,
    indexed by ``active - 1``: (ports and links, HBM share). The path is the DMA port and
    every uplink up to the HBM controller (``link_tables``: ``ceil`` is monotone, so the
    larger of the two rounded tables is the rounded larger one)."""
    tree, root = link_tables(machine)
    return np.maximum(tree, root), memory_share_table(machine.clusters, machine.hbm_bytes_per_cycle)


def store_excess_table(path: Table, share: Table) -> Table:
    """Cycles per byte x SCALE by which one of ``active`` clusters storing is slower over its
    ``path`` (DMA port and the uplinks to the output's memory; an L2 store does not cross the
    root's) than at its ``share`` of that memory, both indexed as ``link_tables``: 0 where the
    memory is the bottleneck. Machines with DMA efficiency tables slow the memory's share by
    the runs' efficiency, which this leaves out (the excess is then an upper bound)."""
    excess: Table = np.maximum(path - share, 0)
    return excess


def reduction_tables(machine: Machine) -> tuple[list[Table], list[int], Table]:
    """The tree reduction of ``active`` private stacks (report Sec. 3.1.3), by ``active - 1``:
    per level its steps (log2 of the nodes it merges) and link bytes per cycle x SCALE, and
    the latency summed over levels."""
    c = machine.clusters
    steps, links, latency_sum = [], [], np.zeros(c, dtype=np.int64)
    nodes = np.arange(1, c + 1, dtype=np.int64)
    for level in machine.levels:
        width = np.minimum(level.fanout, nodes)
        level_steps = np.where(nodes > 1, np.ceil(np.log2(np.maximum(width, 1))), 0).astype(
            np.int64
        )
        steps.append(level_steps)
        links.append(
            int(round(min(machine.dma_bytes_per_cycle, level.uplink_bytes_per_cycle) * SCALE))
        )
        latency_sum += level_steps * level.latency_cycles
        nodes = -(-nodes // level.fanout)
    return steps, links, latency_sum


def inverse_rate(bytes_per_cycle: float) -> int:
    """Cycles per byte x SCALE, rounded up (0 for no rate)."""
    return int(np.ceil(SCALE / bytes_per_cycle - 1e-9)) if bytes_per_cycle else 0


def shared_cycles_per_byte_scaled(machine: Machine) -> int:
    """Multicast: cycles per byte x SCALE of the slowest shared resource (HBM or a link)."""
    slowest = min(
        [machine.hbm_bytes_per_cycle] + [lv.uplink_bytes_per_cycle for lv in machine.levels]
    )
    return inverse_rate(slowest)


def multicast_constants(machine: Machine, placement: Placement) -> dict[str, Any]:
    """Multicast with an L2 stream: cycles per byte x SCALE of the slowest resource a wave's
    distinct bytes cross at each level (none without: the formula is then built exactly as
    with the HBM alone). An L2 read crosses the links below the root and the L2; an HBM
    read the root's uplink and the HBM too; both share the links below the root."""
    if not (machine.dma_multicast and placement.uses_l2):
        return {}
    *below, root = machine.levels
    tree = [lv.uplink_bytes_per_cycle for lv in below]
    return {
        "l2_shared_cycles_per_byte_scaled": inverse_rate(min([machine.l2_bytes_per_cycle, *tree])),
        "root_shared_cycles_per_byte_scaled": inverse_rate(
            min(machine.hbm_bytes_per_cycle, root.uplink_bytes_per_cycle)
        ),
        "tree_shared_cycles_per_byte_scaled": inverse_rate(min(tree)) if tree else 0,
    }


def tree_cut_bytes_per_cycle(machine: Machine) -> float:
    """Bytes per cycle one direction of the tree carries between the clusters and the root
    at most: the narrowest level below the root, all its uplinks at once (Manticore: the two
    L3 quadrants' 128 B/cycle each; the L2 quadrants' 8 x 64 and the L1 quadrants' 32 x 64
    are wider). Every byte between the clusters and a memory at the root (the HBM, the L2)
    crosses it. 0 for a tree with no level below the root (MPPA3)."""
    *below, _root = machine.levels
    sizes = machine.share_group_sizes()
    cuts = [
        machine.clusters // n * level.uplink_bytes_per_cycle
        for n, level in zip(sizes, below, strict=True)
    ]
    return float(min(cuts)) if cuts else 0.0


def l2_constants(machine: Machine, placement: Placement, word_bytes: int) -> dict[str, Any]:
    """The L2's constants for a placement with an L2 stream (none without: the formula is
    then built exactly as with the HBM alone)."""
    if not placement.uses_l2:
        return {}
    tree, root = link_tables(machine)
    l2_share = memory_share_table(machine.clusters, machine.l2_bytes_per_cycle)
    return {
        "l2_latency_cycles": machine.l2_latency_cycles,
        "l2_bytes_per_cycle_scaled": int(round(machine.l2_bytes_per_cycle * SCALE)),
        "l2_word_energy": whole_pj(machine.energy_pj.get("l2_byte", 0.0) * word_bytes),
        "stream_l2_cycles_per_byte_scaled": np.maximum(tree, l2_share),
        "stream_root_cycles_per_byte_scaled": root,
        "stream_l2_share_cycles_per_byte_scaled": l2_share,
    }


def consts(
    layer: Layer,
    machine: Machine,
    precision: str,
    word_bytes: int,
    batch: int,
    placement: Placement = HBM_ONLY,
) -> Consts:
    """The constants the formula needs, all integers (rates in fixed point), with each
    stream at its memory level (``placement``). Raises ``ValueError`` for an L2 stream on a
    machine without an L2."""
    placement.check(machine)
    placement = placement.of_layer(layer.filter_words_per_output > 0, layer.epilogue.residual)
    net, hbm = stream_tables(machine)
    tree = link_tables(machine)[0]
    l2 = l2_constants(machine, placement, word_bytes)
    # the output's path and memory share: the HBM's, or the L2's (links below the root) and
    # no more than the tree's cut carries up
    cut = tree_cut_bytes_per_cycle(machine)
    store_path, store_share = net, hbm
    if placement.output == "l2":
        store_path, store_share = (
            tree,
            l2["stream_l2_share_cycles_per_byte_scaled"],
        )
        if cut:
            store_share = np.maximum(store_share, memory_share_table(machine.clusters, cut))
    steps, links, latency_sum = reduction_tables(machine)
    energy = machine.energy_pj
    return Consts(
        batch=batch,
        in_channels=layer.c_in,
        out_channels=layer.c_out,
        in_pixels=layer.h_in * layer.w_in,
        ops_per_output=layer.ops_per_output,
        filter_words_per_output=layer.filter_words_per_output,
        filter_pixels=filter_pixels(layer),
        weight_words=layer.weight_words,
        output_words=layer.output_words,
        word_bytes=word_bytes,
        clusters=machine.clusters,
        latency_cycles=machine.hbm_latency_cycles,
        dma_bytes_per_cycle=machine.dma_bytes_per_cycle,
        dma_setup_cycles=machine.dma_setup_cycles,
        bank_bytes=machine.l1_bank_bytes,
        l1_bytes=machine.l1_bytes,
        macs_per_cycle_scaled=int(
            round(machine.cluster_macs_per_cycle(precision) * machine.fpu_utilization * SCALE)
        ),
        hbm_bytes_per_cycle_scaled=int(round(machine.hbm_bytes_per_cycle * SCALE)),
        stream_cycles_per_byte_scaled=np.maximum(net, hbm),  # = ceil(max(...)): ceil is monotone
        reduction_latency_cycles=latency_sum,
        reduction_steps=tuple(steps),
        link_bytes_per_cycle_scaled=tuple(links),
        op_energy_fj=int(round(energy.get(f"mac_{precision}", 0.0) * 1000)),
        hbm_word_energy=whole_pj(energy.get("hbm_byte", 0.0) * word_bytes),
        noc_word_energy=whole_pj(energy.get("noc_byte", 0.0) * word_bytes),
        static_energy_per_cycle=whole_pj(energy.get(STATIC_ENERGY, 0.0)),
        has_dma_efficiency=bool(machine.dma_read_efficiency or machine.dma_write_efficiency),
        stream_net_cycles_per_byte_scaled=net,
        stream_hbm_cycles_per_byte_scaled=hbm,
        stream_tree_cycles_per_byte_scaled=tree,
        groups=layer.groups,
        can_multicast=machine.dma_multicast,
        port_cycles_per_byte_scaled=inverse_rate(machine.dma_bytes_per_cycle),
        uplinks=uplinks(machine),
        group_rates=group_rate_tables(machine, placement),
        ring_latencies=tuple(
            (n, level.latency_cycles)
            for n, level in zip(
                (*machine.share_group_sizes(), machine.clusters), machine.levels, strict=True
            )
        ),
        shared_cycles_per_byte_scaled=shared_cycles_per_byte_scaled(machine),
        has_residual=layer.epilogue.residual,
        epilogue_ops=layer.epilogue.ops,
        placement=placement,
        store_excess_cycles_per_byte_scaled=store_excess_table(store_path, store_share),
        # with every stream in HBM a cut as wide as the HBM never binds (its floor counts the
        # loads and the stores together): the formula is then built as before
        tree_cut_bytes_per_cycle_scaled=(
            int(round(cut * SCALE)) if placement.uses_l2 or cut < machine.hbm_bytes_per_cycle else 0
        ),
        prologue_pixels=layer.prologue_pixels,
        prologue_ops=layer.prologue_ops,
        expansion_pixels=layer.expansion_pixels,
        expansion_ops=layer.expansion_ops,
        **l2,
        **multicast_constants(machine, placement),
    )


# -- L1 footprint ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskTiles:
    """Words of the largest task's tiles, per kind of algorithm (report Sec. 2.1.2-3.2.2)."""

    conv_input: Value  # an input step: images x in_c slices x spatial tile (with halo)
    #: the step's band alone: ``conv_input`` less a fused depthwise's result (what Alg. 3
    #: forwards)
    conv_band: Value
    conv_output: Value  # the output stack of a spatial tile: channels x images x pixels
    fc_input: Value  # input_parallel: images x in_c whole input slices


def task_tiles(ops: Ops, q: Quantities, k: Consts) -> TaskTiles:
    """The tiles the largest task holds: the batch tile's images of the largest spatial tile
    (convolutions) or of whole slices (``input_parallel``), ``in_c`` input slices a step."""
    images, step = q.batch_tile_images_max, q.step_in_channels
    band = ops.mul(ops.mul(images, step), q.tile_in_pixels_max)
    conv_input = band
    if k.prologue_pixels:  # a fused depthwise's result, beside its band (``tiling``)
        conv_input = band + ops.mul(ops.mul(images, step), q.tile_out_pixels_max)
    return TaskTiles(
        conv_input=conv_input,
        conv_band=band,
        conv_output=ops.mul(ops.mul(q.stack_out_channels_max, images), q.tile_out_pixels_max),
        fc_input=ops.mul(images, step) * k.in_pixels,
    )


def buffer_tile_words(ops: Ops, q: Quantities, k: Consts, tiles: TaskTiles) -> dict[str, Value]:
    """Words of one tile of each L1 buffer (report Sec. 2.1.2, 2.2.2, 2.3.2, 3.1.2, 3.2.2).

    Convolutions buffer an input step, one filter slice per output channel and step (the
    report streams ``F[:, :, d_i, d_o]``) and the output stack; Alg. 3 adds a forwarding
    buffer of one input step (Sec. 2.3.2). ``input_parallel`` buffers an input step of whole
    slices, the step's filter words of one output channel and a private output stack per
    image (Sec. 3.1.2). A layer without weights has no filter tile; an epilogue's residual
    operand gets a tile of the output's size (read before the store). A fused depthwise's
    weights for the step (``in_c x k x k``) pass through a filter slot before the 1x1's
    slices do, so a slot holds them (``tiling.prologue_tile_words``). A fused 1x1 before a
    depthwise accumulates its result over the input band in the output slot, before the
    output tile, and its depthwise's weights of the stack pass through a filter slot
    (``tiling.expansion_tile_words``).
    """
    alg = q.algorithm
    conv_filter = q.step_filter_channels * k.filter_pixels
    if k.prologue_pixels:  # in_c x k x k >= the 1x1's min(in_c, cin) slices
        conv_filter = q.step_in_channels * k.prologue_pixels
    stored = ops.choose(
        alg,
        [
            tiles.conv_output,
            tiles.conv_output,
            ops.mul(q.stack_out_channels_max, q.batch_tile_images_max),
        ],
    )
    output = stored
    if k.expansion_pixels:  # a conv: never input_parallel, whose tile ``stored`` has too
        conv_filter = ops.max(conv_filter, q.stack_out_channels_max * k.expansion_pixels)
        output = stored + expanded_words(ops, q)
    return {
        "input": ops.choose(alg, [tiles.conv_input, tiles.conv_input, tiles.fc_input]),
        "filter": ops.choose(alg, [conv_filter, conv_filter, q.step_in_channels * k.in_pixels])
        if k.has_filters
        else 0,
        "output": output,
        "share": ops.choose(alg, [0, tiles.conv_band, 0]),
        "residual": stored if k.has_residual else 0,
    }


def expanded_words(ops: Ops, q: Quantities) -> Value:
    """Words of a fused 1x1's result in the largest task: its stack over its images' input
    band (``tiling.expansion_tile_words``)."""
    return ops.mul(ops.mul(q.stack_out_channels_max, q.batch_tile_images_max), q.tile_in_pixels_max)


def bank_aligned(ops: Ops, nbytes: Value, bank_bytes: int) -> Value:
    """``nbytes`` rounded up to the L1 bank width, so that a buffer starts on a bank word."""
    return ops.cdiv(nbytes, bank_bytes) * bank_bytes


@dataclass(frozen=True)
class L1Buffers:
    """Per operand (``OPERANDS``): tile words, bytes its tiles need, bytes allocated."""

    tile_words: dict[str, Value]
    need_bytes: dict[str, Value]
    alloc_bytes: dict[str, Value]
    l1_bytes: Value  # the sum of the allocations


def l1_buffers(
    ops: Ops,
    q: Quantities,
    k: Consts,
    tiles: TaskTiles,
    alloc_override: dict[str, int | None] | None,
) -> L1Buffers:
    """Each buffer is ``depth`` tiles (the forwarding buffer of Alg. 3 is single, Sec. 2.3.2:
    one input slice; the residual buffer is as deep as the output's) or the explicit bytes of
    ``alloc_override`` (as the report's fixed 16 KiB buffers), rounded up to the bank; the
    footprint is their sum. An operand the layer does not have (no weights, no residual)
    gets no buffer, whatever bytes were asked for it."""
    tile_words = buffer_tile_words(ops, q, k, tiles)
    depth = {
        "input": q.input_buffer_depth,
        "filter": q.filter_buffer_depth,
        "output": q.output_buffer_depth,
        "share": 1,
        "residual": q.output_buffer_depth,
    }
    absent = {"filter": not k.has_filters, "residual": not k.has_residual}
    need: dict[str, Value] = {}
    alloc: dict[str, Value] = {}
    for op in OPERANDS:
        given = None if alloc_override is None else alloc_override.get(op)
        need[op] = ops.mul(depth[op], tile_words[op]) * k.word_bytes
        if absent.get(op, False):
            alloc[op] = 0
        else:
            alloc[op] = bank_aligned(ops, need[op] if given is None else given, k.bank_bytes)
    # the search's deep filter buffer: the given bytes (legal where they hold its two tiles)
    if not (isinstance(q.filter_bytes_given, int) and q.filter_bytes_given == 0):
        if not absent["filter"]:
            alloc["filter"] = ops.max(alloc["filter"], q.filter_bytes_given)
    total = alloc["input"] + alloc["filter"] + alloc["output"] + alloc["share"]
    total = total + alloc["residual"]
    return L1Buffers(tile_words, need, alloc, total)


# -- what the largest task computes and moves --------------------------------------------------


@dataclass(frozen=True)
class TaskWork:
    """FPU operations and words of the largest task."""

    ops: Value  # FPU operations (MACs of a conv or fc, Layer.ops_per_output per output word)
    input_words: Value  # its whole input: every step's slices
    offchip_input_words: Value  # the part it loads itself (the rest its share group forwards)
    forwarded_words: Value  # Alg. 3: the part other members load and forward (Sec. 2.3)
    filter_words: Value
    store_words: Value  # 0 for input_parallel (its phase stores once, after the reduction)
    residual_words: Value  # the residual tile it reads before its store (0 without one)
    steps: Value  # input steps of a convolution task (1 for input_parallel)


def task_work(ops: Ops, q: Quantities, k: Consts, tiles: TaskTiles) -> TaskWork:
    """A convolution task computes an output stack of one spatial and batch tile over all the
    input slices its stack reads, ``in_c`` per step (Alg. 1-3): ``ops_per_output`` FPU
    operations per output word (for a layer without weights, its taps, adds or function
    instead of MACs), the epilogue included; an ``input_parallel`` task multiplies ``in_c``
    input slices into a private stack (Alg. 4/5; the epilogue is applied by the reduction's
    root, ``reduction_cycles``). In a share group of ``m`` tasks each loads ``1/m`` of the
    common input and forwards it (Sec. 2.3). A layer without weights loads no filters; one
    whose epilogue has a residual operand reads a tile of the output's size per task. A
    fused depthwise is computed by every task over its tile's outputs and every input
    channel its stack reads (recomputed by each stack of a tile), its weights loaded with
    each step. A fused 1x1 before a depthwise is computed by every task over its input band
    (halo included) for its stack's channels, and the depthwise's weights of the stack are
    loaded once."""
    alg, images = q.algorithm, q.batch_tile_images_max
    stack, step = q.stack_out_channels_max, q.step_in_channels
    conv_ops = tiles.conv_output * k.ops_per_output
    if k.prologue_pixels:
        result = ops.mul(ops.mul(images, q.tile_out_pixels_max), q.stack_in_channels_max)
        conv_ops = conv_ops + result * k.prologue_ops
    if k.expansion_ops:
        conv_ops = conv_ops + expanded_words(ops, q) * k.expansion_ops
    fc_macs = ops.mul(ops.mul(images, step), stack) * k.in_pixels
    task_ops = ops.choose(alg, [conv_ops, conv_ops, fc_macs])
    conv_input = ops.mul(ops.mul(images, q.stack_in_channels_max), q.tile_in_pixels_max)
    members = ops.choose(alg, [1, ops.min(q.share_group, q.stacks), 1])
    input_words = ops.choose(alg, [conv_input, conv_input, tiles.fc_input])
    offchip = ops.choose(alg, [input_words, ops.cdiv(input_words, members), input_words])
    conv_filter = stack * k.filter_words_per_output
    if k.prologue_pixels:
        conv_filter = conv_filter + q.stack_in_channels_max * k.prologue_pixels
    if k.expansion_pixels:
        conv_filter = conv_filter + stack * k.expansion_pixels
    filter_words = (
        ops.choose(alg, [conv_filter, conv_filter, ops.mul(stack, step) * k.in_pixels])
        if k.has_filters
        else 0
    )
    store_words = ops.choose(alg, [tiles.conv_output, tiles.conv_output, 0])
    residual_words = store_words if k.has_residual else 0
    steps = ops.choose(
        alg,
        [
            ops.cdiv(q.stack_in_channels_max, step),
            ops.cdiv(q.stack_in_channels_max, step),
            1,
        ],
    )
    return TaskWork(
        task_ops,
        input_words,
        offchip,
        input_words - offchip,
        filter_words,
        store_words,
        residual_words,
        steps,
    )


# -- tasks and waves ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MulticastWave:
    """A multicast wave: a rectangle of ``tiles`` x ``stacks`` tasks (module docstring)."""

    stacks: Value  # b = min(stacks, C)
    tiles: Value  # a' = min(a, tiles): tiles in a wave, a = floor(C / b)
    tile_chunks: Value  # ceil(T / a): waves along the tiles
    stack_chunks: Value  # ceil(stacks / b): waves along the stacks


def multicast_wave(ops: Ops, q: Quantities, k: Consts, tiles: Value) -> MulticastWave:
    """The wave rectangle of ``tiling`` (``b = min(stacks, C)``, ``a = floor(C / b)``) over
    ``tiles`` spatial/batch tiles."""
    stacks = ops.min(q.stacks, k.clusters)
    per_wave = ops.lookup(
        stacks - 1,
        np.asarray([k.clusters // b for b in range(1, k.clusters + 1)], dtype=np.int64),
    )
    tile_chunks, stack_chunks = ops.cdiv(tiles, per_wave), ops.cdiv(q.stacks, stacks)
    return MulticastWave(stacks, ops.min(per_wave, tiles), tile_chunks, stack_chunks)


@dataclass(frozen=True)
class Schedule:
    """Where the tasks run: per phase ``slots`` cluster slots in ``waves`` waves of C."""

    tiles: Value  # spatial/batch tiles: batch tiles x spatial tiles
    share_groups: Value  # share groups per tile (Alg. 3): ceil(stacks / share_group)
    slots: Value  # cluster slots per phase (idle slots of share groups and waves included)
    waves: Value  # per phase
    active: Value  # clusters busy in a full wave: min(slots, C), or a multicast rectangle
    last: Value  # slots of the last wave: slots - (waves - 1) x C
    phases: Value
    wave: MulticastWave | None  # the multicast rectangle (machines that multicast)


def schedule(ops: Ops, q: Quantities, k: Consts) -> Schedule:
    """Task ``t`` runs on cluster ``slot(t) mod C`` in wave ``slot(t) // C`` (``tiling.TaskGrid``):
    one slot per task, share groups take ``share_group`` aligned slots, multicast waves are
    rectangles; ``input_parallel`` runs one phase per (batch tile, stack), one task per input
    step (Alg. 5's outer loop)."""
    alg = q.algorithm
    tiles = ops.mul(q.batch_tiles, q.spatial_tiles)
    groups = ops.cdiv(q.stacks, q.share_group)
    slots = ops.choose(
        alg,
        [
            ops.mul(tiles, q.stacks),
            ops.mul(tiles, ops.mul(groups, q.share_group)),
            q.in_steps,
        ],
    )
    wave = None
    if k.can_multicast:  # multicast = 0 outside output_stack
        wave = multicast_wave(ops, q, k, tiles)
        wave_slots = ops.mul(ops.mul(wave.tile_chunks, wave.stack_chunks), k.clusters)
        slots = ops.choose(q.multicast, [slots, wave_slots])
    waves = ops.cdiv(slots, k.clusters)
    active = ops.min(slots, k.clusters)
    if wave is not None:
        active = ops.choose(q.multicast, [active, ops.mul(wave.tiles, wave.stacks)])
    phases = ops.choose(alg, [1, 1, ops.mul(q.batch_tiles, q.stacks)])
    last = slots - ops.mul(waves - 1, k.clusters)
    return Schedule(tiles, groups, slots, waves, active, last, phases, wave)


# -- DMA and compute time ----------------------------------------------------------------------


def exceeds(ops: Ops, a: Value, b: Value) -> Value:
    """1 when the integer ``a`` is larger than ``b``, else 0."""
    return ops.min(1, ops.max(0, a - b))


class StreamRates:
    """Cycles per byte x SCALE of one of the ``active`` streaming clusters over each path or
    resource (``Consts``' tables: ``hbm_path`` = ports, links and HBM share, no efficiency
    tables; ``net`` = ports and links to the HBM; ``hbm`` = HBM share; ``l2_path``, ``tree``,
    ``root``, ``l2_share`` with an L2 stream); ``multicast`` is the mapping's flag. A table is
    looked up when the formula first reads it, so the integer program holds the element
    constraints of the rates the layer's streams use and no others."""

    TABLES = {
        "hbm_path": "stream_cycles_per_byte_scaled",
        "net": "stream_net_cycles_per_byte_scaled",
        "hbm": "stream_hbm_cycles_per_byte_scaled",
        "l2_path": "stream_l2_cycles_per_byte_scaled",
        "tree": "stream_tree_cycles_per_byte_scaled",
        "root": "stream_root_cycles_per_byte_scaled",
        "l2_share": "stream_l2_share_cycles_per_byte_scaled",
    }

    def __init__(
        self,
        ops: Ops,
        k: Consts,
        active: Value,
        multicast: Value,
        contiguous: Value = 1,
        group: tuple[Value, Value, Value] | None = None,
    ) -> None:
        self.ops, self.k, self.multicast = ops, k, multicast
        self.index = active - 1 + ops.mul(contiguous, k.clusters)  # ``link_tables``' index
        self.active = active
        self.group = group  # (0/1: groups with idle members, g, m), ``idle_members``
        self._group_keys: tuple[Value, Value, Value, list[int]] | None = None
        self.looked_up: dict[str, Value] = {}

    def __getitem__(self, name: str) -> Value:
        """The rate over ``name`` (a key of ``TABLES``)."""
        if name not in self.looked_up:
            table = getattr(self.k, self.TABLES[name])
            assert table is not None, f"Consts has no {self.TABLES[name]}"
            rate = self.ops.lookup(self.index, table)
            if self.group is not None and name in self.k.group_rates:
                rate = self.ops.choose(self.group[0], [rate, self._grouped(name)])
            self.looked_up[name] = rate
        return self.looked_up[name]

    def _grouped(self, name: str) -> Value:
        """The rate of a wave of Alg. 3 groups of ``g`` slots with ``m < g`` members
        (``group_tables``): the larger of the terms that see ``min(below, m)`` streams and
        ``m / g`` of the terms that see the whole wave."""
        ops = self.ops
        _, g, m = self.group  # type: ignore[misc]
        if self._group_keys is None:  # once for every rate the formula reads
            sizes = [below for below, _ in self.k.uplinks[:-1]]
            rank: Value = 0  # g's rank among the group sizes
            base: Value = 0  # layouts of the smaller sizes before g's
            for size in sizes:
                base = base + (size - 1) * exceeds(ops, g, size)
            for size in sizes[:-1]:
                rank = rank + exceeds(ops, g, size)
            key = base + ops.max(ops.min(m, g - 1), 1) - 1
            wave_key = ops.mul(rank, self.k.clusters) + self.active - 1
            self._group_keys = (key, rank, wave_key, sizes)
        key, rank, wave_key, sizes = self._group_keys
        low, high = self.k.group_rates[name]
        wave = ops.mul(m, ops.lookup(wave_key, high))
        # divided by g: by each size, a constant, and chosen by g's rank (cheaper for CP-SAT)
        scaled = ops.choose(rank, [ops.cdiv(wave, size) for size in sizes])
        return ops.max(ops.lookup(key, low), scaled)


def in_order(ops: Ops, q: Quantities, k: Consts, sched: Schedule) -> Value:
    """1 when a wave's clusters are in order, 0 when spread over the tree (the link tables'
    halves): an ``output_stack`` layer's only wave is spread (``Machine.wave_order``) unless it
    multicasts; every other wave is in order (``tiling.task_clusters``). A full wave is the
    same either way."""
    multicast = q.multicast if k.can_multicast else 0
    several = ops.min(1, sched.waves - 1)
    return ops.choose(q.algorithm, [ops.max(multicast, several), 1, 1])


def stream_rates(
    ops: Ops,
    q: Quantities,
    k: Consts,
    sched: Schedule,
    clusters: Value | None = None,
    groups: bool = True,
    largest_first: Value = 1,
) -> StreamRates:
    """The streaming rates of ``sched.active`` clusters (report Sec. 2.1.2), or of the
    ``clusters`` of them that stream at some time, in the order ``in_order`` gives (a layer
    of several waves has ``active = C``). ``groups=False`` leaves out Alg. 3's groups with
    idle members (``idle_members``) for terms only Alg. 1 reads (its followers' tiles),
    which spares the integer program their terms for every candidate. ``largest_first`` 0:
    the ``clusters`` are not the first slots of a wave in order (``TaskSpread``): they are
    taken as a spread wave's."""
    order = in_order(ops, q, k, sched)
    if not (isinstance(largest_first, int) and largest_first == 1):
        order = ops.mul(order, largest_first)
    return StreamRates(
        ops,
        k,
        sched.active if clusters is None else clusters,
        q.multicast,
        order,
        idle_members(ops, q, k) if groups else None,
    )


def idle_members(ops: Ops, q: Quantities, k: Consts) -> tuple[Value, Value, Value] | None:
    """(1 when an Alg. 3 layer has fewer stacks ``m`` than its group's ``g`` slots, g, m):
    each tile's stacks take the first ``m`` of ``g`` aligned slots and the rest idle
    (``tiling``), so its streams share the links above a group and the memory with ``m / g``
    of the wave's slots (``group_tables``). With more stacks than ``g``, only a tile's last
    group has idle members: the wave counts every slot busy (its first groups are full).
    None on a machine without share groups."""
    if not k.group_rates or not k.uplinks[:-1]:
        return None
    g = q.share_group
    partial = ops.choose(q.algorithm, [0, exceeds(ops, g, q.stacks), 0])
    return partial, g, ops.min(q.stacks, g)


@dataclass(frozen=True)
class Stream:
    """Bytes one cluster moves from or to each memory level (None: nothing at that level),
    with what they cost elsewhere: HBM occupancy (HBM bytes x inverse efficiency; machines
    with DMA efficiency tables) and the distinct bytes of the whole wave at each level
    (machines that multicast)."""

    hbm_bytes: Value = None  # from or to the HBM
    occupied: Value = None
    wave_bytes: Value = None  # the wave's distinct HBM bytes
    l2_bytes: Value = None  # from or to the L2
    l2_wave_bytes: Value = None  # the wave's distinct L2 bytes

    @property
    def payload(self) -> Value:
        """Every byte through the cluster's DMA port, whatever its level."""
        if self.l2_bytes is None:
            return self.hbm_bytes
        return self.l2_bytes if self.hbm_bytes is None else self.hbm_bytes + self.l2_bytes


def hbm_stream_cycles(ops: Ops, k: Consts, rates: StreamRates, stream: Stream) -> Value:
    """Cycles to move ``stream.hbm_bytes`` from or to the HBM at this cluster's share.

    ``occupied``: HBM bytes x SCALE the transfer takes, ``bytes x`` the inverse DMA efficiency
    of its runs (seed 004 Table II). Only the HBM's term of the share is slowed by it; ports
    and links carry payload. Without efficiency tables the inverse efficiency is ``SCALE`` and
    this is ``hbm_bytes x rate`` exactly, so it is not built at all.
    """
    if not k.has_dma_efficiency:
        return ops.cdiv(ops.mul(stream.hbm_bytes, rates["hbm_path"]), SCALE)
    return ops.max(
        ops.cdiv(ops.mul(stream.hbm_bytes, rates["net"]), SCALE),
        ops.cdiv(ops.mul(stream.occupied, rates["hbm"]), SCALE * SCALE),
    )


def resource_cycles(
    ops: Ops, k: Consts, rates: StreamRates, links: Stream, hbm: Stream, l2: Stream
) -> Value:
    """Cycles of a transfer at its busiest resource, at this cluster's share of each: the
    port and the links below the root carrying ``links``' bytes (the HBM's also cross the
    root's uplink), the HBM ``hbm``'s (its occupancy, with efficiency tables) and the L2
    ``l2``'s. One stream for all three but in ``wave_stream_cycles``."""
    l2_share = None
    if links.l2_bytes is not None:
        l2_share = ops.cdiv(ops.mul(l2.l2_bytes, rates["l2_share"]), SCALE)
        if links.hbm_bytes is None:
            return ops.max(ops.cdiv(ops.mul(links.l2_bytes, rates["tree"]), SCALE), l2_share)
    hbm_share = (
        ops.cdiv(ops.mul(hbm.occupied, rates["hbm"]), SCALE * SCALE)
        if k.has_dma_efficiency
        else ops.cdiv(ops.mul(hbm.hbm_bytes, rates["hbm"]), SCALE)
    )
    if l2_share is None:  # ports and links to the HBM
        return ops.max(ops.cdiv(ops.mul(links.hbm_bytes, rates["net"]), SCALE), hbm_share)
    return ops.max(
        ops.cdiv(ops.mul(links.payload, rates["tree"]), SCALE),
        ops.cdiv(ops.mul(links.hbm_bytes, rates["root"]), SCALE),
        hbm_share,
        l2_share,
    )


def mixed_stream_cycles(ops: Ops, k: Consts, rates: StreamRates, stream: Stream) -> Value:
    """Cycles of a transfer with bytes at both levels: its busiest resource, each resource
    carrying the bytes that cross it (the port and the links below the root all of them,
    the root's uplink and the HBM the HBM's, the L2 the L2's)."""
    return resource_cycles(ops, k, rates, stream, stream, stream)


def wave_stream_cycles(
    ops: Ops, k: Consts, rates: StreamRates, largest: Stream, mean: Stream
) -> Value:
    """``stream_cycles`` of the largest task's ``largest`` among a wave's tasks whose mean
    one moves ``mean`` (edge tiles' bands lack the padding's rows, a last chunk is short).
    A link carries one direction: fairly shared, it ends the largest task's stream last,
    when it has carried every task's (what a smaller one no longer takes goes to the streams
    still loading), so the mean's bytes set its share (``task_spread``'s law; RegNetY's
    grouped 3 x 3 ``block3-0/b.0`` in 5-row tiles of a 14-row map: 1.074 of the simulator
    at the largest's). A memory serves reads and writes together: where the layer's output
    goes to the same memory, a smaller task ending first stores there what it no longer
    loads, and the largest one's stream keeps its share (MobileNetV2's ``features.4.conv.1.0``
    in 10-row tiles, from and to the HBM: its stores take 85 of the HBM's 256 B/cycle as soon
    as the short tiles end). A multicast wave reads its tiles once for all: the largest's."""
    if k.can_multicast:
        return stream_cycles(ops, k, rates, largest)
    out = k.level("output")
    hbm = largest if out == "hbm" else mean
    l2 = largest if out == "l2" else mean
    return resource_cycles(ops, k, rates, mean, hbm, l2)


def plain_stream_cycles(ops: Ops, k: Consts, rates: StreamRates, stream: Stream) -> Value:
    """Cycles to move ``stream`` at this cluster's share of the bandwidth of the resources it
    crosses: an HBM stream's path and the HBM, an L2 stream's (the links below the root and
    the L2, efficiency 1), or, for both at once, its busiest resource."""
    if stream.l2_bytes is None:
        return hbm_stream_cycles(ops, k, rates, stream)
    if stream.hbm_bytes is None:
        return ops.cdiv(ops.mul(stream.l2_bytes, rates["l2_path"]), SCALE)
    return mixed_stream_cycles(ops, k, rates, stream)


def spread_load_cycles(
    ops: Ops,
    k: Consts,
    nbytes: Value,
    shared_bytes: Value,
    level: MemoryLevel,
    loaders: Value,
    per_group: Value,
    spacing: Value,
    clusters: Value,
    each_bytes: Value,
    members: Value | None = None,
) -> Value:
    """Cycles of one of ``loaders`` clusters loading ``nbytes`` from ``level``
    while the others between them load no input: the first ``per_group`` of every aligned
    ``spacing`` clusters (Alg. 3's members that load an input step), ``shared_bytes`` each on
    average. Its DMA port; each uplink above it at the share of the loaders below that uplink
    (``min(below, per_group)`` under a link with fewer clusters below than a group, ``below x
    per_group / spacing`` under a larger one); the memory's share of all loaders. Shared
    fairly, a link or memory that is the bottleneck finishes the largest load only when it has
    carried all of them: their average sets the shared terms. An L2 load does not cross the
    root's uplink.

    The group starts together, so the rest of it takes its first tiles meanwhile too, over
    the same links: each of the ``clusters`` active ones its ``each_bytes`` (a filter tile),
    and a subtree that holds the loaders and members that do not load, but not the whole
    group, takes a step from the ring of the next subtree. With ``members`` (busy slots of
    every ``spacing``; default all) the idle slots of a group load no filter tile: under a link
    of fewer clusters than a group, ``min(below, members)`` of them do; under a larger one,
    ``members / spacing`` of its clusters."""
    terms = [ops.cdiv(nbytes * k.port_cycles_per_byte_scaled, SCALE)]
    for depth, (below, per_byte) in enumerate(k.uplinks):
        if level == "l2" and depth == len(k.uplinks) - 1:
            continue
        groups = ops.cdiv(per_group * below, spacing)
        sharing = ops.min(ops.max(groups, ops.min(per_group, below)), loaders)
        ring = ops.mul(exceeds(ops, below, per_group), exceeds(ops, spacing, below))
        under = ops.min(clusters, below)
        if members is not None:
            small = exceeds(ops, spacing, below)  # a link below the group's size
            under = ops.mul(small, ops.min(under, members)) + ops.mul(
                1 - small, ops.cdiv(ops.mul(under, members), spacing)
            )
        carried = ops.mul(shared_bytes, sharing + ring) + ops.mul(under, each_bytes)
        terms.append(ops.cdiv(carried * per_byte, SCALE))
    share = StreamRates(ops, k, loaders, 0)  # the memory's share of ``loaders`` streams
    memory = share["hbm"] if level == "hbm" else share["l2_share"]
    terms.append(ops.cdiv(ops.mul(shared_bytes, memory), SCALE))
    return ops.max(*terms)


def multicast_stream_cycles(ops: Ops, k: Consts, stream: Stream) -> Value:
    """A multicast wave's transfer: every byte of the cluster's own through its DMA port, the
    wave's distinct bytes over the shared resources they cross (charged as payload: no
    preset both multicasts and has DMA efficiency tables). All in HBM: the slowest of the
    HBM and the links. With L2 bytes: the L2's over the L2 and the links below the root, the
    HBM's over the HBM and the root's uplink, both over the links below the root."""
    if stream.l2_bytes is None:
        return ops.max(
            ops.cdiv(stream.hbm_bytes * k.port_cycles_per_byte_scaled, SCALE),
            ops.cdiv(stream.wave_bytes * k.shared_cycles_per_byte_scaled, SCALE),
        )
    terms = [
        ops.cdiv(stream.payload * k.port_cycles_per_byte_scaled, SCALE),
        ops.cdiv(stream.l2_wave_bytes * k.l2_shared_cycles_per_byte_scaled, SCALE),
    ]
    if stream.hbm_bytes is not None:
        terms.append(ops.cdiv(stream.wave_bytes * k.root_shared_cycles_per_byte_scaled, SCALE))
        if k.tree_shared_cycles_per_byte_scaled:
            both = stream.wave_bytes + stream.l2_wave_bytes
            terms.append(ops.cdiv(both * k.tree_shared_cycles_per_byte_scaled, SCALE))
    return ops.max(*terms)


def stream_cycles(ops: Ops, k: Consts, rates: StreamRates, stream: Stream) -> Value:
    """As ``plain_stream_cycles``; with multicast, ``multicast_stream_cycles``."""
    if not k.can_multicast:
        return plain_stream_cycles(ops, k, rates, stream)
    shared = multicast_stream_cycles(ops, k, stream)
    return ops.choose(rates.multicast, [plain_stream_cycles(ops, k, rates, stream), shared])


def shared_cycles(ops: Ops, k: Consts, rates: StreamRates, stream: Stream) -> list[Value]:
    """One cluster's ``stream`` on each resource its loads and its stores both cross: its DMA
    port (the read and write engines "share one master port", report Sec. 1), its share of
    the HBM and of the L2, which serve reads and writes together (0 where it moves nothing)."""
    port = ops.cdiv(ops.mul(stream.payload, k.port_cycles_per_byte_scaled), SCALE)
    hbm: Value = 0
    if stream.hbm_bytes is not None:
        if k.has_dma_efficiency:
            hbm = ops.cdiv(ops.mul(stream.occupied, rates["hbm"]), SCALE * SCALE)
        else:
            hbm = ops.cdiv(ops.mul(stream.hbm_bytes, rates["hbm"]), SCALE)
    l2: Value = 0
    if stream.l2_bytes is not None:
        l2 = ops.cdiv(ops.mul(stream.l2_bytes, rates["l2_share"]), SCALE)
    return [port, hbm, l2]


@dataclass(frozen=True)
class Stores:
    """A cluster's stores going up (``two_way_cycles``): their time alone on their path, on
    each resource loads cross too (``shared_cycles``), and the loads' time beside them."""

    alone: Value
    shared: list[Value]
    beside: Callable[..., Value]


def two_way_cycles(ops: Ops, k: Consts, rates: StreamRates, up: Stream) -> Stores:
    """Cycles of one cluster's loads (``Stores.beside``'s ``down``) beside its stores
    ``up``, whose own times are built once for every set of loads asked about. The tree's
    links carry each direction on wires of their own, so each direction alone takes its
    share of them (``stream_cycles``); what both cross is the cluster's DMA port and each
    memory (``shared_cycles``): the HBM's share and the L2's share of the bytes of both.
    With every cluster streaming, the HBM's share is the path's (the root's uplink is as
    wide as the HBM), so an HBM-only burst costs the sum of its bytes as before; an L2 one
    (the L2 is faster than a direction of the tree) costs the slower direction. A multicast
    wave's distinct bytes are costed together as before.

    ``head``: cycles the stores have already been moving up when the loads start. They take
    that much less of their own direction. A shared resource serves whatever waits for it
    (work conserving): since the stores left, it carried them beside what was left of the
    loads that started ``since`` cycles before them (``ahead``: their ``shared_cycles``), so
    that much of the stores' time on it is done too. ``down_rates``: the loads' rates where
    fewer clusters load than store (by default ``rates``, as the stores'): a memory carries
    each set at its own share. ``extra``: more loads of this cluster at rates of their own
    (fewer clusters load them), carried beside the others on every resource they cross."""
    up_alone = stream_cycles(ops, k, rates, up)
    up_shared = shared_cycles(ops, k, rates, up)

    def beside(
        down: Stream,
        head: Value = 0,
        ahead: list[Value] | None = None,
        since: Value = 0,
        down_rates: StreamRates | None = None,
        extra: tuple[Stream, StreamRates] | None = None,
    ) -> Value:
        both = plus(down, up)
        own = up_alone
        done: list[Value] = [0, 0, 0]
        if not (isinstance(head, int) and head == 0):
            own = ops.max(0, up_alone - head)
            done = [
                ops.min(u, ops.max(0, head - ops.max(0, a - since)))
                for u, a in zip(up_shared, ahead or [0, 0, 0], strict=True)
            ]
        if down_rates is None:
            both_shared = shared_cycles(ops, k, rates, both)
            down_alone = stream_cycles(ops, k, rates, down)
        else:  # loads of fewer clusters than the stores' (a partial last wave)
            down_shared = shared_cycles(ops, k, down_rates, down)
            both_shared = [u + d for u, d in zip(up_shared, down_shared, strict=True)]
            down_alone = stream_cycles(ops, k, down_rates, down)
        if extra is not None:  # (each resource's terms summed: no faster than that)
            more, more_rates = extra
            both = plus(both, more)
            more_shared = shared_cycles(ops, k, more_rates, more)
            both_shared = [b + m for b, m in zip(both_shared, more_shared, strict=True)]
            down_alone = down_alone + stream_cycles(ops, k, more_rates, more)
        present = [True, both.hbm_bytes is not None, both.l2_bytes is not None]
        terms = [down_alone, own] + [
            t - d for t, d, used in zip(both_shared, done, present, strict=True) if used
        ]
        apart = ops.max(*terms)
        if not k.can_multicast:
            return apart
        return ops.choose(rates.multicast, [apart, stream_cycles(ops, k, rates, both)])

    return Stores(up_alone, up_shared, beside)


def operand_stream(
    ops: Ops, k: Consts, stream: str, nbytes: Value, inverse_efficiency: Value, wave: Value
) -> Stream:
    """``nbytes`` of one of the layer's streams (``stream``: ``ir.placement.STREAMS``) at its
    memory level; from or to the HBM with its occupancy (efficiency tables) and, multicast,
    ``wave`` times as many distinct bytes in the wave (None: no multicast)."""
    if k.level(stream) == "l2":
        return Stream(
            l2_bytes=nbytes, l2_wave_bytes=None if wave is None else ops.mul(nbytes, wave)
        )
    occupied = ops.mul(nbytes, inverse_efficiency) if k.has_dma_efficiency else None
    wave_bytes = None if wave is None else ops.mul(nbytes, wave)
    return Stream(nbytes, occupied, wave_bytes)


def operand_streams(
    ops: Ops, q: Quantities, k: Consts, sched: Schedule, in_bytes: Value, filter_bytes: Value
) -> tuple[Stream, Stream | None]:
    """``in_bytes`` of input and ``filter_bytes`` of filters one cluster loads, as streams
    (None: a layer without filters). A multicast wave reads the inputs of its tiles (x its
    stacks when groups > 1: they read different slices) and the filters of its stacks."""
    input_wave = filter_wave = None
    if sched.wave is not None:
        wave = sched.wave
        input_wave = wave.tiles if k.groups == 1 else ops.mul(wave.tiles, wave.stacks)
        filter_wave = wave.stacks
    inputs = operand_stream(ops, k, "input", in_bytes, q.input_inverse_efficiency, input_wave)
    if not k.has_filters:
        return inputs, None
    filters = operand_stream(
        ops, k, "weights", filter_bytes, q.filter_inverse_efficiency, filter_wave
    )
    return inputs, filters


def buffered(
    ops: Ops, q: Quantities, operands: tuple[Stream, Stream | None], double: bool
) -> Stream:
    """The double-buffered (``double``) or single-buffered part of ``operand_streams``: the
    depths are 1 or 2, so ``depth - 1`` and ``2 - depth`` are 0/1 flags."""
    inputs, filters = operands
    part = scaled(ops, q.input_buffer_depth - 1 if double else 2 - q.input_buffer_depth, inputs)
    if filters is None:
        return part
    depth = q.filter_buffer_depth - 1 if double else 2 - q.filter_buffer_depth
    return plus(part, scaled(ops, depth, filters))


def split_streams(
    ops: Ops, q: Quantities, k: Consts, sched: Schedule, in_bytes: Value, filter_bytes: Value
) -> tuple[Stream, Stream]:
    """``operand_streams`` as (double-buffered, single-buffered) streams."""
    operands = operand_streams(ops, q, k, sched, in_bytes, filter_bytes)
    return buffered(ops, q, operands, True), buffered(ops, q, operands, False)


@dataclass(frozen=True)
class Loads:
    """The largest task's loads: ``first`` is the first input tile and the first filter tile
    of its double-buffered streams (nothing is computing yet, so nothing hides them: the
    pipeline's prologue), ``rest`` the rest of the double-buffered streams (they overlap
    compute) and ``single`` the single-buffered streams (serialised with compute)."""

    first: Stream
    rest: Stream
    single: Stream
    rest_input_bytes: Value  # double-buffered input bytes after the first tile
    rest_filter_bytes: Value
    opening: Stream  # the first tile of every stream, double- or single-buffered
    lead_opening: Stream  # the same for the member that loads the first input step itself
    lead_in_bytes: Value  # that member's first input step
    lead_first: Stream  # its double-buffered first tiles (``first`` for that member)
    single_rest: Stream  # the single-buffered loads after each stream's first tile
    #: ``rest`` of the wave's mean task: a link the wave's streams share carries every
    #: task's before the largest one's ends (``wave_stream_cycles``)
    mean_rest: Stream
    #: ``first`` of the wave's mean task: the same law for the first tiles, which every
    #: task of the first wave loads at once
    mean_first: Stream


STREAM_FIELDS = tuple(f.name for f in fields(Stream))


def fieldwise(f: Callable[[Value, Value], Value], a: Stream, b: Stream) -> Stream:
    """``f`` over the matching byte counts of two streams (None: the stream has none)."""
    return Stream(*(f(getattr(a, name), getattr(b, name)) for name in STREAM_FIELDS))


def mapped(f: Callable[[Value], Value], a: Stream) -> Stream:
    """``f`` over the byte counts a stream has (None stays None)."""
    return Stream(*(None if (x := getattr(a, name)) is None else f(x) for name in STREAM_FIELDS))


def minus(ops: Ops, a: Stream, b: Stream) -> Stream:
    """The part of stream ``a`` that is not ``b`` (``b`` is a prefix of ``a``: same levels)."""
    return fieldwise(lambda x, y: None if x is None else x - y, a, b)


def without(ops: Ops, a: Stream, b: Stream) -> Stream:
    """Stream ``a`` less ``b``'s bytes where both have them (none below 0): ``b`` need not be
    a prefix of ``a``, as ``minus`` needs."""
    return fieldwise(lambda x, y: x if x is None or y is None else ops.max(0, x - y), a, b)


def plus(a: Stream, b: Stream) -> Stream:
    """Streams ``a`` and ``b`` at once: they share the cluster's bandwidth."""
    return fieldwise(lambda x, y: y if x is None else x if y is None else x + y, a, b)


def scaled(ops: Ops, flag: Value, a: Stream) -> Stream:
    """Stream ``a`` if the 0/1 ``flag`` is set, else nothing."""
    return mapped(lambda x: ops.mul(flag, x), a)


def fraction(ops: Ops, share: Value, a: Stream) -> Stream:
    """``share / SCALE`` of stream ``a`` (rounded up)."""
    return mapped(lambda x: ops.cdiv(ops.mul(share, x), SCALE), a)


def first_filter_words(q: Quantities, k: Consts, l1: L1Buffers) -> Value:
    """Words of a task's first filter tile: a filter slot's (``buffer_tile_words``); for a
    fused 1x1 before a depthwise, the 1x1's slice of one output channel, which its first step
    needs: the depthwise's weights of the stack, which the slot is sized for, are needed
    only after the last step (``tiling.expansion_tile_words``; the simulator loads them
    then)."""
    if k.expansion_pixels:
        return q.step_filter_channels * k.filter_pixels
    return l1.tile_words["filter"]


def loaded_step_words(ops: Ops, q: Quantities, k: Consts, l1: L1Buffers) -> Value:
    """Words of an input step the largest task loads: its buffer tile, less the fused
    depthwise's result the slot holds beside the band it loads (``task_tiles``)."""
    if not k.prologue_pixels:
        return l1.tile_words["input"]
    return ops.mul(ops.mul(q.batch_tile_images_max, q.step_in_channels), q.tile_in_pixels_max)


def load_streams(
    ops: Ops, q: Quantities, k: Consts, l1: L1Buffers, work: TaskWork, sched: Schedule
) -> Loads:
    """The largest task's input and filter loads, split as ``Loads`` says. The first tiles
    are one buffer tile of each operand (an input step, whose band alone is loaded beside a
    fused depthwise's result: ``loaded_step_words``; one filter slice per output channel;
    ``input_parallel``: the input batch and one output channel's filter tile), no more than
    the task loads itself from main memory (a share-group member loads ``1/m`` of the
    input)."""
    w = k.word_bytes
    in_bytes, filter_bytes = work.offchip_input_words * w, work.filter_words * w
    step_bytes = loaded_step_words(ops, q, k, l1) * w
    first_in = ops.min(step_bytes, in_bytes)
    first_filter = ops.min(first_filter_words(q, k, l1) * w, filter_bytes)
    # Alg. 3's first member loads the whole first input step itself, even when its group
    # has more members than steps (slice d goes to member d mod m).
    lead_in = ops.min(step_bytes, work.input_words * w)
    # A single input buffer of Alg. 3 loads from memory, after compute, only the steps after
    # its first (which the group's prologue loads, ``dma_cycles``); the rest come round the ring.
    # (A double buffer's stream is all of its input: the term is 0 for it.)
    lead_flag = ops.choose(q.algorithm, [0, 1, 0])
    opened = ops.mul(2 - q.input_buffer_depth, ops.mul(lead_flag, ops.min(in_bytes, lead_in)))
    double, single = split_streams(ops, q, k, sched, in_bytes - opened, filter_bytes)
    first, first_single = split_streams(ops, q, k, sched, first_in, first_filter)
    lead, lead_single = split_streams(ops, q, k, sched, lead_in, first_filter)
    after_first = operand_streams(
        ops, q, k, sched, in_bytes - first_in, filter_bytes - first_filter
    )
    single_rest = buffered(ops, q, after_first, False)
    # The wave's mean task: its input by the tiles' and batch tiles' mean (and the stacks'
    # where a stack reads its own groups' channels), its filters by the stacks'. (A
    # multicast wave costs the largest's: ``wave_stream_cycles``; nothing to build.)
    rest = mean_rest = minus(ops, double, first)
    mean_first = first
    if not k.can_multicast:
        in_mean = mean_input_share(ops, q, k)
        mean_first, _ = split_streams(
            ops,
            q,
            k,
            sched,
            ops.cdiv(ops.mul(first_in, in_mean), SCALE),
            ops.cdiv(ops.mul(first_filter, q.stack_mean_share), SCALE),
        )
        rest_in = ops.max(0, in_bytes - opened - first_in)
        mean_rest = buffered(
            ops,
            q,
            operand_streams(
                ops,
                q,
                k,
                sched,
                ops.cdiv(ops.mul(rest_in, in_mean), SCALE),
                ops.cdiv(ops.mul(filter_bytes - first_filter, q.stack_mean_share), SCALE),
            ),
            True,
        )
    return Loads(
        first,
        rest,
        single,
        in_bytes - first_in,
        filter_bytes - first_filter,
        plus(first, first_single),
        plus(lead, lead_single),
        lead_in,
        lead,
        single_rest,
        mean_rest,
        mean_first,
    )


def mean_input_share(ops: Ops, q: Quantities, k: Consts) -> Value:
    """SCALE x the input a wave's mean task loads over the largest one's: by the tiles' and
    batch tiles' mean, and the stacks' where a stack reads its own groups' channels."""
    in_mean = ops.cdiv(ops.mul(q.tile_in_mean_share, q.batch_mean_share), SCALE)
    if k.groups > 1:
        in_mean = ops.cdiv(ops.mul(in_mean, q.stack_mean_share), SCALE)
    return in_mean


def ring_wait_cycles(ops: Ops, k: Consts, share_group: Value) -> Value:
    """What an Alg. 3 group waits for a tile from the ring: a read from the next member plus
    the epoch increment back to it (half a round trip; the simulator's forwarded tile), over
    the slowest hop of the ring, which the lockstep group waits for: the hop between the
    subtrees of the smallest level that holds the group's ``share_group`` aligned clusters."""
    if not k.ring_latencies:
        return 0
    wait: Value = k.ring_latencies[0][1]
    for (below, lower), (_, upper) in zip(k.ring_latencies, k.ring_latencies[1:], strict=False):
        wait = wait + ops.mul(upper - lower, exceeds(ops, share_group, below))
    return ops.cdiv(3 * wait, 2)


def round_trip_wait(
    ops: Ops, round_trip: int, depth: Value, nbytes: Value, in_flight: Value
) -> Value:
    """Cycles a double-buffered stream of ``nbytes`` needs to keep ``in_flight`` bytes in
    flight over its memory's ``round_trip`` (0 when single buffered: ``depth - 1`` is a 0/1
    flag)."""
    return ops.cdiv(ops.mul(ops.mul(depth - 1, nbytes), round_trip), in_flight)


def little_cycles(
    ops: Ops,
    q: Quantities,
    k: Consts,
    l1: L1Buffers,
    loads: Loads,
    input_engine: Value,
    setups: tuple[Value, Value],
    ring: tuple[Value, Value] = (0, 0),
    filter_tiles: Value = 0,
) -> tuple[Value, Value]:
    """Little's law per stream: a double buffer keeps (allocated - one tile) bytes in flight,
    and each stream needs its own (the report's footnotes 2/3: the input and the filter buffer
    each cover the round trip), so a tiny filter buffer is not rescued by a big input buffer:
    every filter tile then waits a whole round trip (of its own memory level).
    The first tiles' round trip is the task's start-up ``L``; the law paces the tiles after
    them.

    The read engine serves its transfers in order (Sec. 1: one engine for reads), and the
    algorithms issue each input step before that step's filter tiles (Alg. 1-3: ``DmaLoad(I)``
    then ``DmaLoad(F)``), so a filter tile also waits for the engine to issue the input steps
    ahead of it: ``input_engine``, the beats of the rest of the input steps, is paid once per
    window of filter tiles in flight.

    A tile's round trip starts when a core programs its transfer, so its set-up is in the
    chain too: a filter tile's (``Consts.dma_setup_cycles``) beside its round trip, and the
    rest of the input steps' (their 2D transfers' set-ups) in the input chain and ahead of
    the filter tiles in the engine (``setups``: the input steps' and the filter tiles' in
    cycles). With more than one tile in flight, the set-up of one tile passes while the
    others travel, so a chain pays its set-ups once per window of bytes in flight (as it pays
    the round trips), not one after the other: the engine's own time, every set-up and beat
    in turn, is the other bound (``dma_cycles``). A window holds a tile at least, so a chain
    pays no more than the set-ups themselves (which also bounds the integer program's
    terms).

    The window counts transfers, not buffer slots: a slot holds the largest filter tile, but
    a fused 1x1's filter tiles are each output channel's weights of one input step, ``in_c``
    words, so a 72-byte slot has eight of them in flight, and the input steps the engine
    issues between them are paid once per window of those (``filter_tiles``: the transfers
    after the first; their mean size sets the window, as the simulator's ``spare_tiles``
    does). (ShuffleNetV2's ``branch2.3``, a 1x1 of 58 channels fused into its 3 x 3
    depthwise, its weights in HBM: 58 filter tiles of 9 bytes a task; costed as one 72-byte
    tile in flight, the chain had the layer 1.30 of the simulator.)

    An Alg. 3 member's steps that come round the ring are a chain of their own, after its
    steps from memory (``ring``: the chain, with their set-ups, and those set-ups, which
    the memory's chain then does not have; ``dma_cycles``).

    Returns (the law's floor, the same for a task with a prologue of its own): Alg. 1 issues
    ``DmaLoad(I[d_i + 1])`` before ``DmaWait(I[d_i])``, so such a task's first window of
    stream tiles is requested with its first tiles and their round trip passes beside the
    prologue's; the chain after it is one round trip shorter."""
    w = k.word_bytes
    input_setups, filter_setups = setups
    ring_chain, ring_setups = ring
    memory_setups = input_setups - ring_setups
    in_flight_input = ops.max(l1.alloc_bytes["input"] - l1.tile_words["input"] * w, 1)
    input_chain = round_trip_wait(
        ops, k.round_trip("input"), q.input_buffer_depth, loads.rest_input_bytes, in_flight_input
    ) + ops.min(
        memory_setups,
        ops.cdiv(ops.mul(memory_setups, l1.tile_words["input"] * w), in_flight_input),
    )
    input_beats = tile_beats_wait(
        ops, k, q.input_buffer_depth, loads.rest_input_bytes, in_flight_input, l1, "input"
    )
    input_wait = input_chain + input_beats + ring_chain
    input_lead = (
        ops.max(0, input_chain - (q.input_buffer_depth - 1) * k.round_trip("input"))
        + input_beats
        + ring_chain
    )
    if not k.has_filters:
        return input_wait, input_lead
    in_flight_filter = ops.max(l1.alloc_bytes["filter"] - l1.tile_words["filter"] * w, 1)
    rest_filter = loads.rest_filter_bytes
    # the mean transfer after the first (a slot's worth where the stream has none)
    slot = l1.tile_words["filter"] * w
    mean_tile = ops.min(slot, ops.cdiv(rest_filter, ops.max(filter_tiles, 1)))
    transfer = ops.choose(exceeds(ops, filter_tiles, 0), [slot, mean_tile])
    engine = ops.mul(input_engine, transfer)
    filter_depth = q.filter_buffer_depth - 1

    # the set-ups: the filter tiles' own, and the input steps' ahead of them in the engine
    # (a term of its own, so that the integer program's sums stay within 64 bits)
    setups_bytes = rest_filter * k.dma_setup_cycles + ops.mul(input_setups, transfer)
    setups_wait = ops.mul(
        filter_depth,
        ops.min(input_setups + filter_setups, ops.cdiv(setups_bytes, in_flight_filter)),
    )

    def filter_chain(early: Value) -> Value:
        """The filter tiles' chain when ``early`` of their bytes had their round trip (not
        their set-up: the engine issues them in turn) beside the prologue's."""
        chained = (rest_filter - early) * k.round_trip("weights") + engine
        return ops.cdiv(ops.mul(filter_depth, chained), in_flight_filter) + setups_wait

    filter_wait = filter_chain(0)
    filter_lead = filter_chain(ops.min(rest_filter, in_flight_filter))
    return ops.max(input_wait, filter_wait), ops.max(input_lead, filter_lead)


def tile_beats_wait(
    ops: Ops, k: Consts, depth: Value, nbytes: Value, in_flight: Value, l1: L1Buffers, op: str
) -> Value:
    """What the tiles' own beats add to a chain of round trips (``little_cycles``): a tile is
    in when its last byte is, its beats through the port after its round trip, and a buffer
    with room for one tile in flight requests the next only then (the report's double buffer:
    the port's time of every tile); ``n`` tiles in flight overlap ``n`` tiles' beats. (The
    filter chain has its beats already: the engine's queue it waits in, ``input_engine``.)"""
    beats = ops.cdiv(ops.mul(depth - 1, nbytes), k.dma_bytes_per_cycle)
    tiles_in_flight = ops.cdiv(in_flight, ops.max(l1.tile_words[op] * k.word_bytes, 1))
    return ops.cdiv(beats, ops.max(tiles_in_flight, 1))


@dataclass(frozen=True)
class DmaCycles:
    """DMA time of the largest task: ``prologue`` loads the first tiles before compute can
    start, ``overlapped`` runs under compute (the rest of the double-buffered streams,
    forwarding, set-ups), ``exposed`` serialises with it (single-buffered loads, each paying
    the round trip)."""

    prologue: Value
    overlapped: Value
    exposed: Value
    handover: Value  # the previous wave's double-buffered store slowing this prologue
    steady: Value  # ``overlapped`` of a task that loads the next one's first tiles beside it
    first: Value  # ``overlapped`` of a cluster's first task when it loads the second's tiles
    last: Value  # ``overlapped`` of a cluster's last task when the one before loaded its tiles
    #: ``steady`` of the wave before a partial last one, whose clusters but the last wave's
    #: load no next tiles
    before_last: Value
    #: the parts of ``overlapped`` that a smaller task of the wave pays as well, each as
    #: ``(fixed, input beats)``: Alg. 3's chain of steps from the ring (as many steps, each a
    #: read over the same hop, then the beats of its input tile) and the engine's serial time
    #: (as many transfers, each a set-up; the beats through its port of the filters and the
    #: residual, and of the input, which shrink with the task's band: ``task_spread``)
    ring_parts: tuple[Value, Value] = (0, 0)
    engine_parts: tuple[Value, Value] = (0, 0)
    #: the round trips of ``exposed``: pure waits for single-buffered tiles, which a wave's
    #: clusters starting together wait at once, each having asked for nothing else (and, for
    #: Alg. 3, its first tiles' round trip, before which it asks for no stream tile)
    waits: Value = 0
    #: ``overlapped`` of a task of a later wave, whose stream the wave before's double-buffered
    #: store shares the cluster's bandwidth with (where tasks do not prefetch their followers)
    beside_store: Value = 0


def dma_cycles(
    ops: Ops,
    q: Quantities,
    k: Consts,
    l1: L1Buffers,
    work: TaskWork,
    sched: Schedule,
    rates: StreamRates,
    residual: Stream | None,
    store: Stream,
    compute: Value,
) -> DmaCycles:
    """Streams at the cluster's share of the bandwidth, no faster than Little's law allows
    (report Sec. 2.1.2); forwarded input crosses the DMA port (Sec. 2.3); every transfer pays
    the set-up: each 2D transfer of an input step (``tiling.input_transfers``: one per slice
    and image for a band of partial rows), a filter tile per output channel and step, a
    store, a residual read; and a run shorter than a bus beat occupies the whole beat.

    A buffer hides the loads of data "loaded once per inner loop iteration" (Sec. 2.1.2)
    behind the iteration before, so the first tile of each stream has nothing to hide behind:
    its transfer is the pipeline's prologue, paid before compute starts. A task of one or two
    input steps is thus mostly prologue.

    The ``residual`` tile of an epilogue (None without one) is read once per task, before
    its store. A double output buffer has a second residual slot, so the read is issued when
    the stream starts and shares the cluster's bandwidth with it: the overlapped part lasts
    at least its round trip. A single one reads it after compute (exposed, like a
    single-buffered load, with its set-up). Each round trip is that of the stream's memory
    level.

    The waves of a layer run in lockstep: a wave's tasks end together, and their
    double-buffered stores (``store``) leave while the next wave's first tiles arrive, both
    through the cluster's one master port and the shared memory (report Sec. 1: the read and
    write engines "share one master port"). The next prologue then lasts until both have
    moved: ``handover`` is what the store adds to it, paid by every wave but the first
    (``phases_cycles``); the last wave's store is the store tail.

    An Alg. 3 group moves in lockstep too, and its members do not all load alike: slice
    ``d`` comes from main memory to member ``d mod m`` (Sec. 2.3), so with fewer input steps
    than members only the first ``min(steps, m)`` of every group load one, a whole step each,
    while the rest wait for the ring. The prologue lasts until that first member has its
    first step (``spread_load_cycles``: its port, the uplinks at the share of the loading
    members below them, the memory at the share of all of them), and it is the tile the
    store is handed over to."""
    loads = load_streams(ops, q, k, l1, work, sched)
    # One filter tile per output channel and step of its own group's channels: a grouped
    # stack's steps each hold only some of its outputs' filters (depthwise: one tile each);
    # an input_parallel task is one step.
    per_output = ops.min(work.steps, q.filter_steps)
    filter_loads = ops.mul(per_output, q.stack_out_channels_max) if k.has_filters else 0
    if k.prologue_pixels:  # and a fused depthwise's weights per step
        filter_loads = filter_loads + work.steps
    if k.expansion_pixels:  # and the depthwise's weights after a fused 1x1, once
        filter_loads = filter_loads + 1
    stores = ops.choose(q.algorithm, [1, 1, 0])  # input_parallel tasks store nothing
    # The engine's overhead beyond the payload: every input step's 2D transfers and idle beat
    # ends (per image, in tiling's layout, but one set-up for all the images of a step whose
    # band is the whole slice), a set-up per filter tile. (The store's is its own: it leaves
    # when the task's compute ends, not beside its stream: ``lone_tile_cycles``.)
    step_overhead = (
        ops.mul(q.batch_tile_images_max, q.input_step_dma_overhead) + q.input_step_setup_cycles
    )
    first_overhead = step_overhead
    # A filter tile is one run of whole bus beats: shorter than a beat (a 1x1 conv's few
    # input channels), it takes the engine the idle rest of its beat too.
    filter_idle: Value = 0
    if k.has_filters:
        tile_overhead = k.dma_setup_cycles * SCALE + q.filter_tile_idle_scaled
        first_overhead = first_overhead + ops.cdiv(
            ops.mul(q.filter_buffer_depth - 1, tile_overhead), SCALE
        )
        filter_idle = ops.cdiv(ops.mul(filter_loads, q.filter_tile_idle_scaled), SCALE)
    transfers = filter_loads
    # The beats of the input steps after the first (from memory or the ring) and of the filter
    # tiles: what a filter tile waits behind in the engine (``little_cycles``).
    # (A single input buffer's steps move after compute, ``exposed``, not in that queue.)
    rest_in_bytes = work.input_words * k.word_bytes - loads.lead_in_bytes
    queued_in_bytes = ops.mul(q.input_buffer_depth - 1, rest_in_bytes)
    input_engine = ops.cdiv(queued_in_bytes + loads.rest_filter_bytes, k.dma_bytes_per_cycle)
    # The engine's overhead of the input steps after the first. A band of partial rows is a
    # 2D transfer per slice, so a short last step (``in_c`` not dividing the stack's input
    # channels) pays for its slices only, not a whole step's: at the steps' mean, as the
    # simulator's streams cost them (``sim.program``: a task's steps at their average engine
    # time). A band of whole rows pays its set-ups per step, however short.
    rest_slices = q.stack_in_channels_max - ops.cdiv(
        q.stack_in_channels_max, ops.max(work.steps, 1)
    )
    whole_steps = ops.mul(work.steps - 1, step_overhead)
    rest_overhead = ops.choose(
        q.input_partial_rows,
        [
            whole_steps,
            ops.min(whole_steps, ops.cdiv(ops.mul(step_overhead, rest_slices), q.step_in_channels)),
        ],
    )
    # The double-buffered input steps' set-ups after the first, and the filter tiles', in
    # the chains.
    input_setups = ops.mul(q.input_buffer_depth - 1, rest_overhead)
    rest_filter_tiles = ops.max(0, filter_loads - 1)
    filter_setups = rest_filter_tiles * k.dma_setup_cycles
    # Alg. 3 loads its steps from memory every ``m``-th one (all members at once, slice d to
    # member d mod m), the others come round the ring (``ring_wait_cycles``).
    members = ops.max(ops.min(q.share_group, q.stacks), 1)
    memory_steps = ops.choose(q.algorithm, [work.steps, ops.cdiv(work.steps, members), work.steps])
    ring_steps = work.steps - memory_steps
    # (the steps from memory are whole ones; the ring brings the rest, a short one among them)
    ring_overhead = ops.max(0, rest_overhead - ops.mul(memory_steps - 1, step_overhead))
    # A double buffer's steps from the ring are a chain: each is read from the next member
    # (a set-up and its beats) once that member has it, and the read's epoch increment back
    # to it frees its forwarding buffer (``ring_wait_cycles``: over the ring's slowest hop,
    # which the lockstep group waits for), as many steps ahead as that buffer holds.
    tile_bytes = loaded_step_words(ops, q, k, l1) * k.word_bytes
    tile_beats = ops.cdiv(tile_bytes, k.dma_bytes_per_cycle)
    ring_tile = tile_beats + ring_wait_cycles(ops, k, q.share_group)
    # (a forwarding buffer of more than every step holds no more of them ahead)
    share_bytes = ops.min(l1.alloc_bytes["share"], ops.mul(work.steps, tile_bytes))
    ahead_scaled = ops.max(SCALE, ops.cdiv(share_bytes * SCALE, ops.max(tile_bytes, 1)))
    ring_chain = ops.mul(
        q.input_buffer_depth - 1,
        ops.cdiv((ops.mul(ring_steps, ring_tile) + ring_overhead) * SCALE, ahead_scaled),
    )
    # (the chain's beats of input tiles, which a task of a smaller band moves fewer of)
    ring_beats = ops.min(
        ring_chain,
        ops.mul(
            q.input_buffer_depth - 1,
            ops.cdiv(
                ops.mul(ring_steps, tile_beats) * SCALE,
                ahead_scaled,
            ),
        ),
    )
    ring_setups = ops.mul(q.input_buffer_depth - 1, ring_overhead)
    little, little_lead = little_cycles(
        ops,
        q,
        k,
        l1,
        loads,
        input_engine,
        (input_setups, filter_setups),
        (ring_chain, ring_setups),
        rest_filter_tiles,
    )
    # the stream's own time at its pace (P / D) and alone at the share (P / S), single values
    pace = (ops.max(0, little), ops.max(0, stream_cycles(ops, k, rates, loads.rest)))
    rest, floor = loads.rest, little
    exposed_residual: Value = 0
    single_alone = stream_cycles(ops, k, rates, loads.single)
    residual_beside: Value = 0
    if residual is not None:
        early = ops.mul(q.output_buffer_depth - 1, stores)  # 1: prefetched under the stream
        late = stores - early  # 1: read after compute
        rest = plus(rest, scaled(ops, early, residual))
        transfers = transfers + early
        residual_alone = stream_cycles(ops, k, rates, residual)
        residual_time = residual_alone + k.round_trip("residual")
        late_time = lone_tile_cycles(ops, q, k, residual, residual_alone, "residual")
        # The early read is issued before the task's single-buffered loads (the cores wait
        # for those before computing) and shares the memory with them flow by flow until the
        # shorter is done: the singles take longer by the residual's time, up to their own
        # (``exposed``), and that much of the read has moved before the stream starts.
        residual_beside = ops.mul(early, ops.min(residual_alone, single_alone))
        # (its toll on the stream below, once the engine's pace is known)
        residual_floor = ops.mul(early, residual_time) - residual_beside
        exposed_residual = ops.mul(late, late_time)
    overhead = (
        step_overhead
        + rest_overhead
        + transfers * k.dma_setup_cycles
        + filter_idle
        - first_overhead
    )
    # A single input buffer's later steps are issued only after the step before is computed:
    # their set-ups are serialised with compute too (the first step's are the prologue's).
    single_steps_overhead = ops.mul(2 - q.input_buffer_depth, rest_overhead)
    overhead = overhead - single_steps_overhead
    # Alg. 3's forwarded tiles cross the port beside the memory stream, not after it: at
    # every step one member of a group loads the step from memory while the others read it
    # from the ring, and the group waits for the slower; summed over the steps, the slower
    # of the memory's share and the port carrying every byte.
    # A single input buffer holds the step being computed, so the next step can come round
    # the ring only after it: those forwarded tiles cross the port serialised with compute.
    # (A member's first step, from the ring when the group has more members than steps,
    # comes in with the group's first tiles.)
    offchip_in_bytes = work.offchip_input_words * k.word_bytes
    ring_first = loads.lead_in_bytes - ops.min(loads.lead_in_bytes, offchip_in_bytes)
    forwarded = work.forwarded_words * k.word_bytes - ring_first
    serialised = ops.mul(2 - q.input_buffer_depth, ops.min(forwarded, rest_in_bytes))
    port = ops.cdiv(
        (rest.payload + forwarded - serialised) * k.port_cycles_per_byte_scaled,
        SCALE,
    )
    forwarded_exposed = ops.cdiv(serialised * k.port_cycles_per_byte_scaled, SCALE)
    # (the port's beats of input bytes: the stream's own and the ring's)
    port_input = ops.min(
        port,
        ops.cdiv(
            (ops.min(rest.payload, loads.rest_input_bytes) + forwarded - serialised)
            * k.port_cycles_per_byte_scaled,
            SCALE,
        ),
    )
    # The set-ups are the engine's work: a core programs the next transfer while the one
    # before moves its bytes, so they add to the engine's own time (the port's beats), not to
    # a transfer the memory slows; the chain of round trips that paces a small buffer has
    # them already (``little_cycles``).
    # A link the wave's streams share fairly ends the largest one's when it has carried
    # every task's: the wave's mean task sets its share (``wave_stream_cycles``; the
    # engine's port and set-ups stay the largest's: ``engine_cycles``).
    mean_rest = loads.mean_rest
    if residual is not None:
        mean_rest = plus(mean_rest, scaled(ops, early, residual))
    rest_alone = wave_stream_cycles(ops, k, rates, rest, mean_rest) - residual_beside
    engine_cycles = port + overhead
    # The stream's pace includes the engine's set-ups: between its transfers its bytes do
    # not move, and a burst beside it takes that time first.
    paced_by = ops.max(little, engine_cycles)
    rest_alone = ops.max(
        rest_alone,
        lockstep_tail(ops, q, k, l1, work, rates, memory_steps, rest, paced_by),
    )
    engine_pace = (ops.max(0, paced_by), pace[1])
    if residual is not None:
        # A stream paced by its round trips (Little's law) or by its engine cannot catch up
        # later: while the early read shares the cluster's bandwidth with it, flow by flow,
        # it moves at half the share at most (if it demands more) and loses what it would
        # have moved meanwhile (``burst_loss``: 2R / S - R / D for R bytes at share S and
        # demand D).
        lost = burst_loss(ops, engine_pace, [(early, residual_alone)])
        floor = ops.max(paced_by + lost, residual_floor)
    overlapped = ops.max(rest_alone, floor, engine_cycles)
    # A task with a prologue of its own (Alg. 1/2: a cluster's first one, or every one
    # without the next task's prefetch, multicast waves' too) had its first stream tiles
    # requested with its first ones (``little_cycles``). Alg. 3 members take theirs from the
    # ring, after the member before has them: they keep the whole chain.
    own_lead = ops.choose(q.algorithm, [1, 0, 0])
    floor_lead = ops.max(0, floor - ops.mul(own_lead, little - little_lead))
    overlapped_lead = ops.max(rest_alone, floor_lead, engine_cycles)
    # A single-buffered stream waits a round trip per tile, but its first tile's is the
    # task's start ``L``: the first tiles of every stream load together before compute; a
    # step from the ring waits for the member before (``ring_wait_cycles``).
    round_trips = ops.mul(
        2 - q.input_buffer_depth,
        (memory_steps - 1) * k.round_trip("input")
        + ops.mul(ring_steps, ring_wait_cycles(ops, k, q.share_group)),
    )
    if k.has_filters:
        single_filter_loads = ops.mul(2 - q.filter_buffer_depth, filter_loads - 1)
        round_trips = round_trips + single_filter_loads * k.round_trip("weights")
    # The cores wait for a single buffer's tiles: each a round trip (a request alone: its
    # latency adds to its transfer), and the transfer at the cluster's share of the memory or
    # the engine's pace (set-ups and the port's beats, the ring's tiles among them), whichever
    # is slower: the set-ups overlap the bytes of the transfers before them, as above.
    single_port = ops.cdiv(loads.single.payload * k.port_cycles_per_byte_scaled, SCALE)
    exposed = (
        round_trips
        + ops.max(
            single_alone + residual_beside,
            single_port + forwarded_exposed + single_steps_overhead,
        )
        + exposed_residual
    )
    first_alone = wave_stream_cycles(ops, k, rates, loads.first, loads.mean_first)
    first = first_alone
    # Alg. 3 moves in lockstep: a group starts when its first member, which loads a whole
    # input step itself (the others' come round the ring), has its first tiles. Only the
    # members that load a step (min(steps, m) of m) share the memories and links meanwhile:
    # all the steps when there are fewer than members (the last may be short), else whole ones.
    lead_flag = ops.choose(q.algorithm, [0, 1, 0])
    per_group = ops.min(work.steps, ops.min(q.share_group, q.stacks))
    loaders = ops.cdiv(ops.mul(sched.active, per_group), q.share_group)
    average = ops.cdiv(work.input_words * k.word_bytes, ops.max(per_group, 1))
    loaded = ops.min(loads.lead_in_bytes, average)
    lead = spread_load_cycles(
        ops,
        k,
        loads.lead_in_bytes,
        loaded,
        k.level("input"),
        loaders,
        per_group,
        q.share_group,
        sched.active,
        ops.min(first_filter_words(q, k, l1) * k.word_bytes, work.filter_words * k.word_bytes),
        members=ops.min(q.share_group, q.stacks),
    )
    first = ops.max(first, ops.mul(lead_flag, lead))
    # (Alg. 3's first step comes in with the first tiles even into a single input buffer.)
    lead_opening = ops.choose(
        q.algorithm,
        [loads.lead_first.payload, loads.lead_opening.payload, loads.lead_first.payload],
    )
    first_port = ops.cdiv(lead_opening * k.port_cycles_per_byte_scaled, SCALE)
    prologue = ops.max(first, first_port + first_overhead)
    handover: Value = 0
    # They meet in the HBM, which serves reads and writes together; to and from the L2 the
    # store goes up the tree while the tiles come down, on links of their own direction.
    hbm_both = k.level("output") == k.level("input") == "hbm"
    if hbm_both:
        opening = stream_cycles(ops, k, rates, loads.opening)
        with_store = stream_cycles(ops, k, rates, plus(loads.opening, store))
        overlaps = ops.mul(q.output_buffer_depth - 1, stores)  # 1: a double-buffered store
        # The store and the first tiles (single-buffered ones too: they open the task as
        # well) share the bandwidth fairly, flow by flow, until the first tiles are in: the
        # store adds its own time, but no more than one more load of the opening tiles of
        # the member that waits longest. That is Alg. 3's first member, which loads a whole
        # input step itself while the others' tiles come round the ring.
        lead_opening = stream_cycles(ops, k, rates, loads.lead_opening)
        # A task's cores then wait for its single-buffered tiles after the first ones
        # (``exposed``), which load after them as the rest of the store still leaves: shared
        # flow by flow, they take longer by what is left of it, up to their own time. (An
        # Alg. 3 member's are the steps it loads from memory itself; those that come round
        # the ring do not cross the store's path.)
        left = ops.max(0, with_store - opening - lead_opening)
        singles_slowed = ops.min(left, stream_cycles(ops, k, rates, loads.single_rest))
        handover = ops.mul(
            overlaps,
            ops.min(with_store - opening, lead_opening) + singles_slowed,
        )
    # A task after the first on its cluster loads the next one's first tiles beside its
    # stream (``follower_cycles``), from its start, as the store of the task before (and the
    # residual read of its second slot) leaves: a burst of traffic. Other tiles are in
    # flight now, so their round trip overlaps their transfer (the first task's cannot):
    # they are in after the slower of their round trip plus the engine's beats and set-ups
    # and their share of the memory beside the burst.
    # The store goes up while the loads (and the residual read) come down (``two_way_cycles``).
    behind = ops.mul(q.output_buffer_depth - 1, stores)
    going_up = two_way_cycles(ops, k, rates, scaled(ops, behind, store))
    read_early = None if residual is None else scaled(ops, early, residual)

    def with_read(loaded: Stream) -> Stream:
        return loaded if read_early is None else plus(loaded, read_early)

    def beside_burst(
        loaded: Stream,
        head: Value = 0,
        ahead: list[Value] | None = None,
        since: Value = 0,
        down_rates: StreamRates | None = None,
        extra: tuple[Stream, StreamRates] | None = None,
    ) -> Value:
        return going_up.beside(with_read(loaded), head, ahead, since, down_rates, extra)

    in_flight = k.start_latency_cycles + first_port + first_overhead
    # Those tiles are one transfer, in flight beside the stream: while the stream moves at
    # its pace they get what it leaves of the cluster's share, and then no more than their
    # own pace (their round trip and the engine's time, ``in_flight``, for all their bytes):
    # a transfer is no faster than it is alone. (ShuffleNetV2's ``stage4.x/Reshape_1``, 7 x
    # 7 x 464 from and to the L2 in 2-row tiles of 3 channels: five waves, each 95 cycles in
    # the simulator, not the 84 of the wave's loads over the tree's cut.)
    first_shared = stream_cycles(ops, k, rates, loads.first)
    beside_stream = ops.max(0, paced_by - stream_cycles(ops, k, rates, loads.rest))
    # (the share of them left after the stream, x SCALE, before the one product with a
    # time: the integer program's domains stay within 64 bits)
    left_share = ops.cdiv(
        ops.max(0, first_shared - beside_stream) * SCALE, ops.max(first_shared, 1)
    )
    paced_tail = ops.cdiv(ops.mul(in_flight, ops.min(SCALE, left_share)), SCALE)
    next_tiles = ops.max(in_flight, beside_burst(loads.first), paced_by + paced_tail)
    # The stream paced by its round trips loses to that burst what it cannot catch up (the
    # residual's toll above, for every flow of the burst): the next task's first tiles, the
    # store of the task before, the early residual read (the first task has no store
    # before it, the last loads no next tiles).
    next_flow = (1, first_alone)
    # The store goes up on wires of its own: it slows the stream only where both cross (the
    # port, a memory), by what it adds there beyond the stream's own time.
    rest_shared = shared_cycles(ops, k, rates, loads.rest)
    store_flow = (
        behind,
        ops.max(
            0,
            ops.max(*[r + u for r, u in zip(rest_shared, going_up.shared, strict=True)]) - pace[1],
        ),
    )
    read_flow = [] if residual is None else [(early, residual_alone)]
    steady_loss = burst_loss(ops, engine_pace, [next_flow, store_flow, *read_flow])
    first_loss = burst_loss(ops, engine_pace, [next_flow, *read_flow])
    last_loss = burst_loss(ops, engine_pace, [store_flow, *read_flow])
    # A later wave's stream (no follower prefetch) meets what is left of the wave before's
    # store after its prologue, which took ``handover`` of it, in the HBM that serves both
    # (the same condition as ``handover``'s; a stream from the L2, a short round trip away,
    # is not held to its pace as one from the HBM is). Only a stream paced by its round trips
    # or its engine loses what it cannot catch up; one bound by its share of the bandwidth
    # moves the store's bytes beside its own, which the memory floor counts.
    later_loss: Value = 0
    if hbm_both:
        store_left = (behind, ops.max(0, store_flow[1] - handover))
        paced = exceeds(ops, paced_by, pace[1])
        later_loss = ops.mul(paced, burst_loss(ops, engine_pace, [store_left, *read_flow]))
    steady = ops.max(
        overlapped,
        next_tiles,
        beside_burst(plus(loads.first, loads.rest)),
        paced_by + steady_loss,
    )
    # The wave before a partial last one: only the last wave's clusters (the first slots, in
    # order) have a next task, so the memories and the links carry their first tiles at their
    # share, beside every cluster's stream (a subtree they fill carries as many as before).
    # (MobileNetV3-Small's first conv, 3 x 3 from 3 channels, in 3 x 16 tiles: three waves,
    # the last of 10 tasks; its second wave's stream took 1,816 cycles, not the 2,250 of
    # every cluster carrying its next task's tiles.)
    last_rates = stream_rates(ops, q, k, sched, sched.last, groups=False)
    before_last_alone = ops.max(
        overlapped,
        in_flight,
        beside_burst(loads.rest, extra=(loads.first, last_rates)),
        paced_by + steady_loss,
    )
    # (no longer than with every cluster carrying: the sum of each part's slowest resource
    # would exceed that where the two parts bind on different ones)
    before_last = ops.min(steady, before_last_alone)
    # The first task's stream and the second's first tiles at their pace (by their round
    # trips, or by links slower than a memory's share), and no sooner than those tiles' round
    # trip (``in_flight``)
    first_paced = ops.max(
        overlapped_lead,
        stream_cycles(ops, k, rates, plus(loads.first, loads.rest)),
        paced_by - ops.mul(own_lead, little - little_lead) + first_loss,
    )
    first_alone = ops.max(in_flight, first_paced)
    # Where the flows of a cluster meet (its port, a memory: ``shared_cycles``), each is
    # served flow by flow, so a flow of ``f`` cycles there that starts beside others ends
    # after ``f`` plus, for each of them, the smaller of it and ``f`` (``shared_end``).
    own_rest = (
        rest_shared if read_early is None else shared_cycles(ops, k, rates, with_read(loads.rest))
    )
    next_first = shared_cycles(ops, k, rates, loads.first)
    own_store = going_up.shared
    # Only the first wave's clusters with a second task (``slots - C``, if fewer than C)
    # load its first tiles: a memory carries theirs at their share. (Only Alg. 1 prefetches
    # a follower's tiles, and has no groups with idle members: ``groups=False``.)
    second = ops.max(1, ops.min(k.clusters, sched.slots - k.clusters))
    next_rates = stream_rates(ops, q, k, sched, second, groups=False)
    next_of_first = [next_first[0], *shared_cycles(ops, k, next_rates, loads.first)[1:]]
    first_loads = [r + f for r, f in zip(own_rest, next_of_first, strict=True)]

    def shared_end(flow: list[Value], *others: list[Value]) -> Value:
        return ops.max(
            *[
                mine + sum((ops.min(mine, theirs[i]) for theirs in others), start=0)
                for i, mine in enumerate(flow)
            ]
        )

    # The first task has no store before it, but its own leaves when it ends (its compute,
    # and its stream beside the next task's first tiles: ``first_end``) while those may still
    # come in: from then on the tiles share each resource with the store, so they take longer
    # by what is left of them there, up to the store's own time on it, less the time they
    # left it idle anyway (a stream paced by its round trips or by other links:
    # ``first_paced``). Not the tiles' round trip: they are in flight beside the task, so it
    # overlaps their transfer, which each memory serves from the start. (MobileNetV2's
    # depthwise at 14 x 14 in one-channel stacks of 14 x 7 tiles, six waves: a task
    # computes 82 cycles, then its store and the next task's tiles share the HBM; taking
    # the round trip's 62 cycles beyond the tiles' 242 as idle, the model had the first
    # task's next tiles in after 340 cycles, the simulator after 435.)
    first_end = ops.max(compute, overlapped_lead, shared_end(own_rest, next_of_first))
    first_task = ops.max(
        first_alone,
        *[
            d + ops.min(u, ops.max(0, d - first_end)) - (first_paced - d)
            for d, u in zip(first_loads, own_store, strict=True)
        ],
    )
    # The store behind a cluster's last task left when the task before ended (its compute,
    # and its stream beside the next task's first tiles and the store before), not when the
    # last one started: it has had the rest of the task before on its own wires, beside what
    # was left of that task's loads (``two_way_cycles``' ``head``). Unless the stores set the
    # pace: a cluster's stores leave one after the other, each when its task has ended and
    # the one before is done, so where a store takes longer than a task beside the loads of
    # the next (``store_beside``), a task ends only when the store before it is done, and the
    # store behind the last task leaves as that task starts. A store as long as a task
    # keeps the lead the first task's store had (it left when that task's compute and stream
    # ended, before the next tiles were in: ``first_end``), and each task shorter than a
    # store lets the stores catch up by the difference. (GoogLeNet's 3 x 3 max pool at 7 x
    # 7 from the L2: the next tiles and the store take 98 cycles each, the compute 31, and
    # each store leaves 67 cycles before the next task starts.)
    followers = ops.min(ops.max(sched.waves - 2, 0), 1)
    before = ops.choose(followers, [first_task, steady])
    follower_end = ops.max(compute, overlapped, shared_end(own_rest, next_first, own_store))
    before_end = ops.choose(followers, [first_end, follower_end])
    store_beside = ops.max(going_up.alone, shared_end(own_store, own_rest, next_first))
    lead = ops.max(0, first_task - first_end) + ops.mul(
        ops.max(sched.waves - 2, 0), ops.max(0, before - store_beside)
    )
    head = ops.mul(
        1 - exceeds(ops, store_beside, before), ops.min(ops.max(0, before - before_end), lead)
    )
    # Of a partial last wave only its clusters load, beside the stores of the full wave
    # before: a memory carries each at its own share (``last_wave_rates``).
    last_burst = beside_burst(loads.rest, head, first_loads, before_end, last_rates)
    last = ops.max(overlapped, last_burst, paced_by + last_loss)
    return DmaCycles(
        prologue,
        overlapped_lead,
        exposed,
        handover,
        steady,
        first_task,
        last,
        before_last,
        (ring_chain - ring_beats, ring_beats),
        (engine_cycles - port_input, port_input),
        # An Alg. 3 member asks for its stream's tiles only once its first ones are in
        # (those after them come round the ring, ``own_lead``): the first wave's groups,
        # started together, all wait for their first tiles' round trip at once.
        round_trips + ops.mul(lead_flag, k.start_latency_cycles),
        # A later wave's stream shares the bandwidth with the wave before's store, which
        # leaves beside it after the prologue (``handover``), and loses what it cannot catch up
        ops.max(overlapped_lead, paced_by - ops.mul(own_lead, little - little_lead) + later_loss),
    )


def lockstep_tail(
    ops: Ops,
    q: Quantities,
    k: Consts,
    l1: L1Buffers,
    work: TaskWork,
    rates: StreamRates,
    memory_steps: Value,
    rest: Stream,
    paced_by: Value,
) -> Value:
    """When an Alg. 3 group's stream ends, if its members' loads differ: slice ``d`` comes
    from memory to member ``d mod m`` (Sec. 2.3), so with ``S`` steps the first ``S mod
    m`` members load one step more than the others, and the group, in lockstep, waits for
    them (``rest`` is a member's mean stream: ``TaskWork.offchip_input_words``).
    Sharing a bottleneck fairly, every member moves at the share while the smaller ones
    last (if the share, not their own pace, holds them back); then the larger ones move the
    step they have beyond them at their own pace (``paced_by``: their round trips and
    engine, which ring and memory tiles share alike), no longer at the share. (GoogLeNet's
    ``inception4e/branch3`` 1 x 1 in groups of 16 over 33 steps from the L2: the first
    member of each group loads 3 steps, the others 2; the simulator's group ends 555
    cycles after the mean's 3,032 at the L3 uplinks' share.) 0 where the smaller members
    are not held back by the share (the stream is then at its pace or its mean's time at
    the share), for the other algorithms, for a single input buffer (its steps after the
    first are the exposed loads) and for groups of no more steps than members (each loads
    its one step in the group's prologue)."""
    w = k.word_bytes
    step = loaded_step_words(ops, q, k, l1)
    largest = ops.min(ops.mul(memory_steps, step), work.input_words)
    largest_rest = largest - ops.min(step, largest)
    mean_rest = work.offchip_input_words - ops.min(step, work.offchip_input_words)
    uneven = ops.mul(ops.choose(q.algorithm, [0, 1, 0]), q.input_buffer_depth - 1)
    uneven = ops.mul(uneven, exceeds(ops, largest_rest, mean_rest))
    if isinstance(uneven, int) and uneven == 0:
        return 0
    small_rest = ops.max(0, largest_rest - step)
    # the smaller members' stream: the mean's (its filters and early residual read too) less
    # the input steps they do not load
    fewer = operand_stream(
        ops, k, "input", (mean_rest - small_rest) * w, q.input_inverse_efficiency, None
    )
    small = without(ops, rest, fewer)
    small_time = stream_cycles(ops, k, rates, small)
    extra = (largest_rest - small_rest) * w
    # (its share of the largest's bytes first, so that the integer program's products stay
    # within 64 bits)
    share = ops.cdiv(extra * SCALE, ops.max(small.payload + extra, 1))
    tail = small_time + ops.cdiv(ops.mul(ops.min(share, SCALE), paced_by), SCALE)
    return ops.mul(ops.mul(uneven, exceeds(ops, small_time, paced_by)), tail)


def burst_loss(
    ops: Ops,
    paced: tuple[Value, Value],
    burst: list[tuple[Value, Value]],
) -> Value:
    """What a stream ``paced`` by its round trips (``(its time at its pace, alone at the
    cluster's share)``: demand D = P / little, P / S) loses to a ``burst`` of flows ``(0/1
    flag, its time alone at the share: B / S)`` that start beside it. Sharing the cluster's
    bandwidth S flow by flow with n of them, it moves at S / (n + 1) at most while they move
    their B bytes at n S / (n + 1), i.e. for (n + 1) B / (n S) cycles, and cannot catch up
    afterwards: it loses ((n + 1) B / S - B / D) / n (0 when it demands no more than its
    share), or, if it ends first, what its P bytes take at S / (n + 1) beyond its pace. A
    flow of the burst that ends early gives its share back sooner, which this does not
    track: an upper bound, within a few per cent for bursts of similar flows.

    B / D is B / S times the paced stream's slowdown S / D = little / (P / S). A slowdown of
    n + 1 or more loses nothing, so it is capped at one more than the most flows, exactly:
    the integer program then multiplies a time by a small factor, never two times."""
    little, alone_paced = paced
    flows: Value = 0
    alone: Value = 0
    for flag, flow_alone in burst:
        if isinstance(flag, int):
            if flag:
                flows, alone = flows + 1, alone + flow_alone
            continue
        flows = flows + flag
        alone = alone + ops.mul(flag, flow_alone)
    if isinstance(flows, int) and not flows:
        return 0
    cap = (len(burst) + 1) * SCALE
    slowdown = ops.min(ops.cdiv(little * SCALE, ops.max(alone_paced, 1)), cap)
    # single values, so that the integer program's sums of their multiples stay in 64 bits
    alone = ops.max(0, alone)
    at_pace = ops.cdiv(ops.mul(alone, slowdown), SCALE)
    options: list[Value] = [0] + [
        ops.min(
            ops.cdiv(ops.max(0, (n + 1) * alone - at_pace), n),
            ops.max(0, (n + 1) * alone_paced - little),
        )
        for n in range(1, len(burst) + 1)
    ]
    return ops.choose(flows, options)


def compute_cycles(ops: Ops, k: Consts, work: TaskWork) -> Value:
    """The largest task's FPU operations at the cluster's MAC rate times the FPU utilisation.

    ASSUMPTION (the seeds rate the FPUs in MACs only): every FPU operation, a compare, an
    add or a move of a layer without weights as much as a multiply-add, takes one MAC slot
    of an FPU."""
    return ops.cdiv(work.ops * SCALE, k.macs_per_cycle_scaled)


def private_stream(
    ops: Ops, k: Consts, sched: Schedule, stream: str, words: Value, inverse_efficiency: Value
) -> Stream:
    """``words`` of the largest task that no other task moves (its output, its residual
    tile; ``stream`` names it) at their memory level: a multicast wave moves ``active``
    tasks' worth (never shared)."""
    wave = sched.active if k.can_multicast else None
    return operand_stream(ops, k, stream, words * k.word_bytes, inverse_efficiency, wave)


def store_stream(ops: Ops, q: Quantities, k: Consts, work: TaskWork, sched: Schedule) -> Stream:
    """The largest task's output store; outputs are distinct, so a multicast wave stores
    ``active`` tasks' outputs (never shared)."""
    return private_stream(ops, k, sched, "output", work.store_words, q.output_inverse_efficiency)


def residual_stream(
    ops: Ops, q: Quantities, k: Consts, work: TaskWork, sched: Schedule
) -> Stream | None:
    """The largest task's read of its residual tile (the output tile's region of the
    residual operand, read with the read efficiency of the output's runs); None without."""
    if not k.has_residual:
        return None
    return private_stream(
        ops, k, sched, "residual", work.residual_words, q.residual_inverse_efficiency
    )


# -- overlap: task, phase and layer latency ----------------------------------------------------


def tile_engine_cycles(ops: Ops, q: Quantities, k: Consts, tile: Stream) -> Value:
    """The DMA engine's own time on a task's output tile (its store, or its residual read):
    its bytes at the engine's pace on them (``quantities.output_engine_scaled``: whole bus
    beats per run, and a set-up per slice and image for a tile of partial rows, as
    ``tiling.output_transfers`` counts them), and the one set-up of a band of whole rows
    (one transfer for all its slices)."""
    engine = ops.cdiv(ops.mul(tile.payload, q.output_engine_scaled), SCALE)
    return engine + (1 - q.output_partial_rows) * k.dma_setup_cycles


def lone_tile_cycles(
    ops: Ops, q: Quantities, k: Consts, tile: Stream, alone: Value, operand: str
) -> Value:
    """A task's output tile (its store, or its residual read) moved while nothing of the
    task streams beside it: its time ``alone`` at its share of the bandwidth, or the DMA
    engine's own time on it if slower (``tile_engine_cycles``: a tile of short rows is bound
    by it rather than by its share), then its round trip."""
    return ops.max(alone, tile_engine_cycles(ops, q, k, tile)) + k.round_trip(operand)


@dataclass(frozen=True)
class TaskSpread:
    """How a layer's tasks differ from its largest one (``task_spread``)."""

    count: Value  # how many end with it in a layer of one wave (``sched.active`` with several)
    lead: Value  # how long before it the smallest one ends (0 with several waves)
    rest_lead: Value  # how long before it the others end, at their mean (0 with several)
    #: how long before it the smallest one of the busiest subtree ends (0 with several): of
    #: a wave in order, the first, which holds the first row of tiles
    subtree_lead: Value
    #: the tasks as large in output (``near_count``, edge tiles among them) end, at the
    #: mean's input, ``near_lead`` sooner: 0 where a compute as long as the largest one's
    #: binds them (not a fused expansion's, which shrinks with the band)
    near_count: Value
    near_lead: Value
    #: how long before it the layer's mean task ends (with several waves too)
    mean_lead: Value
    #: the share of the layer's tasks as large as it (x SCALE)
    largest_share: Value
    #: 1 when the ``count`` largest tasks are the wave's first slots, 0 when the first tile
    #: is smaller (an edge tile whose band lacks the padding's rows): they then sit further
    #: on, across the subtrees the first slots fill
    largest_first: Value


def task_spread(
    ops: Ops,
    q: Quantities,
    k: Consts,
    sched: Schedule,
    compute: Value,
    dma: DmaCycles,
    work: TaskWork,
) -> TaskSpread:
    """How the tasks differ from the largest one, which the formula costs. A task ends when
    the slower of its compute and its stream does. The stream's input bytes follow the
    task's input band (its filters do not: only the input's part of a stream-bound task's
    time shrinks with its tile), its compute its output tile, and its band too where it
    recomputes a fused expansion over it (a fused depthwise before a 1x1 is computed at the
    tile's outputs, ``task_work``). An edge tile's band lacks the padding's rows, the last
    chunk of an axis may be short: such a task is smaller in what binds it, in input
    (stream bound, or fused) or in output (compute bound), along the spatial tiles, stacks
    and batch tiles (``quantities``: per axis, how many chunks have its largest size, the
    smallest's and the mean one's share). The tasks as large in output but not in input
    (edge tiles) are a class of their own (``near_count``, ``near_lead``).

    In a layer of one wave, ``count`` tasks end with the largest one; the smallest
    ``lead`` cycles sooner. Streams sharing a bottleneck fairly end the smallest when it
    has carried ``n x`` the smallest's bytes and the largest when it has carried all, so
    the lead is the largest's time times ``1 - smallest / mean`` (a compute-bound task ends
    at its own pace, ``1 - smallest / largest``: the smaller lead is kept). Spatial tiles
    only: a short last stack or batch tile counts as no lead. The other tasks than the
    ``count`` largest end, at their mean, ``rest_lead`` sooner: of the wave's ``n`` tasks
    of mean share ``s`` of the largest, they are ``n - count`` of mean share
    ``(n s - count) / (n - count)``. Their compute and their bytes shrink with them, not
    what counts per step and transfer (``DmaCycles.ring_parts``, ``engine_parts``: the ring's
    hops, the engine's set-ups, the filters' and the residual's beats), taken at the
    largest's.

    With several waves every wave is costed at its largest task: where the smaller tasks
    fall depends on the order of the slots (a short last row of tiles fills the last wave's
    slots, and some cluster then runs a largest task in every wave before it), which the
    per-axis tables do not give."""
    fused = bool(k.expansion_ops)
    streamed = exceeds(ops, dma.overlapped, compute)
    by_input = 1 if fused else streamed
    tiles = ops.choose(by_input, [q.tiles_out_largest, q.tiles_in_largest])
    largest = ops.mul(ops.mul(tiles, q.stacks_largest), q.batch_tiles_largest)
    share = ops.choose(by_input, [q.tile_out_min_share, q.tile_in_min_share])
    busy = ops.max(compute, dma.overlapped)
    # A stream-bound task's time follows its stream's bytes, whose filters do not shrink
    # with its tile: only the input's part of them does (the mean task's part for the
    # smallest, the largest's for the others' mean). (Shares, x SCALE, before the one
    # product with a time each: the integer program's domains stay within 64 bits.)
    mean_part: Value = SCALE
    largest_part: Value = SCALE
    if k.has_filters:
        in_words = work.offchip_input_words
        mean_in = ops.cdiv(ops.mul(in_words, q.tile_in_mean_share), SCALE)
        # (at most SCALE: the bound the integer program's intervals cannot tell)
        mean_part = ops.min(
            SCALE, ops.cdiv(mean_in * SCALE, ops.max(mean_in + work.filter_words, 1))
        )
        largest_part = ops.min(
            SCALE, ops.cdiv(in_words * SCALE, ops.max(in_words + work.filter_words, 1))
        )
        mean_part = ops.choose(streamed, [SCALE, mean_part])
        largest_part = ops.choose(streamed, [SCALE, largest_part])

    def shorter(by: Value, part: Value) -> Value:
        """How much sooner than ``busy`` a task of share ``by`` ends, ``part`` of it
        shrinking."""
        short = ops.cdiv(ops.mul(SCALE - ops.min(SCALE, by), part), SCALE)
        return ops.cdiv(ops.mul(busy, short), SCALE)

    lead = shorter(share, mean_part)
    # A wave in order fills the first subtree with the first slots: the first tiles, short
    # only along the columns (the last row's come last); a spread one mixes them.
    first_share = ops.choose(by_input, [q.tile_out_first_min_share, q.tile_in_first_min_share])
    subtree_lead = ops.choose(in_order(ops, q, k, sched), [lead, shorter(first_share, mean_part)])
    tile_mean = ops.choose(by_input, [q.tile_out_mean_share, q.tile_in_mean_share])
    mean = ops.cdiv(ops.mul(tile_mean, q.stack_mean_share), SCALE)
    mean = ops.cdiv(ops.mul(mean, q.batch_mean_share), SCALE)
    tasks = ops.min(ops.mul(sched.tiles, q.stacks), k.clusters)  # of one wave
    count = ops.min(largest, tasks)
    # the others' mean share: SCALE - (n (SCALE - s)) / (n - count)
    rest_short = ops.cdiv(ops.mul(SCALE - mean, tasks), ops.max(tasks - count, 1))
    rest_busy = busy - shorter(SCALE - ops.min(rest_short, SCALE), largest_part)
    # What they pay as the largest one does: the ring's and the engine's chains but their
    # beats of input, which shrink with the band (at the others' mean input, ``load_streams``'
    # law; ShuffleNetV2's fused branch2.3 in 7-row tiles: the edge tiles' 8-row bands stream
    # 2,219 cycles against the middle ones' 2,331, their compute 2,139 against 2,372).
    in_mean = mean_input_share(ops, q, k)
    rest_in_short = ops.min(
        SCALE, ops.cdiv(ops.mul(SCALE - in_mean, tasks), ops.max(tasks - count, 1))
    )

    def paid(parts: tuple[Value, Value]) -> Value:
        """A chain's fixed part, and its input beats at the others' mean band."""
        fixed, beats = parts
        return fixed + beats - ops.cdiv(ops.mul(beats, rest_in_short), SCALE)

    per_step = ops.max(paid(dma.ring_parts), paid(dma.engine_parts))
    rest_lead = busy - ops.max(rest_busy, ops.min(per_step, busy))
    # The tasks as large in output, edge tiles among them, whose bands lack the padding's
    # rows: at the mean's input they end when their stream or their compute does, the
    # latter with the largest one's (a third class of ends, between ``count`` and the
    # smallest; MobileNetV2's fused features.1.conv.1 in 9 x 16 tiles: the largest one's
    # stream 8,971 cycles and every 9-row tile's compute 9,120, so the edge tiles store
    # with it; RegNetY's block3-0/b.0: the top row's end 190 cycles before the others).
    # (A fused expansion is computed over the band: its compute shrinks with it too.)
    near_count = ops.min(
        ops.mul(ops.mul(q.tiles_out_largest, q.stacks_largest), q.batch_tiles_largest), tasks
    )
    edge_stream = dma.overlapped - shorter(q.tile_in_mean_share, largest_part)
    edge_compute = compute
    if fused:
        edge_compute = compute - ops.min(compute, shorter(q.tile_in_mean_share, SCALE))
    near_lead = busy - ops.min(busy, ops.max(edge_compute, edge_stream))
    # (for the last wave's stores, ``store_tail_cycles``)
    mean_lead = shorter(mean, largest_part)
    every = ops.mul(ops.mul(q.spatial_tiles, q.stacks), q.batch_tiles)
    largest_share = ops.min(SCALE, ops.cdiv(largest * SCALE, ops.max(every, 1)))
    several = ops.min(1, sched.waves - 1)
    largest_first = ops.choose(by_input, [q.tile_first_largest_out, q.tile_first_largest_in])
    return TaskSpread(
        ops.choose(several, [count, sched.active]),
        ops.choose(several, [lead, 0]),
        ops.choose(several, [rest_lead, 0]),
        ops.choose(several, [subtree_lead, 0]),
        ops.choose(several, [near_count, sched.active]),
        ops.choose(several, [near_lead, 0]),
        mean_lead,
        largest_share,
        largest_first,
    )


def task_store_cycles(
    ops: Ops,
    q: Quantities,
    k: Consts,
    sched: Schedule,
    store: Stream,
    rates: StreamRates,
    last: TaskSpread,
) -> Value:
    """What a task's store adds after its compute when nothing of a next task runs beside it
    (``exposed_store_cycles``: each task of a single output buffer; ``store_tail_cycles``:
    the only task of a cluster in a layer of one wave): the output's round trip plus the
    transfer to store, at its share of the bandwidth or the engine's pace if slower. In a
    layer of one wave of unequal tasks (``task_spread``), the smaller ones store theirs while
    the largest ones still work. Taking the others as ending together at their mean
    (``rest_lead`` sooner), a bottleneck that serves whatever waits ends the stores no
    sooner than the larger of the largest tasks' stores after them, at the share of their
    ``count``, and every store after the others' end, at the wave's share. Nor do the stores
    end sooner than those of the busiest subtree (the most tasks under one uplink: the
    links' share at the wave's count) after its smallest task's end (``subtree_lead``: of a
    wave in order, the first row of tiles'; a short last row sits under another): its tasks
    end last because their streams share its uplink, so they end together, and their stores
    go up through it after them. (MobileNetV2's ``features.4.conv.1.0`` in stacks of 11
    channels: one L3 quadrant holds 14 whole tasks, the other 12 and the short ones.) A
    wave in order puts whole tiles' stacks under an uplink; a spread one (``in_order``)
    alternates its slots between the subtrees, so each holds a share of every row of
    tiles: their mean store each."""
    alone = stream_cycles(ops, k, rates, store)
    if not (isinstance(last.rest_lead, int) and last.rest_lead == 0):
        # (in order from the first slot, unless the first tile is smaller: the largest tasks
        # then straddle the subtrees the first slots fill, as a spread wave's do)
        at_end = stream_rates(ops, q, k, sched, last.count, largest_first=last.largest_first)
        # the busiest subtree's stores cross its uplink after its smallest task's end; it
        # holds whole tiles' stacks (slots in order), so the stacks' mean store each
        subtree = ops.cdiv(ops.mul(store.payload, rates["tree"]), SCALE)
        subtree = ops.cdiv(ops.mul(subtree, q.stack_mean_share), SCALE)
        # (a spread wave mixes the tiles under every uplink: the tiles' mean store each)
        mixed = ops.choose(in_order(ops, q, k, sched), [q.tile_out_mean_share, SCALE])
        subtree = ops.cdiv(ops.mul(subtree, mixed), SCALE)
        alone = ops.max(
            ops.max(stream_cycles(ops, k, at_end, store), alone - last.rest_lead),
            subtree - last.subtree_lead,
        )
    return lone_tile_cycles(ops, q, k, store, alone, "output")


def exposed_store_cycles(ops: Ops, q: Quantities, task_store: Value) -> Value:
    """Unless its output is double buffered, a task pays its store after its compute
    (``task_store_cycles``); ``input_parallel`` tasks store nothing (their phase does, after
    the reduction)."""
    return ops.mul(2 - q.output_buffer_depth, ops.choose(q.algorithm, [task_store, task_store, 0]))


def task_cycles(ops: Ops, k: Consts, compute: Value, dma: DmaCycles, exposed_store: Value) -> Value:
    """The largest task: ``L`` (the slower round trip of its first loads) and the first
    tiles to start, compute overlapped with the rest of the double-buffered streams, then what
    cannot overlap (module docstring)."""
    return (
        k.start_latency_cycles
        + dma.prologue
        + ops.max(compute, dma.overlapped)
        + dma.exposed
        + exposed_store
    )


def follower_cycles(
    ops: Ops, q: Quantities, k: Consts, compute: Value, dma: DmaCycles, exposed_store: Value
) -> tuple[Value, Value, Value, Value]:
    """(whether a cluster's tasks load the next one's first tiles, how long such a task lasts
    after its first tiles are in, what the cluster's last task adds to the first one's
    stream, how long such a task lasts in the wave before a partial last one). An
    ``output_stack`` task whose input and filter buffers are double leaves a slot of each
    free in its last step, and the next task's first tiles load into them beside it (the
    report's buffers let "data transfers by the DMA engine run fully in background", Sec.
    2.1.2; the stream does not stop between tasks): a cluster's tasks
    after the first start with no prologue, and each task but the last carries the next
    one's first tiles (``dma_cycles``: ``steady``). Not for Alg. 3, whose few loaders per
    group would then load every step of a group beside its stream over their quadrant's
    links (a contention this model does not describe), nor for multicast waves or
    ``input_parallel`` (which prefetches its input batch apart)."""
    double = q.input_buffer_depth - 1
    if k.has_filters:
        double = ops.mul(double, q.filter_buffer_depth - 1)
    stacks = ops.choose(q.algorithm, [1, 0, 0])
    prefetch = ops.mul(ops.mul(double, stacks), 1 - q.multicast)
    steady = ops.max(compute, dma.steady) + dma.exposed + exposed_store
    # The first task carries the second's first tiles with no store before it, the last
    # carries no next tiles: what the two add to the first task's own stream (in ``task``)
    # and a follower.
    own = ops.max(compute, dma.overlapped)
    first = ops.max(compute, dma.first)
    last = ops.max(compute, dma.last) + dma.exposed + exposed_store
    before_last = ops.max(compute, dma.before_last) + dma.exposed + exposed_store
    return prefetch, steady, first - own + last - steady, before_last


def store_pace_cycles(ops: Ops, q: Quantities, k: Consts, store: Stream) -> Value:
    """How often a cluster can store behind its tasks: a double-buffered store runs behind
    the next task, which waits for it before storing again (``sim.program``: one store in
    flight per cluster), so a cluster's tasks after its first follow one another no faster
    than one store, set-ups and beats in its engine (``tile_engine_cycles``), then its round
    trip (the write is done when acknowledged). Its bytes at the memory's share are the
    memory floor's: when the clusters each wait a round trip per store, the memory is not
    the bound. A task of small tiles is then paced by its stores' round trips, not by its
    compute or its loads (LR-ASPP's bilinear upsampling to 224 x 224 in 2 x 28 tiles of two
    channels: 31 cycles of compute, a store of 448 bytes in two transfers, 296 cycles from
    one to the next). 0 for a single output buffer (its store is in the task:
    ``exposed_store_cycles``) and for ``input_parallel`` (its phases store after the
    reduction)."""
    paced = tile_engine_cycles(ops, q, k, store) + k.round_trip("output")
    return ops.mul(q.output_buffer_depth - 1, ops.choose(q.algorithm, [paced, paced, 0]))


def reduction_cycles(ops: Ops, q: Quantities, k: Consts, sched: Schedule) -> Value:
    """``input_parallel``: each phase ends with the tree reduction of the ``active`` private
    stacks level by level and one store of the stack (Sec. 3.1.3); 0 for the others. The
    root applies the epilogue to the reduced stack before storing it, after reading the
    stack's residual operand (a set-up, the round trip and the transfer, as the store). The
    round trips are those of the output's and the residual's memory levels; the transfers
    are costed at the DMA port."""
    stack_words = ops.mul(q.stack_out_channels_max, q.batch_tile_images_max)
    stack_bytes = stack_words * k.word_bytes
    index = sched.active - 1
    reduce = (
        ops.lookup(index, k.reduction_latency_cycles)
        + k.round_trip("output")
        + ops.cdiv(stack_bytes, k.dma_bytes_per_cycle)
    )
    if k.epilogue_ops:
        reduce = reduce + ops.cdiv(stack_words * (k.epilogue_ops * SCALE), k.macs_per_cycle_scaled)
    if k.has_residual:
        reduce = (
            reduce
            + k.dma_setup_cycles
            + k.round_trip("residual")
            + ops.cdiv(stack_bytes, k.dma_bytes_per_cycle)
        )
    for level_steps, link in zip(k.reduction_steps, k.link_bytes_per_cycle_scaled, strict=True):
        if int(np.max(level_steps)) > 0:
            reduce = reduce + ops.mul(
                ops.lookup(index, level_steps), ops.cdiv(stack_bytes * SCALE, link)
            )
    return ops.choose(q.algorithm, [0, 0, reduce])


def last_wave_rates(ops: Ops, q: Quantities, k: Consts, sched: Schedule) -> StreamRates:
    """The streaming rates of the last wave's clusters: ``slots - (waves - 1) x C`` of them,
    in order (``in_order``: a layer of one wave is ``stream_rates``' own). A partial last wave
    shares the memories and links among fewer clusters than the waves before it. (A
    multicast wave's slots are whole waves: its rates are ``stream_rates``'.)"""
    last = sched.last
    if k.can_multicast:
        last = ops.choose(q.multicast, [last, sched.active])
    return stream_rates(ops, q, k, sched, last)


def store_tail_cycles(
    ops: Ops,
    q: Quantities,
    k: Consts,
    store: Stream,
    sched: Schedule,
    spread: TaskSpread,
    task_store: Value,
) -> Value:
    """A double-buffered store overlaps the next task; the last one drains after the last
    wave, a lone tile (``lone_tile_cycles``): its bytes, or its set-up and beats in the
    engine if slower (it is programmed when the task's compute ends, so no stream hides its
    set-up), then its round trip (the write is done when acknowledged, and nothing is in
    flight beside it to hide that). Only the last wave's clusters store then
    (``last_wave_rates``): the clusters with a task fewer stored theirs a wave before.
    Their tasks are the last in order (``tiling``: batch tile, row, column, then stack):
    where the last tile's stacks hold the whole last wave (Alg. 1/2), they store the last
    tile's output, which a short last row or column makes smaller than the largest's
    (ShuffleNetV2's channel shuffle at 14 x 14 in 3-column tiles: the last wave's 96 tasks
    store the 2-column tile).

    Nor do the last wave's clusters all end together. A cluster's tasks are the tiles its
    slots draw, and the layer's tasks take ``slots x`` the mean task's time, so over full
    waves the mean cluster ends ``waves x`` the mean task's lead (``TaskSpread.mean_lead``)
    before one that drew a largest task in every wave, and its stores cross the shared links
    meanwhile; the stores of the tasks as large as the largest (``largest_share`` of the
    wave) still cross after it, at the rates of as many clusters in order (the busiest
    subtree's: MobileNetV2's 1x1 at 7 x 7 in a 4-row and a 3-row tile of 64-member groups
    holds each tile's under one uplink). (MnasNet's ``layers.8.1/layers.3``, a 1x1 fused
    into its 3 x 3 depthwise, Alg. 3 in two full waves of 7 x 14 tiles: a cluster that drew
    edge tiles, whose bands lack a padding row or column, ends its compute 911 cycles before
    the last one, and the last wave's stores, 1,764 cycles at the tree's cut, end 1,157
    cycles after it.) A partial last wave keeps the whole: which of its clusters drew which
    tiles before is not in the tables.

    In a layer of one wave a cluster's only task has no next one for its second output
    buffer to overlap: it stores after its compute as a single buffer's task does (Alg. 1's
    ``DmaStore`` after the last input slice), at the cost ``task_store_cycles`` gives it
    with the wave's unequal tasks (SqueezeNet 1.1's ``features.3/expand3x3``, 55 x 55 x 16
    -> 64 in 7 x 14 tiles of 16 channels, 128 tasks: simulated 18,733 cycles with one
    output buffer and with two)."""
    rates = last_wave_rates(ops, q, k, sched)
    within = ops.mul(ops.choose(q.algorithm, [1, 1, 0]), 1 - exceeds(ops, sched.last, q.stacks))
    if k.can_multicast:
        within = ops.mul(within, 1 - q.multicast)
    last_share = ops.cdiv(ops.mul(q.tile_out_last_share, q.batch_last_share), SCALE)
    store = fraction(ops, ops.choose(within, [SCALE, last_share]), store)
    whole = stream_cycles(ops, k, rates, store)
    full = 1 - exceeds(ops, k.clusters, sched.last)
    # (the flag before the one product with a count: the integer program's domains)
    ahead = ops.mul(sched.waves, ops.mul(full, spread.mean_lead))
    # (the largest ones' stores after it, at the rates of as many clusters in order: the
    # busiest subtree's share, as ``exposed_store_cycles`` takes them)
    count = ops.max(1, ops.cdiv(ops.mul(sched.last, spread.largest_share), SCALE))
    at_end = stream_cycles(ops, k, stream_rates(ops, q, k, sched, count), store)
    store_time = lone_tile_cycles(ops, q, k, store, ops.max(at_end, whole - ahead), "output")
    store_time = ops.choose(ops.min(1, sched.waves - 1), [task_store, store_time])
    return ops.mul(q.output_buffer_depth - 1, ops.choose(q.algorithm, [store_time, store_time, 0]))


def phases_cycles(
    ops: Ops,
    sched: Schedule,
    task: Value,
    reduction: Value,
    store_tail: Value,
    handover: Value,
    follower: tuple[Value, Value, Value, Value],
    later_task: Value,
) -> Value:
    """``phases x (waves x task + (waves - 1) x handover + reduction) + store_tail``: a wave
    lasts as long as its largest task, and every wave but the first starts while the one
    before stores (``dma_cycles``), its stream beside that store (``later_task``); or, where
    the tasks prefetch their followers' first tiles (``follower_cycles``: a 0/1 flag, such a
    task's time and the last one's, and such a task's in the wave before a partial last
    one), the first wave's task, the followers, and the last wave's task."""
    prefetch, follower_task, last_extra, before_last = follower
    later = later_task if isinstance(handover, int) and handover == 0 else later_task + handover
    wave_starts = task
    if isinstance(prefetch, int) and prefetch == 0:
        wave_starts = wave_starts + ops.mul(sched.waves - 1, later)
    else:
        # With two waves or more: the first wave's prologue and the first task carrying the
        # second's first tiles, the followers carrying the next ones' (``follower_task``),
        # and the last carrying none (``last_extra``: what the first and the last add).
        pipelined = ops.mul(prefetch, ops.min(1, sched.waves - 1))
        waves = ops.mul(sched.waves - 1, ops.choose(prefetch, [later, follower_task]))
        wave_starts = wave_starts + waves + ops.mul(pipelined, last_extra)
        # (of three waves or more, the one before the last is such a follower: with two, the
        # first task, which ``dma_cycles`` costs with the second wave's clusters already)
        before = ops.mul(prefetch, ops.min(1, ops.max(sched.waves - 2, 0)))
        wave_starts = wave_starts + ops.mul(before, before_last - follower_task)
    return ops.mul(sched.phases, wave_starts + reduction) + store_tail


def last_stores_cycles(ops: Ops, q: Quantities, k: Consts, sched: Schedule, store: Stream) -> Value:
    """What the last wave's stores add to the memory floor: they leave after its compute,
    when nothing else is left to move, each cluster's through its own path, which the floor
    counted at the memory's share (``store_excess_table``). A last wave of ``slots - (waves -
    1) x C`` clusters in order fills whole subtrees (half a wave of Manticore is one L3
    quadrant: 128 of its 256 B/cycle); a layer of one spread wave reaches every uplink
    (``tiling.task_clusters``). 0 for ``input_parallel``: its phases end with the root's
    store. One table lookup and one product per candidate: the formula is built for every
    candidate of every placement of a network plan."""
    table = k.store_excess_cycles_per_byte_scaled
    assert table is not None, "Consts has no store_excess_cycles_per_byte_scaled"
    excess = ops.lookup(sched.last - 1 + ops.mul(in_order(ops, q, k, sched), k.clusters), table)
    stores = ops.cdiv(ops.mul(store.payload, excess), SCALE)
    return ops.choose(q.algorithm, [stores, stores, 0])


def latency_cycles(
    ops: Ops, k: Consts, phases: Value, memory_floor: Value, last_stores: Value = 0
) -> Value:
    """The layer's latency: its phases, but never faster than main memory can deliver, then
    the last wave's stores at their own path (``last_stores_cycles``), and the last store's
    round trip after that (the write is done when acknowledged)."""
    return ops.max(phases, memory_floor + last_stores + k.round_trip("output"))


# -- traffic, memory floor and energy ----------------------------------------------------------


@dataclass(frozen=True)
class Traffic:
    """Words the whole layer moves (report Eq. 7, 9, 10, 12/13 generalised): each stream
    from or to its memory level (``placement``), and between clusters."""

    input_load_words: Value
    filter_load_words: Value
    residual_load_words: int  # the epilogue's residual operand, read once
    store_words: int
    intercluster_words: Value
    placement: Placement = HBM_ONLY

    def stream_words(self) -> dict[str, Value]:
        """Words of each stream (``ir.placement.STREAMS``)."""
        return {
            "input": self.input_load_words,
            "weights": self.filter_load_words,
            "residual": self.residual_load_words,
            "output": self.store_words,
        }

    def words_at(self, level: MemoryLevel) -> Value:
        """Words of the streams placed at ``level`` (0 if none is)."""
        total: Value = None
        for stream, words in self.stream_words().items():
            if self.placement.level(stream) == level:
                total = words if total is None else total + words
        return 0 if total is None else total

    def offchip_words(self) -> Value:
        """Words from and to the HBM (off-chip)."""
        return self.words_at("hbm")

    def l2_words(self) -> Value:
        """Words from and to the on-chip L2."""
        return self.words_at("l2")


def multicast_loads(
    ops: Ops, q: Quantities, k: Consts, wave: MulticastWave, stack_input: Value, stack_filter: Value
) -> tuple[Value, Value]:
    """``output_stack`` loads with multicast (module docstring): the input once per stack
    chunk (groups = 1: every stack reads every slice), the filters once per tile chunk."""
    once = (  # groups > 1: stacks read different slices, loaded per task as without multicast
        ops.mul(wave.stack_chunks, q.tile_in_pixels_sum) * (k.batch * k.in_channels)
        if k.groups == 1
        else stack_input
    )
    stack_input = ops.choose(q.multicast, [stack_input, once])
    stack_filter = ops.choose(q.multicast, [stack_filter, wave.tile_chunks * k.weight_words])
    return stack_input, stack_filter


def memory_traffic(ops: Ops, q: Quantities, k: Consts, sched: Schedule) -> Traffic:
    """Alg. 1/2 read each stack's input slices of every tile (halos included) and the filters
    once per tile (Eq. 7); Alg. 3 reads the input once per share group and forwards it to the
    other members (Eq. 9, 10); Alg. 4/5 read the input once per stack and the filters once
    per batch tile, and reduce ``active - 1`` private stacks between clusters (Eq. 12/13).
    A layer without weights loads no filters. Every output is stored once, and its residual
    operand (if any) read once. Each stream's words are at its memory level; forwarded and
    reduced words move between clusters wherever the stream lives."""
    alg, pixels = q.algorithm, q.tile_in_pixels_sum
    one_pass = k.batch * k.in_channels  # words of one input pass, per pixel
    stack_input = ops.mul(q.stack_in_channels_sum, pixels) * k.batch
    stack_filter = sched.tiles * k.weight_words
    if sched.wave is not None:
        stack_input, stack_filter = multicast_loads(
            ops, q, k, sched.wave, stack_input, stack_filter
        )
    input_load = ops.choose(
        alg,
        [
            stack_input,
            ops.mul(sched.share_groups, pixels) * one_pass,
            q.stacks * (one_pass * k.in_pixels),
        ],
    )
    filter_load = (
        ops.choose(
            alg,
            [stack_filter, sched.tiles * k.weight_words, q.batch_tiles * k.weight_words],
        )
        if k.has_filters
        else 0
    )
    if k.prologue_pixels:
        # ``weight_words`` counts a fused depthwise's weights once per tile; every stack of
        # the tile loads them (output_stack and Alg. 3 only: a pair is never input_parallel)
        dw_words = k.in_channels * k.prologue_pixels
        filter_load = filter_load + ops.mul(sched.tiles, q.stacks - 1) * dw_words
    intercluster = ops.choose(
        alg,
        [
            0,
            ops.mul(q.stacks - sched.share_groups, pixels) * one_pass,
            (sched.active - 1) * (k.out_channels * k.batch),
        ],
    )
    stores = k.batch * k.output_words
    residual = stores if k.has_residual else 0
    return Traffic(input_load, filter_load, residual, stores, intercluster, k.placement)


def memory_occupancy_scaled(ops: Ops, q: Quantities, k: Consts, traffic: Traffic) -> Value:
    """HBM occupancy (bytes x SCALE) of the HBM streams: payload over the DMA efficiency of
    each operand's runs (seed 004 Table II); the traffic in bytes is unchanged by it."""
    if not k.has_dma_efficiency:
        return traffic.offchip_words() * k.word_bytes * SCALE
    words = traffic.stream_words()
    inverse_efficiency = {
        "input": q.input_inverse_efficiency,
        "weights": q.filter_inverse_efficiency,
        "output": q.output_inverse_efficiency,
        "residual": q.residual_inverse_efficiency,
    }
    occupied: Value = 0
    for stream, inverse in inverse_efficiency.items():
        if k.level(stream) == "hbm" and not (stream == "residual" and not words[stream]):
            occupied = occupied + ops.mul(words[stream], inverse)
    return occupied * k.word_bytes


def output_stores(
    ops: Ops,
    q: Quantities,
    sched: Schedule,
    traffic: Traffic,
    work: TaskWork,
    last: TaskSpread,
    first_output: Value,
) -> tuple[tuple[Value, Value], ...]:
    """Output words and the cycle before which none of them can cross the tree's cut
    (``memory_floor_cycles``): the largest task's output is ready at ``first_output`` (its
    first tiles and compute). With several waves every store follows it; in a layer of one
    wave the ``last.count`` tasks as large as it (``task_spread``) do, those as large in
    output ``last.near_lead`` sooner, and every store follows the smallest task's output,
    ``last.lead`` sooner. ``input_parallel``'s phases store after their reduction."""
    several = ops.min(1, sched.waves - 1)
    largest = ops.choose(several, [ops.mul(last.count, work.store_words), traffic.store_words])
    largest = ops.choose(q.algorithm, [largest, largest, traffic.store_words])
    if isinstance(last.lead, int) and last.lead == 0:
        return ((largest, first_output),)
    near = ops.mul(last.near_count, work.store_words)
    return (
        (largest, first_output),
        (near, ops.max(0, first_output - last.near_lead)),
        (traffic.store_words, ops.max(0, first_output - last.lead)),
    )


def memory_floor_cycles(
    ops: Ops,
    k: Consts,
    occupancy_scaled: Value,
    l2_bytes: Value,
    traffic: Traffic,
    stores: tuple[tuple[Value, Value], ...] = (),
    idle: Value = 0,
) -> Value:
    """No mapping is faster than the HBM delivers its occupancy at its bandwidth, nor than
    the L2 delivers its bytes at its own (two memories, working at once), nor than the tree
    carries them: every load comes down and every store goes up through its narrowest cut,
    each direction on wires of its own (``tree_cut_bytes_per_cycle``). Whatever the memory
    (a placement must not look faster for lacking a floor), but not built where it cannot
    bind: with every stream in HBM and a cut as wide as the HBM (Manticore's), whose floor
    counts the loads and the stores together (``consts``). The stores cannot cross the cut
    before there is an output to store: ``stores`` gives (words, the cycle before which none
    of them is ready; default: every store, from the start) (``output_stores``). The
    memories and the tree idle ``idle`` cycles while the clusters wait together
    (``DmaCycles.waits``): the loads' floors start after them; the stores' start later
    anyway, the first output being after those waits."""
    floors = [idle + ops.cdiv(occupancy_scaled, k.hbm_bytes_per_cycle_scaled)]
    if k.placement.uses_l2:
        floors.append(idle + ops.cdiv(l2_bytes * SCALE, k.l2_bytes_per_cycle_scaled))
    if k.tree_cut_bytes_per_cycle_scaled:
        down = traffic.input_load_words + traffic.filter_load_words
        down = down + traffic.residual_load_words
        for words, start in ((down, idle), *(stores or ((traffic.store_words, idle),))):
            floors.append(
                start + ops.cdiv(words * (k.word_bytes * SCALE), k.tree_cut_bytes_per_cycle_scaled)
            )
    return ops.max(*floors)


def fill_floor_cycles(
    ops: Ops,
    q: Quantities,
    k: Consts,
    sched: Schedule,
    traffic: Traffic,
    work: TaskWork,
    l1: L1Buffers,
    prefetch: Value,
    ready: Value,
) -> Value:
    """No memory carries what nobody has asked for yet. Until the first wave's first output
    is ready (``ready``: its round trip, first tiles and compute, less the smallest task's
    ``lead``), a cluster asks only for its first task's tiles and, where its tasks load their
    followers' first tiles (``follower_cycles``), the second's: at most ``C`` largest tasks'
    loads. Every other byte of the layer (the later waves' loads, every store) crosses each
    memory after ``ready``, at its bandwidth. The memory otherwise idles meanwhile, bar the
    first wave's streams: with tasks that compute long on tiles loaded in their prologue
    (Alg. 3 with as many steps as members loads a task's whole input first), a layer bound
    by its memory's bytes lasts the first wave's compute longer than those bytes take.
    (MobileNetV2's ``features.2.conv.0.0`` with one-channel steps: six waves, the HBM
    carrying 22 B/cycle of filters during the first wave's 2,106 cycles of compute.)

    A lower bound whatever the order of the tasks: a task of the first wave loads no more
    than the largest one, and the payload (not the DMA efficiency's occupancy) is what a
    memory carries at least. 0 for ``input_parallel``, whose phases each load their input
    batch apart."""
    several = ops.min(1, sched.waves - 1)
    filter_words = work.filter_words
    if k.has_filters:
        filter_words = filter_words + ops.mul(prefetch, first_filter_words(q, k, l1))
    first_wave = {
        "input": work.offchip_input_words + ops.mul(prefetch, l1.tile_words["input"]),
        "weights": filter_words,
        "residual": work.residual_words,
    }
    levels = [("hbm", k.hbm_bytes_per_cycle_scaled)]
    if k.placement.uses_l2:
        levels.append(("l2", k.l2_bytes_per_cycle_scaled))
    floors = []
    for level, rate in levels:
        rest: Value = 0
        for stream, words in traffic.stream_words().items():
            if k.level(stream) != level or (isinstance(words, int) and words == 0):
                continue
            if stream == "output":
                rest = rest + words
            else:
                later = ops.max(0, words - first_wave[stream] * k.clusters)
                rest = rest + ops.choose(several, [0, later])
        floors.append(ready + ops.cdiv(rest * (k.word_bytes * SCALE), rate))
    fill = ops.max(*floors)
    return ops.choose(q.algorithm, [fill, fill, 0])


def energy_pj(k: Consts, traffic: Traffic, cycles: Value) -> Value:
    """Energy (``ir.machine.whole_pj``, pJ): the FPU operations are fixed by
    the layer (ASSUMPTION: each costs the machine's energy of a MAC); mappings differ in the
    bytes they move, each byte at its memory's energy (HBM or L2), and in their time, each
    cycle at the machine's static energy (what the chip draws whatever it does: without it
    a slower schedule that moves a few bytes less would count as cheaper). A fused
    depthwise's operations are counted once (``Layer.ops``): its recomputation by every
    stack costs time, hence static energy, but its dynamic part is not counted; so are a
    fused 1x1's (its halos computed twice)."""
    prologue = k.output_words // k.out_channels * k.in_channels * k.prologue_ops
    expansion = k.in_pixels * k.out_channels * k.expansion_ops
    energy = (
        whole_pj(
            k.batch
            * (k.output_words * k.ops_per_output + prologue + expansion)
            * k.op_energy_fj
            / 1000
        )
        + traffic.offchip_words() * k.hbm_word_energy
        + traffic.intercluster_words * k.noc_word_energy
    )
    if k.placement.uses_l2:
        energy = energy + traffic.l2_words() * k.l2_word_energy
    if k.static_energy_per_cycle:
        energy = energy + cycles * k.static_energy_per_cycle
    return energy


# -- the formula -------------------------------------------------------------------------------


def evaluate(
    ops: Ops,
    quantities: dict[str, Value],
    k: Consts,
    alloc_override: dict[str, int | None] | None = None,
) -> dict[str, Value]:
    """Footprint, traffic and cycles of the mapping(s) whose quantities are ``quantities``.

    ``alloc_override`` (scalar evaluation only) gives explicit buffer bytes, as the report's
    fixed 16 KiB buffers; otherwise each buffer is ``depth x tile`` rounded up to the bank.
    Outputs: ``l1`` bytes, per operand ``tile_words_*``, ``need_bytes_*`` and
    ``alloc_bytes_*``, word counts of the traffic (each stream's, wherever it lives),
    ``offchip_bytes`` (the HBM streams') and ``l2_bytes`` (the L2 streams'), the cycle
    figures, ``cycles`` (the latency) and ``energy`` (whole pJ).
    """
    q = Quantities(**quantities)
    tiles = task_tiles(ops, q, k)
    l1 = l1_buffers(ops, q, k, tiles, alloc_override)
    work = task_work(ops, q, k, tiles)
    sched = schedule(ops, q, k)
    rates = stream_rates(ops, q, k, sched)
    store = store_stream(ops, q, k, work, sched)
    residual = residual_stream(ops, q, k, work, sched)
    compute = compute_cycles(ops, k, work)
    dma = dma_cycles(ops, q, k, l1, work, sched, rates, residual, store, compute)
    last = task_spread(ops, q, k, sched, compute, dma, work)
    task_store = task_store_cycles(ops, q, k, sched, store, rates, last)
    exposed_store = exposed_store_cycles(ops, q, task_store)
    task = task_cycles(ops, k, compute, dma, exposed_store)
    store_pace = store_pace_cycles(ops, q, k, store)
    prefetch, steady, last_extra, before_last = follower_cycles(
        ops, q, k, compute, dma, exposed_store
    )
    follower = (
        prefetch,
        ops.max(steady, store_pace),
        last_extra,
        ops.max(before_last, store_pace),
    )
    reduction = reduction_cycles(ops, q, k, sched)
    tail = store_tail_cycles(ops, q, k, store, sched, last, task_store)
    # a later wave's task: its stream beside the store of the wave before (``beside_store``)
    later_dma = replace(dma, overlapped=dma.beside_store)
    later_task = ops.max(task_cycles(ops, k, compute, later_dma, exposed_store), store_pace)
    phases = phases_cycles(ops, sched, task, reduction, tail, dma.handover, follower, later_task)
    traffic = memory_traffic(ops, q, k, sched)
    # the largest task's output: after its first tiles' round trip, its loads and its compute
    first_output = task_cycles(ops, k, compute, dma, 0)
    occupancy = memory_occupancy_scaled(ops, q, k, traffic)
    l2_bytes = traffic.l2_words() * k.word_bytes
    memory_floor = memory_floor_cycles(
        ops,
        k,
        occupancy,
        l2_bytes,
        traffic,
        output_stores(ops, q, sched, traffic, work, last, first_output),
        dma.waits,
    )
    last_stores = last_stores_cycles(ops, q, k, sched, store)
    # the first wave's clusters start together: the memory is idle while they all wait for
    # their single-buffered tiles (``DmaCycles.waits``), or compute before any byte of the
    # later waves is asked for (``fill_floor_cycles``)
    ready = first_output - last.lead
    fill = fill_floor_cycles(ops, q, k, sched, traffic, work, l1, follower[0], ready)
    floor = ops.max(memory_floor, fill)
    cycles = latency_cycles(ops, k, phases, floor, last_stores)
    return {
        **{f"need_bytes_{op}": l1.need_bytes[op] for op in OPERANDS},
        **{f"tile_words_{op}": l1.tile_words[op] for op in OPERANDS},
        **{f"alloc_bytes_{op}": l1.alloc_bytes[op] for op in OPERANDS},
        "l1": l1.l1_bytes,
        "task_ops": work.ops,
        "slots": sched.slots,
        "waves": ops.mul(sched.phases, sched.waves),  # over all phases
        "phases": sched.phases,
        "active_clusters": sched.active,
        "task_cycles": task,
        "compute_cycles": compute,
        "prologue_dma_cycles": dma.prologue,
        "overlapped_dma_cycles": dma.overlapped,
        "exposed_dma_cycles": dma.exposed,
        "reduction_cycles": ops.mul(sched.phases, reduction),  # over all phases
        "input_load_words": traffic.input_load_words,
        "filter_load_words": traffic.filter_load_words,
        "residual_load_words": traffic.residual_load_words,
        "store_words": traffic.store_words,
        "intercluster_words": traffic.intercluster_words,
        "offchip_bytes": traffic.offchip_words() * k.word_bytes,
        "l2_bytes": l2_bytes,
        "memory_floor_cycles": memory_floor,
        "memory_occupancy_scaled": occupancy,
        "cycles": cycles,
        "energy": energy_pj(k, traffic, cycles),
    }
