"""``simulate``: run a mapped layer through the tile-level simulator."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.ir.placement import HBM_ONLY, Placement
from autotune.ir.precision import word_bytes
from autotune.sim.costs import TaskCosts, task_costs
from autotune.sim.engine import Background, Engine, RunResult
from autotune.sim.interconnect import Interconnect
from autotune.sim.l1 import plan_l1
from autotune.sim.memory import Memories, check_placement
from autotune.sim.program import fc_runs, stack_runs
from autotune.sim.result import Breakdown, SimResult, Trace
from autotune.tiling import TaskGrid, task_grid


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
    """Simulate ``layer`` for ``batch`` images under ``mapping`` on one chiplet of ``machine``
    (a package's layers go through ``autotune.chiplets``, which simulates each part).

    ``placement`` says which of the layer's streams (input, weights, residual, output) live
    in the chiplet's shared L2 instead of its HBM (``autotune.sim.memory``). With
    ``prefetch_bytes`` the chiplet copies that many bytes from the HBM into the L2 while the
    layer runs (a network plan fetching a later layer's weights): a background flow from
    time 0 over the two memories only, sharing them fairly with the layer's transfers; the
    layer lasts until both its work and the copy are done. Raises ``ValueError`` when the
    machine has no L2 but the placement or a prefetch needs one.

    Independent of the analytical model (``autotune.analyze``): it reads only the task
    structure (``autotune.tiling``) and the machine. Raises ``autotune.MappingError`` when the
    mapping does not apply to the layer and ``autotune.sim.CapacityError`` when its buffers
    do not fit L1. ``trace=True`` records the per-cluster timeline for ``write_trace``.

    Example:
        >>> from autotune import Layer, Machine, Mapping, simulate
        >>> conv = Layer("c", "conv", 32, 32, 128, 128, 3, 3, pad_h=1, pad_w=1)
        >>> r = simulate(conv, Mapping.from_report(2, delta_o=24), Machine.preset("manticore"))
        >>> r.tasks, r.cycles > r.macs / Machine.preset("manticore").peak_macs_per_cycle("fp32")
        (6, True)
    """
    machine.check_precision(precision)
    check_placement(machine, placement, prefetch_bytes)
    mem = Memories(machine, placement)
    wb = word_bytes(precision)
    grid = task_grid(layer, mapping, batch, machine)
    plan = plan_l1(grid, machine, wb)
    costs = task_costs(grid, machine, precision, wb)
    net = Interconnect(machine)
    if grid.algorithm == "input_parallel":
        block, runs = fc_runs(grid, costs, plan, net, precision, wb, mem)
    else:
        block, runs = stack_runs(grid, costs, plan, net, mem)
    engine = Engine(net, block, trace)

    t = 0.0
    carry: list[Background] = [engine.prefetch(prefetch_bytes)] if prefetch_bytes else []
    memo: dict[tuple, RunResult] = {}
    done: list[RunResult] = []
    for i, spec in enumerate(runs):
        sig = None if spec.key is None else (spec.key, _signature(carry))
        template = memo.get(sig) if sig is not None else None
        if template is None:
            res = engine.run(
                spec.make(), t, carry, spec.participates, spec.barrier, last=i == len(runs) - 1
            )
            if sig is not None:
                memo[sig] = res
        else:
            res = _shifted(template, t - template.start)
        done.append(res)
        t, carry = res.end, res.carry
    return _result(
        grid.layer.name,
        grid.algorithm,
        precision,
        batch,
        grid.n_tasks,
        int(costs.macs.sum()),
        _ops(grid, costs),
        machine,
        done,
        trace,
        placement,
        prefetch_bytes,
    )


def _ops(grid: TaskGrid, costs: TaskCosts) -> int:
    """FPU operations simulated: the tasks', and the epilogue the reduction roots of
    ``input_parallel`` apply to their stacks (every output word once)."""
    ops = int(costs.ops.sum())
    if grid.algorithm == "input_parallel":
        ops += grid.batch * grid.layer.c_out * grid.layer.epilogue.ops
    return ops


def _signature(carry: list[Background]) -> tuple:
    """What a run's outcome depends on besides its programs: the writes carried into it."""
    return tuple((b.slot, b.lane, round(b.bytes_left, 3), round(b.demand, 9)) for b in carry)


def _shifted(res: RunResult, dt: float) -> RunResult:
    """A replay of ``res`` starting ``dt`` cycles later (a phase identical to a simulated one)."""
    carry = [replace(b, start=b.start + dt) for b in res.carry]
    return RunResult(
        res.start + dt,
        res.end + dt,
        res.compute,
        res.dma_wait,
        res.contention,
        res.sync,
        res.hbm_load_bytes,
        res.hbm_store_bytes,
        res.intercluster_bytes,
        res.level_bytes,
        res.l2_load_bytes,
        res.l2_store_bytes,
        carry,
        0,
        [(k, c, t0 + dt, t1 + dt, lb) for k, c, t0, t1, lb in res.spans],
        [(t0 + dt, *rates) for t0, *rates in res.counters],
    )


def _result(
    layer: str,
    algorithm: str,
    precision: str,
    batch: int,
    tasks: int,
    macs: int,
    ops: int,
    machine: Machine,
    runs: list[RunResult],
    trace: bool,
    placement: Placement,
    prefetch_bytes: int,
) -> SimResult:
    end = runs[-1].end
    parts = {
        name: np.sum([getattr(r, name) for r in runs], axis=0)
        for name in ("compute", "dma_wait", "contention", "sync")
    }
    busy = sum(parts.values())
    mean = {name: float(v.mean()) for name, v in parts.items()}
    mean["idle"] = float((end - busy).mean())
    # Rounding leaves parts that are zero by construction at about -1e-12 of the makespan.
    breakdown = Breakdown(**{k: 0.0 if -1e-9 * end < v < 0 else v for k, v in mean.items()})
    level_bytes = np.sum([r.level_bytes for r in runs], axis=0)
    timeline = None
    if trace:
        timeline = Trace([s for r in runs for s in r.spans], [c for r in runs for c in r.counters])
    return SimResult(
        layer=layer,
        algorithm=algorithm,
        precision=precision,
        batch=batch,
        cycles=int(np.ceil(end - 1e-6)),
        breakdown=breakdown,
        macs=macs,
        ops=ops,
        tasks=tasks,
        clusters=machine.clusters,
        peak_macs_per_cycle=machine.peak_macs_per_cycle(precision),
        clock_hz=machine.clock_hz,
        # The prefetch is carried into the first run, which does not count carried bytes.
        hbm_load_bytes=round(sum(r.hbm_load_bytes for r in runs)) + prefetch_bytes,
        hbm_store_bytes=round(sum(r.hbm_store_bytes for r in runs)),
        l2_load_bytes=round(sum(r.l2_load_bytes for r in runs)),
        l2_store_bytes=round(sum(r.l2_store_bytes for r in runs)) + prefetch_bytes,
        prefetch_bytes=prefetch_bytes,
        placement=placement,
        level_bytes={
            lv.name: round(float(b)) for lv, b in zip(machine.levels, level_bytes, strict=True)
        },
        intercluster_bytes=round(sum(r.intercluster_bytes for r in runs)),
        events=sum(r.events for r in runs),
        trace=timeline,
    )
