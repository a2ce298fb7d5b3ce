"""``analyze`` on any machine, and the cost of a chiplet split: a package layer as its largest
part plus the die-to-die links.

A package (seed 002, Chiplet Architecture: four chiplets, each with a private HBM and a link
to each sibling) runs a split layer as ``autotune.chiplets`` divides it. Every chiplet runs
its part as an ordinary single-chiplet sub-layer (the tiling, formula, integer program,
simulator and executor stay single-chiplet: they see ``machine.chiplet()``). Data placement
assumptions are those of ``autotune.chiplets``: weights replicated in every HBM, activations
where their producer left them, remote input read over the direct link to its holder. Under a
network plan's placement (``autotune.plans``) each chiplet keeps the streams the plan puts in
L2 in its own L2: every part runs with that placement on its chiplet, and the remote input it
stages in lands in its L2 instead of its HBM (the same link bytes and time).

Time. The remote input a part needs is copied into its chiplet before the part starts (a
stage-in), all links at once; then the part runs from its local HBM:

    d2d_cycles = d2d_latency + ceil(max over link directions of bytes / d2d bytes per cycle)
                 (0 when nothing crosses)
    cycles     = cycles of part 0 (the largest part) on one chiplet + d2d_cycles

Adding rather than overlapping the transfer is a choice: it is an upper bound (streaming the
remote rows while computing would save at most ``d2d_cycles``), and it keeps the link cost
independent of the inner mapping, so the sub-layer's proven-optimal mapping plus the link
cost is the proven optimum over (split, mapping) for the latency objective. Part 0 is the
largest part (``autotune.chiplets``: balanced, largest first); smaller parts are taken to
finish no later (the simulator checks each part). The remote reads also load the sibling's
HBM; at 64 GB/s per link against 256 GB/s per HBM this is neglected. No d2d energy is
charged (the seeds give no figure).

Totals over the package: MACs and FPU operations of the whole layer, off-chip (HBM) and
inter-cluster words summed over all parts (each distinct part shape analysed once), the
compute and memory floors against the whole package's peak and HBM bandwidth.
"""

from __future__ import annotations

from dataclasses import replace

from autotune.chiplets.split import link_bytes, part_mapping, split_parts
from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.ir.placement import HBM_ONLY, Placement
from autotune.ir.precision import word_bytes
from autotune.model.analysis import Analysis, bound_of, with_prefetch
from autotune.model.analysis import analyze as analyze_chiplet
from autotune.model.formulas import SCALE


def analyze(
    layer: Layer,
    mapping: Mapping,
    machine: Machine,
    precision: str = "fp32",
    batch: int = 1,
    *,
    placement: Placement = HBM_ONLY,
    prefetch_bytes: int = 0,
) -> Analysis:
    """Analytical cost of ``layer`` under ``mapping`` on ``machine``, one chiplet or a package.

    On one chiplet this is ``autotune.model.analysis.analyze`` (each stream at the memory
    level ``placement`` gives it); on a package, the figures of the whole split layer
    (``analyze_package``), every part with that placement in its own chiplet's L2 and HBM.
    ``prefetch_bytes``: later layers' weights a network plan copies from HBM into L2 beside
    the layer (one copy; every chiplet loads its own), as ``simulate`` takes them: the layer
    lasts at least as long as both memories take for its traffic and the copy
    (``model.analysis.with_prefetch``).
    Raises ``autotune.MappingError`` when the mapping does not apply, ``ValueError`` for an
    L2 stream on a machine without an L2; a mapping that overflows L1 returns ``fits=False``.

    Example:
        >>> from autotune import Layer, Machine, Mapping, analyze
        >>> conv = Layer("c", "conv", 32, 32, 128, 128, 3, 3, pad_h=1, pad_w=1)
        >>> package = Machine.preset("manticore-package")
        >>> split = Mapping.from_report(2, delta_o=24).with_(chiplet_split="output_channels")
        >>> a = analyze(conv, split, package)
        >>> a.chiplets, a.fits, a.d2d_bytes > 0
        (4, True, True)
    """
    if machine.chiplets == 1:
        analysis = analyze_chiplet(layer, mapping, machine, precision, batch, placement=placement)
    else:
        placement.check(machine)
        machine.check_precision(precision)
        analysis = analyze_package(layer, mapping, machine, precision, batch, placement)
    return with_prefetch(analysis, machine, prefetch_bytes)


def d2d_cycles(max_link_bytes: int, machine: Machine) -> int:
    """Cycles to stage in remote input when the busiest link direction carries
    ``max_link_bytes``: round-trip latency plus the transfer (0 when nothing crosses)."""
    if max_link_bytes <= 0:
        return 0
    rate = round(machine.d2d_bytes_per_cycle * SCALE)
    if rate <= 0:
        raise ValueError(
            f"machine {machine.name!r} has {machine.chiplets} chiplets but no die-to-die bandwidth"
        )
    return machine.d2d_latency_cycles + -(-max_link_bytes * SCALE // rate)


def analyze_package(
    layer: Layer,
    mapping: Mapping,
    machine: Machine,
    precision: str = "fp32",
    batch: int = 1,
    placement: Placement = HBM_ONLY,
) -> Analysis:
    """``analyze`` on a package: the figures of the whole split layer (see the module
    docstring), every part at ``placement`` on its chiplet; ``l1_bytes``, buffers, waves and
    the largest task are part 0's."""
    chiplet = machine.chiplet()
    parts = split_parts(
        layer, mapping.chiplet_split, machine.chiplets, batch, word_bytes(precision)
    )
    memo: dict[tuple[object, ...], Analysis] = {}
    analyses = []
    for part in parts:
        inner = part_mapping(mapping, part)
        key = (part.layer.shape_key(), part.batch, inner)
        if key not in memo:
            memo[key] = analyze_chiplet(
                part.layer, inner, chiplet, precision, part.batch, placement=placement
            )
        analyses.append(memo[key])
    first = analyses[0]
    links = link_bytes(parts)
    extra = d2d_cycles(max(links.values(), default=0), machine)
    macs, ops = batch * layer.macs, batch * layer.ops
    compute_ideal = ops / (machine.peak_macs_per_cycle(precision) * machine.fpu_utilization)
    # Every part's main-memory occupancy (with its DMA efficiency) over all chiplets' HBMs.
    memory_ideal = sum(a.memory_cycles for a in analyses) / machine.chiplets
    cycles = first.cycles + extra
    bound = bound_of(compute_ideal, memory_ideal, cycles)
    unfit = [a for a in analyses if not a.fits]
    return replace(
        first,
        layer=layer.name,
        report_algorithm=mapping.report_algorithm_for(layer.c_out),
        batch=batch,
        macs=macs,
        ops=ops,
        tasks=sum(a.tasks for a in analyses),
        offchip_load_words=sum(a.offchip_load_words for a in analyses),
        offchip_store_words=sum(a.offchip_store_words for a in analyses),
        l2_load_words=sum(a.l2_load_words for a in analyses),
        l2_store_words=sum(a.l2_store_words for a in analyses),
        l2_both_words=sum(a.l2_both_words for a in analyses),
        input_load_words=sum(a.input_load_words for a in analyses),
        filter_load_words=sum(a.filter_load_words for a in analyses),
        residual_load_words=sum(a.residual_load_words for a in analyses),
        intercluster_words=sum(a.intercluster_words for a in analyses),
        cycles=cycles,
        compute_cycles=compute_ideal,
        memory_cycles=memory_ideal,
        energy_pj=sum(a.energy_pj for a in analyses),
        bound=bound,
        fits=not unfit,
        reason=unfit[0].reason if unfit else None,
        chiplet_split=mapping.chiplet_split,
        chiplets=len(parts),
        d2d_bytes=sum(links.values()),
        d2d_cycles=extra,
    )
