"""Where a layer's operand streams live: the chiplet's HBM or its shared L2 (``Placement``).

A transfer of a stream placed in the L2 differs from an HBM transfer in three ways, and in
nothing else (same DMA engine time, same quadrant links below the root):

* its route ends at the L2 beside the HBM controller: it does not cross the root level's link
  (the one to the HBM controller) and is charged on the L2 instead (``interconnect``);
* its round trip is ``l2_latency_cycles`` instead of ``hbm_latency_cycles``;
* it occupies the L2 with its payload: the DMA efficiency tables are the HBM's.

A multicast read from the L2 is one L2 read delivered to every receiver, as from the HBM
(``program``): the L2 and the links below the root carry it once.

The streams (``ir.placement.STREAMS``): ``input`` (every input load from memory, Alg. 3's
member loads included; what the members forward to each other stays in L1), ``weights`` (the
filter loads), ``residual`` (the epilogue's residual read), ``output`` (the stores).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.ir.machine import Machine
from autotune.ir.placement import HBM_ONLY, Placement


def check_placement(machine: Machine, placement: Placement, prefetch_bytes: int) -> None:
    """Raise ``ValueError`` unless ``machine`` can run a layer with streams placed as
    ``placement`` while prefetching ``prefetch_bytes`` into its L2."""
    if prefetch_bytes < 0:
        raise ValueError(f"prefetch_bytes must be >= 0, not {prefetch_bytes}")
    if (placement.uses_l2 or prefetch_bytes) and not machine.has_l2:
        what = f"placement {placement.label()}" if placement.uses_l2 else "an L2 prefetch"
        raise ValueError(f"machine {machine.name!r} has no L2: {what} needs one")


@dataclass(frozen=True)
class Memories:
    """The memory level of each stream of a layer on ``machine``."""

    machine: Machine
    placement: Placement = HBM_ONLY

    def in_l2(self, stream: str) -> bool:
        return getattr(self.placement, stream) == "l2"

    def latency(self, stream: str) -> int:
        """Round-trip cycles of a transfer of ``stream``."""
        m = self.machine
        return m.l2_latency_cycles if self.in_l2(stream) else m.hbm_latency_cycles

    def split(
        self, *transfers: tuple[str, np.ndarray, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(HBM payload, L2 payload, HBM occupancy) of ``transfers``, each ``(stream, payload,
        HBM occupancy if it were in HBM)``; summed in the order given."""
        n = np.shape(transfers[0][1])
        hbm, l2, occupancy = np.zeros(n), np.zeros(n), np.zeros(n)
        for stream, payload, occ in transfers:
            if self.in_l2(stream):
                l2 = l2 + payload
            else:
                hbm = hbm + payload
                occupancy = occupancy + occ
        return hbm, l2, occupancy
