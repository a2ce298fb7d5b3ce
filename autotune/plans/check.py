"""A plan read back, checked against what it claims: every figure re-derived.

``plan_findings`` rebuilds the plan from the file's own evidence (the lowering's tensors at
the file's batch and precision, each step's figures re-derived by the model at its
placement, the claimed levels, offsets and prefetch steps) with the same ``assemble`` that
made it, and lists every difference; plus the layout's own soundness (``ir.plan.check_plan``:
offsets aligned and inside the L2, no two live tensors sharing a byte), pinned tensors in
HBM, prefetches inside their window, and each step's placement matching its tensors' levels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields

from autotune.ir.fusion import fused_steps
from autotune.ir.lowering import Lowering
from autotune.ir.machine import Machine
from autotune.ir.plan import NetworkPlan, PlannedStep, PlannedTensor, check_plan
from autotune.plans.options import StepOption
from autotune.plans.problem import (
    Choice,
    PlanProblem,
    assemble,
    consistent_option,
    make_problem,
)
from autotune.plans.tensors import plan_tensors

#: REFINED: the CP-SAT's plan whose layers the refinement then changed (``bound_cycles`` is
#: the CP-SAT's proven bound under the model, the cycles the refined layers' figures).
KNOWN_STATUS = ("OPTIMAL", "FEASIBLE", "GREEDY", "PER_LAYER", "REFINED")


def restate(
    claim: NetworkPlan,
    lowering: Lowering,
    machine: Machine,
    batch: int,
    precision: str,
    figures: Sequence[StepOption],
) -> NetworkPlan:
    """``claim`` with every figure derived again (``assemble``) from its own layout and
    prefetches and each step's ``figures`` (its placement, mapping and the model's cycles,
    HBM and L2 bytes there): the same plan after its layers' mappings changed, or what a
    file's plan must equal."""
    tensors = plan_tensors(lowering, batch, precision)
    problem = make_problem(
        lowering, tensors, [[f] for f in figures], machine, batch=batch, precision=precision
    )
    return _restated(claim, problem)


def _claimed_choice(claim: NetworkPlan) -> Choice:
    """The choice a plan states: each step's one option, its L2 offsets and prefetch steps."""
    offsets = {t.name: t.offset or 0 for t in claim.tensors if t.level == "l2"}
    prefetch = {w: i for i, s in enumerate(claim.steps) for w in s.prefetch}
    return Choice(tuple(0 for _ in claim.steps), offsets, prefetch)


def _restated(claim: NetworkPlan, problem: PlanProblem) -> NetworkPlan:
    """``restate`` on a problem whose every step has the one option of its figures."""
    return assemble(
        problem,
        _claimed_choice(claim),
        claim.mode,
        claim.status,
        claim.bound_cycles,
        claim.solve_s,
    )


def plan_findings(
    claim: NetworkPlan,
    lowering: Lowering,
    machine: Machine,
    batch: int,
    precision: str,
    figures: Sequence[StepOption],
) -> list[tuple[str, str]]:
    """(field, problem) pairs; ``figures``: each step's option as re-derived (placement,
    mapping, the model's cycles, HBM bytes and L2 bytes at that placement)."""
    found = [("plan.tensors", p) for p in check_plan(claim)]
    if claim.status not in KNOWN_STATUS:
        found.append(("plan.status", f"unknown status {claim.status!r}"))
    if claim.l2_capacity != machine.l2_bytes:
        found.append(
            ("plan.l2_capacity", f"{claim.l2_capacity}, the machine has {machine.l2_bytes}")
        )
        return found
    names = [s.name for s in lowering.steps]
    if [s.name for s in claim.steps] != names:
        return found + [("plan.steps", "are not the layers in order")]
    if claim.fused != fused_steps(lowering):
        return found + [("plan.fused", "are not the steps the graph fuses")]
    tensors = plan_tensors(lowering, batch, precision)
    expected = {t.name: t for t in tensors}
    claimed = {t.name: t for t in claim.tensors}
    if set(claimed) != set(expected) or len(claim.tensors) != len(tensors):
        missing = sorted(set(expected) - set(claimed))[:2]
        extra = sorted(set(claimed) - set(expected))[:2]
        return found + [
            ("plan.tensors", f"are not the network's (missing {missing}, extra {extra})")
        ]
    problem = make_problem(
        lowering, tensors, [[f] for f in figures], machine, batch=batch, precision=precision
    )
    stated = _claimed_choice(claim)
    offsets, prefetch = stated.offsets, stated.prefetch_step
    for name in offsets:
        if not problem.placeable(name):
            found.append((f"plan.tensors.{name}", "cannot be in L2 (pinned to HBM or too large)"))
    for w, j in prefetch.items():
        t = expected.get(w)
        if t is None or t.role != "weights" or w not in offsets:
            found.append((f"plan.steps.{names[j]}.prefetch", f"{w!r} is no L2 weights tensor"))
        elif not t.readers[0] - problem.prefetch_window <= j < t.readers[0]:
            found.append((f"plan.steps.{names[j]}.prefetch", f"{w!r} outside its window"))
    for w in offsets:
        if expected[w].role == "weights" and w not in prefetch:
            found.append((f"plan.tensors.{w}", "weights in L2 that no step prefetches"))
    for i, s in enumerate(claim.steps):
        if consistent_option(problem, i, set(offsets)) is None:
            found.append((f"plan.steps.{s.name}.placement", "does not match its tensors' levels"))
        if s.placement != figures[i].placement:
            found.append((f"plan.steps.{s.name}.placement", "differs from the layer's"))
    if found:
        return found
    derived = _restated(claim, problem)
    for a, b in zip(claim.tensors, derived.tensors, strict=True):
        found += _field_differences(f"plan.tensors.{a.name}", a, b)
    for sa, sb in zip(claim.steps, derived.steps, strict=True):
        found += _field_differences(f"plan.steps.{sa.name}", sa, sb)
    for name in ("cycles", "hbm_bytes", "l2_peak_bytes"):
        if getattr(claim, name) != getattr(derived, name):
            found.append(
                (
                    f"plan.{name}",
                    f"{getattr(claim, name)} in the file, {getattr(derived, name)} re-derived",
                )
            )
    if claim.bound_cycles > claim.cycles:
        found.append(("plan.bound_cycles", "above the plan's cycles"))
    if claim.status in ("OPTIMAL", "PER_LAYER", "GREEDY") and claim.bound_cycles != claim.cycles:
        found.append(("plan.bound_cycles", f"a {claim.status} plan's bound is its cycles"))
    if claim.status == "REFINED" and claim.mode != "network":
        found.append(("plan.status", "only a network plan is refined"))
    if claim.mode == "per-layer" and offsets:
        found.append(("plan.mode", "a per-layer plan keeps everything in HBM"))
    return found


def _field_differences(
    where: str, claim: PlannedTensor | PlannedStep, derived: PlannedTensor | PlannedStep
) -> list[tuple[str, str]]:
    """Each field of a tensor or step (dataclasses of one type) that differs, named."""
    return [
        (
            f"{where}.{f.name}",
            f"{getattr(claim, f.name)!r} in the file, {getattr(derived, f.name)!r} re-derived",
        )
        for f in fields(claim)
        if getattr(claim, f.name) != getattr(derived, f.name)
    ]
