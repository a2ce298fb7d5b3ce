"""Multi-chiplet packages as one layer above the single-chiplet stages.

A package (seed 002: four chiplets, a private HBM each, die-to-die links) runs a layer as
``split`` divides it among the chiplets. Every other stage (tiling, model, integer program,
simulator, executor) knows one chiplet only; this layer splits a layer into its per-chiplet
parts, calls those stages on each part, and joins the results, one dispatcher per stage:

``analyze``      the model's figures of the whole split layer (``analysis``)
``simulate``     every part simulated on its chiplet after its stage-in (``simulation``)
``verify``       every part executed on its slice, the output assembled (``verification``)
``execute_layer`` the same on given operands: a layer's output, for running a network
``solve_layer``  the best split and the mapping each chiplet runs (``solve``)
``solve_by_placement`` the same for every placement of a network plan's step

On a machine of one chiplet each dispatcher is the single-chiplet stage itself.
"""

from autotune.chiplets.analysis import analyze, analyze_package, d2d_cycles
from autotune.chiplets.simulation import simulate, simulate_package, stage_in_cycles
from autotune.chiplets.solve import (
    package_key,
    refinement_target,
    solve_by_placement,
    solve_layer,
)
from autotune.chiplets.split import (
    SPLITS,
    ChipletPart,
    balanced,
    coverage,
    link_bytes,
    part_mapping,
    split_parts,
)
from autotune.chiplets.verification import execute_layer, verify, verify_package

__all__ = [
    "SPLITS",
    "ChipletPart",
    "analyze",
    "analyze_package",
    "balanced",
    "coverage",
    "d2d_cycles",
    "execute_layer",
    "link_bytes",
    "package_key",
    "part_mapping",
    "refinement_target",
    "simulate",
    "simulate_package",
    "solve_by_placement",
    "solve_layer",
    "split_parts",
    "stage_in_cycles",
    "verify",
    "verify_package",
]
