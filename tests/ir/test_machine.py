"""Laws of the machine's derived figures that hold for every preset."""

from __future__ import annotations

from collections import Counter

import pytest

from autotune import Machine


@pytest.mark.parametrize("preset", Machine.presets())
def test_a_waves_first_slots_spread_evenly_over_every_uplink(preset):
    """``wave_order`` is a permutation of the clusters, and its first ``n`` slots put at most
    ``ceil(n x below / C)`` clusters under any uplink with ``below`` clusters (what the
    model's link tables count for a spread wave); the order the tasks used before, cluster
    ids, puts ``min(n, below)`` there."""
    machine = Machine.preset(preset).chiplet()
    order, c = machine.wave_order(), machine.clusters
    assert sorted(order) == list(range(c))
    for n in range(1, c + 1):
        below = 1
        for level in machine.levels:
            below *= level.fanout
            busiest = max(Counter(cluster // below for cluster in order[:n]).values())
            assert busiest == -(-n * below // c), (n, level.name)
