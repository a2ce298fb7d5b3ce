"""The network plan as a problem: steps with their options, tensors with their lifetimes, the
L2 and the two memories' bandwidths; and the one function that turns a choice into a plan.

A step's time with a choice (Eq. below, used by the CP-SAT model, the greedy baseline and
``assemble`` alike): the option's own cycles, but never less than what the HBM and the L2
can deliver of its traffic plus the weights it prefetches for later steps, since the
prefetch shares both memories with the step's own transfers, and never less than the copy
takes when it moves only what the step's transfers leave of the two memories while the
option runs (``blocked`` bytes of what it could move at its own rate, ``copy`` = the slower
memory's B/cycle: ``model.analysis.prefetch_blocked_bytes``)::

    cycles_i = max(option cycles, (HBM bytes + prefetch) / HBM B/cycle,
                   (L2 bytes + prefetch) / L2 B/cycle, (blocked + prefetch) / copy B/cycle)

On a package (``copies`` chiplets) every chiplet runs its part of each step with the same
placement in its own L2 (``chiplets.analysis``) and keeps the same L2 layout (SPMD): a tensor
takes its whole size at its offset in every chiplet's L2, an upper bound on a chiplet's
share of it (its part plus the remote rows it stages in never exceed the whole tensor).
Weights are replicated, so a prefetch loads one copy per chiplet; the bytes of an option
are summed over the chiplets and the bandwidths are the package's (per chiplet x copies).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cached_property

from autotune.ir.fusion import fuse_depthwise, fused_steps
from autotune.ir.lowering import Lowering
from autotune.ir.machine import Machine
from autotune.ir.plan import (
    L2_ALIGN,
    NetworkPlan,
    PlanMode,
    PlannedStep,
    PlannedTensor,
    l2_peak,
    weights_tensor,
)
from autotune.model.analysis import cut_rate, memory_rates, prefetch_floor_cycles
from autotune.plans.options import StepOption
from autotune.plans.tensors import (
    TensorSpec,
    fused_weights,
    may_live_in_l2,
    plan_tensors,
    step_buffers,
    weights_stream,
)

#: Steps before its reader during which a layer's weights may be prefetched into L2.
PREFETCH_WINDOW = 4


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
    #: bytes per cycle one direction of the trees carries (``model.analysis.cut_rate``)
    cut_rate: Fraction = Fraction(0)
    copies: int = 1  # chiplets, each with its own L2 and its own copy of prefetched weights
    #: steps that may absorb the step before them (``ir.fusion``: ``fused`` options at them,
    #: ``absorbed`` at the step before: ``options.step_options``), and what
    #: a choice that fuses some is realized with (``realized``): the lowering, the batch and
    #: the precision the tensors were sized at
    fused: tuple[int, ...] = ()
    lowering: Lowering | None = field(default=None, compare=False, repr=False)
    batch: int = 1
    precision: str = "fp32"

    @cached_property
    def spec(self) -> dict[str, TensorSpec]:
        return {t.name: t for t in self.tensors}

    def placeable(self, name: str) -> bool:
        """The tensor can be in L2 at all (``tensors.may_live_in_l2``)."""
        return may_live_in_l2(self.spec[name], self.capacity)

    @cached_property
    def pair_weights(self) -> frozenset[str]:
        """The tensors of fused pairs' weights (``tensors.fused_weights``)."""
        return frozenset(fused_weights(self.steps[i]) for i in self.fused)

    def option_streams(self, i: int, option: StepOption) -> StepStreams | None:
        """The tensors step ``i`` reads and writes with ``option``: its own; a fused pair's
        (``pair_streams``); none for an absorbed step."""
        if option.role == "absorbed":
            return None
        return self.streams[i] if option.role == "own" else self.pair_streams(i)

    def pair_streams(self, i: int) -> StepStreams:
        """The tensors of the fused pair whose second step is ``i``: the first's input, the
        pair's weights, the second's residual and output."""
        own = self.streams[i]
        return StepStreams(
            self.streams[i - 1].inputs, own.residual, own.output, fused_weights(self.steps[i])
        )

    def prefetch_cost(self, weights: str) -> int:
        """Bytes moved from HBM to L2 to prefetch ``weights``: one copy per chiplet."""
        return self.spec[weights].bytes * self.copies

    def step_cycles(self, i: int, option: StepOption, prefetch_bytes: int) -> int:
        """Step ``i``'s time with ``option`` while prefetching ``prefetch_bytes`` (all
        copies: ``prefetch_cost``); the module docstring's equation."""
        floor = prefetch_floor_cycles(
            option.cycles,
            option.hbm_bytes,
            option.l2_bytes,
            prefetch_bytes,
            self.hbm_rate,
            self.l2_rate,
            option.l2_both_bytes,
            self.cut_rate,
        )
        return max(option.cycles, floor)


def make_problem(
    lowering: Lowering,
    tensors: Sequence[TensorSpec],
    options: Sequence[Sequence[StepOption]],
    machine: Machine,
    fused: Sequence[int] = (),
    *,
    batch: int,
    precision: str,
) -> PlanProblem:
    """The problem of ``lowering``'s steps with their ``options``; ``fused``, ``batch``,
    ``precision``: as ``PlanProblem`` says (``tensors`` sized at that batch and precision)."""
    return PlanProblem(
        tuple(s.name for s in lowering.steps),
        step_streams(lowering, tensors),
        tuple(tensors),
        tuple(tuple(o) for o in options),
        machine.l2_bytes if machine.has_l2 else 0,
        *memory_rates(machine),
        cut_rate=cut_rate(machine),
        copies=machine.chiplets,
        fused=tuple(fused),
        lowering=lowering,
        batch=batch,
        precision=precision,
    )


def step_streams(lowering: Lowering, tensors: Sequence[TensorSpec]) -> tuple[StepStreams, ...]:
    """The tensors of each step's streams (weights only when ``tensors`` has them)."""
    names = {t.name for t in tensors}
    streams = []
    for step in lowering.steps:
        inputs, residual, output = step_buffers(step)
        w = weights_stream(step)
        streams.append(StepStreams(inputs, residual, output, w if w in names else None))
    return tuple(streams)


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
    """The plan a choice makes, every figure computed here (not taken from a solver); over
    the lowering it runs when the problem offers fusion (``realized``)."""
    if problem.fused:
        problem, choice = realized(problem, choice)
    fused = () if problem.lowering is None else fused_steps(problem.lowering)
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
        fused,
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
        if option.role == "own" and (p.input, p.weights, p.residual, p.output) == want:
            return k
    return None


def fused_by(problem: PlanProblem, choice: Choice) -> tuple[str, ...]:
    """The steps whose ``fused`` option the choice takes."""
    return tuple(
        problem.steps[i]
        for i in problem.fused
        if problem.options[i][choice.option[i]].role == "fused"
    )


def realized(problem: PlanProblem, choice: Choice) -> tuple[PlanProblem, Choice]:
    """A choice of a problem that offers fusion as the problem of the lowering it runs (its
    pairs fused: ``ir.fusion``), each step with its chosen option alone, and the choice
    there: the same L2 offsets (a fused pair's weights under their tensor's name),
    prefetches at the same steps, renumbered. ``assemble`` of the two is the plan; its
    figures are the choice's (an absorbed step runs and moves nothing)."""
    assert problem.lowering is not None, "a problem that offers fusion has its lowering"
    pairs = fused_by(problem, choice)
    runs = fuse_depthwise(problem.lowering, pairs)
    absorbed = {problem.steps.index(name) - 1 for name in pairs}
    renumbered: list[int] = []
    for i in range(len(problem.steps)):
        renumbered.append(i - sum(1 for j in absorbed if j < i))
    chosen = [[problem.options[i][k]] for i, k in enumerate(choice.option) if i not in absorbed]
    tensors = plan_tensors(runs, problem.batch, problem.precision)
    final = replace(
        problem,
        steps=tuple(s.name for s in runs.steps),
        streams=step_streams(runs, tensors),
        tensors=tensors,
        options=tuple(tuple(o) for o in chosen),
        fused=(),
        lowering=runs,
    )
    alias = {weights_tensor(name): fused_weights(name) for name in pairs}
    offsets, prefetch = {}, {}
    for t in tensors:
        source = alias.get(t.name, t.name)
        if source in choice.offsets:
            offsets[t.name] = choice.offsets[source]
        if source in choice.prefetch_step:
            prefetch[t.name] = renumbered[choice.prefetch_step[source]]
    return final, Choice(tuple(0 for _ in chosen), offsets, prefetch)


def aligned_units(nbytes: int) -> int:
    return -(-nbytes // L2_ALIGN)
