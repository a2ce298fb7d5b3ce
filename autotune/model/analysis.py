"""``analyze``: every analytical figure of one layer under one mapping on one machine."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.ir.placement import HBM_ONLY, Placement
from autotune.ir.precision import word_bytes as precision_word_bytes
from autotune.model.footprint import buffer_override, footprint_from
from autotune.model.formulas import SCALE, consts, evaluate, tree_cut_bytes_per_cycle
from autotune.model.ops import NumpyOps, as_int
from autotune.model.quantities import grid_quantities
from autotune.tiling import TaskGrid, task_grid, used_input


@dataclass(frozen=True)
class Analysis:
    """Analytical cost of a mapped layer (whole batch, all clusters).

    ``macs`` are the layer's MACs (0 for the kinds without weights); ``ops`` its FPU
    operations (``Layer.ops``: the MACs plus the epilogue's, or a pool's taps, an add's adds,
    ...), what the compute floor and the energy count. ``ccr`` is MACs per off-chip word
    counting loads and stores, as the report's Eq. 1/2 and 8 do; ``ccr_loads`` counts loads
    only, as Eq. 11 and 14 do ("the bulk of accesses ... are the loads"). ``flop_per_byte``
    is the roofline's operational intensity (``flops`` per off-chip byte).

    Each stream (input, weights, residual, output) is at the memory level ``placement``
    gives it: ``offchip_*`` count the HBM's streams (off-chip), ``l2_*`` the L2's; the
    per-stream counts (``input_load_words``, ...) are wherever the stream lives. Their sums
    are the layer's traffic with every stream in HBM. ``memory_cycles`` is the slower of the
    two memories' floors. With nothing in HBM the per-off-chip ratios are infinite.
    """

    layer: str
    algorithm: str
    report_algorithm: int | None
    precision: str
    batch: int
    macs: int
    ops: int
    tasks: int
    task_ops_max: int
    waves: int
    l1_bytes: int
    buffer_bytes: dict[str, int]
    buffer_tile_words: dict[str, int]
    offchip_load_words: int
    offchip_store_words: int
    input_load_words: int
    filter_load_words: int
    residual_load_words: int
    intercluster_words: int
    word_bytes: int
    cycles: int
    compute_cycles: float
    memory_cycles: float
    reduction_cycles: int
    energy_pj: float
    bound: str
    fits: bool
    reason: str | None
    #: On a package (``autotune.chiplets.analysis``): the split, the chiplets that got a part,
    #: the bytes over all die-to-die links and the cycles the link transfer adds.
    chiplet_split: str = "none"
    chiplets: int = 1
    d2d_bytes: int = 0
    d2d_cycles: int = 0
    #: The memory level of each stream, and the words from and to the L2 (0 with HBM_ONLY)
    placement: Placement = HBM_ONLY
    l2_load_words: int = 0
    l2_store_words: int = 0
    #: the L2 words that come down while the layer's own stores go up (``l2_both_words``)
    l2_both_words: int = 0

    @property
    def offchip_words(self) -> int:
        return self.offchip_load_words + self.offchip_store_words

    @property
    def offchip_bytes(self) -> int:
        """Bytes from and to the HBM."""
        return self.offchip_words * self.word_bytes

    @property
    def l2_words(self) -> int:
        return self.l2_load_words + self.l2_store_words

    @property
    def l2_bytes(self) -> int:
        """Bytes from and to the on-chip L2."""
        return self.l2_words * self.word_bytes

    @property
    def intercluster_bytes(self) -> int:
        return self.intercluster_words * self.word_bytes

    @property
    def ccr(self) -> float:
        """MAC per off-chip word, loads and stores (report Eq. 1/2, 8)."""
        return ratio(self.macs, self.offchip_words)

    @property
    def ccr_loads(self) -> float:
        """MAC per off-chip word loaded (report Eq. 11, 14)."""
        return ratio(self.macs, self.offchip_load_words)

    @property
    def flops(self) -> int:
        """Floating-point operations: a MAC is two (multiply and add), every other FPU
        operation one, so ``2 * macs + (ops - macs)``."""
        return self.macs + self.ops

    @property
    def flop_per_byte(self) -> float:
        return ratio(self.flops, self.offchip_bytes)


def ratio(work: int, words: int) -> float:
    """``work / words``; infinite when nothing moves off chip (everything in the L2), 0 when
    there is no work either."""
    if words == 0:
        return math.inf if work else 0.0
    return work / words


def analyze(
    layer: Layer,
    mapping: Mapping,
    machine: Machine,
    precision: str = "fp32",
    batch: int = 1,
    *,
    placement: Placement = HBM_ONLY,
) -> Analysis:
    """Analytical cost of running ``layer`` for ``batch`` images under ``mapping`` on one
    chiplet (a package's layers go through ``autotune.chiplets``, which calls this per part),
    each stream at the memory level ``placement`` gives it.

    Raises ``autotune.tiling.MappingError`` when the mapping does not apply to the layer
    (e.g. ``input_parallel`` on a convolution); a mapping that applies but overflows L1
    returns ``fits=False`` with the reason. Raises ``ValueError`` for an L2 stream on a
    machine without an L2.

    Example:
        >>> from autotune import Layer, Machine, Mapping, analyze
        >>> conv = Layer("c", "conv", 32, 32, 128, 128, 3, 3, pad_h=1, pad_w=1)
        >>> a = analyze(conv, Mapping.from_report(2, delta_o=24), Machine.preset("manticore"))
        >>> round(a.ccr, 1), a.fits
        (141.8, True)
    """
    machine.check_precision(precision)
    placement.check(machine)
    wb = precision_word_bytes(precision)
    grid = task_grid(layer, mapping, batch, machine)
    return analyze_grid(grid, machine, precision, wb, placement)


def bound_of(compute_ideal: float, memory_ideal: float, cycles: int) -> str:
    """``latency`` when neither ideal time reaches half the cycles, else the larger of
    ``compute`` and ``memory`` (ties: compute)."""
    if max(compute_ideal, memory_ideal) < 0.5 * cycles:
        return "latency"
    return "compute" if compute_ideal >= memory_ideal else "memory"


def memory_split(
    values: dict[str, int], placement: Placement
) -> tuple[dict[str, int], dict[str, int]]:
    """(HBM, L2) words of the layer's (loads, stores), each stream counted at its level."""
    loads = {
        "input": values["input_load_words"],
        "weights": values["filter_load_words"],
        "residual": values["residual_load_words"],
    }
    split = {}
    for level in ("hbm", "l2"):
        split[level] = {
            "loads": sum(w for s, w in loads.items() if placement.level(s) == level),
            "stores": values["store_words"] if placement.output == level else 0,
        }
    return split["hbm"], split["l2"]


def memory_ideal_cycles(values: dict[str, int], machine: Machine, placement: Placement) -> float:
    """The memory floor: the HBM's occupancy (payload over the DMA efficiency of its runs;
    = bytes without efficiency tables, to the bit: occupied is bytes x SCALE) over its
    bandwidth, or the L2's bytes over its own, whichever is slower."""
    hbm = values["memory_occupancy_scaled"] / SCALE / machine.hbm_bytes_per_cycle
    if not placement.uses_l2:
        return hbm
    return max(hbm, values["l2_bytes"] / machine.l2_bytes_per_cycle)


def analyze_grid(
    grid: TaskGrid,
    machine: Machine,
    precision: str,
    wb: int,
    placement: Placement = HBM_ONLY,
) -> Analysis:
    layer, mapping = grid.layer, grid.mapping
    k = consts(layer, machine, precision, wb, grid.batch, placement)
    evaluated = evaluate(NumpyOps(), grid_quantities(grid, machine, wb), k, buffer_override(grid))
    fp = footprint_from(evaluated, grid, machine, wb)
    v = {name: as_int(value) for name, value in evaluated.items()}
    hbm, l2 = memory_split(v, k.placement)
    macs, ops = grid.batch * layer.macs, grid.batch * layer.ops
    # The compute floor counts FPU operations (one MAC slot each, ``formulas``): a layer
    # without weights is memory-bound, not free.
    compute_ideal = ops / (machine.peak_macs_per_cycle(precision) * machine.fpu_utilization)
    memory_ideal = memory_ideal_cycles(v, machine, k.placement)
    cycles = v["cycles"]
    bound = bound_of(compute_ideal, memory_ideal, cycles)
    return Analysis(
        layer=layer.name,
        algorithm=mapping.algorithm,
        report_algorithm=mapping.report_algorithm_for(layer.c_out),
        precision=precision,
        batch=grid.batch,
        macs=macs,
        ops=ops,
        tasks=grid.n_tasks,
        task_ops_max=v["task_ops"],
        waves=v["waves"],
        l1_bytes=fp.l1_bytes,
        buffer_bytes=dict(fp.allocated_bytes),
        buffer_tile_words=dict(fp.tile_words),
        offchip_load_words=hbm["loads"],
        offchip_store_words=hbm["stores"],
        input_load_words=v["input_load_words"],
        filter_load_words=v["filter_load_words"],
        residual_load_words=v["residual_load_words"],
        intercluster_words=v["intercluster_words"],
        word_bytes=wb,
        cycles=cycles,
        compute_cycles=compute_ideal,
        memory_cycles=memory_ideal,
        reduction_cycles=v["reduction_cycles"],
        energy_pj=float(v["energy"]),
        bound=bound,
        fits=fp.fits,
        reason=fp.reason,
        placement=k.placement,
        l2_load_words=l2["loads"],
        l2_store_words=l2["stores"],
        l2_both_words=l2_both_words(
            v["waves"] if mapping.algorithm != "input_parallel" else 1,
            mapping.buffers.output_depth,
            l2["loads"],
            l2["stores"],
        ),
    )


def l2_both_words(waves: int, output_depth: int, load_words: int, store_words: int) -> int:
    """The words of a layer's own L2 traffic that come down while its stores go up: a
    double-buffered store leaves beside the next wave's loads in every wave but the first
    (whose loads come alone; the last wave's stores leave after it), so ``(waves - 1) /
    waves`` of the smaller direction's words. 0 with one wave, or a single output buffer
    (a wave's stores follow its compute, and nothing loads beside them)."""
    if waves < 2 or output_depth < 2:
        return 0
    return min(load_words, store_words) * (waves - 1) // waves


def rate(bytes_per_cycle: float) -> Fraction:
    """A bandwidth as an exact fraction (bytes per cycle), for integer constraints."""
    return Fraction(bytes_per_cycle).limit_denominator(1000)


def cdiv_rate(nbytes: int, bandwidth: Fraction) -> int:
    """Cycles to move ``nbytes`` at ``bandwidth``: ceil(nbytes / bandwidth)."""
    return -(-nbytes * bandwidth.denominator // bandwidth.numerator)


def cut_rate(machine: Machine) -> Fraction:
    """Bytes per cycle one direction of every chiplet's tree carries to and from its root
    (``formulas.tree_cut_bytes_per_cycle``; 0 for a tree with no level below the root)."""
    one = machine.chiplet() if machine.chiplets > 1 else machine
    return rate(tree_cut_bytes_per_cycle(one) * machine.chiplets)


def memory_rates(machine: Machine) -> tuple[Fraction, Fraction]:
    """(HBM, L2) bytes per cycle of the whole machine (every chiplet's; 0: no L2)."""
    hbm = rate(machine.hbm_bytes_per_cycle * machine.chiplets)
    l2 = rate(machine.l2_bytes_per_cycle * machine.chiplets) if machine.has_l2 else Fraction(0)
    return hbm, l2


def copy_rate(hbm_rate: Fraction, l2_rate: Fraction) -> Fraction:
    """The fastest a prefetch copies from the HBM into the L2 when alone: the slower of the
    two memories (the simulator's copy demands as much: ``sim.engine``)."""
    return min(hbm_rate, l2_rate) if l2_rate else hbm_rate


def prefetch_blocked_bytes(
    cycles: int,
    hbm_bytes: int,
    l2_bytes: int,
    hbm_rate: Fraction,
    l2_rate: Fraction,
    both_bytes: int = 0,
    cut_rate: Fraction = Fraction(0),
) -> int:
    """The bytes a prefetch beside a layer cannot copy while the layer runs, because the
    layer's own transfers hold the memories: of the ``copy_rate`` x ``cycles`` the copy could
    move in the layer's ``cycles``, it gets only what both memories leave of their bandwidth
    once the layer's ``hbm_bytes`` and ``l2_bytes`` are spread over those cycles (the
    simulator shares each memory max-min fairly: the layer's flows, held by their own ports
    and links, keep their rates and the one copy takes the rest). Nor more than the L2
    leaves while the layer's loads come down and its stores go up at once, each at the
    tree's cut (``cut_rate``), for ``both_bytes`` of them (``l2_both_words``): beyond twice
    the cut (DenseNet-121's batch norms at 7 x 7 from and to the L2, in waves of one-channel
    tasks: 1,008 simulated cycles beside a copy of 147 KB, 829 alone; the even spread said
    836). An estimate, then, no longer a floor: where the loads trickle below the cut the
    L2 has room beside them. Rounded down."""
    rate = copy_rate(hbm_rate, l2_rate)
    spare = min(cycles * rate, cycles * hbm_rate - hbm_bytes)
    if l2_rate:
        spare = min(spare, cycles * l2_rate - l2_bytes)
        if both_bytes and cut_rate:
            both = min(Fraction(cycles), both_bytes / cut_rate)
            left = min(rate, max(Fraction(0), l2_rate - 2 * cut_rate))
            spare = min(spare, (cycles - both) * rate + both * left)
    return math.floor(cycles * rate - max(Fraction(0), spare))


def prefetch_floor_cycles(
    cycles: int,
    hbm_bytes: int,
    l2_bytes: int,
    prefetch_bytes: int,
    hbm_rate: Fraction,
    l2_rate: Fraction,
    both_bytes: int = 0,
    cut_rate: Fraction = Fraction(0),
) -> int:
    """The cycles of a layer that runs ``cycles`` alone and moves ``hbm_bytes`` to and from
    the HBM and ``l2_bytes`` to and from the L2 while a network plan copies
    ``prefetch_bytes`` of later layers' weights from the HBM into the L2 beside it (all
    chiplets' copies); ``plans.problem``'s step equation. The copy shares both memories with
    the layer's own transfers, so the layer cannot end before either memory has moved its
    share and the copy; and the copy moves only what the layer's transfers leave while they
    run (``prefetch_blocked_bytes``, ``both_bytes`` and ``cut_rate`` as there), the rest at
    its own rate after them."""
    hbm = cdiv_rate(hbm_bytes + prefetch_bytes, hbm_rate)
    l2 = cdiv_rate(l2_bytes + prefetch_bytes, l2_rate) if l2_rate else 0
    blocked = prefetch_blocked_bytes(
        cycles, hbm_bytes, l2_bytes, hbm_rate, l2_rate, both_bytes, cut_rate
    )
    copy = cdiv_rate(blocked + prefetch_bytes, copy_rate(hbm_rate, l2_rate))
    return max(hbm, l2, copy)


def with_prefetch(analysis: Analysis, machine: Machine, prefetch_bytes: int) -> Analysis:
    """``analysis`` of a layer that runs beside a network plan's prefetch of
    ``prefetch_bytes`` (one copy; every chiplet loads its own): its cycles and memory floor
    are at least ``prefetch_floor_cycles``, which the simulator's background copy also takes
    (``sim.engine``), so the model's claim for the layer is the plan's for its step."""
    if not prefetch_bytes:
        return analysis
    floor = prefetch_floor_cycles(
        analysis.cycles,
        analysis.offchip_bytes,
        analysis.l2_bytes,
        prefetch_bytes * machine.chiplets,
        *memory_rates(machine),
        analysis.l2_both_words * analysis.word_bytes,
        cut_rate(machine),
    )
    cycles = max(analysis.cycles, floor)
    memory = max(analysis.memory_cycles, float(floor))
    return replace(
        analysis,
        cycles=cycles,
        memory_cycles=memory,
        bound=bound_of(analysis.compute_cycles, memory, cycles),
    )


def compulsory_words(layer: Layer, batch: int = 1) -> tuple[int, int]:
    """(load, store) words any mapping moves at least: every used input, weight, residual
    operand and output once."""
    rows, cols = used_input(layer)
    loads = batch * (rows * cols * layer.c_in + layer.residual_words) + layer.weight_words
    return loads, batch * layer.output_words
