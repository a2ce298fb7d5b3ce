"""``simulate`` on any machine; a chiplet split: every part on its own chiplet, after its
remote input arrives.

The parts come from ``autotune.chiplets`` (the data placement assumptions are stated there).
Each distinct part is simulated on one chiplet (``machine.chiplet()``) by the ordinary
tile-level simulator. Before its part starts, a chiplet stages in the input it reads from
its siblings: each incoming link direction carries one flow at the link's bandwidth, all at
once, after the link's round-trip latency, so the stage-in lasts
``latency + max over incoming links of bytes / bandwidth``. The layer ends when the last
chiplet ends. (The analytical model, ``autotune.chiplets.analysis``, charges the largest part
and the busiest link of the whole package; this simulates every part and its own links.)
"""

from __future__ import annotations

import math
from dataclasses import replace

from autotune.chiplets.split import link_bytes, part_mapping, split_parts
from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.ir.placement import HBM_ONLY, Placement
from autotune.ir.precision import word_bytes
from autotune.sim.result import SimResult
from autotune.sim.simulate import simulate as simulate_chiplet


def simulate(
    layer: Layer,
    mapping: Mapping,
    machine: Machine,
    precision: str = "fp32",
    batch: int = 1,
    placement: Placement = HBM_ONLY,
    prefetch_bytes: int = 0,
    *,
    trace: bool = False,
) -> SimResult:
    """Simulate ``layer`` under ``mapping`` on ``machine``, one chiplet or a package.

    On one chiplet this is ``autotune.sim.simulate`` (with the streams' ``placement`` and an
    L2 ``prefetch_bytes``); on a package, every part of the split on its chiplet
    (``simulate_package``), each with that placement in its own chiplet's L2 and HBM and
    prefetching ``prefetch_bytes`` into its own L2 (weights are replicated per chiplet).

    Example:
        >>> from autotune import Layer, Machine, Mapping, simulate
        >>> conv = Layer("c", "conv", 32, 32, 128, 128, 3, 3, pad_h=1, pad_w=1)
        >>> split = Mapping.from_report(2, delta_o=24).with_(chiplet_split="spatial")
        >>> r = simulate(conv, split, Machine.preset("manticore-package"))
        >>> r.chiplets, r.d2d_bytes > 0
        (4, True)
    """
    if machine.chiplets == 1:
        return simulate_chiplet(
            layer, mapping, machine, precision, batch, placement, prefetch_bytes, trace=trace
        )
    placement.check(machine)
    machine.check_precision(precision)
    return simulate_package(
        layer, mapping, machine, precision, batch, placement, prefetch_bytes, trace=trace
    )


def stage_in_cycles(incoming: list[int], machine: Machine) -> float:
    """Cycles until a chiplet holds the remote input that reaches it over ``incoming`` links."""
    if not any(incoming):
        return 0.0
    return machine.d2d_latency_cycles + max(incoming) / machine.d2d_bytes_per_cycle


def simulate_package(
    layer: Layer,
    mapping: Mapping,
    machine: Machine,
    precision: str = "fp32",
    batch: int = 1,
    placement: Placement = HBM_ONLY,
    prefetch_bytes: int = 0,
    *,
    trace: bool = False,
) -> SimResult:
    """``simulate`` on a package: the figures of the whole split layer, every part at
    ``placement`` on its chiplet and prefetching ``prefetch_bytes`` into that chiplet's L2.

    ``cycles``: when the last chiplet finishes (stage-in + its part); ``breakdown``: that
    chiplet's, with the stage-in as ``d2d``; bytes, MACs, operations, tasks and events: sums
    over all parts. ``trace=True`` records chiplet 0's timeline.
    """
    chiplet = machine.chiplet()
    parts = split_parts(
        layer, mapping.chiplet_split, machine.chiplets, batch, word_bytes(precision)
    )
    links = link_bytes(parts)
    memo: dict[tuple, SimResult] = {}
    runs = []
    for part in parts:
        inner = part_mapping(mapping, part)
        key = (part.layer.shape_key(), part.batch, inner)
        if key not in memo or (trace and part.chiplet == 0):
            memo[key] = simulate_chiplet(
                part.layer,
                inner,
                chiplet,
                precision,
                part.batch,
                placement,
                prefetch_bytes,
                trace=trace and part.chiplet == 0,
            )
        stage = stage_in_cycles(
            [b for (_, dst), b in links.items() if dst == part.chiplet], machine
        )
        runs.append((math.ceil(stage - 1e-9) + memo[key].cycles, stage, memo[key]))
    end, stage, last = max(runs, key=lambda run: run[0])  # first of the latest on ties
    results = [run[2] for run in runs]
    return replace(
        last,
        layer=layer.name,
        batch=batch,
        cycles=end,
        breakdown=replace(last.breakdown, d2d=float(math.ceil(stage - 1e-9))),
        macs=sum(r.macs for r in results),
        ops=sum(r.ops for r in results),
        tasks=sum(r.tasks for r in results),
        clusters=machine.total_clusters,
        peak_macs_per_cycle=machine.peak_macs_per_cycle(precision),
        hbm_load_bytes=sum(r.hbm_load_bytes for r in results),
        hbm_store_bytes=sum(r.hbm_store_bytes for r in results),
        l2_load_bytes=sum(r.l2_load_bytes for r in results),
        l2_store_bytes=sum(r.l2_store_bytes for r in results),
        prefetch_bytes=sum(r.prefetch_bytes for r in results),
        level_bytes={name: sum(r.level_bytes[name] for r in results) for name in last.level_bytes},
        intercluster_bytes=sum(r.intercluster_bytes for r in results),
        events=sum(r.events for r in results),
        trace=results[0].trace,
        chiplet_split=mapping.chiplet_split,
        chiplets=len(parts),
        d2d_bytes=sum(links.values()),
        d2d_cycles=math.ceil(stage - 1e-9),
    )
