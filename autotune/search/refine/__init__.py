"""Optuna refinement of the integer program's winners against the tile-level simulator."""

from autotune.search.refine.study import (
    RefineResult,
    make_sampler,
    refine_layer,
    simulated_value,
    storage_url,
)

__all__ = ["RefineResult", "make_sampler", "refine_layer", "simulated_value", "storage_url"]
