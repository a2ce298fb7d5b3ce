"""Numerical verification: execute a mapped layer as its schedule says, in numpy.

``build_program`` turns a mapping into explicit per-cluster operations (``program``);
``execute`` runs them on a model of main memory and the clusters' L1 (``executor``),
checking every operation's preconditions; ``verify`` does both on random data and compares
with an independent reference (``reference``). ``faults`` builds deliberately broken
programs, which the executor must reject. Every layer kind runs this way, its epilogue
applied by the output stores.

``execute_layer`` (``run``) is the entry point for running a layer on given data
(input, weights, bias, residual -> output), one layer of a network at a time.

The package is named ``verification`` so that ``autotune.verify``, the public function, does
not shadow it.
"""

from autotune.verification.build import build_program
from autotune.verification.check import Verification, tolerance, verify, verify_program
from autotune.verification.executor import AllocationError, Outputs, ScheduleError, Stats, execute
from autotune.verification.program import Program, Region
from autotune.verification.reference import reference
from autotune.verification.run import execute_layer, interleave, layer_inputs

__all__ = [
    "AllocationError",
    "Outputs",
    "Program",
    "Region",
    "ScheduleError",
    "Stats",
    "Verification",
    "build_program",
    "execute",
    "execute_layer",
    "interleave",
    "layer_inputs",
    "reference",
    "tolerance",
    "verify",
    "verify_program",
]
