"""Numerical verification: execute a mapped layer as its schedule says, in numpy.

``build_program`` turns a mapping into explicit per-cluster operations (``program``);
``execute`` runs them on a model of main memory and the clusters' L1 (``executor``),
checking every operation's preconditions; ``verify`` does both on random data and compares
with an independent reference (``reference``). ``faults`` builds deliberately broken
programs, which the executor must reject.

Note: ``autotune.verify`` (the attribute of the top-level package) is the *function*
``verify``; import this package's modules with ``from autotune.verify.executor import ...``.
"""

from autotune.verify.build import build_program
from autotune.verify.executor import AllocationError, Outputs, ScheduleError, Stats, execute
from autotune.verify.program import Program, Region
from autotune.verify.reference import reference
from autotune.verify.verification import Verification, tolerance, verify, verify_program

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
    "reference",
    "tolerance",
    "verify",
    "verify_program",
]
