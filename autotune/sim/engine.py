"""The event loop: agents run their programs while their flows share the network.

An *agent* is what moves as one: a cluster, or for Alg. 3 the clusters of one share group,
which the epoch synchronisation of the forwarding ring keeps in lockstep (a member cannot run
more than a slice ahead of its neighbour, so in steady state the group moves at the pace of
its slowest member; the difference is booked as synchronisation).

A program is a generator of instructions:

``Work``           one part per member cluster: payload bytes over a route, and the part's
                   uncontended duration (``costs``). It becomes one flow per member whose
                   demand is bytes / uncontended duration; the members of a group are tied
                   in proportion to their bytes (``network.max_min_rates``). A part without
                   bytes is a pure delay.
``StartTransfer``  starts a background transfer and continues: a store of a double-buffered
                   output (kind "store"), or a read ahead ("load"): the next task's input
                   (Alg. 4/5) or the task's residual tile (Alg. 1-3).
``WaitTransfer``   waits until the agent's background transfers of that kind are done.

Besides the agents' flows, a run may carry the layer's *prefetch* (``simulate``'s
``prefetch_bytes``): one background copy from the HBM into the L2, on the slot after all the
clusters' (``PREFETCH``), that no program waits for; the last run lasts until it is done.
``SetFlag`` / ``WaitFlag``  point-to-point synchronisation (the reduction tree of Alg. 4/5).

Each flow is split by lane (``Route.lane``): what a part moves from and to the memories and
what it reads from peers are separate DMA transfers, each its own flow, so an Alg. 3 member's
ring reads do not wait at a link only its filter tiles cross. A Work ends when all its lanes
are done (each takes at least the Work's uncontended time), a background transfer when both
of its lanes are.

Between two events every rate is constant, so the loop jumps from event to event: the next
event is the earliest completion of a Work or of a background transfer; at it, the max-min fair
rates are re-solved if any flow changed. This is exact for the fluid model; what the fluid
model itself approximates is said in ``costs`` and ``network``.

Time accounting per cluster (what ``SimResult.breakdown`` reports): a Work's duration is
``compute`` (the cores busy), ``dma_wait`` (stalls an uncontended network still causes:
latency, setup, beats, serialised single buffers), ``sync`` (waiting for the slowest member
of a lockstep group, for a reduction partner, at a phase barrier) and ``contention`` (the
rest: time lost to sharing ports, links, HBM and L2). Waiting for one's own background
transfer is ``dma_wait``; time with no work assigned is ``idle`` (also the tail in which only
the prefetch still runs).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field

import numpy as np

from autotune.sim.interconnect import LANES, Interconnect, Route, max_min_rates

#: Relative tolerance for "finishes at this event" (floating point, not a model parameter).
_TOL = 1e-9


@dataclass(slots=True)
class MemberShare:
    """One member cluster's share of a Work."""

    cluster: int
    bytes: float
    route: Route | None
    compute: float
    own: float  # the member's uncontended duration


@dataclass(slots=True)
class Work:
    label: str
    own: float  # the agent's uncontended duration: max over its parts
    parts: tuple[MemberShare, ...]
    kind: str = "work"  # "work" (split as documented) or "sync" (all of it is sync)


#: Kinds of background transfer, each with its own flow per cluster.
KINDS = ("store", "load", "next", "stream")
#: The kind of the prefetch's flow: one flow, on the slot after the clusters' ``KINDS``.
PREFETCH = "prefetch"


@dataclass(slots=True)
class StartTransfer:
    kind: str
    label: str
    parts: tuple[MemberShare, ...]


@dataclass(slots=True)
class WaitTransfer:
    kind: str


@dataclass(slots=True)
class WaitFlag:
    key: Hashable


@dataclass(slots=True)
class SetFlag:
    key: Hashable


Instr = Work | StartTransfer | WaitTransfer | WaitFlag | SetFlag


@dataclass(slots=True)
class Background:
    """A background transfer still running when a run ends (carried into the next run)."""

    slot: int  # kind index * clusters + cluster
    bytes_left: float
    demand: float
    route: Route
    start: float
    label: str
    lane: int = 0  # the lane of ``route`` (``Route.lane``): one entry per lane still moving


@dataclass
class RunResult:
    """What one run (a whole layer, or one phase of Alg. 4/5) produced."""

    start: float
    end: float
    compute: np.ndarray
    dma_wait: np.ndarray
    contention: np.ndarray
    sync: np.ndarray
    hbm_load_bytes: float
    hbm_store_bytes: float
    intercluster_bytes: float
    level_bytes: np.ndarray
    l2_load_bytes: float
    l2_store_bytes: float
    carry: list[Background]
    events: int
    spans: list[tuple] = field(default_factory=list)  # (track, cluster, t0, t1, label)
    #: (t, HBM load, HBM store, L2 load, L2 store) B/cycle from t on
    counters: list[tuple] = field(default_factory=list)


class Engine:
    """Runs agents' programs on one network. ``block``: clusters per agent (1 or g)."""

    def __init__(self, net: Interconnect, block: int, trace: bool) -> None:
        self.net, self.block, self.trace = net, block, trace
        self.clusters = c = net.clusters
        self.agents = c // block
        self.starts = np.arange(0, c, block)

    def prefetch(self, nbytes: float) -> Background:
        """The layer's copy of ``nbytes`` from the HBM into the L2, to carry into its first
        run: from time 0, as fast as the two memories allow when alone (each read or
        written at full bandwidth), and shared max-min fairly with the layer's flows."""
        m = self.net.machine
        demand = min(m.hbm_bytes_per_cycle, m.l2_bytes_per_cycle)
        route = self.net.prefetch_route()
        slot = len(KINDS) * self.clusters
        return Background(slot, float(nbytes), demand, route, 0.0, "prefetch to L2", route.lane)

    def run(
        self,
        programs: list[Iterator[Instr]],
        t0: float,
        carry: list[Background],
        participates: np.ndarray | None = None,
        barrier: float = 0.0,
        last: bool = True,
    ) -> RunResult:
        """Run the agents' programs from time ``t0`` until all are done.

        Unless the run is the ``last``, background writes still running at the end are
        returned in ``carry``. When ``participates`` is given the run ends in a barrier:
        participating agents that finish early wait (sync), then all pay ``barrier`` cycles;
        the others are idle.
        """
        state = _Run(self, programs, t0, carry)
        state.loop(last)
        return state.finish(participates, barrier)


class _Run:
    """State of one run; a separate object so that the engine can be reused."""

    def __init__(
        self, eng: Engine, programs: list[Iterator[Instr]], t0: float, carry: list[Background]
    ) -> None:
        self.eng, self.net = eng, eng.net
        c, k, a = eng.clusters, self.net.width, eng.agents
        self.c = c
        self.t = self.t0 = t0
        self.programs = programs
        # Flows, per lane: one foreground flow per cluster, then one per background kind and
        # cluster, then the prefetch's. Flow ``lane * stride + i``.
        self.prefetch_slot = len(KINDS) * c
        n_bg = self.prefetch_slot + 1
        self.stride = stride = c + n_bg
        n = LANES * stride
        self.idx = np.zeros((n, k), dtype=np.int64)
        self.w = np.zeros((n, k))
        self.demand = np.zeros(n)
        self.load_frac = np.zeros(n)
        self.store_frac = np.zeros(n)
        self.l2_load_frac = np.zeros(n)
        self.l2_store_frac = np.zeros(n)
        self.fg_bytes = np.zeros((LANES, c))  # each cluster's foreground bytes, per lane
        self.bg_left = np.zeros((LANES, n_bg))
        self.bg_start = np.zeros(n_bg)
        self.bg_label = [""] * n_bg
        self.rates = np.zeros(n)
        self.dirty = True
        self.work: list[Work | None] = [None] * a
        self.p = np.zeros((a, LANES))  # progress of the agent's Work, per lane
        self.live = np.zeros((a, LANES), dtype=bool)  # its lanes still moving (or timing)
        self.inv_own = np.zeros(a)
        self.working = np.zeros(a, dtype=bool)
        self.start = np.zeros(a)
        self.waiting: list[str | None] = [None] * a
        self.wait_start = np.zeros(a)
        self.members: list[tuple[int, ...]] = [
            tuple(range(i * eng.block, (i + 1) * eng.block)) for i in range(a)
        ]
        self.done = np.full(a, np.nan)
        self.flags: set[Hashable] = set()
        self.waiters: dict[Hashable, list[int]] = {}
        self.acc = {k: np.zeros(c) for k in ("compute", "dma_wait", "contention", "sync")}
        self.moved: dict[int, list] = {}  # id(route) -> [route, payload bytes]
        self.spans: list[tuple] = []
        self.counters: list[tuple] = []
        self.events = 0
        for bg in carry:
            self._start_background(
                bg.slot, bg.bytes_left, bg.demand, bg.route, bg.label, bg.start, lane=bg.lane
            )

    # -- flows -----------------------------------------------------------------------------
    def _set_flow(self, f: int, demand: float, route: Route) -> None:
        self.idx[f], self.w[f] = route.idx, route.w
        self.demand[f] = demand
        self.load_frac[f], self.store_frac[f] = route.load, route.store
        self.l2_load_frac[f], self.l2_store_frac[f] = route.l2_load, route.l2_store
        self.dirty = True

    def _account_bytes(self, nbytes: float, route: Route) -> None:
        key = id(route)
        if key in self.moved:
            self.moved[key][1] += nbytes
        else:
            self.moved[key] = [route, nbytes]

    def _bytes_moved(self) -> tuple[float, float, float, np.ndarray, float, float]:
        """(HBM load, HBM store, intercluster, per level, L2 load, L2 store) payload bytes
        of every flow."""
        load = store = peer = l2_load = l2_store = 0.0
        levels = np.zeros(len(self.net.machine.levels))
        for route, nbytes in self.moved.values():
            load += nbytes * route.load
            store += nbytes * route.store
            peer += nbytes * route.peer
            levels += nbytes * route.level_bytes
            l2_load += nbytes * route.l2_load
            l2_store += nbytes * route.l2_store
        return load, store, peer, levels, l2_load, l2_store

    def _start_background(
        self,
        slot: int,
        nbytes: float,
        demand: float,
        route: Route,
        label: str,
        start: float,
        lane: int | None = None,
    ) -> None:
        """A new transfer in ``slot`` (split into its lanes), or with ``lane`` the rest of a
        carried one's lane (its bytes already counted)."""
        self.bg_start[slot] = start
        self.bg_label[slot] = label
        if lane is not None:
            self.bg_left[lane, slot] = nbytes
            self._set_flow(lane * self.stride + self.c + slot, demand, route)
            return
        self._account_bytes(nbytes, route)
        self.bg_left[:, slot] = 0.0  # a new transfer replaces the slot's, on every lane
        self.demand[self.c + slot :: self.stride] = 0.0
        for frac, r in route.lanes:
            self.bg_left[r.lane, slot] = nbytes * frac
            self._set_flow(r.lane * self.stride + self.c + slot, demand * frac, r)

    # -- programs --------------------------------------------------------------------------
    def _advance(self, a: int) -> None:
        """Run agent ``a``'s program until it starts a Work, waits, or ends."""
        gen = self.programs[a]
        while True:
            ins = next(gen, None)
            if ins is None:
                self.done[a] = self.t
                return
            if isinstance(ins, Work):
                if ins.own <= 0:
                    continue
                self._install(a, ins)
                return
            if isinstance(ins, StartTransfer):
                base = KINDS.index(ins.kind) * self.c
                for part in ins.parts:
                    assert part.route is not None
                    self._start_background(
                        base + part.cluster,
                        part.bytes,
                        part.bytes / part.own,
                        part.route,
                        ins.label,
                        self.t,
                    )
            elif isinstance(ins, WaitTransfer):
                if self.bg_left[:, self._block(a, ins.kind)].any():
                    self._wait(a, ins.kind)
                    return
            elif isinstance(ins, WaitFlag):
                if ins.key not in self.flags:
                    self.waiters.setdefault(ins.key, []).append(a)
                    self._wait(a, "flag")
                    return
            else:  # SetFlag
                self.flags.add(ins.key)
                for b in self.waiters.pop(ins.key, []):
                    self._resume(b)

    def _block(self, a: int, kind: str) -> slice:
        """The background slots of ``kind`` of agent ``a``'s clusters."""
        base = KINDS.index(kind) * self.c
        return slice(base + a * self.eng.block, base + (a + 1) * self.eng.block)

    def _install(self, a: int, work: Work) -> None:
        live = self.live[a]
        live[:] = False
        for part in work.parts:
            if part.bytes > 0:
                assert part.route is not None
                c = part.cluster
                for frac, route in part.route.lanes:
                    nbytes = part.bytes * frac
                    self.fg_bytes[route.lane, c] = nbytes
                    self._set_flow(route.lane * self.stride + c, nbytes / work.own, route)
                    live[route.lane] = True
                self._account_bytes(part.bytes, part.route)
        if not live.any():
            live[0] = True  # a pure delay: lane 0 times it
        self.work[a] = work
        self.members[a] = tuple(p.cluster for p in work.parts)
        self.p[a] = 0.0
        self.inv_own[a] = 1.0 / work.own
        self.working[a] = True
        self.start[a] = self.t

    def _wait(self, a: int, why: str) -> None:
        self.waiting[a] = why
        self.wait_start[a] = self.t

    def _resume(self, a: int) -> None:
        why, t0 = self.waiting[a], self.wait_start[a]
        self.waiting[a] = None
        book = self.acc["sync" if why == "flag" else "dma_wait"]
        for c in self.members[a]:
            book[c] += self.t - t0
            if self.eng.trace and self.t > t0:
                self.spans.append(("cluster", c, t0, self.t, f"wait ({why})"))
        self._advance(a)

    def _finish_work(self, a: int) -> None:
        work = self.work[a]
        assert work is not None
        dur = self.t - self.start[a]
        acc = self.acc
        for part in work.parts:
            c = part.cluster
            if work.kind == "work":
                acc["compute"][c] += part.compute
                acc["dma_wait"][c] += part.own - part.compute
                acc["sync"][c] += work.own - part.own
                acc["contention"][c] += dur - work.own
            else:
                acc["sync"][c] += dur
            if part.bytes > 0:
                self._stop_foreground(c)
            if self.eng.trace:
                self.spans.append(("cluster", c, self.start[a], self.t, work.label))
        self.work[a] = None
        self.working[a] = False
        self.live[a] = False

    def _stop_foreground(self, c: int, lane: int | None = None) -> None:
        """Cluster ``c``'s foreground flow of ``lane`` (all lanes by default) is done."""
        lanes = range(LANES) if lane is None else (lane,)
        for ln in lanes:
            self.fg_bytes[ln, c] = 0.0
            self.demand[ln * self.stride + c] = 0.0
        self.dirty = True

    def _finish_lane(self, a: int, lane: int) -> None:
        """A lane of agent ``a``'s Work is done; the Work ends with its last lane."""
        self.live[a, lane] = False
        work = self.work[a]
        assert work is not None
        for part in work.parts:
            if part.bytes > 0:
                self._stop_foreground(part.cluster, lane)
        if not self.live[a].any():
            self._finish_work(a)
            self._advance(a)

    def _finish_background(self, slot: int) -> None:
        self.bg_left[:, slot] = 0.0
        self.demand[self.c + slot :: self.stride] = 0.0
        self.dirty = True
        if slot == self.prefetch_slot:
            if self.eng.trace:
                self.spans.append((PREFETCH, 0, self.bg_start[slot], self.t, self.bg_label[slot]))
            return
        kind, c = KINDS[slot // self.c], slot % self.c
        if self.eng.trace:
            self.spans.append((kind, c, self.bg_start[slot], self.t, self.bg_label[slot]))
        a = c // self.eng.block
        if self.waiting[a] == kind and not self.bg_left[:, self._block(a, kind)].any():
            self._resume(a)

    # -- the loop --------------------------------------------------------------------------
    def _solve(self) -> None:
        """Max-min fair rates of all flows; the members of a lockstep group are tied in
        proportion to their bytes (``max_min_rates``), so the group's pace is its largest
        member's fair share and no member holds bandwidth the pace cannot use."""
        live = np.flatnonzero(self.demand > 0)
        self.rates = np.zeros(len(self.demand))
        self.dirty = False
        if not len(live):
            return
        args = (self.demand[live], self.idx[live], self.w[live], self.net.capacity)
        block = self.eng.block
        if block == 1:
            self.rates[live] = max_min_rates(*args)
            return
        lane, i = np.divmod(live, self.stride)
        fg = i < self.c
        agents = self.eng.agents
        # A group's flows of one lane are tied; background flows each stand alone.
        group = np.where(fg, lane * agents + i // block, LANES * agents + live)
        nbytes = np.where(fg, self.fg_bytes[lane, np.minimum(i, self.c - 1)], 1.0)
        largest = np.zeros(LANES * agents + len(self.demand))
        np.maximum.at(largest, group, nbytes)
        self.rates[live] = max_min_rates(*args, group, nbytes / largest[group])

    def _agent_rates(self) -> np.ndarray:
        """Each agent's progress per cycle on each lane of its Work (0 where done)."""
        fg = self.fg_bytes
        moving = fg > 0
        ratio = np.full((LANES, self.c), np.inf)
        ratio[moving] = self.rates.reshape(LANES, self.stride)[:, : self.c][moving] / fg[moving]
        if self.eng.block > 1:
            ratio = np.minimum.reduceat(ratio, self.eng.starts, axis=1)
        rho = np.where(np.isinf(ratio.T), self.inv_own[:, None], ratio.T)
        return np.where(self.live, rho, 0.0)

    def loop(self, last: bool) -> None:
        for a in range(self.eng.agents):
            self._advance(a)
        while self.working.any() or (self.bg_left > 0).any():
            if not last and not np.isnan(self.done).any():
                break  # only background transfers remain: carry
            if self.dirty:
                self._solve()
            rho = self._agent_rates()
            if self.eng.trace:
                self._record_counters(rho)
            with np.errstate(divide="ignore", invalid="ignore"):
                t_lane = np.where(self.live, (1.0 - self.p) / rho, np.inf)
                bg_rate = self.rates.reshape(LANES, self.stride)[:, self.c :]
                t_bg = np.where(self.bg_left > 0, self.bg_left / bg_rate, np.inf)
            dt = min(float(t_lane.min()), float(t_bg.min()))
            if not np.isfinite(dt):
                raise RuntimeError("simulation deadlock: agents wait but nothing moves")
            slack = dt * _TOL + _TOL
            self.events += 1
            self.t += dt
            self.p += rho * dt
            moving_bg = self.bg_left > 0
            self.bg_left[moving_bg] -= bg_rate[moving_bg] * dt
            ending = moving_bg & (t_bg <= dt + slack)
            self.bg_left[ending] = 0.0
            self.demand.reshape(LANES, self.stride)[:, self.c :][ending] = 0.0  # a view
            self.dirty |= bool(ending.any())
            for slot in np.flatnonzero(ending.any(axis=0)).tolist():
                # A transfer that an agent resumed by an earlier one of this list started in
                # the same slot, now, has its bytes still to move.
                if self.bg_start[slot] < self.t and not self.bg_left[:, slot].any():
                    self._finish_background(slot)
            for a, lane in zip(*np.nonzero(self.live & (t_lane <= dt + slack)), strict=True):
                self._finish_lane(int(a), int(lane))
        if np.isnan(self.done).any():
            raise RuntimeError("simulation deadlock: a program never finished")

    def _record_counters(self, rho: np.ndarray) -> None:
        agent_of = np.arange(self.c) // self.eng.block
        use = self.rates.copy()
        use.reshape(LANES, self.stride)[:, : self.c] = self.fg_bytes * rho[agent_of].T
        sample = (
            self.t,
            float(use @ self.load_frac),
            float(use @ self.store_frac),
            float(use @ self.l2_load_frac),
            float(use @ self.l2_store_frac),
        )
        if not self.counters or self.counters[-1][1:] != sample[1:]:
            self.counters.append(sample)

    def finish(self, participates: np.ndarray | None, barrier: float) -> RunResult:
        end = self.t
        acc = self.acc
        if participates is not None:
            for a in np.flatnonzero(participates):
                for c in range(a * self.eng.block, (a + 1) * self.eng.block):
                    acc["sync"][c] += end - self.done[a] + barrier
                    if self.eng.trace and barrier + end - self.done[a] > 0:
                        self.spans.append(("cluster", c, self.done[a], end + barrier, "barrier"))
            end += barrier
            self._drain(barrier)
        carry = [
            Background(
                s,
                float(self.bg_left[lane, s]),
                float(self.demand[lane * self.stride + self.c + s]),
                self._route_of(lane * self.stride + self.c + s, lane),
                float(self.bg_start[s]),
                self.bg_label[s],
                lane,
            )
            for lane, s in zip(*np.nonzero(self.bg_left > 0), strict=True)
        ]
        return RunResult(
            self.t0,
            end,
            acc["compute"],
            acc["dma_wait"],
            acc["contention"],
            acc["sync"],
            *self._bytes_moved(),
            carry,
            self.events,
            self.spans,
            self.counters,
        )

    def _drain(self, cycles: float) -> None:
        """Let background transfers progress while the clusters pass the closing barrier."""
        if not (self.bg_left > 0).any():
            return
        self._solve()
        rate = self.rates.reshape(LANES, self.stride)[:, self.c :]
        now = self.t
        with np.errstate(divide="ignore", invalid="ignore"):
            ends = np.where(self.bg_left > 0, self.bg_left / rate, 0.0)  # a done lane: 0
        for slot in np.flatnonzero((self.bg_left > 0).any(axis=0)).tolist():
            if ends[:, slot].max() <= cycles:
                self.t = now + float(ends[:, slot].max())  # ends during the barrier (trace)
                self._finish_background(slot)
                self.t = now
            else:
                moving = self.bg_left[:, slot] > 0
                self.bg_left[moving, slot] = np.maximum(
                    self.bg_left[moving, slot] - rate[moving, slot] * cycles, 0.0
                )

    def _route_of(self, f: int, lane: int) -> Route:
        return Route(
            self.idx[f].copy(),
            self.w[f].copy(),
            float(self.load_frac[f]),
            float(self.store_frac[f]),
            0.0,
            np.zeros(len(self.net.machine.levels)),
            float(self.l2_load_frac[f]),
            float(self.l2_store_frac[f]),
            lane,
        )
