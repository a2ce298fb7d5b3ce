"""A network plan: where every tensor lives (HBM or the shared L2, at which L2 offset and for
which steps) and which placement each step runs with.

Time is the step index of the lowering (``Lowering.steps``): the network runs its steps one
after another on the whole chiplet. A tensor in L2 occupies bytes ``offset … offset + bytes − 1``
from the start of step ``first`` to the end of step ``last``: an activation from its first
producing step to its last reading step, a layer's weights from the step during which they are
prefetched to the step that reads them. Two L2 tensors whose step ranges meet must not share a
byte; ``check_plan`` says so for every pair (the plan is sound by construction when the
network CP-SAT made it, and checked anyway when read back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from autotune.ir.placement import MemoryLevel, Placement

TensorRole = Literal["input", "activation", "output", "weights"]
TENSOR_ROLES: tuple[TensorRole, ...] = get_args(TensorRole)
PlanMode = Literal["network", "per-layer"]
PLAN_MODES: tuple[PlanMode, ...] = get_args(PlanMode)
#: Byte alignment of every L2 offset and size: one DMA beat of the Manticore (512 bit).
L2_ALIGN = 64


def weights_tensor(step: str) -> str:
    """The plan's name of a step's weights."""
    return f"{step}:weights"


@dataclass(frozen=True)
class PlannedTensor:
    """One stored tensor: its level, size (bytes at the plan's batch and precision), live
    steps and, in L2, its offset (``None`` in HBM). ``step``: the step whose weights these
    are (weights only)."""

    name: str
    role: TensorRole
    level: MemoryLevel
    bytes: int
    first: int
    last: int
    offset: int | None = None
    step: str | None = None

    @property
    def l2_end(self) -> int:
        """One past the tensor's last L2 byte (its offset when in HBM)."""
        return (self.offset or 0) + (self.bytes if self.level == "l2" else 0)


@dataclass(frozen=True)
class PlannedStep:
    """One step of the plan: the placement of its streams, the weights it prefetches into
    L2 for later steps, and what the model predicts for its chosen mapping there."""

    name: str
    placement: Placement
    prefetch: tuple[str, ...]  # names of weight tensors loaded into L2 during this step
    cycles: int  # the step's predicted cycles, prefetch included
    hbm_bytes: int  # the step's own HBM traffic plus its prefetches
    l2_bytes: int  # its L2 traffic (reads and writes) plus its prefetches' writes


@dataclass(frozen=True)
class NetworkPlan:
    """The placement of every tensor and every step, and how the plan was found.

    ``status``: the network CP-SAT's (``OPTIMAL``, ``FEASIBLE``), ``GREEDY`` for the greedy
    baseline, ``PER_LAYER`` for today's everything-in-HBM schedule. ``bound_cycles`` is the
    solver's lower bound on the network latency (= ``cycles`` when optimal)."""

    mode: PlanMode
    l2_capacity: int
    tensors: tuple[PlannedTensor, ...]
    steps: tuple[PlannedStep, ...]
    status: str
    cycles: int
    bound_cycles: int
    hbm_bytes: int
    l2_peak_bytes: int
    solve_s: float = 0.0
    #: the 1x1 steps that run with the depthwise step before them fused in
    #: (``autotune.ir.fusion``): the plan's steps are those of the lowering so fused
    fused: tuple[str, ...] = ()

    @property
    def gap(self) -> float:
        return 0.0 if self.cycles <= 0 else max(0.0, 1.0 - self.bound_cycles / self.cycles)

    @property
    def in_l2(self) -> tuple[PlannedTensor, ...]:
        """The tensors the plan keeps in L2 (activations and prefetched weights)."""
        return tuple(t for t in self.tensors if t.level == "l2")

    @property
    def prefetched_bytes(self) -> int:
        """Bytes of weights copied from HBM into L2 ahead of their steps, over all steps
        (part of ``hbm_bytes``, though no step's own streams move them)."""
        return sum(self.prefetch_bytes(s.name) for s in self.steps)

    def tensor(self, name: str) -> PlannedTensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def step(self, name: str) -> PlannedStep:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    def placement(self, step: str) -> Placement:
        return self.step(step).placement

    def prefetch_bytes(self, step: str) -> int:
        """Bytes of the weights ``step`` prefetches into L2 for later steps (one copy: on a
        package every chiplet loads its own)."""
        return sum(self.tensor(w).bytes for w in self.step(step).prefetch)


def l2_peak(tensors: tuple[PlannedTensor, ...] | list[PlannedTensor]) -> int:
    """The most L2 bytes live during any one step (sum over live tensors)."""
    in_l2 = [t for t in tensors if t.level == "l2"]
    if not in_l2:
        return 0
    steps = range(min(t.first for t in in_l2), max(t.last for t in in_l2) + 1)
    return max(sum(t.bytes for t in in_l2 if t.first <= s <= t.last) for s in steps)


def overlaps(tensors: tuple[PlannedTensor, ...] | list[PlannedTensor]) -> list[tuple[str, str]]:
    """Pairs of L2 tensors that are live during a common step and share a byte."""
    in_l2 = sorted((t for t in tensors if t.level == "l2"), key=lambda t: (t.first, t.name))
    found = []
    for i, a in enumerate(in_l2):
        for b in in_l2[i + 1 :]:
            if b.first > a.last:
                break
            if (a.offset or 0) < b.l2_end and (b.offset or 0) < a.l2_end:
                found.append((a.name, b.name))
    return found


def check_plan(plan: NetworkPlan) -> list[str]:
    """Everything wrong with a plan's L2 layout on its own terms: offsets present, aligned,
    inside the capacity; lifetimes ordered; no two live tensors sharing a byte."""
    problems = []
    for t in plan.tensors:
        if t.bytes < 0 or t.first < 0 or t.last < t.first:
            problems.append(f"tensor {t.name!r}: lifetime {t.first}..{t.last}, {t.bytes} B")
        if t.level == "hbm":
            if t.offset is not None:
                problems.append(f"tensor {t.name!r}: in HBM but has an L2 offset")
            continue
        if t.offset is None:
            problems.append(f"tensor {t.name!r}: in L2 without an offset")
            continue
        if t.offset < 0 or t.offset % L2_ALIGN:
            problems.append(f"tensor {t.name!r}: offset {t.offset} is not a {L2_ALIGN} B multiple")
        if t.l2_end > plan.l2_capacity:
            problems.append(
                f"tensor {t.name!r}: bytes {t.offset}..{t.l2_end - 1} beyond the L2's "
                f"{plan.l2_capacity} B"
            )
    for a, b in overlaps(plan.tensors):
        problems.append(f"tensors {a!r} and {b!r} are live together and share L2 bytes")
    return problems
