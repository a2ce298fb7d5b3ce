"""autotune: map the conv and fc layers of a CNN onto the Manticore many-core processor.

Public API (stable):

    Machine.preset(name)                           a bundled machine description
    load_network(path) -> Network                  a validated network.yaml or .onnx model
    Layer, Network, Mapping, Tile, Buffers         the data the stages exchange
    analyze(layer, mapping, machine, precision)    the analytical cost model
    simulate(layer, mapping, machine, precision)   the tile-level simulator (checks analyze)
    verify(layer, mapping, machine, precision)     execute the schedule in numpy and check it
    tune(network, machine, ...) -> TuneResult      the whole pipeline: solve, refine,
                                                   simulate, verify; .save() writes JSON
    sweep(network, machine, batches=...)           tune at several batches -> SweepResult:
                                                   totals, fc memory/compute-bound, turning
                                                   batches, best_within(budget); .save()
    choose_batch(network, latency_budget_s=...)    the batch with most images/s in a budget
"""

from autotune.api import TuneResult, tune  # noqa: E402  (after the stages it chains)
from autotune.batching import BatchChoice, BatchPoint, BudgetError, SweepResult, choose_batch, sweep
from autotune.io.errors import InputError
from autotune.io.network_yaml import load_network
from autotune.ir import ALGORITHMS, Buffers, Layer, Level, Machine, Mapping, Network, Tile
from autotune.model.analysis import Analysis, analyze
from autotune.sim import SimResult, simulate
from autotune.tiling import MappingError
from autotune.verify import Verification, verify

__version__ = "0.1.0"

__all__ = [
    "ALGORITHMS",
    "Analysis",
    "BatchChoice",
    "BatchPoint",
    "Buffers",
    "BudgetError",
    "InputError",
    "Layer",
    "Level",
    "Machine",
    "Mapping",
    "MappingError",
    "Network",
    "SimResult",
    "SweepResult",
    "Tile",
    "TuneResult",
    "Verification",
    "analyze",
    "choose_batch",
    "load_network",
    "simulate",
    "sweep",
    "tune",
    "verify",
    "__version__",
]
