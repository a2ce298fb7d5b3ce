"""autotune: map the conv and fc layers of a CNN onto the Manticore many-core processor.

Public API (stable):

    Machine.preset(name)                           a bundled machine description
    load_network(path) -> Network                  a validated network.yaml
    Layer, Network, Mapping, Tile, Buffers         the data the stages exchange
    analyze(layer, mapping, machine, precision)    the analytical cost model
    simulate(layer, mapping, machine, precision)   the tile-level simulator (checks analyze)
"""

from autotune.io.errors import InputError
from autotune.io.network_yaml import load_network
from autotune.ir import ALGORITHMS, Buffers, Layer, Level, Machine, Mapping, Network, Tile
from autotune.model.analysis import Analysis, analyze
from autotune.sim import SimResult, simulate
from autotune.tiling import MappingError

__version__ = "0.1.0"

__all__ = ["ALGORITHMS", "Analysis", "Buffers", "InputError", "Layer", "Level", "Machine",
           "Mapping", "MappingError", "Network", "SimResult", "Tile", "analyze", "load_network",
           "simulate", "__version__"]
