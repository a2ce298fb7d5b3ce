"""One CP-SAT model over the whole network: an option per step, a level per tensor, a
prefetch step for every layer's weights kept in L2, and static L2 offsets.

Variables and constraints (time is the step index):

- ``x[i][k]``: step ``i`` runs option ``k`` (exactly one); ``l2[t]``: tensor ``t`` is in L2.
  An option's placement must match its tensors: for each stream, the options that read it
  from L2 are chosen exactly when its tensors are in L2.
- ``load[w][j]``: weights ``w`` are prefetched during step ``j`` (``PREFETCH_WINDOW`` steps
  before their reader at most); ``l2[w]`` is their sum.
- ``d[i]`` >= the option's cycles, >= what the HBM and the L2 need for the step's own
  bytes plus its prefetches, and >= what the copy takes beside the option's own transfers
  (``problem`` module docstring).
- Each L2 tensor is a box: steps ``first … last`` by bytes ``offset … offset + size``; the
  boxes never overlap (``AddNoOverlap2D``), so the layout is sound by construction, and their
  sizes never exceed the L2 at any step (``AddCumulative``, implied but propagates faster).
- Depthwise fusion (``ir.fusion``): ``fuse[c]`` for each pair the problem offers (a
  depthwise and the 1x1 after it, or an expansion 1x1 and the depthwise after it), true
  exactly when its second step takes a ``fused`` option and its first step the
  ``absorbed`` one (a depthwise between two 1x1s is in two pairs: it takes one option, so
  at most one of them fuses). The options of each role match the levels of the tensors
  that role touches (``PlanProblem.option_streams``); a tensor no chosen option touches
  (the inner tensor and the two steps' own weights when fused, the pair's weights when
  not) is not in L2; nothing is prefetched during an absorbed step; the absorbed step's
  input lives one step longer when fused (the second step reads it). Every stage
  runs with CP-SAT's full LP relaxation (``linearization_level`` 2; ``solve_plan``).

Objectives, ranked: network latency ``sum d[i]``; then HBM bytes; then the L2 high-water
mark. Each stage keeps the previous optimum (or best found) as a constraint and starts from
its solution.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from autotune.ir.plan import L2_ALIGN
from autotune.model.analysis import copy_rate, prefetch_blocked_bytes
from autotune.plans.problem import Choice, PlanProblem, aligned_units
from autotune.search import cpsat

#: Share of the time limit each stage may use at most (latency, HBM bytes, L2 peak); a
#: stage that finishes early leaves its time to the next.
STAGE_SHARES = (0.7, 0.2, 0.1)


@dataclass(frozen=True)
class SolveReport:
    status: str  # the latency stage's: OPTIMAL or FEASIBLE
    cycles: int
    bound: int
    wall_s: float


class _Model:
    def __init__(self, problem: PlanProblem) -> None:
        self.p = problem
        m = self.m = cp_model.CpModel()
        spec = problem.spec
        n = len(problem.steps)
        self.x = [
            [m.new_bool_var(f"x[{i}][{k}]") for k in range(len(problem.options[i]))]
            for i in range(n)
        ]
        for row in self.x:
            m.add_exactly_one(row)
        self.l2: dict[str, cp_model.IntVar] = {}
        for t in problem.tensors:
            if problem.placeable(t.name):
                self.l2[t.name] = m.new_bool_var(f"l2[{t.name}]")
        # depthwise fusion: one flag per pair
        self.fuse: dict[int, cp_model.IntVar] = {}
        for i in problem.fused:
            flag = self.fuse[i] = m.new_bool_var(f"fuse[{problem.steps[i]}]")
            roles = [o.role for o in problem.options[i]]
            m.add(sum(x for x, r in zip(self.x[i], roles, strict=True) if r == "fused") == flag)
            before = [o.role for o in problem.options[i - 1]]
            m.add(self.x[i - 1][before.index("absorbed")] == flag)
            own, pair = problem.streams[i - 1], problem.pair_streams(i)
            assert pair.weights is not None
            for name in (own.output, own.weights, problem.streams[i].weights):
                if name in self.l2:
                    m.add(self.l2[name] == 0).only_enforce_if(flag)
            if pair.weights in self.l2:
                m.add(self.l2[pair.weights] == 0).only_enforce_if(~flag)
        # weights: the step that prefetches them
        self.load: dict[str, dict[int, cp_model.IntVar]] = {}
        for t in problem.tensors:
            if t.role == "weights" and t.name in self.l2:
                reader = t.readers[0]
                window = range(max(0, reader - problem.prefetch_window), reader)
                self.load[t.name] = {j: m.new_bool_var(f"load[{t.name}][{j}]") for j in window}
                m.add(sum(self.load[t.name].values()) == self.l2[t.name])
                for j, flag in self.load[t.name].items():  # not during an absorbed step
                    if j + 1 in problem.fused:
                        m.add(flag == 0).only_enforce_if(self.fuse[j + 1])
        # placements match tensor levels: for each option role, the tensors it touches
        for i in range(n):
            options = problem.options[i]
            for role in dict.fromkeys(o.role for o in options):
                ks = [k for k, o in enumerate(options) if o.role == role]
                s = problem.option_streams(i, options[ks[0]])
                if s is None:
                    continue
                taken = self._role_taken(i, role, len(ks) == len(options))
                for stream, names in (
                    ("input", s.inputs),
                    ("weights", (s.weights,) if s.weights else ()),
                    ("residual", (s.residual,) if s.residual else ()),
                    ("output", (s.output,)),
                ):
                    chosen = sum(
                        self.x[i][k] for k in ks if getattr(options[k].placement, stream) == "l2"
                    )
                    for name in names:
                        level = self.l2[name] if name in self.l2 else 0
                        if taken is None:
                            m.add(chosen == level)
                        else:
                            m.add(chosen == level).only_enforce_if(taken)
        # step durations
        hbm, l2r = problem.hbm_rate, problem.l2_rate
        self.d = []
        for i in range(n):
            options = problem.options[i]
            prefetch = sum(
                problem.prefetch_cost(w) * loads[i] for w, loads in self.load.items() if i in loads
            )
            most_prefetch = sum(
                problem.prefetch_cost(w) for w, loads in self.load.items() if i in loads
            )
            low = min(o.cycles for o in options)
            high = max(problem.step_cycles(i, o, most_prefetch) for o in options)
            d = m.new_int_var(low, high, f"d[{i}]")
            m.add(d >= sum(o.cycles * x for o, x in zip(options, self.x[i], strict=True)))
            own_hbm = sum(o.hbm_bytes * x for o, x in zip(options, self.x[i], strict=True))
            m.add(d * hbm.numerator >= (own_hbm + prefetch) * hbm.denominator)
            if l2r:
                own_l2 = sum(o.l2_bytes * x for o, x in zip(options, self.x[i], strict=True))
                m.add(d * l2r.numerator >= (own_l2 + prefetch) * l2r.denominator)
            if most_prefetch:  # the copy beside the option's own transfers (``problem``)
                copy = copy_rate(hbm, l2r)
                blocked = sum(
                    prefetch_blocked_bytes(
                        o.cycles,
                        o.hbm_bytes,
                        o.l2_bytes,
                        hbm,
                        l2r,
                        o.l2_both_bytes,
                        problem.cut_rate,
                    )
                    * x
                    for o, x in zip(options, self.x[i], strict=True)
                )
                m.add(d * copy.numerator >= (blocked + prefetch) * copy.denominator)
            self.d.append(d)
        self.latency = sum(self.d)
        self.hbm_bytes = sum(
            o.hbm_bytes * x
            for i in range(n)
            for o, x in zip(problem.options[i], self.x[i], strict=True)
        ) + sum(problem.prefetch_cost(w) * self.l2[w] for w in self.load)
        # the L2 boxes
        units = problem.capacity // L2_ALIGN
        self.offset: dict[str, cp_model.IntVar] = {}
        xs, ys, demands = [], [], []
        self.peak = m.new_int_var(0, units, "peak")
        for name, present in self.l2.items():
            t = spec[name]
            size = aligned_units(t.bytes)
            off = m.new_int_var(0, max(0, units - size), f"off[{name}]")
            self.offset[name] = off
            if name in self.load:
                start = m.new_int_var(min(self.load[name]), t.last, f"start[{name}]")
                for j, flag in self.load[name].items():
                    m.add(start == j).only_enforce_if(flag)
                length = m.new_int_var(1, t.last + 1 - min(self.load[name]), f"len[{name}]")
                xi = m.new_optional_interval_var(start, length, t.last + 1, present, f"t[{name}]")
            elif t.last + 1 in problem.fused and name in problem.streams[t.last].inputs:
                # an absorbable step's input: read by the step after it when the pair is fused
                longer = self.fuse[t.last + 1]
                xi = m.new_optional_interval_var(
                    t.first,
                    t.last - t.first + 1 + longer,
                    t.last + 1 + longer,
                    present,
                    f"t[{name}]",
                )
            else:
                xi = m.new_optional_fixed_size_interval_var(
                    t.first, t.last - t.first + 1, present, f"t[{name}]"
                )
            yi = m.new_optional_fixed_size_interval_var(off, size, present, f"a[{name}]")
            m.add(self.peak >= off + size).only_enforce_if(present)
            xs.append(xi)
            ys.append(yi)
            demands.append(size)
        if xs:
            m.add_no_overlap_2d(xs, ys)
            m.add_cumulative(xs, demands, units)

    def _role_taken(self, i: int, role: str, alone: bool) -> cp_model.LiteralT | None:
        """The literal that says step ``i`` takes an option of ``role`` (None: always, the
        step has no other role)."""
        if alone:
            return None
        if role == "fused":
            return self.fuse[i]
        if role == "absorbed":
            return self.fuse[i + 1]
        # own: neither the step's pair (it absorbs the step before) nor the next one (the
        # step after absorbs it) is fused; a depthwise between an expansion and a 1x1 is in
        # both
        pairs = [self.fuse[j] for j in (i, i + 1) if j in self.fuse]
        if len(pairs) == 1:
            return ~pairs[0]
        own = self.m.new_bool_var(f"own[{i}]")
        self.m.add_bool_and([~p for p in pairs]).only_enforce_if(own)
        self.m.add_bool_or(pairs).only_enforce_if(~own)
        return own

    def choice(self, solver: cp_model.CpSolver) -> Choice:
        option = tuple(
            next(k for k, x in enumerate(row) if solver.boolean_value(x)) for row in self.x
        )
        offsets = {
            name: solver.value(self.offset[name]) * L2_ALIGN
            for name, flag in self.l2.items()
            if solver.boolean_value(flag)
        }
        prefetch = {
            w: next(j for j, flag in loads.items() if solver.boolean_value(flag))
            for w, loads in self.load.items()
            if w in offsets
        }
        return Choice(option, offsets, prefetch)

    def hint(self, solver: cp_model.CpSolver) -> None:
        self.m.clear_hints()
        for var in [v for row in self.x for v in row] + list(self.l2.values()):
            self.m.add_hint(var, solver.boolean_value(var))
        for loads in self.load.values():
            for flag in loads.values():
                self.m.add_hint(flag, solver.boolean_value(flag))
        for off in self.offset.values():
            self.m.add_hint(off, solver.value(off))


def solve_plan(
    problem: PlanProblem,
    time_limit: float = 60.0,
    workers: int = 1,
    seed: int = 0,
    hint: Choice | None = None,
) -> tuple[Choice, SolveReport]:
    """The ranked optimum (or the best found within ``time_limit`` seconds). ``hint``: a
    known feasible choice (the greedy one) to start from."""
    start = time.perf_counter()
    model = _Model(problem)
    if hint is not None:
        _hint_choice(model, hint)
    report: SolveReport | None = None
    best: Choice | None = None
    for stage in range(len(STAGE_SHARES)):
        objective = (model.latency, model.hbm_bytes, model.peak)[stage]
        model.m.minimize(objective)
        solver = cp_model.CpSolver()
        left = time_limit - (time.perf_counter() - start)
        # its share and what the stages before left, keeping the later stages' shares
        budget = max(1.0, left - time_limit * sum(STAGE_SHARES[stage + 1 :]))
        solver.parameters.max_time_in_seconds = max(0.5, min(budget, left))
        solver.parameters.num_search_workers = workers
        solver.parameters.random_seed = seed
        # The full LP relaxation of the option choices: with fusion's overlapping pairs the
        # default (level 1) leaves MobileNetV2's latency gap at 15 % after 60 s, level 2
        # proves the optimum in about a second (benchmarks/bench_plan.py)
        solver.parameters.linearization_level = 2
        status = cpsat.solve(solver, model.m)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if best is None:
                raise RuntimeError(f"network plan: CP-SAT found no plan ({solver.status_name()})")
            break  # keep the previous stage's plan
        best = model.choice(solver)
        if stage == 0:
            report = SolveReport(
                solver.status_name(status),
                round(solver.objective_value),
                round(solver.best_objective_bound),
                0.0,
            )
        # The objective is integral, but CP-SAT reports it as a float that may fall just
        # short of it (499.99999999999994 for 500): truncated, the next stage's bound would
        # cut the optimum off and the report would say one cycle less than the plan's.
        value = round(solver.objective_value)
        model.m.add(objective <= value)
        model.hint(solver)
    assert best is not None and report is not None
    wall = time.perf_counter() - start
    return best, SolveReport(report.status, report.cycles, report.bound, wall)


def _hint_choice(model: _Model, choice: Choice) -> None:
    for i, row in enumerate(model.x):
        for k, var in enumerate(row):
            model.m.add_hint(var, k == choice.option[i])
    for name, flag in model.l2.items():
        model.m.add_hint(flag, name in choice.offsets)
        if name in choice.offsets:
            model.m.add_hint(model.offset[name], choice.offsets[name] // L2_ALIGN)
    for w, loads in model.load.items():
        for j, flag in loads.items():
            model.m.add_hint(flag, choice.prefetch_step.get(w) == j)


__all__ = ["SolveReport", "solve_plan"]
