"""The bytes a stream keeps in flight (Little's law, report Sec. 2.1.2), as the simulator
reads them from the declared L1 buffers."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.sim.l1 import L1Plan


def _plan(depth: int) -> L1Plan:
    # filter tiles of one output channel: two steps of 64 slices and one of 16 (4 B words)
    return L1Plan(
        tile_bytes={"filter": 256}, allocated_bytes={"filter": 512}, depth={"filter": depth}
    )


@pytest.mark.parametrize(("average", "in_flight"), [(256.0, 1.0), (128.0, 2.0), (64.0, 4.0)])
def test_a_double_buffer_keeps_the_bytes_beyond_its_largest_tile_in_flight(average, in_flight):
    """While the largest tile (a whole step) is computed on, the buffer's other 256 B are in
    flight: one whole tile, or more of the average size when the last step is short (as the
    model's Little's law counts bytes, not slots)."""
    assert _plan(2).spare_tiles("filter", np.array([average]))[0] == pytest.approx(in_flight)


def test_a_single_buffer_keeps_nothing_in_flight():
    assert _plan(1).spare_tiles("filter", np.array([128.0]))[0] == 0.0
