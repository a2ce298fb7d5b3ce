"""Optuna refinement of the integer program's winners against the tile-level simulator."""

from autotune.search.refine.storage import (
    StorageError,
    StorageWarning,
    cache_dir,
    check_storage,
    prepare_storage,
    storage_url,
)
from autotune.search.refine.study import (
    RefineResult,
    make_sampler,
    refine_layer,
    simulated_value,
)

__all__ = [
    "RefineResult",
    "StorageError",
    "StorageWarning",
    "cache_dir",
    "check_storage",
    "make_sampler",
    "prepare_storage",
    "refine_layer",
    "simulated_value",
    "storage_url",
]
