"""The errors a stage raises cross from a worker process (a parallel solve, refinement over
processes) as themselves: pickled with their own arguments, not rebuilt from the message
alone, which fails and breaks the whole process pool (an infeasible layer reached the user as
"BrokenProcessPool" instead of the line naming it)."""

from __future__ import annotations

import pickle

import pytest

from autotune.io.errors import InputError
from autotune.ir.graph import GraphError
from autotune.ir.layer import LayerError
from autotune.ir.options import OptionsError
from autotune.search.refine.storage import StorageError
from autotune.search.solve import InfeasibleError

ERRORS = [
    InfeasibleError("conv1", 131072, 200704),
    InfeasibleError("conv1", 131072, None),
    LayerError("conv1", "kernel", "must be positive"),
    OptionsError("trials", "must be >= 1"),
    StorageError("sqlite:///x.db: not an autotune cache"),
    GraphError("add1", "in", "shapes differ", producer="conv1"),
    InputError("net.yaml", "must be positive", layer="conv1", field="kernel"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_an_error_crosses_a_process_boundary_intact(error):
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error)
    assert vars(again) == vars(error)
