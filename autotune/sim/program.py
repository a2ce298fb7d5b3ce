"""The programs the clusters run: the report's algorithms at tile granularity.

**Output stacks** (Alg. 1-3 generalised). Tasks occupy cluster slots in the grid's order
(``tiling.TaskGrid``; ``tiling.task_clusters``: an Alg. 1/2 layer of one wave of fewer than C
tasks spreads them over the tree, in the machine's ``wave_order``); each cluster runs its tasks
one after the other, with no barrier between waves (a "parallelize for" over clusters is a
static round-robin loop). A task is a prologue, a stream and a store (``costs``). A single
output buffer makes the cluster wait for its store; a double one lets the store run behind the
next task, which waits for it only before storing again. Alg. 3 share groups move in lockstep
(``engine``); each member reads its next input tile from the next member of the ring, except
every n-th step when all members load their own next slice from HBM (Alg. 3: slice ``d`` comes
from main memory to the member with ``d mod n`` = its index), so the group loads every slice
from HBM once. A forwarded tile's round trip is the quadrant latency plus the epoch counter
increment back to the source (half a round trip), and only as many tiles can be forwarded ahead
as the source's forwarding buffer holds (one, unless ``share_bytes`` gives more).

**Multicast** (``output_stack`` with ``multicast``, MPPA3, seed 003 Sec. IV). The tasks of a
wave (``tiling``: a rectangle of tiles x stacks) move in lockstep as one agent, as a share
group does: each input band and filter tile the wave needs is one main-memory read whose bytes
arrive at every receiving cluster's port, while the HBM and the links above the clusters carry
them once (charged to one receiver, the carrier). A stream in the L2 is multicast the same way:
the L2 and the links below the root carry it once.

**Input parallel** (Alg. 4/5). One run per phase (a stack of outputs for a batch tile):
each cluster takes tasks ``k = cid, cid + C, ...`` of ``in_c`` input slices, loads the input
batch (prefetched during the previous task when the input buffer is double) and streams one
filter tile per output channel into its private partial output. Then the private outputs are
summed by a binary tree over cluster ids (Sec. 3.1.3: pairs in an L1 quadrant first, then up
the levels; 127 reads of D_O·B words for 128 clusters), the root applies the epilogue
(reading the stack's residual operand first, if it has one) and stores the stack, and all
clusters meet at a barrier (an atomic round trip to the top level of the tree).

**First tiles.** A task's prologue moves its bytes and then waits their round trip, a pure
wait that takes no bandwidth: nothing is in flight before the first tiles, so the memory
serves them while the requests are on their way and they arrive a round trip after that
(report Sec. 2.1.2: the buffers cover the round trip of the tiles *after* the first). Later
tiles stream with the round trip inside their own time (several in flight); a task whose
prologue is its own (Alg. 1/2, multicast waves too) requests its first window of them with its
first tiles (Alg. 1 issues ``DmaLoad(I[d_i + 1])`` before ``DmaWait(I[d_i])``), so that
window's round trip passes beside the prologue's (``costs.stream_own``'s ``lead``). The first
input step is a whole one (``in_c`` slices) even when the task's average step is shorter
(only the last may be).

**Double-buffered streams** (Alg. 1-3 with double input and filter buffers). The report's
buffers let "data transfers by the DMA engine run fully in background" (Sec. 2.1.2): a
task's later tiles are a transfer of their own (the "stream" track), paced by their
round-trip chains and engine (``_ProgramPart.pace``), and the compute does not wait for each
byte as in one Work: a burst of other traffic (a wave's stores, the residual read, the next
tiles) delays the task only when its loads fall behind its compute as a whole.

**Single buffers.** A single-buffered operand's later tiles load after the compute of the
tile before (the report's loops without the prefetch): the cores wait for each, and a
double-buffered stream beside them can run no more than its buffer ahead of the compute, so
it waits too. Those bytes are a part of their own (``single``) before the stream: a round trip
per tile (a request alone: its latency adds to its transfer) after a transfer that contends
with the other clusters' traffic of that time. (Folded into the stream as bytes it could move
while the cores compute, they borrowed the bandwidth that round-trip-paced streams leave,
which clusters waiting together for their next step cannot.) A multicast wave keeps them in
its stream, as before.

**The next task's first tiles** (``output_stack`` with double input and filter buffers). A
task's last step leaves a slot of each buffer free: a cluster loads its next task's first
tiles beside the stream (the "next" track), so only its first task waits for a prologue,
and the others' round trips are inside their transfer, as in a stream. Alg. 3 groups and
multicast waves keep a prologue per task (``model.formulas.follower_cycles`` says why).

**Memories.** Each stream (input, weights, residual, output) is loaded from or stored to
the memory its ``Placement`` names (``memory``): an L2 transfer waits the L2's round trip
instead of the HBM's and is routed to the L2. A prologue that loads its input tile from
memory and then its filter tile waits until the later of the two arrives.

**Residual operands.** An output-stack task whose layer's epilogue adds a residual reads the
residual tile (its output tile's region) before its store: with a double output buffer the
read is issued when the stream starts and runs behind it (a background "load"; the
residual buffer has a second slot), with a single one it follows the stream.

Shortcuts, and why they hold:

* Steps within a task: costed in steady state (``costs``), so a task is three events, not
  one per slice; totals are exact.
* Phases of Alg. 4/5 with equal shapes that start from the same state (the barrier resets
  everything but a background store carried over) take exactly the same time: each distinct
  (shape, carried store) is simulated once and replayed.
* Identical clusters are not simulated separately in the program, but the network solver
  sees every flow; clusters that start together with equal tasks stay in lockstep and their
  events coincide, so a full wave costs a handful of events.
* When a run would have more than ``ITEM_BUDGET`` agent items, the middle tasks of each agent
  are merged into chunks (its first and last task stay exact: they carry the start-up burst
  and the load imbalance of the last wave). A chunk moves the exact bytes in the exact
  uncontended time of its tasks (each task at least as long as each of its background
  transfers: the next task's first tiles and the store run one task ahead, no more); what it
  approximates is the demand profile inside it (the fluid model averages it, as it does
  inside every stream).

Spatial tiles load their halo rows from HBM (``tiling`` gives every tile its input band);
no halo is exchanged between clusters.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from autotune.ir.machine import Machine
from autotune.sim.costs import TaskCosts, Transfers, stream_own
from autotune.sim.engine import (
    Instr,
    MemberShare,
    SetFlag,
    StartTransfer,
    WaitFlag,
    WaitTransfer,
    Work,
)
from autotune.sim.interconnect import Interconnect, Route
from autotune.sim.l1 import L1Plan
from autotune.sim.memory import Memories
from autotune.tiling import TaskGrid, dma_efficiency, output_runs, task_clusters

#: Agent items per run beyond which an agent's middle tasks are merged into chunks.
ITEM_BUDGET = 1024

_FIELDS = (
    "bytes",
    "own",
    "own_agent",
    "compute",
    "load",
    "store",
    "peer",
    "beats",
    "hbm",
    "l2_load",
    "l2_store",
)
#: The fields a merged chunk sums over its tasks (its durations are costed apart).
_SUMMED = tuple(f for f in _FIELDS if f not in ("own", "own_agent"))


@dataclass(frozen=True)
class RunSpec:
    """One run of the engine: fresh programs for every agent, and how it ends."""

    key: Hashable | None  # runs with equal keys (and carry) are identical
    make: Callable[[], list[Iterator[Instr]]]
    participates: np.ndarray | None = None  # agents that wait at the closing barrier
    barrier: float = 0.0


@dataclass
class _ProgramPart:
    """One part of the program (prologue, stream, store) for every task, as arrays."""

    bytes: np.ndarray
    own: np.ndarray  # the task's uncontended duration
    own_agent: np.ndarray  # of its lockstep group (= own outside Alg. 3)
    compute: np.ndarray
    load: np.ndarray  # payload bytes from HBM, to HBM, from a peer
    store: np.ndarray
    peer: np.ndarray
    beats: np.ndarray
    hbm: np.ndarray  # HBM bandwidth bytes the loads and stores occupy (costs)
    l2_load: np.ndarray  # payload bytes from and to the L2 (``memory``)
    l2_store: np.ndarray
    received: np.ndarray | None = None  # multicast: bytes through the port from HBM or L2
    #: The part of ``own`` that is a pure wait, no bytes moving: the first tiles' round trip
    #: (nothing is in flight before them, so it cannot overlap their transfer).
    delay: np.ndarray | None = None
    #: The uncontended time of the part's transfers alone, without its compute (a stream's
    #: round-trip chains and engine; ``_Tasks.stream``).
    pace: np.ndarray | None = None


class _Tasks:
    """Per-task program parts plus where each task runs; builds the agents' programs."""

    def __init__(
        self,
        net: Interconnect,
        width: int,
        cluster: np.ndarray,
        peer: np.ndarray,
        parts: dict[str, _ProgramPart],
        store_blocking: bool,
    ) -> None:
        self.net, self.width = net, width
        self.cluster, self.peer = cluster, peer
        self.arrays = parts
        self.store_blocking = store_blocking

    def part(self, t: int, name: str) -> MemberShare:
        """Task ``t``'s share of program part ``name`` (scalars read on demand: only the
        exact, unmerged tasks ever get here)."""
        v = self.arrays[name]
        b, cluster = float(v.bytes[t]), int(self.cluster[t])
        route = None
        if b > 0:
            received = None if v.received is None else float(v.received[t]) / b
            route = self.net.route(
                cluster,
                float(v.load[t]) / b,
                float(v.store[t]) / b,
                int(self.peer[t]),
                float(v.peer[t]) / b,
                float(v.beats[t]) * self.width / b,
                float(v.hbm[t]) / b,
                received,
                float(v.l2_load[t]) / b,
                float(v.l2_store[t]) / b,
            )
        return MemberShare(cluster, b, route, float(v.compute[t]), float(v.own[t]))

    def work(self, label: str, name: str, tasks: list[int]) -> Work:
        parts = tuple(self.part(t, name) for t in tasks)
        return Work(label, float(self.arrays[name].own_agent[tasks[0]]), parts)

    def flows(self, name: str, tasks: list[int]) -> tuple[MemberShare, ...]:
        """Part ``name`` of ``tasks`` without its ``delay``: the bytes' transfer alone."""
        parts = self.work("", name, tasks).parts
        delay = self.arrays[name].delay
        if delay is None:
            return parts
        return tuple(
            replace(share, own=share.own - float(delay[t]))
            for share, t in zip(parts, tasks, strict=True)
        )

    def timed(self, label: str, name: str, tasks: list[int]) -> Iterator[Instr]:
        """Part ``name`` of ``tasks``; with a ``delay``, its bytes first (their transfer at
        the rate the rest of its time allows) and then the round trip as a pure wait, so
        that the wait takes no share of any bandwidth."""
        whole = self.work(label, name, tasks)
        if self.arrays[name].delay is None:
            yield whole
            return
        flows = self.flows(name, tasks)
        flow_own = max(share.own for share in flows)
        yield Work(label, flow_own, flows)
        yield self.wait(label, tasks, whole.own - flow_own)

    def wait(self, label: str, tasks: list[int], cycles: float) -> Work:
        """A pure wait of ``cycles`` on the clusters of ``tasks``: no bytes, no compute."""
        waits = tuple(MemberShare(int(self.cluster[t]), 0.0, None, 0.0, cycles) for t in tasks)
        return Work(label, cycles, waits)

    def drain(self, items: list[list[int] | _Chunk]) -> Iterator[Instr]:
        """The end of an agent's program: its last store done, and a double-buffered one's
        round trip (the write's acknowledgement; the single-buffered ones wait theirs in
        ``store``)."""
        yield WaitTransfer("store")
        last = items[-1] if items else None
        store = self.arrays.get("store")
        if self.store_blocking or store is None or store.delay is None:
            return
        if isinstance(last, list) and store.bytes[last[0]] > 0:
            yield self.wait("store", last, float(store.delay[last[0]]))

    @property
    def background(self) -> set[str]:
        """Parts that run behind the program: a double-buffered store and the residual read
        of its second slot, input prefetches."""
        return {"prefetch", "next"} | (set() if self.store_blocking else {"store", "residual"})

    def sequence(self, items: list[list[int] | _Chunk]) -> Iterator[Instr]:
        """An agent's items in order: per task its prologue, stream and store (a prefetch of
        the next task's input starts with the stream), or a merged chunk as one Work. A
        residual tile is read before the store: behind the stream when the output buffer is
        double (a second residual slot), else after it."""
        for item in items:
            if isinstance(item, _Chunk):
                yield item.work
                continue
            ahead = self.arrays.get("next")
            if ahead is not None:
                yield WaitTransfer("next")  # this task's first tiles, loaded by the task before
            if self.arrays["load"].own_agent[item[0]] > 0:
                yield from self.timed("load", "load", item)
            if ahead is not None:
                moving = tuple(p for p in self.work("", "next", item).parts if p.bytes > 0)
                if moving:
                    yield StartTransfer("next", "next", moving)
            if "prefetch" in self.arrays:
                yield WaitTransfer("load")  # the input prefetched by the last task
                if self.arrays["prefetch"].bytes[item[0]] > 0:
                    yield StartTransfer("load", "prefetch", self.work("", "prefetch", item).parts)
            residual = "residual" in self.arrays and self.arrays["residual"].bytes[item[0]] > 0
            if residual and not self.store_blocking:
                yield StartTransfer("load", "residual", self.work("", "residual", item).parts)
            single = self.arrays.get("single")
            if single is not None and single.bytes[item[0]] > 0:
                yield from self.timed("single", "single", item)
            yield from self.stream(item)
            if residual:
                if self.store_blocking:
                    yield from self.timed("residual", "residual", item)
                else:
                    yield WaitTransfer("load")
            if "store" in self.arrays:
                yield from self.store(item)

    def stream(self, tasks: list[int]) -> Iterator[Instr]:
        """The tasks' compute beside the loads of their later tiles. Where the stream has a
        ``pace`` the loads are a transfer of their own, paced by the stream's uncontended time (its
        round-trip chains and engine), and the compute does not wait for each byte as it
        would in one Work: a double buffer holds a step ahead, so a burst of other traffic
        that slows the loads for a while (a wave's stores, the next tiles) delays the
        compute only when the loads fall behind it as a whole. The task ends when both are
        done."""
        whole = self.work("compute", "stream", tasks)
        pace = self.arrays["stream"].pace
        if pace is None:
            yield whole
            return
        moving = tuple(
            replace(p, own=float(pace[t]))
            for p, t in zip(whole.parts, tasks, strict=True)
            if p.bytes > 0
        )
        if moving:
            yield StartTransfer("stream", "stream", moving)
        compute = tuple(
            MemberShare(p.cluster, 0.0, None, p.compute, p.compute) for p in whole.parts
        )
        yield Work("compute", max(p.compute for p in compute), compute)
        if moving:
            yield WaitTransfer("stream")

    def store(self, tasks: list[int]) -> Iterator[Instr]:
        if self.arrays["store"].bytes[tasks[0]] <= 0:
            return
        if self.store_blocking:
            yield from self.timed("store", "store", tasks)
        else:
            yield WaitTransfer("store")
            yield StartTransfer("store", "store", self.flows("store", tasks))


@dataclass
class _Chunk:
    work: Work


def _plan_items(
    agent: np.ndarray, rank: np.ndarray, n_agents: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per task: whether it is merged into a chunk, and the chunk's rank within its agent
    (``ITEM_BUDGET`` read at each call, so a test can lift it)."""
    items = np.zeros(n_agents, dtype=np.int64)
    np.maximum.at(items, agent, rank + 1)
    busy = max(1, int(np.count_nonzero(items)))
    limit = max(3, ITEM_BUDGET // busy)
    size = np.where(items > limit, -(-(items - 2) // max(limit - 2, 1)), 1)[agent]
    merged = (size > 1) & (rank >= 1) & (rank <= items[agent] - 2)
    chunk = np.where(merged, (rank - 1) // size, -1)
    return merged, chunk


def _chunks(
    tasks: _Tasks,
    agent: np.ndarray,
    chunk: np.ndarray,
    merged: np.ndarray,
    item_members: np.ndarray,
    parts: tuple[str, ...],
) -> dict[tuple[int, int], _Chunk]:
    """Merge the marked tasks of each (agent, chunk) into one Work, one part per cluster."""
    ids = np.flatnonzero(merged)
    if len(ids) == 0:
        return {}
    cl = tasks.cluster[ids]
    n_cl, n_ch = int(cl.max()) + 1, int(chunk.max()) + 1
    key = (agent[ids] * n_ch + chunk[ids]) * n_cl + cl
    ukeys, first, inv = np.unique(key, return_index=True, return_inverse=True)
    uniq = np.stack([ukeys // n_cl // n_ch, ukeys // n_cl % n_ch, ukeys % n_cl])
    n = len(ukeys)

    def total(values: np.ndarray) -> np.ndarray:
        return np.bincount(inv, weights=values[ids], minlength=n)

    def over(values: list[np.ndarray]) -> np.ndarray:
        return np.sum(values, axis=0)

    sums = {f: over([total(getattr(tasks.arrays[p], f)) for p in parts]) for f in _SUMMED}
    multicast = any(tasks.arrays[p].received is not None for p in parts)
    if multicast:
        sums["received"] = over([total(_received(tasks.arrays[p])) for p in parts])
    blocking = [p for p in parts if p not in tasks.background]
    behind = [p for p in parts if p in tasks.background]

    def paced(field: str) -> np.ndarray:
        """Per task, its blocking parts' time, or a background transfer's when that is longer:
        a task waits for the first tiles the task before loaded beside it ("next", "prefetch"),
        and a store for the store before it, so in a run of tasks each takes at least the
        time of each of its background transfers (their round trips included)."""
        own = over([getattr(tasks.arrays[p], field) for p in blocking])
        for p in behind:
            own = np.maximum(own, getattr(tasks.arrays[p], field))
        return own

    own = total(paced("own"))
    # The agent's own time: each item's lockstep duration once (shared by its members).
    item_own = paced("own_agent") / item_members
    ukey, ainv = np.unique(agent[ids] * n_ch + chunk[ids], return_inverse=True)
    agent_own = np.bincount(ainv, weights=item_own[ids], minlength=len(ukey))
    n_items = np.bincount(ainv, weights=1.0 / item_members[ids], minlength=len(ukey))
    work_of = {
        (int(k) // n_ch, int(k) % n_ch): (float(v), round(float(i)))
        for k, v, i in zip(ukey, agent_own, n_items, strict=True)
    }
    out: dict[tuple[int, int], list[MemberShare]] = {}
    for i in range(n):
        a, c, cluster = (int(x) for x in uniq[:, i])
        b = float(sums["bytes"][i])
        route = None
        if b > 0:
            peer = int(tasks.peer[ids[first[i]]])
            route = tasks.net.route(
                cluster,
                sums["load"][i] / b,
                sums["store"][i] / b,
                peer,
                sums["peer"][i] / b,
                sums["beats"][i] * tasks.width / b,
                sums["hbm"][i] / b,
                sums["received"][i] / b if multicast else None,
                sums["l2_load"][i] / b,
                sums["l2_store"][i] / b,
            )
        out.setdefault((a, c), []).append(
            MemberShare(cluster, b, route, float(sums["compute"][i]), float(own[i]))
        )
    return {
        k: _Chunk(Work(f"{work_of[k][1]} tasks", work_of[k][0], tuple(v))) for k, v in out.items()
    }


def _received(part: _ProgramPart) -> np.ndarray:
    return part.load + part.l2_load if part.received is None else part.received


def _sequences(
    agent: np.ndarray,
    rank: np.ndarray,
    member: np.ndarray,
    merged: np.ndarray,
    chunk: np.ndarray,
    chunks: dict[tuple[int, int], _Chunk],
    n_agents: int,
) -> list[list[list[int] | _Chunk]]:
    """Each agent's items in order: lists of member tasks, or chunks."""
    seqs: list[list[tuple[float, list[int] | _Chunk]]] = [[] for _ in range(n_agents)]
    exact = np.flatnonzero(~merged)
    order = exact[np.lexsort((member[exact], rank[exact], agent[exact]))]
    ag, rk = agent[order].tolist(), rank[order].tolist()
    ts = order.tolist()
    i = 0
    while i < len(ts):
        j = i + 1
        while j < len(ts) and ag[j] == ag[i] and rk[j] == rk[i]:
            j += 1
        seqs[ag[i]].append((rk[i], ts[i:j]))
        i = j
    for (a, c), ch in chunks.items():
        seqs[a].append((0.5 + c / (len(chunks) + 1), ch))  # between the first and last task
    return [[item for _, item in sorted(s, key=lambda e: e[0])] for s in seqs]


# -- output stacks (Alg. 1-3) --------------------------------------------------------------
def stack_runs(
    grid: TaskGrid,
    costs: TaskCosts,
    plan: L1Plan,
    net: Interconnect,
    mem: Memories,
) -> tuple[int, list[RunSpec]]:
    """(agent block size, the one run) of an output-stack mapping whose streams live in
    ``mem``."""
    m = net.machine
    setup, width = m.dma_setup_cycles, m.dma_bytes_per_cycle
    lat_in, lat_w = mem.latency("input"), mem.latency("weights")
    c_total = net.clusters
    shared = grid.algorithm == "output_stack_shared"
    multicast = grid.mapping.multicast
    g = grid.mapping.share_group if shared else (c_total if multicast else 1)
    slot = grid.task_slot
    cluster = task_clusters(grid, m)
    member = slot % g
    n_members = grid.share_members() if shared else np.ones_like(slot)
    peer = cluster - member + (member + 1) % n_members if shared else cluster
    inp, fil, out = costs.input, costs.filter, costs.output
    steps, n_f = inp.tiles, fil.tiles
    in_tile, f_tile = inp.bytes_per_tile(), fil.bytes_per_tile()
    # The first filter tile is a whole one, as the first input step (below); the stream
    # carries the rest, the last step's short ones among them, at their average.
    f_first = fil.first_tile_bytes()
    f_rest_tile = np.where(n_f > 1, (fil.bytes - f_first) / np.maximum(n_f - 1, 1), f_tile)
    in_eng, f_eng = inp.engine_per_tile(setup), fil.engine_per_tile(setup)
    # The steps are costed at their average, but the first is a whole one (``in_c`` slices;
    # only the last may be short): the prologue loads that much. (Alg. 3 keeps the average:
    # which member loads which step from memory is costed per average step.)
    task_in, in_c = grid.task_in_channels, grid.mapping.tile.in_c
    first_share = 1.0 if shared else np.minimum(in_c, task_in) * steps / task_in
    in_first = in_tile * first_share
    in_first_eng = in_eng if shared else inp.first_engine(setup, in_first)

    if shared:
        # Steps member j loads from HBM: j, j + n, j + 2n, ... of the ring's S steps.
        hbm_steps = np.where(member < steps, -(-(steps - member) // n_members), 0)
        first_hbm = member < steps
        rest = steps - 1
        h = np.where(rest > 0, (hbm_steps - first_hbm) / np.maximum(rest, 1), 1.0)
        # A forwarded tile's round trip: the read plus the epoch increment back to the
        # source; as many tiles can be forwarded ahead as the source's forwarding buffer holds.
        ahead = np.maximum(1.0, plan.allocated_bytes["share"] / np.maximum(in_tile, 1.0))
        fwd_wait = 1.5 * net.latency(cluster, peer) / ahead
        fwd = in_eng / ahead + fwd_wait
    else:
        first_hbm, h = np.ones(len(slot), dtype=bool), np.ones(len(slot))
        fwd = fwd_wait = np.zeros(0)
    hbm_unit = in_eng + lat_in  # a tile from memory (HBM or L2)
    k_in = plan.spare_tiles("input", in_tile)
    k_f = plan.spare_tiles("filter", f_rest_tile)
    if shared:
        in_unit = h * hbm_unit / np.where(k_in > 0, k_in, 1) + (1 - h) * fwd
        in_window = np.where(k_in > 0, 1.0, 0.0)
        in_wait = h * lat_in + (1 - h) * fwd_wait  # of a single buffer's tile
    else:
        in_unit, in_window, in_wait = hbm_unit, k_in, lat_in

    mem_lat = _round_trip(lat_in, lat_w, f_eng, np.ones(len(slot), dtype=bool), f_tile > 0)
    first_lat = (
        np.where(first_hbm, mem_lat, 1.5 * net.latency(cluster, peer)) if shared else mem_lat
    )
    pro_bytes = in_first + f_first
    pro_in_hbm = np.where(first_hbm, in_first, 0.0)  # from memory (HBM or L2), not the ring
    in_occ, f_occ = inp.hbm_per_byte(), fil.hbm_per_byte()
    zero = np.zeros(len(slot))
    pro_load, pro_l2, pro_hbm = mem.split(
        ("input", pro_in_hbm, pro_in_hbm * in_occ), ("weights", f_first, f_first * f_occ)
    )
    pro = _ProgramPart(
        pro_bytes,
        in_first_eng + fil.first_engine(setup, f_first) + first_lat,
        np.zeros(0),
        np.zeros_like(in_tile),
        pro_load,
        np.zeros_like(in_tile),
        in_first - pro_in_hbm,
        inp.beats_of(in_first) + fil.beats_of(f_first),
        pro_hbm,
        pro_l2,
        zero,
        delay=first_lat,
    )
    in_rest, f_rest = inp.bytes - in_first, fil.bytes - f_first
    f_unit = f_eng + lat_w
    # A single buffer's later tiles load after the compute of the tile before and before
    # the next (Alg. 1-3 without the prefetch): the cores wait for them, and so does a
    # double-buffered stream beside them, which can run no more than its buffer ahead of
    # the compute. Their bytes are a part of their own (``single``) that the task waits for,
    # contending with the other clusters' traffic at that time (a wave's clusters load
    # their single-buffered steps together), not bytes the stream may move while the cores
    # compute. ``model.formulas.dma_cycles`` charges them so (``exposed``).
    # (A multicast wave's single-buffered tiles stay in its stream: one lockstep transfer
    # per datum for the whole wave, its carrier's bytes apart from its receivers'.)
    in_single = np.where((in_window > 0) | multicast, 0.0, 1.0)
    f_single = np.where((k_f > 0) | multicast, 0.0, 1.0) * (f_tile > 0)
    sg_in, sg_f = in_single * in_rest, f_single * f_rest
    sg_load, sg_l2, sg_hbm = mem.split(
        ("input", h * sg_in, h * sg_in * in_occ), ("weights", sg_f, sg_f * f_occ)
    )
    in_beats_rest = inp.beats - inp.beats_of(in_first)
    f_beats_rest = fil.beats - fil.beats_of(f_first)
    single = _ProgramPart(
        sg_in + sg_f,
        in_single * (steps - 1) * in_unit + f_single * (n_f - 1) * f_unit,
        np.zeros(0),
        np.zeros_like(in_tile),
        sg_load,
        np.zeros_like(in_tile),
        (1 - h) * sg_in,
        in_single * in_beats_rest + f_single * f_beats_rest,
        sg_hbm,
        sg_l2,
        zero,
        # each tile a request alone: its round trip adds to its transfer
        delay=in_single * (steps - 1) * in_wait + f_single * (n_f - 1) * lat_w,
    )
    db_in, db_f = in_rest - sg_in, f_rest - sg_f
    st_load, st_l2, st_hbm = mem.split(
        ("input", h * db_in, h * db_in * in_occ), ("weights", db_f, db_f * f_occ)
    )
    buffers = grid.mapping.buffers
    double = buffers.input_depth == 2 and (buffers.filter_depth == 2 or not np.any(f_tile > 0))
    prefetch = double and not multicast and not shared
    nxt = _next_on_cluster(slot, c_total) if prefetch else None
    # Tasks with a prologue of their own (Alg. 1/2; with the next task's prefetch only a
    # cluster's first): their first stream tiles go out with their first ones. (Alg. 3's come
    # round the ring, after the member before has them.)
    lead = np.full(len(slot), 0.0 if shared else 1.0)
    if nxt is not None:
        lead[nxt[nxt >= 0]] = 0.0
    stream_args = (
        (steps - 1) * (1 - in_single),
        in_unit,
        in_eng,
        in_window,
        (n_f - 1) * (1 - f_single),
        f_unit,
        f_eng,
        k_f,
        lead,
        lat_in,
        lat_w,
    )
    st = _ProgramPart(
        db_in + db_f,
        stream_own(costs.compute, *stream_args),
        np.zeros(0),
        costs.compute,
        st_load,
        np.zeros_like(in_tile),
        (1 - h) * db_in,
        (1 - in_single) * in_beats_rest + (1 - f_single) * f_beats_rest,
        st_hbm,
        st_l2,
        zero,
    )
    if multicast:
        # A wave moves in lockstep; each datum is read once and multicast to the wave's tasks
        # that need it. Its carrier (the wave's first stack for an input tile, the first tile
        # for a stack's filters) is charged with it on the memory it comes from (HBM or L2)
        # and the links; every receiver's port receives all of its bytes.
        a, b = grid.multicast_wave
        in_carrier = (grid.task_index[3] % b == 0) if grid.layer.groups == 1 else True
        f_carrier = grid.task_tile() % a == 0
        for part, in_bytes, f_bytes in ((pro, in_first, f_first), (st, db_in, db_f)):
            part.received = part.load + part.l2_load
            carried_in, carried_f = in_carrier * in_bytes, f_carrier * f_bytes
            part.load, part.l2_load, part.hbm = mem.split(
                ("input", carried_in, carried_in * in_occ),
                ("weights", carried_f, carried_f * f_occ),
            )
    parts = dict(load=pro, single=single, stream=st, store=_tile_part(out, setup, mem, "output"))
    if nxt is not None:
        parts["next"] = _prefetched(pro, nxt)
    if double and not multicast:
        st.pace = stream_own(np.zeros_like(in_tile), *stream_args)
    if grid.layer.epilogue.residual:
        # The output tile's region of the residual operand: one read, costed as the store
        # (set-ups, beats, round trip). Every task reads its own (never multicast).
        parts["residual"] = _tile_part(costs.residual, setup, mem, "residual")
    group = slot // g
    for part in parts.values():
        lock = np.zeros(int(group.max()) + 1)
        np.maximum.at(lock, group, part.own)
        part.own_agent = lock[group]
    tasks = _Tasks(
        net,
        width,
        cluster,
        peer,
        parts,
        grid.mapping.buffers.output_depth == 1,
    )

    n_agents = c_total // g
    agent = cluster // g  # the engine's agent ``a`` is clusters a*g ... a*g + g - 1
    rank = group // n_agents
    merged, chunk = _plan_items(agent, rank, n_agents)
    chunks = _chunks(tasks, agent, chunk, merged, n_members.astype(float), tuple(parts))
    seqs = _sequences(agent, rank, member, merged, chunk, chunks, n_agents)

    def program(items: list[list[int] | _Chunk]) -> Iterator[Instr]:
        yield from tasks.sequence(items)
        yield from tasks.drain(items)

    return g, [RunSpec(None, lambda: [program(s) for s in seqs])]


def _next_on_cluster(slot: np.ndarray, clusters: int) -> np.ndarray:
    """Per task, the task its cluster runs next (the slot a wave later; -1: none)."""
    by_slot = np.full(int(slot.max()) + clusters + 1, -1, dtype=np.int64)
    by_slot[slot] = np.arange(len(slot))
    return by_slot[slot + clusters]


#: The fields of a prologue that move with it to the task that loads it.
_MOVED = ("bytes", "own", "compute", "load", "store", "peer", "beats", "hbm", "l2_load", "l2_store")


def _prefetched(prologue: _ProgramPart, nxt: np.ndarray) -> _ProgramPart:
    """Per task, the prologue of the task its cluster runs next (``nxt``, -1: none), which
    it loads in the background beside its stream; those prologues are then empty. A task's
    last input step and filter tile leave a slot of each double buffer free, and the report's
    buffers let "data transfers by the DMA engine run fully in background" (Sec. 2.1.2): the
    stream does not stop between the tasks of a cluster. The round trip is inside the
    transfer's time, as in a stream."""
    has = nxt >= 0
    after = np.where(has, nxt, 0)

    def moved(values: np.ndarray) -> np.ndarray:
        return np.where(has, values[after], 0.0)

    ahead = _ProgramPart(**{f: moved(getattr(prologue, f)) for f in _MOVED}, own_agent=np.zeros(0))
    emptied = np.zeros(len(has), dtype=bool)
    emptied[nxt[has]] = True
    for f in _MOVED:
        setattr(prologue, f, np.where(emptied, 0.0, getattr(prologue, f)))
    if prologue.delay is not None:
        prologue.delay = np.where(emptied, 0.0, prologue.delay)
    return ahead


def _round_trip(
    lat_in: int, lat_w: int, f_eng: np.ndarray, inputs: np.ndarray, filters: np.ndarray
) -> np.ndarray:
    """Cycles a prologue waits after its engine issued an input tile (where ``inputs``) and,
    ``f_eng`` cycles before the engine is done, a filter tile (where ``filters``): until the
    later of the two arrives (the round trips of their memories, ``lat_in`` and ``lat_w``)."""
    both = np.maximum(lat_w, lat_in - f_eng)
    return np.where(inputs & filters, both, np.where(filters, lat_w, lat_in))


def _tile_part(t: Transfers, setup: int, mem: Memories, stream: str) -> _ProgramPart:
    """The store (``stream`` "output") or the residual read of a task's output tile region:
    its set-ups, bus beats and one round trip to the memory ``stream`` lives in. One
    transfer with nothing in flight beside it: its bytes move, then its round trip passes
    (the read's data, the write's acknowledgement), as a task's first tiles."""
    payload = t.bytes.astype(float)
    zero = np.zeros(len(payload))
    write, l2 = stream == "output", mem.in_l2(stream)
    latency = mem.latency(stream)
    return _ProgramPart(
        payload,
        t.count * setup + t.beats + latency,
        np.zeros(0),
        zero,
        zero if write or l2 else payload,
        zero if not write or l2 else payload,
        zero,
        t.beats.astype(float),
        zero if l2 else t.hbm.astype(float),
        payload if l2 and not write else zero,
        payload if l2 and write else zero,
        delay=np.full(len(payload), float(latency)),
    )


# -- input parallel (Alg. 4/5) -------------------------------------------------------------
def fc_runs(
    grid: TaskGrid,
    costs: TaskCosts,
    plan: L1Plan,
    net: Interconnect,
    precision: str,
    word_bytes: int,
    mem: Memories,
) -> tuple[int, list[RunSpec]]:
    """(1, one run per phase) of an input-parallel mapping whose streams live in ``mem``."""
    m: Machine = net.machine
    setup, width = m.dma_setup_cycles, m.dma_bytes_per_cycle
    lat_in, lat_w = mem.latency("input"), mem.latency("weights")
    c_total = net.clusters
    per_phase = len(grid.in_steps)
    n = grid.n_tasks
    k = np.arange(n) % per_phase
    cluster = k % c_total
    inp, fil = costs.input, costs.filter
    double_in = grid.mapping.buffers.input_depth == 2
    prefetched = double_in & (k >= c_total)
    has_next = double_in & (k + c_total < per_phase)
    nxt = np.minimum(np.arange(n) + c_total, n - 1)
    in_eng, f_eng = inp.engine_per_tile(setup), fil.engine_per_tile(setup)
    f_tile = fil.bytes_per_tile()
    f_beats = fil.beats / fil.tiles
    keep = ~prefetched
    pro_bytes = keep * inp.bytes + f_tile
    zero = np.zeros(n)
    in_occ, f_occ = inp.hbm_per_byte(), fil.hbm_per_byte()
    pro_in = keep * inp.bytes
    pro_load, pro_l2, pro_hbm = mem.split(
        ("input", pro_in, pro_in * in_occ), ("weights", f_tile, f_tile * f_occ)
    )
    pro = _ProgramPart(
        pro_bytes,
        keep * in_eng + f_eng + _round_trip(lat_in, lat_w, f_eng, keep, f_tile > 0),
        np.zeros(0),
        zero,
        pro_load,
        zero,
        zero,
        keep * inp.beats + f_beats,
        pro_hbm,
        pro_l2,
        zero,
    )
    # A double input buffer prefetches the next task's input in the background while this
    # task streams its filters; the next prologue waits for it (Alg. 2's prefetch applied to
    # Alg. 4/5's input batch). Its engine time still delays the filter tiles behind it.
    next_bytes = has_next * inp.bytes[nxt]
    fetch_load, fetch_l2, fetch_hbm = mem.split(("input", next_bytes, next_bytes * in_occ[nxt]))
    fetch = _ProgramPart(
        next_bytes,
        in_eng[nxt] + lat_in,
        np.zeros(0),
        zero,
        fetch_load,
        zero,
        zero,
        has_next * inp.beats[nxt],
        fetch_hbm,
        fetch_l2,
        zero,
    )
    st_bytes = (fil.tiles - 1) * f_tile
    st_load, st_l2, st_hbm = mem.split(("weights", st_bytes, st_bytes * f_occ))
    st = _ProgramPart(
        st_bytes,
        stream_own(
            costs.compute,
            has_next.astype(float),
            in_eng[nxt],
            in_eng[nxt],
            np.ones(n),
            fil.tiles - 1,
            f_eng + lat_w,
            f_eng,
            plan.spare_tiles("filter", f_tile),
        ),
        np.zeros(0),
        costs.compute,
        st_load,
        zero,
        zero,
        (fil.tiles - 1) * f_beats,
        st_hbm,
        st_l2,
        zero,
    )
    for part in (pro, st, fetch):
        part.own_agent = part.own
    tasks = _Tasks(net, width, cluster, cluster, dict(load=pro, prefetch=fetch, stream=st), True)

    rate = m.cluster_macs_per_cycle(precision) * m.fpu_utilization
    active = min(per_phase, c_total)
    participates = np.arange(c_total) < active
    barrier = float(m.levels[-1].latency_cycles)
    out_depth = grid.mapping.buffers.output_depth
    runs, built = [], {}
    for phase in range(grid.n_phases):
        ids = np.arange(phase * per_phase, (phase + 1) * per_phase)
        images = int(grid.task_images[ids[0]])
        stack = int(grid.task_out_channels[ids[0]])
        key = (images, stack, phase == grid.n_phases - 1)
        if key not in built:  # phases of one shape have equal tasks: build their run once
            run = int(output_runs(grid.layer, 1, 1, stack)[0]) * word_bytes
            occupancy = 1.0 / float(dma_efficiency(m, run, write=True))
            epilogue = grid.layer.epilogue
            reduce = _Reduction(
                net,
                setup,
                mem,
                width,
                stack * images / rate,
                stack * images * word_bytes,
                images,
                active,
                out_depth,
                key[2],
                occupancy,
                stack * images * epilogue.ops / rate,
                1.0 / float(dma_efficiency(m, run)) if epilogue.residual else None,
            )
            seqs = _phase_items(tasks, ids, k[ids] // c_total, c_total)
            built[key] = RunSpec(
                key, partial(_fc_programs, tasks, seqs, reduce), participates, barrier
            )
        runs.append(built[key])
    return 1, runs


def _phase_items(
    tasks: _Tasks, ids: np.ndarray, rank: np.ndarray, c_total: int
) -> list[list[list[int] | _Chunk]]:
    """Each cluster's items in one phase (task ``ids[i]`` runs on cluster ``i mod C``)."""
    local = np.arange(len(ids))
    agent = local % c_total
    merged, chunk = _plan_items(agent, rank, c_total)
    chunks = _chunks(
        _Slice(tasks, ids), agent, chunk, merged, np.ones(len(ids)), ("load", "prefetch", "stream")
    )
    seqs = _sequences(
        agent, rank, np.zeros(len(ids), dtype=np.int64), merged, chunk, chunks, c_total
    )
    return [[it if isinstance(it, _Chunk) else [int(ids[t]) for t in it] for it in s] for s in seqs]


class _Slice(_Tasks):
    """The tasks of one phase, renumbered from 0 (what ``_chunks`` indexes)."""

    def __init__(self, tasks: _Tasks, ids: np.ndarray) -> None:
        self.net, self.width, self.store_blocking = tasks.net, tasks.width, tasks.store_blocking
        self.cluster, self.peer = tasks.cluster[ids], tasks.peer[ids]
        self.arrays = {name: _sliced(p, ids) for name, p in tasks.arrays.items()}


def _sliced(part: _ProgramPart, ids: np.ndarray) -> _ProgramPart:
    """``part`` for tasks ``ids`` only."""
    out = _ProgramPart(*(getattr(part, f)[ids] for f in _FIELDS))
    out.delay = None if part.delay is None else part.delay[ids]
    return out


@dataclass(frozen=True)
class _Reduction:
    """The tree reduction of one phase's private outputs and the root's store."""

    net: Interconnect
    setup: int
    mem: Memories  # where the residual read and the store go (their round trips, routes)
    width: int
    adds: float  # cycles to add one private output into another
    stack_bytes: int
    images: int
    active: int
    out_depth: int
    last: bool
    store_occupancy: float = 1.0  # HBM bytes per stored byte (DMA efficiency of its runs)
    epilogue: float = 0.0  # cycles of the root's epilogue on the reduced stack
    #: HBM bytes per byte of the root's residual read (None: the epilogue has no residual)
    residual_occupancy: float | None = None

    def program(self, c: int) -> Iterator[Instr]:
        if c >= self.active:
            return
        adds = self.adds
        beats = -(-self.stack_bytes // self.width)
        step, level = 1, 0
        while step < self.active:
            if c % (2 * step) == step:  # send: my partial is complete
                yield SetFlag((c, level))
                return
            partner = c + step
            if partner < self.active:
                yield WaitFlag((partner, level))
                lat = int(self.net.latency(np.asarray([c]), np.asarray([partner]))[0])
                own = self.setup + lat + beats + adds
                route = self.net.route(c, peer=partner, peer_frac=1.0)
                yield Work(
                    "reduce", own, (MemberShare(c, float(self.stack_bytes), route, adds, own),)
                )
            step, level = step * 2, level + 1
        if c == 0:
            # The root applies the epilogue to the reduced stack (after reading its residual
            # operand, a transfer shaped as the store) and stores it.
            engine = self.setup + self.images * (-(-self.stack_bytes // self.images // self.width))
            if self.residual_occupancy is not None:
                own = engine + self.mem.latency("residual")
                route = self._route("residual", self.residual_occupancy)
                read = MemberShare(0, float(self.stack_bytes), route, 0.0, own)
                yield Work("residual", own, (read,))
            if self.epilogue > 0:
                work = MemberShare(0, 0.0, None, self.epilogue, self.epilogue)
                yield Work("epilogue", self.epilogue, (work,))
            own = engine + self.mem.latency("output")
            route = self._route("output", self.store_occupancy)
            part = MemberShare(0, float(self.stack_bytes), route, 0.0, own)
            if self.out_depth == 1:
                yield Work("store", own, (part,))
            else:
                yield WaitTransfer("store")
                yield StartTransfer("store", "store", (part,))
                if self.last:
                    yield WaitTransfer("store")

    def _route(self, stream: str, occupancy: float) -> Route:
        """The root's read of the residual or store of the output stack (``stream``), from
        or to the memory the stream lives in (``occupancy``: HBM bytes per byte)."""
        write = stream == "output"
        if self.mem.in_l2(stream):
            return self.net.route(0, l2_load=float(not write), l2_store=float(write))
        if write:
            return self.net.route(0, store=1.0, hbm=occupancy)
        return self.net.route(0, load=1.0, hbm=occupancy)


def _fc_programs(
    tasks: _Tasks, seqs: list[list[list[int] | _Chunk]], reduce: _Reduction
) -> list[Iterator[Instr]]:
    return [_fc_program(tasks, items, c, reduce) for c, items in enumerate(seqs)]


def _fc_program(
    tasks: _Tasks, items: list[list[int] | _Chunk], c: int, reduce: _Reduction
) -> Iterator[Instr]:
    yield from tasks.sequence(items)
    yield from reduce.program(c)
