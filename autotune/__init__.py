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
"""

from autotune.api import TuneResult, tune  # noqa: E402  (after the stages it chains)
from autotune.io.errors import InputError
from autotune.io.network_yaml import load_network
from autotune.ir import ALGORITHMS, Buffers, Layer, Level, Machine, Mapping, Network, Tile
from autotune.model.analysis import Analysis, analyze
from autotune.sim import SimResult, simulate
from autotune.tiling import MappingError
from autotune.verify import Verification, verify

__version__ = "0.1.0"

__all__ = ["ALGORITHMS", "Analysis", "Buffers", "InputError", "Layer", "Level", "Machine",
           "Mapping", "MappingError", "Network", "SimResult", "Tile", "TuneResult",
           "Verification", "analyze", "load_network", "simulate", "tune", "verify",
           "__version__"]
