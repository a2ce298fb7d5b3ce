"""The fluid network: max-min fair sharing and the routes transfers take."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.sim.engine import Engine, MemberShare, StartTransfer, Work
from autotune.sim.interconnect import Interconnect, max_min_rates


def _rates(demand, paths, capacity):
    """Rates for flows given as lists of resource indices (weight 1 each)."""
    width = max(len(p) for p in paths)
    idx = np.zeros((len(paths), width), dtype=np.int64)
    w = np.zeros((len(paths), width))
    for f, path in enumerate(paths):
        idx[f, : len(path)] = path
        w[f, : len(path)] = 1.0
    return max_min_rates(np.asarray(demand, dtype=float), idx, w, np.asarray(capacity, float))


def test_equal_flows_split_a_resource_equally():
    assert _rates([100, 100, 100, 100], [[0]] * 4, [64]) == pytest.approx([16] * 4)


def test_a_modest_demand_is_met_and_the_rest_goes_to_the_others():
    assert _rates([4, 100, 100], [[0]] * 3, [64]) == pytest.approx([4, 30, 30])


def test_no_congestion_meets_every_demand():
    assert _rates([1, 2, 3], [[0], [0], [1]], [10, 10]) == pytest.approx([1, 2, 3])


def test_max_min_on_a_tree():
    # Flows 0 and 1 share a narrow link 1 (cap 4); all three share the root 0 (cap 10):
    # the narrow link caps 0 and 1 at 2 each, and flow 2 gets the rest of the root.
    assert _rates([100, 100, 100], [[0, 1], [0, 1], [0, 2]], [10, 4, 100]) == pytest.approx(
        [2, 2, 6]
    )


def test_weights_charge_more_capacity_per_payload_byte():
    idx = np.array([[0], [0]])
    w = np.array([[2.0], [1.0]])  # flow 0 uses two bytes of capacity per byte
    rates = max_min_rates(np.array([100.0, 100.0]), idx, w, np.array([30.0]))
    assert rates == pytest.approx([10, 10])  # equal payload rates, 20 + 10 = 30 of capacity


def test_routes(manticore):
    net = Interconnect(manticore)
    hbm = net.route(5, load=1.0)
    assert net.capacity[hbm.idx[hbm.w > 0]].min() == manticore.levels[0].uplink_bytes_per_cycle
    assert hbm.level_bytes.tolist() == [1.0] * len(manticore.levels)
    # Clusters 0 and 1 share an L1 quadrant: a read between them crosses no uplink.
    near = net.route(0, peer=1, peer_frac=1.0)
    assert near.level_bytes.sum() == 0 and near.load == near.store == 0
    assert net.latency(np.array([0]), np.array([1]))[0] == manticore.levels[0].latency_cycles
    # Clusters 0 and 4 are in different L1 quadrants of one L2 quadrant.
    far = net.route(0, peer=4, peer_frac=1.0)
    assert far.level_bytes.tolist()[:2] == [2.0, 0.0]
    assert net.latency(np.array([0]), np.array([4]))[0] == manticore.levels[1].latency_cycles
    # Short runs pad the DMA port only.
    padded = net.route(3, load=1.0, pad=4.0)
    assert padded.w[0] == 4.0 and padded.w[-1] == 1.0


def test_tied_flows_move_in_proportion():
    # A lockstep group (flows 0, 1 with bytes 4:1) and a free flow 2 share one resource: the
    # group's largest flow gets a fair share, its partner a quarter of that, the rest is 2's.
    idx = np.zeros((3, 1), dtype=np.int64)
    w = np.ones((3, 1))
    rates = max_min_rates(
        np.array([100.0, 25.0, 100.0]),
        idx,
        w,
        np.array([90.0]),
        group=np.array([0, 0, 1]),
        scale=np.array([1.0, 0.25, 1.0]),
    )
    assert rates == pytest.approx([40, 10, 40])


def test_a_route_with_peer_and_memory_payload_splits_into_lanes_that_add_up(manticore):
    net = Interconnect(manticore)
    whole = net.route(0, load=0.05, store=0.1, peer=4, peer_frac=0.85, pad=1.5)
    assert [r.lane for _, r in whole.lanes] == [0, 1]
    assert sum(frac for frac, _ in whole.lanes) == pytest.approx(1.0)
    use = np.zeros(net.resources)
    for frac, r in whole.lanes:
        np.add.at(use, r.idx, frac * r.w)
    expected = np.zeros(net.resources)
    np.add.at(expected, whole.idx, whole.w)
    assert use == pytest.approx(expected)
    assert net.route(0, peer=4, peer_frac=1.0).lanes[0][1].lane == 1
    assert net.route(0, load=1.0).lanes == ((1.0, net.route(0, load=1.0)),)


def test_ring_reads_do_not_wait_at_a_link_only_the_filter_tiles_cross(manticore):
    """Cluster 0 reads 95 % of its bytes from a neighbour's L1 and 5 % from HBM; clusters
    1-3 load from HBM through the same quadrant downlink (64 B/cycle), which saturates. The
    two kinds of read are separate DMA transfers: the ring reads run at the port's rate and
    the filter tiles get their fair share of the link, so cluster 0 ends at its uncontended
    time. As one flow, frozen at the link's fair rate, it took three times as long."""
    net = Interconnect(manticore)
    engine = Engine(net, 1, trace=True)
    nbytes, own = 6400.0, 100.0

    def program(c: int):
        if c == 0:
            route = net.route(0, load=0.05, peer=1, peer_frac=0.95)
        elif c <= 3:
            route = net.route(c, load=1.0)
        else:
            return
        yield Work("stream", own, (MemberShare(c, nbytes, route, 0.0, own),))

    res = engine.run([program(c) for c in range(net.clusters)], 0.0, [])
    ends = {c: t1 for kind, c, _, t1, _ in res.spans if kind == "cluster"}
    assert ends[0] == pytest.approx(own)
    # The others share the link with cluster 0's filter tiles (3.2 B/cycle) until it ends.
    first = own * (64.0 - 3.2) / 3
    assert ends[1] == pytest.approx(own + (nbytes - first) / (64.0 / 3))


def test_a_transfer_whose_lanes_end_apart_ends_during_the_closing_barrier(manticore):
    """Cluster 0's store is mostly a read from cluster 1's L1, which two other clusters'
    reads crowd, so its memory lane ends first; the run ends in a barrier while the other
    lane still moves, and the transfer must end during the barrier, once both are in."""
    net = Interconnect(manticore)
    engine = Engine(net, 1, trace=True)

    def program(c: int):
        if c == 0:
            route = net.route(0, store=0.05, peer=1, peer_frac=0.95)
            yield StartTransfer("store", "store", (MemberShare(0, 6400.0, route, 0.0, 100.0),))
            yield Work("compute", 150.0, (MemberShare(0, 0.0, None, 150.0, 150.0),))
        elif c in (2, 3):
            route = net.route(c, peer=1, peer_frac=1.0)
            yield StartTransfer("load", "load", (MemberShare(c, 1e6, route, 0.0, 100.0),))

    programs = [program(c) for c in range(net.clusters)]
    res = engine.run(programs, 0.0, [], np.ones(net.clusters, dtype=bool), 10_000.0, last=False)
    stores = [s for s in res.spans if s[0] == "store" and s[1] == 0]
    assert len(stores) == 1 and 150.0 < stores[0][3] < 10_150.0
    assert all(b.slot != 0 for b in res.carry)
