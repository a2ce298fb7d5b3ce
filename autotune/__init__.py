"""autotune: map the conv and fc layers of a CNN onto the Manticore many-core processor.

Public API (stable):

    Machine.preset(name)                           a bundled machine description
    load_network(path) -> Network                  a validated network.yaml or .onnx model
    Layer, Network, Mapping, Tile, Buffers         the data the stages exchange
    analyze(layer, mapping, machine, precision)    the analytical cost model
    simulate(layer, mapping, machine, precision)   the tile-level simulator (checks analyze)
    verify(layer, mapping, machine, precision)     execute the schedule in numpy and check it
                                                   (all three: one chiplet or a package)
    TuneOptions(objective=..., refine=..., ...)    every choice of a tuning run, in one value
    tune(network, machine, options=...)            the whole pipeline: solve, refine,
        -> TuneResult                              simulate, verify; .save() writes JSON
    sweep(network, machine, batches=...)           tune at several batches -> SweepResult:
                                                   totals, fc memory/compute-bound, turning
                                                   batches, best_within(budget); .save()
    choose_batch(network, latency_budget_s=...)    the batch with most images/s in a budget
"""

from autotune.api import tune
from autotune.batching import BatchChoice, BatchPoint, BudgetError, SweepResult, choose_batch, sweep
from autotune.chiplets import analyze, simulate, verify
from autotune.io.errors import InputError
from autotune.io.machine_yaml import resolve_machine
from autotune.io.network_yaml import load_network
from autotune.ir import ALGORITHMS, Buffers, Layer, Level, Machine, Mapping, Network, Tile
from autotune.ir.options import OptionsError, TuneOptions
from autotune.model.analysis import Analysis
from autotune.result import LayerResult, Totals, TuneResult
from autotune.sim import SimResult
from autotune.tiling import MappingError
from autotune.verification import Verification
from autotune.version import __version__

__all__ = [
    "ALGORITHMS",
    "Analysis",
    "BatchChoice",
    "BatchPoint",
    "Buffers",
    "BudgetError",
    "InputError",
    "Layer",
    "LayerResult",
    "Level",
    "Machine",
    "Mapping",
    "MappingError",
    "Network",
    "OptionsError",
    "SimResult",
    "SweepResult",
    "Tile",
    "Totals",
    "TuneOptions",
    "TuneResult",
    "Verification",
    "analyze",
    "choose_batch",
    "load_network",
    "resolve_machine",
    "simulate",
    "sweep",
    "tune",
    "verify",
    "__version__",
]
