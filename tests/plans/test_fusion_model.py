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


@st.composite
def fusion_problems(draw: st.DrawFn) -> PlanProblem:
    """A chain (``test_network_model.chain``) whose steps ``k``, ``k + 1`` may fuse: the
    ``k + 1``-th gets fused options (reading ``t{k}``, the pair's weights, writing
    ``t{k+2}``), the ``k``-th the absorbed one."""
    problem = draw(st.composite(chain)())
    n = len(problem.steps)
    k = draw(st.integers(0, n - 2))
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
    return dataclasses.replace(problem, tensors=tensors, options=tuple(options), fused=(k + 1,))


def exhaustive_latency(problem: PlanProblem) -> int:
    """The best latency over fusing or not, every level of every tensor and every prefetch
    step (``test_network_model.exhaustive_latency``, with fusion's rules: when fused, the
    inner tensor and the two steps' own weights are not in L2, the pair's weights may be,
    nothing is prefetched during the absorbed step and its input lives one step longer)."""
    (pw,) = problem.fused
    dw = pw - 1
    spec = problem.spec
    own = problem.streams
    pair = fused_weights(problem.steps[pw])
    names = [t.name for t in problem.tensors if problem.placeable(t.name)]
    best = None
    for fuse in (False, True):
        absent = {own[dw].output, own[dw].weights, own[pw].weights} if fuse else {pair}
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
                    if not (fuse and j == dw)
                ]
                for w in weights
            ]
            for starts in itertools.product(*windows):
                prefetch = dict(zip(weights, starts, strict=True))
                life = {}
                for n in in_l2:
                    last = spec[n].last
                    if fuse and last == dw and n in own[dw].inputs:
                        last = pw
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
                    if fuse and i == dw:
                        option: StepOption | None = ABSORBED
                    elif fuse and i == pw:
                        want = Placement(
                            "l2" if own[dw].inputs[0] in in_l2 else "hbm",
                            "l2" if pair in in_l2 else "hbm",
                            "hbm",
                            "l2" if own[pw].output in in_l2 else "hbm",
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


@settings(max_examples=40, deadline=None)
@given(fusion_problems())
def test_cpsat_optimum_with_fusion_equals_exhaustive_optimum(problem: PlanProblem) -> None:
    choice, report = solve_plan(problem, time_limit=20)
    assert report.status == "OPTIMAL"
    assert report.cycles == exhaustive_latency(problem)
    # the choice is what the report says, and fuses consistently
    (pw,) = problem.fused
    roles = [problem.options[i][k].role for i, k in enumerate(choice.option)]
    assert (roles[pw] == "fused") == (roles[pw - 1] == "absorbed")
