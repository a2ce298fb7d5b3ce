"""The greedy baseline the network CP-SAT is compared with: keep every tensor that a
first-fit allocation finds room for in L2 (activations in the order they appear, then each
layer's weights prefetched during the step before it), then give every step the option that
matches its tensors' levels. What Deeploy-style "tile, then allocate" flows do; it never
undoes a placement that a later, larger tensor would have used better.
"""

from __future__ import annotations

from autotune.ir.plan import L2_ALIGN
from autotune.plans.problem import Choice, PlanProblem, consistent_option


def first_fit(
    placed: list[tuple[int, int, int, int]], first: int, last: int, size: int, capacity: int
) -> int | None:
    """The lowest aligned offset where ``size`` bytes are free during steps first..last,
    given ``placed`` rectangles (first, last, offset, end); None if there is none."""
    busy = sorted((o, e) for f, la, o, e in placed if f <= last and first <= la)
    offset = 0
    for start, end in busy:
        if start - offset >= size:
            break
        offset = max(offset, -(-end // L2_ALIGN) * L2_ALIGN)
    return offset if offset + size <= capacity else None


def greedy_choice(problem: PlanProblem) -> Choice:
    spec = problem.spec
    placed: list[tuple[int, int, int, int]] = []
    offsets: dict[str, int] = {}
    prefetch: dict[str, int] = {}

    def place(name: str, first: int, last: int) -> bool:
        size = spec[name].bytes
        offset = first_fit(placed, first, last, size, problem.capacity)
        if offset is None:
            return False
        placed.append((first, last, offset, offset + size))
        offsets[name] = offset
        return True

    for t in sorted(problem.tensors, key=lambda t: (t.first, t.name)):
        if t.role != "weights" and problem.placeable(t.name):
            place(t.name, t.first, t.last)
    for t in problem.tensors:  # (it fuses nothing: a pair's weights are never read)
        if t.role == "weights" and problem.placeable(t.name) and t.name not in problem.pair_weights:
            reader = t.readers[0]
            if place(t.name, reader - 1, reader):
                prefetch[t.name] = reader - 1
    # a step whose input tensors ended up on different levels reads them all from HBM
    changed = True
    while changed:
        changed = False
        for i in range(len(problem.steps)):
            if consistent_option(problem, i, set(offsets)) is None:
                for name in problem.streams[i].inputs:
                    if offsets.pop(name, None) is not None:
                        changed = True
    option = []
    for i in range(len(problem.steps)):
        k = consistent_option(problem, i, set(offsets))
        assert k is not None, f"step {problem.steps[i]!r}: no option matches its levels"
        option.append(k)
    return Choice(tuple(option), offsets, {w: j for w, j in prefetch.items() if w in offsets})
