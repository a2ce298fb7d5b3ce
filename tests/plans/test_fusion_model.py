"""The network CP-SAT with depthwise fusion against an exhaustive search on small chains."""

from __future__ import annotations

import dataclasses
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.ir.placement import Placement, placements
from autotune.plans.network_model import solve_plan
from autotune.plans.options import ABSORBED, StepOption
from autotune.plans.problem import PlanProblem, consistent_option
from autotune.plans.tensors import TensorSpec, fused_weights
from tests.plans.test_network_model import MAPPING, UNIT, chain


def _with_pair(draw: st.DrawFn, problem: PlanProblem, k: int) -> PlanProblem:
    """``problem`` where steps ``k``, ``k + 1`` may fuse: the ``k + 1``-th gets fused
    options (reading ``t{k}``, the pair's weights, writing ``t{k+2}``), the ``k``-th the
    absorbed one."""
    n = len(problem.steps)
    pair = fused_weights(problem.steps[k + 1])
    tensors = (*problem.tensors, TensorSpec(pair, "weights", UNIT, (), (k + 1,), False))
    fused = []
    for p in placements(True, False):
        if p.input == "l2" and k == 0 or p.output == "l2" and k + 1 == n - 1:
            continue
        cycles = draw(st.integers(50, 3000))
        hbm, l2 = draw(st.integers(0, 200_000)), draw(st.integers(0, 200_000))
        fused.append(StepOption(p, MAPPING, cycles, hbm, l2, "fused"))
    options = list(problem.options)
    options[k] = (*options[k], ABSORBED)
    options[k + 1] = (*options[k + 1], *fused)
    return dataclasses.replace(
        problem, tensors=tensors, options=tuple(options), fused=(*problem.fused, k + 1)
    )


@st.composite
def fusion_problems(draw: st.DrawFn) -> PlanProblem:
    """A chain (``test_network_model.chain``) with a fusable pair of steps ``k``, ``k + 1``
    and, sometimes, a second one ``k + 1``, ``k + 2`` (MobileNetV2's expansion, depthwise
    and 1x1: the middle step is in both pairs)."""
    problem = draw(st.composite(chain)())
    n = len(problem.steps)
    k = draw(st.integers(0, n - 2))
    problem = _with_pair(draw, problem, k)
    if k + 2 < n and draw(st.booleans()):
        problem = _with_pair(draw, problem, k + 1)
    return problem


def exhaustive_latency(problem: PlanProblem) -> int:
    """The best latency over every set of pairs to fuse (no step in two), every level of
    every tensor and every prefetch step (``test_network_model.exhaustive_latency``, with
    fusion's rules: when a pair is fused, its inner tensor and its two steps' own weights
    are not in L2, its weights may be (not otherwise), nothing is prefetched during its
    absorbed step, and that step's input lives one step longer)."""
    spec = problem.spec
    own = problem.streams
    names = [t.name for t in problem.tensors if problem.placeable(t.name)]
    best = None
    choices = [
        chosen
        for r in range(len(problem.fused) + 1)
        for chosen in itertools.combinations(problem.fused, r)
        if all(b - a > 1 for a, b in itertools.pairwise(chosen))
    ]
    for chosen in choices:
        fused = {pw: pw - 1 for pw in chosen}  # second step -> the step it absorbs
        absorbed = set(fused.values())
        absent = {fused_weights(problem.steps[pw]) for pw in problem.fused if pw not in fused}
        for pw, dw in fused.items():
            absent |= {own[dw].output, own[dw].weights, own[pw].weights}
        free = [n for n in names if n not in absent]
        for levels in itertools.product((False, True), repeat=len(free)):
            in_l2 = {n for n, flag in zip(free, levels, strict=True) if flag}
            weights = [n for n in in_l2 if spec[n].role == "weights"]
            windows = [
                [
                    j
                    for j in range(
                        max(0, spec[w].readers[0] - problem.prefetch_window), spec[w].readers[0]
                    )
                    if j not in absorbed
                ]
                for w in weights
            ]
            for starts in itertools.product(*windows):
                prefetch = dict(zip(weights, starts, strict=True))
                life = {}
                for n in in_l2:
                    last = spec[n].last
                    if last in absorbed and n in own[last].inputs:
                        last += 1
                    life[n] = (prefetch.get(n, spec[n].first), last)
                if any(
                    sum(spec[n].bytes for n, (f, la) in life.items() if f <= s <= la)
                    > problem.capacity
                    for s in range(len(problem.steps))
                ):
                    continue
                total, feasible = 0, True
                for i in range(len(problem.steps)):
                    extra = sum(spec[w].bytes for w, j in prefetch.items() if j == i)
                    if i in absorbed:
                        option: StepOption | None = ABSORBED
                    elif i in fused:
                        dw = fused[i]
                        want = Placement(
                            "l2" if own[dw].inputs[0] in in_l2 else "hbm",
                            "l2" if fused_weights(problem.steps[i]) in in_l2 else "hbm",
                            "hbm",
                            "l2" if own[i].output in in_l2 else "hbm",
                        )
                        option = next(
                            (
                                o
                                for o in problem.options[i]
                                if o.role == "fused" and o.placement == want
                            ),
                            None,
                        )
                    else:
                        k = consistent_option(problem, i, in_l2)
                        option = None if k is None else problem.options[i][k]
                    if option is None:
                        feasible = False
                        break
                    total += problem.step_cycles(i, option, extra)
                if feasible:
                    best = total if best is None else min(best, total)
    assert best is not None  # all in HBM, unfused, is always feasible
    return best


@settings(max_examples=100, deadline=None)
@given(fusion_problems())
def test_cpsat_optimum_with_fusion_equals_exhaustive_optimum(problem: PlanProblem) -> None:
    choice, report = solve_plan(problem, time_limit=20)
    assert report.status == "OPTIMAL"
    assert report.cycles == exhaustive_latency(problem)
    # the choice is what the report says, and fuses consistently
    roles = [problem.options[i][k].role for i, k in enumerate(choice.option)]
    for pw in problem.fused:
        assert (roles[pw] == "fused") == (roles[pw - 1] == "absorbed")
