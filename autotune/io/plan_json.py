"""The ``plan`` section of a schedule file: where every tensor lives and how each step runs.

``tensors`` lists every stored tensor the plan placed: its ``role`` (network ``input`` or
``output``, an ``activation``, a layer's ``weights``), ``level`` (``hbm`` or ``l2``), size in
``bytes`` (at the file's batch and precision, rounded up to the L2 alignment), its lifetime
``first``…``last`` (step indices, in the order of ``layers``) and, in L2, its byte ``offset``.
``steps`` gives each layer's ``placement`` (the level of its input, weights, residual and
output streams), the weights it ``prefetch``es into L2 for later steps and the plan's figures
for it. ``fused`` names the 1x1 steps that run with the depthwise step before them fused in
(``autotune.ir.fusion``: the depthwise's result never leaves the clusters, so it is no tensor
of the plan; absent when none is). A compiler allocates the L2 from it; ``verify`` re-derives
every figure and executes the network with a byte-addressed L2 at those offsets.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from autotune.ir.placement import MemoryLevel, Placement
from autotune.ir.plan import NetworkPlan, PlanMode, PlannedStep, PlannedTensor, TensorRole


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PlacementRecord(_Record):
    input: MemoryLevel
    weights: MemoryLevel
    residual: MemoryLevel
    output: MemoryLevel


class PlannedTensorRecord(_Record):
    name: str
    role: TensorRole
    level: MemoryLevel
    bytes: int = Field(ge=0)
    first: int = Field(ge=0, description="first step (index into layers) it is live")
    last: int = Field(ge=0, description="last step it is live (read)")
    offset: int | None = Field(default=None, ge=0, description="L2 byte offset (L2 only)")
    step: str | None = Field(default=None, description="the layer whose weights these are")


class PlannedStepRecord(_Record):
    name: str
    placement: PlacementRecord
    prefetch: list[str] = Field(description="weights loaded into L2 during this step")
    cycles: int = Field(description="the step's predicted cycles, its prefetches included")
    hbm_bytes: int
    l2_bytes: int


class PlanRecord(_Record):
    mode: PlanMode
    status: str = Field(
        description=(
            "OPTIMAL, FEASIBLE (time limit), GREEDY, PER_LAYER or REFINED "
            "(the refinement changed layers of a CP-SAT plan)"
        )
    )
    l2_capacity: int = Field(ge=0, description="L2 bytes the plan may use")
    cycles: int = Field(description="predicted network latency: the steps' cycles summed")
    bound_cycles: int = Field(description="the network CP-SAT's proven lower bound")
    gap: float
    hbm_bytes: int
    l2_peak_bytes: int
    solve_s: float = Field(description="informational: the network CP-SAT's wall time")
    tensors: list[PlannedTensorRecord]
    steps: list[PlannedStepRecord]
    fused: list[str] = Field(
        default_factory=list,
        description="the 1x1 steps that run with the depthwise step before them fused in",
    )

    _omit_unfused = model_serializer(mode="wrap")(  # files without fusion keep their layout
        lambda self, handler: {k: v for k, v in handler(self).items() if k != "fused" or v}
    )


def plan_record(plan: NetworkPlan) -> PlanRecord:
    return PlanRecord(
        mode=plan.mode,
        status=plan.status,
        l2_capacity=plan.l2_capacity,
        cycles=plan.cycles,
        bound_cycles=plan.bound_cycles,
        gap=round(plan.gap, 6),
        hbm_bytes=plan.hbm_bytes,
        l2_peak_bytes=plan.l2_peak_bytes,
        solve_s=plan.solve_s,
        tensors=[
            PlannedTensorRecord(
                name=t.name,
                role=t.role,
                level=t.level,
                bytes=t.bytes,
                first=t.first,
                last=t.last,
                offset=t.offset,
                step=t.step,
            )
            for t in plan.tensors
        ],
        steps=[
            PlannedStepRecord(
                name=s.name,
                placement=PlacementRecord(**vars(s.placement)),
                prefetch=list(s.prefetch),
                cycles=s.cycles,
                hbm_bytes=s.hbm_bytes,
                l2_bytes=s.l2_bytes,
            )
            for s in plan.steps
        ],
        fused=list(plan.fused),
    )


def plan_from_record(record: PlanRecord) -> NetworkPlan:
    """The plan a file claims (checked by the audit, not here)."""
    return NetworkPlan(
        record.mode,
        record.l2_capacity,
        tuple(
            PlannedTensor(t.name, t.role, t.level, t.bytes, t.first, t.last, t.offset, t.step)
            for t in record.tensors
        ),
        tuple(
            PlannedStep(
                s.name,
                Placement(**s.placement.model_dump()),
                tuple(s.prefetch),
                s.cycles,
                s.hbm_bytes,
                s.l2_bytes,
            )
            for s in record.steps
        ),
        record.status,
        record.cycles,
        record.bound_cycles,
        record.hbm_bytes,
        record.l2_peak_bytes,
        record.solve_s,
        tuple(record.fused),
    )
