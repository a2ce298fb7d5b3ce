"""Optuna refinement of the integer program's winners against the tile-level simulator."""

from autotune.search.refine.study import (
    RefineResult,
    refine_layer,
    refinement_target,
    storage_url,
)

__all__ = ["RefineResult", "refine_layer", "refinement_target", "storage_url"]
