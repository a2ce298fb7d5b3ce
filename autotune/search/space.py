"""The values each mapping variable can take for a layer: the search space both the integer
program and exhaustive enumeration range over, and two reference mappings.

Sizes are chosen as *distinct chunk sizes*: ``ceil(n / k)`` for k = 1..n. Any other size
gives the same number of chunks as one of these but larger remainders, so this set loses
nothing a latency or traffic objective could want, and has only about 2·sqrt(n) members.
"""

from __future__ import annotations

from collections.abc import Iterator

from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.mapping import KIB, Buffers, Mapping, Tile
from autotune.ir.precision import word_bytes
from autotune.model.footprint import footprint
from autotune.tiling import MappingError, task_grid


def chunk_sizes(n: int) -> list[int]:
    """Distinct values of ceil(n / k), k = 1..n, ascending."""
    return sorted({-(-n // k) for k in range(1, n + 1)})


def delta_o_values(layer: Layer) -> list[int]:
    """Stack sizes: within a group, or whole groups per stack (grouped convolutions)."""
    values = set(chunk_sizes(layer.cout_per_group))
    if layer.groups > 1:
        values |= {layer.cout_per_group * k for k in chunk_sizes(layer.groups)}
    return sorted(values)


def algorithms_for(layer: Layer) -> list[str]:
    algos = ["output_stack"]
    if layer.groups == 1:
        algos.append("output_stack_shared")
    if layer.kind == "fc":
        algos.append("input_parallel")
    return algos


def fits(layer: Layer, mapping: Mapping, machine: Machine, precision: str, batch: int) -> bool:
    try:
        grid = task_grid(layer, mapping, batch)
    except MappingError:
        return False
    return footprint(grid, machine, word_bytes(precision)).fits


def minimal_mapping(layer: Layer, batch: int = 1) -> Mapping:
    """The mapping with the smallest L1 footprint: one output pixel of one channel per task,
    one input slice per step, everything single-buffered. If this does not fit, nothing does.
    """
    return Mapping("output_stack", delta_o=1, batch_tile=1,
                   tile=Tile(out_h=1, out_w=1, in_c=1),
                   buffers=Buffers(input_depth=1, filter_depth=1, output_depth=1))


def hand_choice(layer: Layer, machine: Machine, precision: str, batch: int = 1) -> Mapping:
    """The report's own recipe, extended only as far as a layer forces it.

    Convolutions: Alg. 2 with the report's 16 KiB input and filter buffers and the largest
    ``delta_o`` that fits (Sec. 2.2.2); when not even ``delta_o = 1`` fits (input slices
    larger than the buffer), split the output rows into the fewest bands that fit.
    Fully-connected layers: Alg. 5 over the whole batch with the largest ``delta_o`` that
    fits (Sec. 3.2.2), the batch tile halved until the input batch fits its buffer.
    Raises ``MappingError`` if no such mapping fits.
    """
    report = dict(input_bytes=16 * KIB, filter_bytes=16 * KIB)
    deltas = delta_o_values(layer)
    if layer.kind == "fc":
        bt = batch
        while bt >= 1:
            base = Mapping("input_parallel", batch_tile=bt,
                           buffers=Buffers(**report, input_depth=1))
            best = _largest_fitting(layer, base, deltas, machine, precision, batch)
            if best is not None:
                return best
            bt //= 2
    else:
        # Fewest spatial tiles first: whole slices, then row bands, then column tiles too.
        shapes = sorted(((r, c) for r in chunk_sizes(layer.h_out) for c in chunk_sizes(
            layer.w_out)), key=lambda rc: (-(-layer.h_out // rc[0]) * -(-layer.w_out // rc[1]),
                                           -rc[1]))
        for rows, cols in shapes:
            tile = Tile(out_h=None if rows == layer.h_out else rows,
                        out_w=None if cols == layer.w_out else cols)
            base = Mapping("output_stack", tile=tile, buffers=Buffers(**report))
            best = _largest_fitting(layer, base, deltas, machine, precision, batch)
            if best is not None:
                return best
    raise MappingError(f"layer {layer.name!r}: the report's recipe fits no mapping in L1")


def _largest_fitting(layer: Layer, base: Mapping, deltas: list[int], machine: Machine,
                     precision: str, batch: int) -> Mapping | None:
    """The fitting mapping with the largest ``delta_o`` (the footprint grows with it)."""
    if not fits(layer, base.with_(delta_o=deltas[0]), machine, precision, batch):
        return None
    lo, hi = 0, len(deltas) - 1  # deltas[lo] fits; find the last that does
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(layer, base.with_(delta_o=deltas[mid]), machine, precision, batch):
            lo = mid
        else:
            hi = mid - 1
    return base.with_(delta_o=deltas[lo])


def iter_report_mappings(layer: Layer, batch: int = 1) -> Iterator[Mapping]:
    """Each applicable report algorithm with every stack size (fixed report buffers)."""
    for n in (2, 3, 5):
        algo = {2: "output_stack", 3: "output_stack_shared", 5: "input_parallel"}[n]
        if algo not in algorithms_for(layer):
            continue
        for delta_o in delta_o_values(layer):
            params: dict[str, object] = {"delta_o": delta_o}
            if n == 5:
                params["batch_tile"] = batch
            yield Mapping.from_report(n, **params)
