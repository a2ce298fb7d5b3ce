"""``TuneOptions``: every choice of a tuning run, built once and passed down whole.

The command line (``autotune tune``), ``autotune.tune`` and ``autotune.sweep`` build one
``TuneOptions``; every stage below reads the fields it needs from it. No stage re-lists the
options as parameters of its own or passes them on in a ``**kwargs`` bag, so a new option is
one field here and one read where it is used.

Two kinds of parallelism have distinct names: ``solver_workers`` are CP-SAT's search
threads inside one solve; ``processes`` are worker processes over the distinct layer shapes
of a network; ``refine_workers`` are processes sharing one layer's Optuna study.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from autotune.ir.errors import ArgumentsError
from autotune.ir.precision import WORD_BYTES

Objective = Literal["latency", "traffic", "energy"]
OBJECTIVES: tuple[str, ...] = ("latency", "traffic", "energy")
SEARCH_MODES: tuple[str, ...] = ("ilp", "exhaustive")
SAMPLERS: tuple[str, ...] = ("tpe", "random")
#: ``network``: one CP-SAT model places every tensor in L2 or HBM (``autotune.plans``);
#: ``per-layer``: every layer on its own, all tensors in HBM.
PLANS: tuple[str, ...] = ("network", "per-layer")

#: Refinement trials per distinct layer shape when no budget is given.
DEFAULT_TRIALS = 24
#: Seeds (and CP-SAT's random seed) must fit a signed 32-bit integer (numpy, Optuna, CP-SAT).
MAX_SEED = 2**31 - 1


class OptionsError(ArgumentsError, ValueError):
    """An option has a value no stage accepts: ``option`` names the field, ``problem`` says
    what is wrong (the command line reports it under its flag, ``--option``)."""

    def __init__(self, option: str, problem: str) -> None:
        self.option = option
        self.problem = problem
        super().__init__(f"option {option!r}: {problem}")


@dataclass(frozen=True)
class TuneOptions:
    """The choices of one tuning run (all keyword, all with defaults).

    Attributes:
        precision: word format, ``fp64``/``fp32``/``fp16``; None takes the network's.
        batch: images per inference; None takes the network's.
        objective: ``latency`` (cycles), ``traffic`` (off-chip bytes) or ``energy``; the
            integer program and the refinement both minimise it (ties: cycles, then L1).
        search: ``ilp`` (CP-SAT, proven optimal) or ``exhaustive`` (numpy enumeration).
        time_limit: seconds per layer for the integer program (None: no limit).
        solver_workers: CP-SAT search workers per solve (1 keeps results reproducible).
        processes: worker processes over distinct layer shapes (None: one per core).
        refine: refine the integer program's winners against the simulator with Optuna.
        trials: refinement trials per distinct layer shape (the study's total budget).
        refine_timeout: seconds of refinement per layer in this run (None: no limit).
        sampler: Optuna sampler of the refinement, ``tpe`` or ``random``.
        storage: Optuna storage URL (``sqlite:///PATH``, ``postgresql://...``), ``"memory"``,
            or None (SQLite in the user cache); checked and opened at the start of ``tune``
            (``search.refine.storage``). Any number of processes may share one.
        refine_workers: processes sharing each layer's study (needs a storage several
            processes can open: the default SQLite file or PostgreSQL).
        verify: execute every winner in numpy and compare with a reference.
        plan: ``network`` (one CP-SAT model over the network keeps tensors in the shared L2
            where it pays; needs a graph and a machine with an L2, else per-layer) or
            ``per-layer`` (every tensor in HBM, each layer alone).
        plan_time_limit: seconds for the network CP-SAT (None: no limit); the best plan
            found so far is kept when it runs out.
        fuse_depthwise: the network plan may fuse a depthwise conv into the 1x1 conv that
            alone reads it, or a 1x1 conv into the depthwise that alone reads it
            (``autotune.ir.fusion``), where that pays; False: never.
        seed: seeds CP-SAT, Optuna and the verification data.

    Example:
        >>> TuneOptions(objective="traffic", refine=False).objective
        'traffic'
        >>> TuneOptions(trials=0)
        Traceback (most recent call last):
        ...
        autotune.ir.options.OptionsError: option 'trials': must be a positive integer, got 0
    """

    precision: str | None = None
    batch: int | None = None
    objective: str = "latency"
    search: str = "ilp"
    time_limit: float | None = 60.0
    solver_workers: int = 1
    processes: int | None = None
    refine: bool = True
    trials: int = DEFAULT_TRIALS
    refine_timeout: float | None = None
    sampler: str = "tpe"
    storage: str | None = None
    refine_workers: int = 1
    verify: bool = True
    seed: int = 0
    plan: str = "network"
    plan_time_limit: float | None = 60.0
    fuse_depthwise: bool = True

    def __post_init__(self) -> None:
        _choice("objective", self.objective, OBJECTIVES)
        _choice("search", self.search, SEARCH_MODES)
        _choice("sampler", self.sampler, SAMPLERS)
        _choice("plan", self.plan, PLANS)
        if self.precision is not None:
            _choice("precision", self.precision, tuple(WORD_BYTES))
        for name in ("batch", "processes"):
            value = getattr(self, name)
            if value is not None:
                _positive(name, value)
        for name in ("trials", "solver_workers", "refine_workers"):
            _positive(name, getattr(self, name))
        for name in ("time_limit", "refine_timeout", "plan_time_limit"):
            value = getattr(self, name)
            if value is not None and not (
                isinstance(value, int | float) and not isinstance(value, bool)
            ):
                raise OptionsError(name, f"expected seconds, got {value!r}")
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise OptionsError(name, f"must be positive seconds, got {value!r}")
        if not isinstance(self.fuse_depthwise, bool):
            raise OptionsError("fuse_depthwise", f"expected a boolean, got {self.fuse_depthwise!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise OptionsError("seed", f"expected an integer, got {self.seed!r}")
        if not 0 <= self.seed <= MAX_SEED:
            raise OptionsError("seed", f"must be between 0 and {MAX_SEED}, got {self.seed}")


def _choice(name: str, value: object, known: tuple[str, ...]) -> None:
    if value not in known:
        raise OptionsError(name, f"unknown {name} {value!r} (choose: {', '.join(known)})")


def _positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise OptionsError(name, f"must be a positive integer, got {value!r}")
