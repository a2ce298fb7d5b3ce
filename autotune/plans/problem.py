"""The network plan as a problem: steps with their options, tensors with their lifetimes, the
L2 and the two memories' bandwidths; and the one function that turns a choice into a plan.

A step's time with a choice (Eq. below, used by the CP-SAT model, the greedy baseline and
``assemble`` alike): the option's own cycles, but never less than what the HBM and the L2
can deliver of its traffic plus the weights it prefetches for later steps, since the
prefetch shares both memories with the step's own transfers::

    cycles_i = max(option cycles, (HBM bytes + prefetch) / HBM B/cycle,
                   (L2 bytes + prefetch) / L2 B/cycle)

On a package (``copies`` chiplets) every chiplet runs its part of each step with the same
placement in its own L2 (``chiplets.analysis``) and keeps the same L2 layout (SPMD): a tensor
takes its whole size at its offset in every chiplet's L2, an upper bound on a chiplet's
share of it (its part plus the remote rows it stages in never exceed the whole tensor).
Weights are replicated, so a prefetch loads one copy per chiplet; the bytes of an option
are summed over the chiplets and the bandwidths are the package's (per chiplet x copies).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from autotune.ir.lowering import Lowering
from autotune.ir.machine import Machine
from autotune.ir.plan import (
    L2_ALIGN,
    NetworkPlan,
    PlanMode,
    PlannedStep,
    PlannedTensor,
    l2_peak,
)
from autotune.plans.options import StepOption
from autotune.plans.tensors import TensorSpec, may_live_in_l2, step_buffers, weights_stream

#: Steps before its reader during which a layer's weights may be prefetched into L2.
PREFETCH_WINDOW = 4


def rate(bytes_per_cycle: float) -> Fraction:
    """A bandwidth as an exact fraction (bytes per cycle), for integer constraints."""
    return Fraction(bytes_per_cycle).limit_denominator(1000)


def cdiv_rate(nbytes: int, bandwidth: Fraction) -> int:
    """Cycles to move ``nbytes`` at ``bandwidth``: ceil(nbytes / bandwidth)."""
    return -(-nbytes * bandwidth.denominator // bandwidth.numerator)


@dataclass(frozen=True)
class StepStreams:
    """The plan tensors a step reads as input, as residual, writes, and its weights."""

    inputs: tuple[str, ...]
    residual: str | None
    output: str
    weights: str | None


@dataclass(frozen=True)
class PlanProblem:
    steps: tuple[str, ...]
    streams: tuple[StepStreams, ...]
    tensors: tuple[TensorSpec, ...]
    options: tuple[tuple[StepOption, ...], ...]
    capacity: int  # L2 bytes the plan may use
    hbm_rate: Fraction
    l2_rate: Fraction
    prefetch_window: int = PREFETCH_WINDOW
    copies: int = 1  # chiplets, each with its own L2 and its own copy of prefetched weights

    @cached_property
    def spec(self) -> dict[str, TensorSpec]:
        return {t.name: t for t in self.tensors}

    def placeable(self, name: str) -> bool:
        """The tensor can be in L2 at all (``tensors.may_live_in_l2``)."""
        return may_live_in_l2(self.spec[name], self.capacity)

    def prefetch_cost(self, weights: str) -> int:
        """Bytes moved from HBM to L2 to prefetch ``weights``: one copy per chiplet."""
        return self.spec[weights].bytes * self.copies

    def step_cycles(self, i: int, option: StepOption, prefetch_bytes: int) -> int:
        """Step ``i``'s time with ``option`` while prefetching ``prefetch_bytes`` (all
        copies: ``prefetch_cost``); the module docstring's equation."""
        return max(
            option.cycles,
            cdiv_rate(option.hbm_bytes + prefetch_bytes, self.hbm_rate),
            cdiv_rate(option.l2_bytes + prefetch_bytes, self.l2_rate) if self.l2_rate else 0,
        )


def make_problem(
    lowering: Lowering,
    tensors: Sequence[TensorSpec],
    options: Sequence[Sequence[StepOption]],
    machine: Machine,
) -> PlanProblem:
    names = {t.name for t in tensors}
    streams = []
    for step in lowering.steps:
        inputs, residual, output = step_buffers(step)
        w = weights_stream(step)
        streams.append(StepStreams(inputs, residual, output, w if w in names else None))
    return PlanProblem(
        tuple(s.name for s in lowering.steps),
        tuple(streams),
        tuple(tensors),
        tuple(tuple(o) for o in options),
        machine.l2_bytes if machine.has_l2 else 0,
        rate(machine.hbm_bytes_per_cycle * machine.chiplets),
        rate(machine.l2_bytes_per_cycle * machine.chiplets) if machine.has_l2 else Fraction(0),
        copies=machine.chiplets,
    )


@dataclass(frozen=True)
class Choice:
    """A solution: each step's option index, the tensors in L2 with their offsets, and the
    step that prefetches each L2-resident layer's weights."""

    option: tuple[int, ...]
    offsets: Mapping[str, int]  # tensor -> L2 byte offset (L2 tensors only)
    prefetch_step: Mapping[str, int]  # weights tensor -> the step that loads it


def assemble(
    problem: PlanProblem,
    choice: Choice,
    mode: PlanMode,
    status: str,
    bound_cycles: int | None = None,
    solve_s: float = 0.0,
) -> NetworkPlan:
    """The plan a choice makes, every figure computed here (not taken from a solver)."""
    prefetch: dict[int, list[str]] = {}
    for name, j in sorted(choice.prefetch_step.items()):
        prefetch.setdefault(j, []).append(name)
    steps, total, hbm = [], 0, 0
    for i, name in enumerate(problem.steps):
        option = problem.options[i][choice.option[i]]
        loads = tuple(prefetch.get(i, ()))
        extra = sum(problem.prefetch_cost(w) for w in loads)
        cycles = problem.step_cycles(i, option, extra)
        total += cycles
        hbm += option.hbm_bytes + extra
        steps.append(
            PlannedStep(
                name,
                option.placement,
                loads,
                cycles,
                option.hbm_bytes + extra,
                option.l2_bytes + extra,
            )
        )
    tensors = []
    for t in problem.tensors:
        in_l2 = t.name in choice.offsets
        first = choice.prefetch_step[t.name] if t.role == "weights" and in_l2 else t.first
        tensors.append(
            PlannedTensor(
                t.name,
                t.role,
                "l2" if in_l2 else "hbm",
                t.bytes,
                first,
                t.last,
                choice.offsets[t.name] if in_l2 else None,
                t.step,
            )
        )
    return NetworkPlan(
        mode,
        problem.capacity,
        tuple(tensors),
        tuple(steps),
        status,
        total,
        total if bound_cycles is None else bound_cycles,
        hbm,
        l2_peak(tensors),
        round(solve_s, 3),
    )


def per_layer_choice(problem: PlanProblem) -> Choice:
    """Today's schedule: every step's all-HBM option (its first), nothing in L2."""
    return Choice(tuple(0 for _ in problem.steps), {}, {})


def consistent_option(problem: PlanProblem, i: int, in_l2: set[str]) -> int | None:
    """The index of step ``i``'s option whose placement matches the tensors' levels."""
    s = problem.streams[i]

    def level(names: Sequence[str]) -> str | None:
        levels = {"l2" if n in in_l2 else "hbm" for n in names}
        return levels.pop() if len(levels) == 1 else None

    want = (
        level(s.inputs),
        level([s.weights]) if s.weights else "hbm",
        level([s.residual]) if s.residual else "hbm",
        level([s.output]),
    )
    for k, option in enumerate(problem.options[i]):
        p = option.placement
        if (p.input, p.weights, p.residual, p.output) == want:
            return k
    return None


def aligned_units(nbytes: int) -> int:
    return -(-nbytes // L2_ALIGN)
