"""Tile-level simulator of a mapped layer on the machine: the independent check of the
analytical model (it must not import ``autotune.model``).

``simulate(layer, mapping, machine, precision, batch, placement=HBM_ONLY, prefetch_bytes=0,
trace=False) -> SimResult``.

Modules: ``l1`` (buffers and what they let stay in flight), ``costs`` (per task: DMA
transfers and uncontended times), ``memory`` (the streams in HBM or the shared L2),
``interconnect`` (resources, routes, max-min fair sharing),
``program`` (the report's algorithms as per-cluster programs), ``engine`` (the event loop),
``result`` (``SimResult``, Chrome trace), ``simulate``.
"""

from autotune.sim.l1 import CapacityError
from autotune.sim.result import Breakdown, SimResult
from autotune.sim.simulate import simulate

__all__ = ["Breakdown", "CapacityError", "SimResult", "simulate"]
