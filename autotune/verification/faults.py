"""Deliberately broken schedules: small mutations of a correct program.

Each function takes a correct program and returns a copy with one mistake a schedule
generator could make; the executor must reject every one of them with a clear reason (the
tests check the reason). A function raises ``ValueError`` when the program has nothing to
break in its way (e.g. no halo rows because there is a single band).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from autotune.verification.program import (
    Alloc,
    Apply,
    Conv,
    Copy,
    Load,
    Multicast,
    Op,
    Program,
    Reduce,
    Region,
    Store,
    Zero,
)


def overflow_l1(program: Program) -> Program:
    """A ΔO stack too deep for L1: every cluster's output buffer is declared for a stack
    enough times deeper that the buffers no longer fit (``Alloc`` must fail)."""
    ops = list(program.ops)
    for i, op in enumerate(ops):
        if isinstance(op, Alloc) and op.buffer == "output":
            factor = program.l1_bytes // op.nbytes + 1
            ops[i] = replace(op, nbytes=op.nbytes * factor)
    return program.replace_ops(ops)


def drop_halo_row(program: Program) -> Program:
    """The first input band that ends above the bottom of the input loads one row fewer:
    the halo row it shares with the band below (the convolution must notice)."""
    for i, op in enumerate(program.ops):
        if isinstance(op, Load) and op.src.tensor == "input":
            images, channels, (r0, r1), cols = op.src.box
            if r1 < program.layer.h_in and r1 - r0 > 1:
                src = Region("input", (images, channels, (r0, r1 - 1), cols))
                return _with(program, i, replace(op, src=src))
    raise ValueError("no input band ends above the bottom of the input")


def skip_remainder_stack(program: Program) -> Program:
    """Forget the remainder stack (``D_O mod ΔO`` channels, report Sec. 2.2.1): drop every
    operation from its accumulator's initialisation to its store (its output is missing)."""
    delta_o = program.mapping.delta_o
    ops, kept, i = program.ops, [], 0
    while i < len(ops):
        op = ops[i]
        if isinstance(op, Zero) and op.region.box[1][1] - op.region.box[1][0] < delta_o:
            j = next(
                j
                for j in range(i, len(ops))
                if isinstance(store := ops[j], Store) and store.region == op.region
            )
            i = j + 1
            continue
        kept.append(op)
        i += 1
    if len(kept) == len(ops):
        raise ValueError(f"no remainder stack: delta_o {delta_o} divides the output channels")
    return program.replace_ops(kept)


def drop_reduction_step(program: Program) -> Program:
    """Leave out one step of the tree reduction of private outputs (report Sec. 3.1.3)."""
    return _without(program, lambda op: isinstance(op, Reduce), "no reduction step")


def wrong_stride(program: Program) -> Program:
    """Every convolution (or window of a pool) computes with stride 1 on a strided layer."""
    layer = program.layer
    if (layer.stride_h, layer.stride_w) == (1, 1):
        raise ValueError("the layer has stride 1")
    return program.replace_ops(
        [replace(op, stride=(1, 1)) if isinstance(op, Conv | Apply) else op for op in program.ops]
    )


def forward_from_predecessor(program: Program) -> Program:
    """Alg. 3 as the report prints it: a member of a share group reads the next slice from
    cluster ``(CID - 1) mod group``, which in lockstep holds an older slice (the slice it
    needs is with its successor, ``CID + 1``)."""
    size = program.mapping.share_group

    def predecessor(cluster: int) -> int:
        base = cluster - cluster % size
        return base + (cluster - base - 1) % size

    ops = [
        replace(op, src_cluster=predecessor(op.cluster))
        if isinstance(op, Copy) and op.src_cluster != op.cluster
        else op
        for op in program.ops
    ]
    if list(program.ops) == ops:
        raise ValueError("no input slice is forwarded between clusters")
    return program.replace_ops(ops)


def skip_input_load(program: Program) -> Program:
    """Leave out the second input load: its step computes on whatever is in the slot."""
    return _without(program, _is_input_load, "fewer than two input loads", skip=1)


def skip_input_step(program: Program) -> Program:
    """Leave out the second input step altogether (its load, filter loads and blocks)."""
    loads = [i for i, op in enumerate(program.ops) if _is_input_load(op)]
    if len(loads) < 2:
        raise ValueError("fewer than two input steps")
    start = loads[1]
    cluster = program.ops[start].cluster
    end = start + 1
    while (
        end < len(program.ops)
        and isinstance(program.ops[end], Load | Conv | Apply)
        and not _is_input_load(program.ops[end])
        and program.ops[end].cluster == cluster
    ):
        end += 1
    return program.replace_ops(program.ops[:start] + program.ops[end:])


def drop_multicast_receiver(program: Program) -> Program:
    """A multicast whose receiver set misses a cluster that needs the data: the last
    receiver of the first multicast is left out (it computes on whatever its slot holds)."""
    for i, op in enumerate(program.ops):
        if isinstance(op, Multicast) and len(op.targets) > 1:
            return _with(program, i, replace(op, targets=op.targets[:-1]))
    raise ValueError("no multicast with more than one receiver")


def _is_input_load(op: Op) -> bool:
    return isinstance(op, Load) and op.src.tensor == "input"


def _with(program: Program, index: int, op: Op) -> Program:
    ops = list(program.ops)
    ops[index] = op
    return program.replace_ops(ops)


def _without(program: Program, match: Callable[[Op], bool], none: str, skip: int = 0) -> Program:
    hits = [i for i, op in enumerate(program.ops) if match(op)]
    if len(hits) <= skip:
        raise ValueError(none)
    ops = list(program.ops)
    del ops[hits[skip]]
    return program.replace_ops(ops)


#: Every fault by name, for tests and demonstrations.
FAULTS: dict[str, Callable[[Program], Program]] = {
    f.__name__: f
    for f in (
        overflow_l1,
        drop_halo_row,
        skip_remainder_stack,
        drop_reduction_step,
        wrong_stride,
        forward_from_predecessor,
        skip_input_load,
        skip_input_step,
        drop_multicast_receiver,
    )
}
