"""The values each mapping variable can take for a layer: the search space both the integer
program and exhaustive enumeration range over, and two reference mappings.

Sizes are chosen as *distinct chunk sizes*: ``ceil(n / k)`` for k = 1..n. Any other size
gives the same number of chunks as one of these but larger remainders, so this set loses
nothing a latency or traffic objective could want, and has only about 2·sqrt(n) members.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.mapping import KIB, Buffers, Mapping, Tile
from autotune.ir.precision import word_bytes
from autotune.model.footprint import footprint
from autotune.model.formulas import ALGORITHM_CODES
from autotune.model.quantities import (
    batch_quantities,
    dma_overhead_cycles,
    filter_run_words,
    idle_beat_scaled,
    in_step_quantities,
    input_run_words,
    input_step_runs,
    inverse_efficiency,
    output_engine_scaled,
    output_run_words,
    spatial_quantities,
    stack_quantities,
)
from autotune.tiling import MappingError, col_axis, output_stacks, row_axis, task_grid


def chunk_sizes(n: int) -> list[int]:
    """Distinct values of ceil(n / k), k = 1..n, ascending."""
    return sorted({-(-n // k) for k in range(1, n + 1)})


def delta_o_values(layer: Layer) -> list[int]:
    """Stack sizes: within a group, or whole groups per stack (grouped convolutions and the
    depthwise kinds); a softmax keeps all its channels in one stack (``tiling``)."""
    if layer.kind == "softmax":
        return [layer.c_out]
    values = set(chunk_sizes(layer.cout_per_group))
    if layer.groups > 1:
        values |= {layer.cout_per_group * k for k in chunk_sizes(layer.groups)}
    return sorted(values)


def in_c_values(layer: Layer) -> list[int]:
    """Input slices per step (per task for ``input_parallel``): powers of two up to the
    input channels; a softmax reads all of a pixel's channels in one step (``tiling``)."""
    if layer.kind == "softmax":
        return [layer.c_in]
    return [1 << i for i in range(MAX_IN_C_LOG2 + 1) if (1 << i) <= max(layer.c_in, 1)]


def algorithms_for(layer: Layer) -> list[str]:
    """The algorithms that apply to ``layer``. Every kind runs the output-stationary ones
    (Alg. 1-3; Alg. 3 needs groups = 1); only an fc layer has ``input_parallel``: its
    partial outputs are sums over input channels, which the tree reduction adds up, while a
    pool's max, a softmax or an elementwise layer have no such partial sums."""
    algos = ["output_stack"]
    if layer.groups == 1:
        algos.append("output_stack_shared")
    if layer.kind == "fc":
        algos.append("input_parallel")
    return algos


def fits(layer: Layer, mapping: Mapping, machine: Machine, precision: str, batch: int) -> bool:
    try:
        grid = task_grid(layer, mapping, batch, machine)
    except MappingError:
        return False
    return footprint(grid, machine, word_bytes(precision)).fits


def minimal_mapping(layer: Layer, batch: int = 1) -> Mapping:
    """The mapping with the smallest L1 footprint: one output pixel of one channel per task
    (a softmax: of all its channels), one input slice per step (a softmax: all of them),
    everything single-buffered. If this does not fit, nothing does.
    """
    return Mapping(
        "output_stack",
        delta_o=min(delta_o_values(layer)),
        batch_tile=1,
        tile=Tile(out_h=1, out_w=1, in_c=min(in_c_values(layer))),
        buffers=Buffers(input_depth=1, filter_depth=1, output_depth=1),
    )


def hand_choice(layer: Layer, machine: Machine, precision: str, batch: int = 1) -> Mapping:
    """The report's own recipe, extended only as far as a layer forces it.

    Convolutions: Alg. 2 with the report's 16 KiB input and filter buffers and the largest
    ``delta_o`` that fits (Sec. 2.2.2); when not even ``delta_o = 1`` fits (input slices
    larger than the buffer), split the output rows into the fewest bands that fit.
    Fully-connected layers: Alg. 5 over the whole batch with the largest ``delta_o`` that
    fits (Sec. 3.2.2), the batch tile halved until the input batch fits its buffer. The
    other kinds as convolutions (a layer without weights gets no filter buffer; a softmax
    steps through all its channels at once). Raises ``MappingError`` if no such mapping fits.
    """
    report = dict(input_bytes=16 * KIB, filter_bytes=16 * KIB)
    deltas = delta_o_values(layer)
    if layer.kind == "fc":
        bt = batch
        while bt >= 1:
            base = Mapping(
                "input_parallel", batch_tile=bt, buffers=Buffers(**report, input_depth=1)
            )
            best = _largest_fitting(layer, base, deltas, machine, precision, batch)
            if best is not None:
                return best
            bt //= 2
    else:
        # Fewest spatial tiles first: whole slices, then row bands, then column tiles too.
        shapes = sorted(
            ((r, c) for r in chunk_sizes(layer.h_out) for c in chunk_sizes(layer.w_out)),
            key=lambda rc: (-(-layer.h_out // rc[0]) * -(-layer.w_out // rc[1]), -rc[1]),
        )
        for rows, cols in shapes:
            tile = Tile(
                out_h=None if rows == layer.h_out else rows,
                out_w=None if cols == layer.w_out else cols,
                in_c=min(in_c_values(layer)),
            )
            base = Mapping("output_stack", tile=tile, buffers=Buffers(**report))
            best = _largest_fitting(layer, base, deltas, machine, precision, batch)
            if best is not None:
                return best
    raise MappingError(f"layer {layer.name!r}: the report's recipe fits no mapping in L1")


def kann_spatial(layer: Layer, machine: Machine, precision: str, batch: int = 1) -> Mapping:
    """KaNN's spatial splitting (seed 003 Sec. IV) for ``layer``: every cluster computes a
    spatial tile for all output channels, and the parameters are "read once from the DDR
    memory and multicasted to all the target compute clusters".

    ``output_stack`` with one stack (``delta_o = C_out``), row bands of at most
    ``ceil(H_out / C)`` rows so that the clusters share the map (columns split only when a
    band does not fit), ``multicast=True``; the largest tiles that fit: fewest tiles first,
    then the most input slices per step. Only when no tile fits one stack are the outputs cut
    into the fewest stacks that fit ("few stacks"). Every value is one the search space
    offers, so the integer program's optimum is never worse in the model. Raises
    ``MappingError`` if the machine does not multicast or nothing fits.
    """
    _need_multicast(machine, precision)
    c = machine.clusters
    band = -(-layer.h_out // c)
    shapes = sorted(
        (
            (r, w)
            for r, w in spatial_values(layer)
            if (r or layer.h_out) <= band or layer.h_out <= 1
        ),
        key=lambda rw: (_tiles(layer, rw), -(rw[1] or layer.w_out)),
    )
    for delta_o in sorted(delta_o_values(layer), reverse=True):
        for out_h, out_w in shapes:
            found = _largest_in_c(
                layer,
                Mapping(
                    "output_stack",
                    delta_o=delta_o,
                    tile=Tile(out_h=out_h, out_w=out_w),
                    multicast=True,
                ),
                machine,
                precision,
                batch,
            )
            if found is not None:
                return found
    raise MappingError(f"layer {layer.name!r}: KaNN's spatial splitting fits no tile in L1")


def kann_channel(layer: Layer, machine: Machine, precision: str, batch: int = 1) -> Mapping:
    """KaNN's channel splitting (seed 003 Sec. IV) for ``layer``: every cluster computes a
    slice of the output channels over the whole map; "the full input layer must be
    replicated in the local memory of each compute cluster, but only the corresponding slice
    of parameters is read from the DDR memory".

    ``output_stack`` with whole-map tiles and stacks of at most ``ceil(C_out / C)`` channels
    (one slice per cluster; smaller when that does not fit), ``multicast=True`` (the
    replicated input is read once per wave and multicast), the most input slices per step
    that fit. Raises ``MappingError`` if the machine does not multicast or nothing fits.
    """
    _need_multicast(machine, precision)
    per_cluster = -(-layer.c_out // machine.clusters)
    deltas = sorted((d for d in delta_o_values(layer) if d <= per_cluster), reverse=True)
    for delta_o in deltas or [min(delta_o_values(layer))]:
        found = _largest_in_c(
            layer,
            Mapping("output_stack", delta_o=delta_o, multicast=True),
            machine,
            precision,
            batch,
        )
        if found is not None:
            return found
    raise MappingError(
        f"layer {layer.name!r}: KaNN's channel splitting (whole maps) fits no stack in L1"
    )


def system_strategies(
    layer: Layer, machine: Machine, precision: str, batch: int = 1
) -> list[Mapping]:
    """The seed system's own mappings of ``layer`` on ``machine``, to seed a refinement so
    that it starts from them and ends no worse: KaNN's spatial and channel splitting on a
    machine that multicasts (seed 003, Sec. IV; the MPPA3 preset). Those that do not apply
    or do not fit are left out; none on other machines."""
    if not machine.dma_multicast:
        return []
    found = []
    for make in (kann_spatial, kann_channel):
        try:
            found.append(make(layer, machine, precision, batch))
        except MappingError:
            continue
    return found


def _need_multicast(machine: Machine, precision: str) -> None:
    machine.check_precision(precision)
    if not machine.dma_multicast:
        raise MappingError(f"KaNN's strategies multicast; machine {machine.name!r} cannot")


def _tiles(layer: Layer, shape: tuple[int | None, int | None]) -> int:
    rows, cols = shape
    return -(-layer.h_out // (rows or layer.h_out)) * -(-layer.w_out // (cols or layer.w_out))


def _largest_in_c(
    layer: Layer, base: Mapping, machine: Machine, precision: str, batch: int
) -> Mapping | None:
    """``base`` with the most input slices per step (the space's powers of two) that fits,
    double-buffered if possible, else single-buffered; None if nothing fits."""
    try:
        in_max = int(output_stacks(layer, base.delta_o).in_size.max())
    except MappingError:
        return None
    in_cs = sorted((c for c in in_c_values(layer) if c <= in_max), reverse=True)
    for buffers in (Buffers(), Buffers(input_depth=1, filter_depth=1, output_depth=1)):
        for in_c in in_cs:
            mapping = base.with_(tile=Tile(base.tile.out_h, base.tile.out_w, in_c), buffers=buffers)
            if fits(layer, mapping, machine, precision, batch):
                return mapping
    return None


def _largest_fitting(
    layer: Layer, base: Mapping, deltas: list[int], machine: Machine, precision: str, batch: int
) -> Mapping | None:
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
            if layer.kind == "softmax":  # all channels in one step (``tiling``)
                params["tile"] = Tile(in_c=layer.c_in)
            if n == 5:
                params["batch_tile"] = batch
            yield Mapping.from_report(n, **params)


# -- the candidate space the integer program and exhaustive search range over -----------------

#: Most column tiles considered: column splits only help a row of a very wide layer fit;
#: beyond this many the halo overhead outweighs anything a row split cannot give.
MAX_COLUMN_TILES = 8
#: Input slices per step (or per task, for input_parallel): powers of two up to this.
MAX_IN_C_LOG2 = 12
#: The deep filter buffer's bytes: the report's 16 KiB buffers, enough to keep a round trip
#: of bytes in flight (Sec. 2.1.2: 256 cycles x 64 B/cycle). A double filter buffer of two
#: tiles keeps one tile in flight; the report streams one tile per output channel and step
#: (``F[:, :, d_i, d_o]``), a few bytes when a step has few slices, and each then waits a
#: round trip. Given these bytes, the DMA keeps as many tiles in flight as they hold.
FILTER_WINDOW_BYTES = 16 * KIB
#: The filter buffer variable's value of the deep buffer (after single and double); Alg. 1-3
#: only (``input_parallel`` streams its filters per output channel over a whole batch step).
DEEP_FILTER = 2


@dataclass(frozen=True)
class SearchSpace:
    """Per-variable candidate values of one layer and the quantities each implies.

    Variables (each an index into its value list): ``alg``, ``delta_o``, ``spatial`` (a pair
    ``(out_h, out_w)``), ``batch_tile``, ``in_c``, ``share`` (share group size; 1 unless the
    algorithm is ``output_stack_shared``), the depths ``d_in``, ``d_out``, the filter buffer
    ``d_f`` (``filter_buffers``: single, double, and for a layer with weights double in
    ``FILTER_WINDOW_BYTES``) and
    ``multicast`` (False, and True on machines with ``dma_multicast``; True only with
    ``output_stack``). The
    tables give the formula's quantities (``model/quantities.py``) for each value; they are
    built by calling ``tiling`` for each value, so they are exactly the quantities of the
    decoded mapping.
    """

    layer: Layer
    batch: int
    algorithms: tuple[str, ...]
    delta_o: tuple[int, ...]
    spatial: tuple[tuple[int | None, int | None], ...]
    batch_tile: tuple[int, ...]
    in_c: tuple[int, ...]
    share: tuple[int, ...]
    depths: tuple[int, ...]
    tables: dict[str, np.ndarray]
    multicast: tuple[bool, ...] = (False,)
    #: (depth, bytes given or None) of each filter buffer value
    filter_buffers: tuple[tuple[int, int | None], ...] = ((1, None), (2, None))

    def filter_values(self, algorithm: str) -> int:
        """How many of the ``filter_buffers`` values ``algorithm`` may take: the deep buffer
        is Alg. 1-3's (``DEEP_FILTER``)."""
        n = len(self.filter_buffers)
        return min(n, DEEP_FILTER) if algorithm == "input_parallel" else n

    @property
    def sizes(self) -> dict[str, int]:
        return {
            "alg": len(self.algorithms),
            "delta_o": len(self.delta_o),
            "spatial": len(self.spatial),
            "batch_tile": len(self.batch_tile),
            "in_c": len(self.in_c),
            "share": len(self.share),
            "d_in": len(self.depths),
            "d_f": len(self.filter_buffers),
            "d_out": len(self.depths),
            "multicast": len(self.multicast),
        }

    def decode(self, index: dict[str, int]) -> Mapping:
        """The mapping a candidate (one index per variable) stands for."""
        algorithm = self.algorithms[index["alg"]]
        out_h, out_w = self.spatial[index["spatial"]]
        filter_depth, filter_bytes = self.filter_buffers[index["d_f"]]
        return Mapping(
            algorithm,
            delta_o=self.delta_o[index["delta_o"]],
            batch_tile=self.batch_tile[index["batch_tile"]],
            share_group=self.share[index["share"]],
            tile=Tile(out_h=out_h, out_w=out_w, in_c=self.in_c[index["in_c"]]),
            buffers=Buffers(
                input_depth=self.depths[index["d_in"]],
                # a layer without weights has no filter buffer: its depth is 1 whatever the
                # variable says (both values cost the same), so equal mappings read equal
                filter_depth=filter_depth if self.layer.filter_words_per_output else 1,
                filter_bytes=filter_bytes,
                output_depth=self.depths[index["d_out"]],
            ),
            multicast=self.multicast[index.get("multicast", 0)],
        )


def spatial_values(layer: Layer) -> list[tuple[int | None, int | None]]:
    rows = chunk_sizes(layer.h_out)
    cols = [c for c in chunk_sizes(layer.w_out) if -(-layer.w_out // c) <= MAX_COLUMN_TILES]
    return [
        (None if r == layer.h_out else r, None if c == layer.w_out else c)
        for r in rows
        for c in cols
    ]


def search_space(layer: Layer, machine: Machine, batch: int = 1) -> SearchSpace:
    """The candidate values of every mapping variable for ``layer`` and their quantities."""
    # Alg. 3 needs a quadrant below the root to share in (MPPA3's one-level NoC has none).
    algorithms = tuple(
        a
        for a in algorithms_for(layer)
        if a != "output_stack_shared" or machine.share_group_sizes()
    )
    deltas = delta_o_values(layer)
    spatial = spatial_values(layer)
    batch_tiles = chunk_sizes(batch)
    in_cs = in_c_values(layer)
    share = (1,) + (machine.share_group_sizes() if "output_stack_shared" in algorithms else ())
    tables: dict[str, list[int]] = {}

    def add(values: dict[str, int]) -> None:
        for key, value in values.items():
            tables.setdefault(key, []).append(value)

    for d in deltas:
        add(stack_quantities(output_stacks(layer, d)))
    extents = []  # per spatial value: the largest tile's (rows, cols) in and out
    for out_h, out_w in spatial:
        rows = row_axis(layer, out_h)
        cols = col_axis(layer, out_w)
        add(spatial_quantities(rows, cols, layer))
        extents.append(
            (
                int(rows.in_size.max()),
                int(cols.in_size.max()),
                int(rows.out_size.max()),
                int(cols.out_size.max()),
            )
        )
    for bt in batch_tiles:
        add(batch_quantities(batch, bt))
    for c in in_cs:
        add(in_step_quantities(layer, c))
    tables["share_group"] = list(share)
    tables["buffer_depth"] = [1, 2]
    filter_buffers: tuple[tuple[int, int | None], ...] = ((1, None), (2, None))
    if layer.filter_words_per_output:
        filter_buffers += ((2, FILTER_WINDOW_BYTES),)
    tables["filter_buffer_depth"] = [depth for depth, _ in filter_buffers]
    tables["filter_bytes_given"] = [given or 0 for _, given in filter_buffers]
    tables["algorithm"] = [ALGORITHM_CODES[a] for a in algorithms]
    # Run lengths (words) of the largest tiles, flattened over RUN_SOURCE's variable pairs.
    tables["input_run_words"] = [
        input_run_words(layer, ri, ci, c) for ri, ci, _, _ in extents for c in in_cs
    ]
    step_runs = [input_step_runs(layer, ri, ci, c) for ri, ci, _, _ in extents for c in in_cs]
    tables["input_step_run_count"] = [runs for runs, _, _ in step_runs]
    tables["input_step_transfers"] = [transfers for _, transfers, _ in step_runs]
    tables["input_step_shared_transfers"] = [shared for _, _, shared in step_runs]
    tables["filter_run_words"] = [filter_run_words(layer, c) for c in in_cs]
    tables["output_run_words"] = [
        output_run_words(layer, ro, co, s)
        for s in tables["stack_out_channels_max"]
        for _, _, ro, co in extents
    ]
    tables["output_tile_rows"] = [ro for _, _, ro, _ in extents]
    tables["output_tile_cols"] = [co for _, _, _, co in extents]
    # Multicast only where the machine can (no new candidates elsewhere: same results).
    multicast = (False, True) if machine.dma_multicast and not layer.fuses else (False,)
    tables["multicast"] = [int(m) for m in multicast]
    return SearchSpace(
        layer,
        batch,
        algorithms,
        tuple(deltas),
        tuple(spatial),
        tuple(batch_tiles),
        tuple(in_cs),
        share,
        (1, 2),
        {k: np.asarray(v, dtype=np.int64) for k, v in tables.items()},
        multicast,
        filter_buffers,
    )


#: The variable each formula quantity's table (``SearchSpace.tables``, same name) is indexed by.
QUANTITY_SOURCE = {
    "stacks": "delta_o",
    "stack_out_channels_max": "delta_o",
    "stack_in_channels_sum": "delta_o",
    "stack_in_channels_max": "delta_o",
    "stacks_largest": "delta_o",
    "stack_mean_share": "delta_o",
    "spatial_tiles": "spatial",
    "tile_out_pixels_max": "spatial",
    "tile_in_pixels_max": "spatial",
    "tile_in_pixels_sum": "spatial",
    "tiles_out_largest": "spatial",
    "tiles_in_largest": "spatial",
    "tile_out_min_share": "spatial",
    "tile_in_min_share": "spatial",
    "tile_out_first_min_share": "spatial",
    "tile_in_first_min_share": "spatial",
    "tile_first_largest_out": "spatial",
    "tile_first_largest_in": "spatial",
    "tile_out_mean_share": "spatial",
    "tile_in_mean_share": "spatial",
    "tile_out_last_share": "spatial",
    "input_partial_rows": "spatial",
    "output_partial_rows": "spatial",
    "batch_tiles": "batch_tile",
    "batch_tile_images_max": "batch_tile",
    "batch_tiles_largest": "batch_tile",
    "batch_mean_share": "batch_tile",
    "batch_last_share": "batch_tile",
    "step_in_channels": "in_c",
    "step_filter_channels": "in_c",
    "filter_steps": "in_c",
    "in_steps": "in_c",
    "share_group": "share",
    "algorithm": "alg",
    "multicast": "multicast",
    "filter_buffer_depth": "d_f",
    "filter_bytes_given": "d_f",
}

#: The buffer depths, each read from the ``buffer_depth`` table by its variable.
DEPTH_SOURCE = {
    "input_buffer_depth": "d_in",
    "output_buffer_depth": "d_out",
}

#: The inverse DMA efficiencies: quantity -> (run table, the variables it is indexed by,
#: first variable major, write?). Their values depend on the machine and the word size, so
#: ``efficiency_tables`` derives them from the run lengths where the precision is known.
RUN_SOURCE: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "input_inverse_efficiency": ("input_run_words", ("spatial", "in_c"), False),
    "filter_inverse_efficiency": ("filter_run_words", ("in_c",), False),
    "output_inverse_efficiency": ("output_run_words", ("delta_o", "spatial"), True),
    "residual_inverse_efficiency": ("output_run_words", ("delta_o", "spatial"), False),
    # Not efficiencies: the DMA engine's overhead of one image's input step (set-ups, idle
    # beat ends; ``quantities.dma_overhead_cycles``), from the same runs, the set-ups its
    # images share, and its pace on an output tile (``quantities.output_engine_scaled``),
    # from the tile's columns and rows.
    "input_step_dma_overhead": ("input_run_words", ("spatial", "in_c"), False),
    "input_step_setup_cycles": ("input_run_words", ("spatial", "in_c"), False),
    "output_engine_scaled": ("output_tile_cols", ("spatial",), True),
    # and the idle end of a filter tile's last beat (``quantities.idle_beat_scaled``)
    "filter_tile_idle_scaled": ("filter_run_words", ("in_c",), False),
}


def efficiency_tables(
    space: SearchSpace, machine: Machine, precision: str
) -> dict[str, np.ndarray]:
    """Per ``RUN_SOURCE`` quantity: SCALE / DMA efficiency of each candidate's runs, the
    DMA engine's overhead of an input step per image and the set-ups its images share, the
    idle end of a filter tile's last beat, and the engine's pace on an output tile."""
    wb = word_bytes(precision)
    engines = (
        "input_step_dma_overhead",
        "input_step_setup_cycles",
        "output_engine_scaled",
        "filter_tile_idle_scaled",
    )
    tables = {
        name: inverse_efficiency(machine, space.tables[run] * wb, write)
        for name, (run, _, write) in RUN_SOURCE.items()
        if name not in engines
    }
    tables["input_step_dma_overhead"] = dma_overhead_cycles(
        machine,
        space.tables["input_run_words"],
        space.tables["input_step_run_count"],
        space.tables["input_step_transfers"],
        wb,
    )
    tables["input_step_setup_cycles"] = (
        np.asarray(space.tables["input_step_shared_transfers"], dtype=np.int64)
        * machine.dma_setup_cycles
    )
    tables["filter_tile_idle_scaled"] = idle_beat_scaled(
        machine, space.tables["filter_run_words"], wb
    )
    tables["output_engine_scaled"] = output_engine_scaled(
        machine,
        space.layer,
        space.tables["output_tile_rows"],
        space.tables["output_tile_cols"],
        wb,
    )
    return tables


def flat_index(space: SearchSpace, variables: tuple[str, ...], index: dict[str, Any]) -> Any:
    """Index into a table over ``variables`` (first major) from per-variable indices; works
    on ints, numpy arrays and linear CP-SAT expressions alike."""
    flat: Any = 0
    for v in variables:
        flat = flat * space.sizes[v] + index[v]
    return flat
