"""The interconnect as shared resources, the routes DMA transfers take, and fair sharing.

Resources (each with a bandwidth in B/cycle, all from the machine file):

* one DMA master port per cluster (``dma_bytes_per_cycle``), shared by the cluster's read and
  write engines (report Sec. 1: "one for reads and one for writes ... share one master port");
* one slave port per cluster, through which other clusters read its L1 (same width);
* per node of every quadrant level, its link to the parent, one per direction
  (``uplink_bytes_per_cycle``); the root level's link is the one to the HBM controller;
* the HBM (``hbm_bytes_per_cycle``), shared by loads and stores; a transfer whose runs reach
  only a fraction of its bandwidth (the machine's DMA efficiency tables) occupies it for
  payload / fraction bytes;
* the shared L2 (``l2_bytes_per_cycle``; capacity 0 on a machine without one), shared by
  loads and stores. It sits at the chiplet root beside the HBM controller: an L2 transfer
  crosses the quadrant levels as an HBM transfer does, except the root level's link (the one
  to the HBM controller), and occupies the L2 with its payload (the efficiency tables are
  the HBM's). MPPA3's L2 (the clusters' shares of their local memories) is taken the same
  way: its transfers go between clusters, not along the path to the DDR (the root's link).

A *route* says what fraction of a flow's payload goes where: loaded from HBM, stored to HBM,
loaded from or stored to the L2, or read from a peer cluster's L1. Its row of weights is bytes
of resource capacity per payload byte. On the DMA ports a short run occupies whole bus beats
of the DMA width, so the port weights include that padding; the quadrant links and the
memories are charged payload only (the machine file gives their bandwidth, not their widths
or the HBM access granularity, so this is the optimistic choice, and it keeps a wider DMA
from looking slower on the network).

``max_min_rates`` is the fluid model: concurrent flows share every resource max-min fairly
(progressive filling), each flow capped by its own demand. Re-solved at every event, this is
what the issue asks for instead of packets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from autotune.ir.machine import Machine

#: Relative slack when comparing rates and loads (floating point, not a model parameter).
EPS = 1e-9


@dataclass(frozen=True)
class Route:
    """Where one flow's payload goes, as a row of resource weights.

    ``idx``/``w``: resource indices and weights (capacity bytes per payload byte), fixed width
    so that rows stack into arrays. ``load``/``store``/``peer``: payload fractions from HBM,
    to HBM, and from another cluster's L1; ``l2_load``/``l2_store``: from and to the L2.
    ``level_bytes``: payload bytes carried over each level's links per payload byte (a peer
    read crossing a level counts once up, once down).

    ``lane``: which DMA transfers carry the payload, 0 from and to the memories (HBM, L2),
    1 from a peer's L1. A route with both (an Alg. 3 member's ring reads beside its filter
    tiles from HBM) is ``split`` into one sub-route per lane, (payload fraction, route):
    they are separate transfers, so the engine makes each its own flow and one does not wait
    at a link only the other crosses.
    """

    idx: np.ndarray
    w: np.ndarray
    load: float
    store: float
    peer: float
    level_bytes: np.ndarray
    l2_load: float = 0.0
    l2_store: float = 0.0
    lane: int = 0
    split: tuple[tuple[float, Route], ...] = ()

    @property
    def lanes(self) -> tuple[tuple[float, Route], ...]:
        """(payload fraction, route) of each lane the payload takes; fractions sum to 1."""
        return self.split or ((1.0, self),)


#: Lanes of a flow (``Route.lane``): transfers from and to the memories, and from peers.
LANES = 2


@dataclass
class Interconnect:
    """The resources of one machine and the routes between clusters and HBM."""

    machine: Machine
    clusters: int = field(init=False)
    capacity: np.ndarray = field(init=False)
    _anc: np.ndarray = field(init=False)  # (levels, clusters): node of each cluster
    _up0: list[int] = field(init=False)  # first resource of each level's up links
    _down0: list[int] = field(init=False)
    _cache: dict[tuple, Route] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        m = self.machine
        self.clusters = c = m.clusters
        cap = [float(m.dma_bytes_per_cycle)] * (2 * c)  # master ports, then slave ports
        anc, size, self._up0, self._down0 = [], 1, [], []
        for level in m.levels:
            size *= level.fanout
            nodes = c // size
            anc.append(np.arange(c) // size)
            self._up0.append(len(cap))
            cap += [float(level.uplink_bytes_per_cycle)] * nodes
            self._down0.append(len(cap))
            cap += [float(level.uplink_bytes_per_cycle)] * nodes
        self.hbm = len(cap)
        cap.append(float(m.hbm_bytes_per_cycle))
        self.l2 = len(cap)
        cap.append(float(m.l2_bytes_per_cycle))
        self.capacity = np.asarray(cap)
        self._anc = np.asarray(anc)
        # port, slave, down(c), up(c), up(peer), l2, hbm
        self.width = 2 + 3 * len(m.levels) + 2

    @property
    def resources(self) -> int:
        return len(self.capacity)

    def lca_level(self, a: int, b: int) -> int:
        """Index of the lowest level whose node holds both clusters."""
        same = self._anc[:, a] == self._anc[:, b]
        return int(np.argmax(same))

    def latency(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Round-trip latency of a DMA read by clusters ``a`` from clusters ``b`` (arrays)."""
        lca = np.argmax(self._anc[:, a] == self._anc[:, b], axis=0)
        return np.asarray([lv.latency_cycles for lv in self.machine.levels])[lca]

    def route(
        self,
        cluster: int,
        load: float = 0.0,
        store: float = 0.0,
        peer: int = -1,
        peer_frac: float = 0.0,
        pad: float = 1.0,
        hbm: float | None = None,
        received: float | None = None,
        l2_load: float = 0.0,
        l2_store: float = 0.0,
    ) -> Route:
        """The route of a flow of ``cluster``: payload fractions ``load`` (from HBM),
        ``store`` (to HBM), ``l2_load``/``l2_store`` (from and to the L2: below the root
        level's link, charged payload on the L2) and ``peer_frac`` (read from cluster
        ``peer``); ``pad`` >= 1 is
        DMA bus-beat bytes per payload byte (charged on the ports); ``hbm`` is HBM bandwidth
        bytes per payload byte, ``load + store`` unless short runs reach only a fraction of
        the memory's bandwidth (``costs``: payload / DMA efficiency). ``received`` (default
        ``load + l2_load``) is the fraction that arrives from memory (HBM or L2) through this
        cluster's port: more than ``load + l2_load`` for a multicast receiver, whose data the
        memory and the links above carry once for all receivers (one of them, the carrier,
        is charged with it). A route with both peer and memory payload is ``split`` by lane
        (``Route``); the sub-routes' weights add up to the whole's. Cached: the tasks of a
        layer repeat a few shapes on every cluster."""
        if hbm is None:
            hbm = load + store
        key = (cluster, load, store, peer, peer_frac, pad, hbm, received, l2_load, l2_store)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        n = len(self.machine.levels)
        idx = np.zeros(self.width, dtype=np.int64)
        w = np.zeros(self.width)
        port_load = load + l2_load if received is None else received
        idx[0], w[0] = cluster, (port_load + store + peer_frac + l2_store) * pad
        levels = np.zeros(n)
        lca = self.lca_level(cluster, peer) if peer_frac > 0 else 0
        if peer_frac > 0:
            idx[1], w[1] = self.clusters + peer, peer_frac * pad
        for lv in range(n):
            node = self._anc[lv, cluster]
            crosses = peer_frac if lv < lca else 0.0
            # The L2 sits below the root level's link (the one to the HBM controller).
            l2_in, l2_out = (l2_load, l2_store) if lv < n - 1 else (0.0, 0.0)
            idx[2 + lv], w[2 + lv] = self._down0[lv] + node, load + crosses + l2_in
            idx[2 + n + lv], w[2 + n + lv] = self._up0[lv] + node, store + l2_out
            if peer_frac > 0:
                idx[2 + 2 * n + lv] = self._up0[lv] + self._anc[lv, peer]
                w[2 + 2 * n + lv] = crosses
            levels[lv] = load + store + 2 * crosses + l2_in + l2_out
        idx[-2], w[-2] = self.l2, l2_load + l2_store
        idx[-1], w[-1] = self.hbm, hbm
        lane = 0
        split: tuple[tuple[float, Route], ...] = ()
        memory = 1.0 - peer_frac  # what does not come from the peer: memory, multicast
        if peer_frac > 0 and memory <= EPS:
            lane = 1
        elif peer_frac > 0:
            # Per peer payload byte: both ports (padded), and the links below the common
            # ancestor, down on this side and up on the peer's; the memory lane is the rest.
            w_peer = np.zeros(self.width)
            w_peer[:2] = pad
            below = np.arange(n) < lca
            w_peer[2 : 2 + n] = w_peer[2 + 2 * n : 2 + 3 * n] = below
            levels_peer = 2.0 * below
            peer_lane = Route(idx, w_peer, 0.0, 0.0, 1.0, levels_peer, lane=1)
            memory_lane = Route(
                idx,
                (w - peer_frac * w_peer) / memory,
                load / memory,
                store / memory,
                0.0,
                (levels - peer_frac * levels_peer) / memory,
                l2_load / memory,
                l2_store / memory,
            )
            split = ((memory, memory_lane), (peer_frac, peer_lane))
        route = Route(idx, w, load, store, peer_frac, levels, l2_load, l2_store, lane, split)
        self._cache[key] = route
        return route

    def prefetch_route(self) -> Route:
        """A copy from the HBM into the L2 (``simulate``'s ``prefetch_bytes``): both memories
        sit at the chiplet root, so it crosses no port and no quadrant link; the HBM is read
        in long contiguous blocks (occupancy = payload)."""
        idx = np.zeros(self.width, dtype=np.int64)
        w = np.zeros(self.width)
        idx[-2], w[-2] = self.l2, 1.0
        idx[-1], w[-1] = self.hbm, 1.0
        levels = np.zeros(len(self.machine.levels))
        return Route(idx, w, 1.0, 0.0, 0.0, levels, 0.0, 1.0)


def max_min_rates(
    demand: np.ndarray,
    idx: np.ndarray,
    w: np.ndarray,
    capacity: np.ndarray,
    group: np.ndarray | None = None,
    scale: np.ndarray | None = None,
) -> np.ndarray:
    """Max-min fair rates of flows with demands ``demand`` over shared resources.

    Progressive filling: all unfrozen flows grow at the same rate until a resource saturates
    (its flows freeze at that level) or a flow reaches its demand (it freezes there). Each
    flow ``f`` uses ``w[f, k] * rate`` of resource ``idx[f, k]``. The result is the unique
    max-min fair allocation of the fluid model.

    Flows of one ``group`` are tied (the members of a lockstep share group): flow ``f`` runs
    at ``scale[f]`` times its group's level, so the group's largest flow (scale 1) competes
    as any other flow and its partners move in proportion, never holding bandwidth their
    group's pace cannot use.
    """
    n, r = len(demand), len(capacity)
    if n == 0:
        return np.zeros(0)
    if group is None or scale is None:
        ginv, scale = np.arange(n), np.ones(n)
    else:
        ginv = np.unique(group, return_inverse=True)[1].ravel()
    n_groups = int(ginv.max()) + 1
    gcap = np.full(n_groups, np.inf)
    np.minimum.at(gcap, ginv, demand / scale)
    flat_idx = idx.ravel()
    rates = scale * gcap[ginv]
    load = np.bincount(flat_idx, weights=(w * rates[:, None]).ravel(), minlength=r)
    if np.all(load <= capacity * (1 + EPS)):
        return rates  # nothing is congested: every demand is met
    ws = w * scale[:, None]
    level_of = np.zeros(n_groups)
    frozen_load = np.zeros(r)
    live = np.ones(n_groups, dtype=bool)
    while live.any():
        flows = live[ginv]
        slope = np.bincount(idx[flows].ravel(), weights=ws[flows].ravel(), minlength=r)
        used = slope > 0
        level_r = np.full(r, np.inf)
        level_r[used] = (capacity[used] - frozen_load[used]) / slope[used]
        level = max(min(float(level_r.min()), float(gcap[live].min())), 0.0)
        saturated = level_r <= level * (1 + EPS) + EPS
        touched = np.zeros(n_groups, dtype=bool)
        touched[ginv[flows & (saturated[idx] & (w > 0)).any(axis=1)]] = True
        capped = gcap <= level * (1 + EPS)
        now = live & (touched | capped)
        level_of[now] = np.where(capped[now], gcap[now], level)
        moved = now[ginv]
        frozen_load += np.bincount(
            idx[moved].ravel(),
            weights=(ws[moved] * level_of[ginv[moved], None]).ravel(),
            minlength=r,
        )
        live &= ~now
    return scale * level_of[ginv]
