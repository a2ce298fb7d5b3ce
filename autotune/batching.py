"""Batch as a decision: tune a network at several batch sizes and choose one.

A fully-connected layer reads every weight once per batch, so at batch 1 it is memory-bound
(about one MAC per weight word), and its arithmetic intensity grows with the batch until it
crosses the machine's ridge point and turns compute-bound (seed 001). ``sweep`` tunes the
network at each batch (``autotune.api.tune``) and records the network totals and, per fc
layer, which side of the ridge its tuned schedule lies on; ``choose_batch`` picks the batch
with the most images per second within a latency budget.

Memory- or compute-bound is the cost model's own rule (``Analysis.bound``), read from the
tuned schedule's figures: a layer is memory-bound when its off-chip bytes take longer at the
HBM bandwidth (``Analysis.memory_cycles``) than its MACs at the machine's sustained peak
(``Analysis.compute_cycles``: peak MACs per cycle times the FPU utilisation), i.e. when its
flop per off-chip byte is below the ridge point ``peak_flops * fpu_utilization /
hbm_bytes_per_s``. ``Analysis.bound`` also says ``latency`` when neither reaches half the
layer's cycles; the sweep still reports which of the two is larger, with the same tie rule.

Latency, images/s, Tflop/s and % of peak are the ``tune`` totals: simulated cycles.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from autotune.api import progress_reporter, resolve, tune_network
from autotune.files import write_atomic
from autotune.io.limits import check_fits
from autotune.io.machine_yaml import resolve_machine
from autotune.io.network_yaml import load_network
from autotune.ir.machine import Machine
from autotune.ir.network import Network
from autotune.ir.options import TuneOptions
from autotune.model.analysis import Analysis
from autotune.result import Totals, TuneResult
from autotune.version import __version__

#: The default sweep: powers of two from 1 to 256.
DEFAULT_BATCHES: tuple[int, ...] = tuple(2**i for i in range(9))
#: An ellipsis progression may expand to at most this many batches.
MAX_BATCHES = 1024


def regime(analysis: Analysis) -> str:
    """``"memory"`` or ``"compute"``: ``Analysis.bound`` without its ``latency`` verdict.

    Equal to ``analysis.bound`` whenever that is ``memory`` or ``compute``; when it is
    ``latency`` (neither ideal time reaches half the cycles), the larger of the two ideal
    times decides, ties to ``compute`` as in ``analyze``.
    """
    if analysis.bound in ("memory", "compute"):
        return analysis.bound
    return "compute" if analysis.compute_cycles >= analysis.memory_cycles else "memory"


def ridge_flop_per_byte(machine: Machine, precision: str) -> float:
    """Flop per off-chip byte above which a layer is compute-bound under ``regime``."""
    return machine.peak_flops(precision) * machine.fpu_utilization / machine.hbm_bytes_per_s


@dataclass(frozen=True)
class FcBound:
    """One fc layer at one batch: which side of the ridge its tuned schedule is on."""

    layer: str
    bound: str  # "memory" | "compute" (``regime``)
    model_bound: str  # ``Analysis.bound``: "memory" | "compute" | "latency"
    flop_per_byte: float  # 2 MACs per off-chip byte of the chosen schedule
    offchip_bytes: int
    memory_cycles: float  # off-chip bytes / HBM bytes per cycle
    compute_cycles: float  # MACs / (peak MACs per cycle * FPU utilisation)
    cycles: int  # the layer's simulated cycles (predicted without simulation)


@dataclass(frozen=True)
class BatchPoint(Totals):
    """The tuned network at one batch: ``tune``'s totals and the fc layers' bounds."""

    batch: int
    fc: tuple[FcBound, ...]
    verified: bool | None  # every layer verified (None: not verified)

    def fc_bound(self, layer: str) -> FcBound:
        for f in self.fc:
            if f.layer == layer:
                return f
        raise KeyError(layer)


@dataclass(frozen=True)
class SweepResult:
    """What ``sweep`` returns: one ``BatchPoint`` per batch, in increasing batch order.

    ``results`` keeps each batch's full ``TuneResult`` (not part of the JSON).
    """

    network: str
    machine: Machine
    precision: str
    objective: str
    seed: int
    search: str
    refine: bool
    verify: bool
    points: tuple[BatchPoint, ...]
    results: dict[int, TuneResult] = field(default_factory=dict, compare=False, repr=False)

    @property
    def batches(self) -> tuple[int, ...]:
        return tuple(p.batch for p in self.points)

    @property
    def fc_layers(self) -> tuple[str, ...]:
        """The fc layers' names in network order."""
        return tuple(f.layer for f in self.points[0].fc) if self.points else ()

    @property
    def ridge_flop_per_byte(self) -> float:
        return ridge_flop_per_byte(self.machine, self.precision)

    def point(self, batch: int) -> BatchPoint:
        for p in self.points:
            if p.batch == batch:
                return p
        raise KeyError(f"batch {batch} is not in the sweep {list(self.batches)}")

    def turning_batch(self, layer: str) -> int | None:
        """The first swept batch at which fc ``layer`` is compute-bound (None: never)."""
        for p in self.points:
            if p.fc_bound(layer).bound == "compute":
                return p.batch
        return None

    def turning_batches(self) -> dict[str, int | None]:
        return {name: self.turning_batch(name) for name in self.fc_layers}

    def memory_again(self, layer: str) -> int | None:
        """The first batch after the turning batch at which ``layer`` is memory-bound again.

        The tuned schedule may trade traffic for cycles at a larger batch, so compute-bound
        at one batch does not imply compute-bound at every larger one.
        """
        turn = self.turning_batch(layer)
        if turn is None:
            return None
        for p in self.points:
            if p.batch > turn and p.fc_bound(layer).bound == "memory":
                return p.batch
        return None

    def best(self) -> int:
        """The batch with the most images per second (ties: the smaller batch)."""
        return max(self.points, key=lambda p: (p.images_per_s, -p.batch)).batch

    def best_within(self, latency_budget_s: float) -> int | None:
        """The batch with the most images/s whose latency is at most ``latency_budget_s``
        (ties: the smaller batch), or None when no batch meets the budget."""
        within = [p for p in self.points if p.latency_s <= latency_budget_s]
        if not within:
            return None
        return max(within, key=lambda p: (p.images_per_s, -p.batch)).batch

    # -- output ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        m = self.machine
        return {
            "tool": {"name": "autotune", "version": __version__},
            "network": self.network,
            "machine": {
                "name": m.name,
                "peak_flops": m.peak_flops(self.precision),
                "fpu_utilization": m.fpu_utilization,
                "hbm_bytes_per_s": m.hbm_bytes_per_s,
            },
            "precision": self.precision,
            "objective": self.objective,
            "seed": self.seed,
            "search": self.search,
            "refine": self.refine,
            "verify": self.verify,
            "ridge_flop_per_byte": self.ridge_flop_per_byte,
            "batches": list(self.batches),
            "points": [asdict(p) for p in self.points],
            "fc_layers": [
                {
                    "layer": name,
                    "turning_batch": self.turning_batch(name),
                    "memory_again": self.memory_again(name),
                }
                for name in self.fc_layers
            ],
            "best_batch": self.best() if self.points else None,
        }

    def to_json(self) -> str:
        """Deterministic JSON (sorted keys, no timings): same input and seed, same text."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def save(self, path: str | Path) -> None:
        """Write the JSON atomically (temp file + rename)."""

        write_atomic(path, self.to_json())


def check_batches(batches: Iterable[int]) -> tuple[int, ...]:
    """Sorted, deduplicated batches; ValueError on an empty list or a non-positive batch."""
    values = list(batches)
    for b in values:
        if not isinstance(b, int) or isinstance(b, bool) or b < 1:
            raise ValueError(f"a batch must be a positive integer, got {b!r}")
    if not values:
        raise ValueError("no batches to sweep")
    return tuple(sorted(set(values)))


def parse_batches(text: str) -> tuple[int, ...]:
    """Parse a batch list: ``1,4,64``, or a progression with an ellipsis, ``1,2,4,...,256``.

    Plain lists are sorted and deduplicated (``8,1,8`` is ``1,8``). Before ``...`` give at
    least two terms: they continue geometrically when each term is an integer multiple (at
    least twice) of the previous one (``1,2,...,8`` is 1, 2, 4, 8), else arithmetically
    (give three terms to force it: ``1,2,3,...,8``). The last term, after ``...``, must lie
    on the progression. ``…`` works as well as ``...``. ValueError names the problem.
    """
    items = [s.strip() for s in text.replace("…", "...").split(",")]
    if any(not s for s in items):
        raise ValueError(f"empty entry in {text!r} (expected e.g. 1,4,64 or 1,2,4,...,256)")

    def number(s: str) -> int:
        if not re.fullmatch(r"[+]?\d+", s):
            raise ValueError(f"{s!r} is not a positive integer")
        value = int(s)
        if value < 1:
            raise ValueError(f"batch {value} is not a positive integer")
        return value

    dots = [i for i, s in enumerate(items) if s == "..."]
    if not dots:
        return check_batches(number(s) for s in items)
    if len(dots) > 1 or dots[0] != len(items) - 2:
        raise ValueError(f"{text!r}: '...' must come once, just before the last batch")
    head = [number(s) for s in items[:-2]]
    last = number(items[-1])
    if len(head) < 2:
        raise ValueError(f"{text!r}: give at least two batches before '...'")
    pairs = list(zip(head, head[1:], strict=False))
    ratios = {b // a for a, b in pairs}
    if all(b % a == 0 and b >= 2 * a for a, b in pairs) and len(ratios) == 1:
        ratio = ratios.pop()
        step = lambda v: v * ratio  # noqa: E731
        kind = f"×{ratio}"
    else:
        diffs = {b - a for a, b in pairs}
        if len(diffs) != 1 or next(iter(diffs)) <= 0:
            raise ValueError(
                f"{text!r}: the batches before '...' are neither a rising "
                f"geometric nor an arithmetic progression"
            )
        d = next(iter(diffs))
        step = lambda v: v + d  # noqa: E731
        kind = f"+{d}"
    if last < head[-1]:
        raise ValueError(f"{text!r}: the last batch {last} is below {head[-1]}")
    values = list(head)
    while values[-1] < last:
        values.append(step(values[-1]))
        if len(values) > MAX_BATCHES:
            raise ValueError(f"{text!r}: more than {MAX_BATCHES} batches")
    if values[-1] != last:
        raise ValueError(
            f"{text!r}: {last} is not in the progression {head[0]}, {head[1]}, "
            f"... ({kind} each step; it passes {values[-2]} and {values[-1]})"
        )
    return tuple(values)


def powers_of_two(max_batch: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to ``max_batch``, and ``max_batch`` itself if not a power of two."""
    if max_batch < 1:
        raise ValueError(f"max batch must be a positive integer, got {max_batch!r}")
    values = [1]
    while values[-1] * 2 <= max_batch:
        values.append(values[-1] * 2)
    if values[-1] != max_batch:
        values.append(max_batch)
    return tuple(values)


def point_of(result: TuneResult) -> BatchPoint:
    """The ``BatchPoint`` of one ``TuneResult``."""
    fc = []
    for r in result.layers:
        if r.layer.kind != "fc":
            continue
        a = r.predicted
        fc.append(
            FcBound(
                layer=r.layer.name,
                bound=regime(a),
                model_bound=a.bound,
                flop_per_byte=a.flop_per_byte,
                offchip_bytes=a.offchip_bytes,
                memory_cycles=a.memory_cycles,
                compute_cycles=a.compute_cycles,
                cycles=r.simulated.cycles if r.simulated is not None else a.cycles,
            )
        )
    checked = [r.verified for r in result.layers if r.verified is not None]
    verified = all(v.ok for v in checked) if checked else None
    totals = {f.name: getattr(result.totals, f.name) for f in fields(Totals)}
    return BatchPoint(**totals, batch=result.batch, fc=tuple(fc), verified=verified)


#: A sweep is a planning tool: by default no refinement and no verification.
SWEEP_OPTIONS = TuneOptions(refine=False, verify=False)


def sweep(
    network: str | Path | Network,
    machine: str | Path | Machine | None = None,
    *,
    batches: Iterable[int] = DEFAULT_BATCHES,
    options: TuneOptions | None = None,
    progress: bool | Callable[[str, str], None] = False,
    precision: str | None = None,
    objective: str | None = None,
    refine: bool | None = None,
    verify: bool | None = None,
    seed: int | None = None,
    storage: str | None = None,
    trials: int | None = None,
    search: str | None = None,
    time_limit: float | None = None,
    timeout: float | None = None,
) -> SweepResult:
    """Tune ``network`` at each batch of ``batches`` (``autotune.api.tune``) and compare.

    ``batches`` is sorted and deduplicated; the options' batch is ignored. Refinement and
    verification are off by default (``SWEEP_OPTIONS``): a sweep is a planning tool, and the
    integer program plus the simulator give the same latency figure ``tune`` reports. Every
    batch is tuned per layer (``plan="per-layer"``): the sweep judges each layer against the
    HBM roofline on its own; ``benchmarks/bench_plan.py --batches`` sweeps network plans.
    ``progress``: True prints one line per stage to stderr; a callable gets
    ``(stage, "layer @ batch B")``. The shorthands override the same ``options`` fields, as
    for ``tune`` (``timeout``: seconds of refinement per layer).

    Example:
        >>> s = sweep("examples/alexnet.yaml", batches=(1, 8, 64))   # doctest: +SKIP
        >>> s.turning_batches(), s.best_within(5e-3)                 # doctest: +SKIP
    """
    shorthands = {
        "precision": precision,
        "objective": objective,
        "refine": refine,
        "verify": verify,
        "seed": seed,
        "storage": storage,
        "trials": trials,
        "search": search,
        "time_limit": time_limit,
        "refine_timeout": timeout,
    }
    given = {name: value for name, value in shorthands.items() if value is not None}
    # the sweep's verdicts are per layer against the HBM roofline: layers on their own
    opts = replace(options or SWEEP_OPTIONS, **given, plan="per-layer")  # type: ignore[arg-type]
    values = check_batches(batches)
    net = network if isinstance(network, Network) else load_network(network)
    mach = resolve_machine(machine)
    opts = resolve(opts, net)
    prec = str(opts.precision)
    mach.check_precision(prec)
    check_fits(net, mach, prec, values[-1])  # the largest batch, before tuning the others
    report = progress_reporter(progress)
    points, results = [], {}
    for b in values:

        def at_batch(stage: str, name: str, b: int = b) -> None:
            report(stage, f"{name} @ batch {b}")

        result = tune_network(net, mach, replace(opts, batch=b), at_batch)
        points.append(point_of(result))
        results[b] = result
    return SweepResult(
        net.name,
        mach,
        prec,
        opts.objective,
        opts.seed,
        opts.search,
        opts.refine,
        opts.verify,
        tuple(points),
        results,
    )


class BudgetError(ValueError):
    """No swept batch meets the latency budget; names the smallest latency achievable."""

    def __init__(self, budget_s: float, sweep_result: SweepResult) -> None:
        fastest = min(sweep_result.points, key=lambda p: (p.latency_s, p.batch))
        self.budget_s = budget_s
        self.smallest_latency_s = fastest.latency_s
        self.smallest_latency_batch = fastest.batch
        self.sweep = sweep_result
        super().__init__(
            f"no batch meets the latency budget of {budget_s * 1e3:.6g} ms: the "
            f"smallest latency achievable is {fastest.latency_s * 1e3:.6g} ms "
            f"(batch {fastest.batch})"
        )


@dataclass(frozen=True)
class BatchChoice:
    """What ``choose_batch`` returns: the chosen batch and the sweep it was chosen from."""

    batch: int
    latency_budget_s: float
    sweep: SweepResult

    @property
    def point(self) -> BatchPoint:
        return self.sweep.point(self.batch)

    @property
    def candidates(self) -> tuple[BatchPoint, ...]:
        """The swept batches that meet the budget."""
        return tuple(p for p in self.sweep.points if p.latency_s <= self.latency_budget_s)


def choose_batch(
    network: str | Path | Network,
    machine: str | Path | Machine | None = None,
    *,
    latency_budget_s: float,
    max_batch: int = 256,
    options: TuneOptions | None = None,
    progress: bool | Callable[[str, str], None] = False,
    precision: str | None = None,
    objective: str | None = None,
    seed: int | None = None,
    search: str | None = None,
    time_limit: float | None = None,
) -> BatchChoice:
    """The batch with the most images/s whose latency is at most ``latency_budget_s``.

    Sweeps the powers of two from 1 to ``max_batch`` (``powers_of_two``) without refinement
    or verification (integer program + simulator: the latency ``tune`` reports) and takes
    ``best_within(latency_budget_s)``. Raises ``BudgetError`` when no batch meets the budget.
    ``options`` (refinement and verification switched off) and the shorthands as for ``sweep``.

    Tuning the chosen batch afterwards with refinement keeps the budget: refinement returns
    the best simulated trial, the integer program's winner on ties, so it never raises a
    layer's simulated cycles (``autotune.search.refine``) -- provided the integer program
    picks the same winner again, as it does for the same input and seed when it proves
    optimality.

    Example:
        >>> choice = choose_batch("examples/alexnet.yaml", latency_budget_s=5e-3)  # doctest: +SKIP
        >>> result = tune("examples/alexnet.yaml", batch=choice.batch)             # doctest: +SKIP
    """
    if not latency_budget_s > 0:
        raise ValueError(f"the latency budget must be positive, got {latency_budget_s!r}")
    result = sweep(
        network,
        machine,
        batches=powers_of_two(max_batch),
        options=replace(options or SWEEP_OPTIONS, refine=False, verify=False),
        progress=progress,
        precision=precision,
        objective=objective,
        seed=seed,
        search=search,
        time_limit=time_limit,
    )
    batch = result.best_within(latency_budget_s)
    if batch is None:
        raise BudgetError(latency_budget_s, result)
    return BatchChoice(batch, latency_budget_s, result)


def tune_within_budget(
    network: Network,
    machine: Machine,
    options: TuneOptions,
    *,
    latency_budget_s: float,
    max_batch: int = 256,
    progress: bool | Callable[[str, str], None] = False,
) -> tuple[BatchChoice, TuneResult]:
    """``tune --batch auto``: ``choose_batch``, then tune the chosen batch with ``options``.

    Without refinement and verification the sweep's own result at that batch is returned
    (the same run). Refinement keeps or lowers every layer's simulated cycles (the integer
    program's winner is its incumbent), so the tuned batch is at most as slow as the swept
    one; a ``RuntimeError`` says so if that promise is ever broken.
    """
    choice = choose_batch(
        network,
        machine,
        latency_budget_s=latency_budget_s,
        max_batch=max_batch,
        options=options,
        progress=progress,
    )
    if not options.refine and not options.verify:
        result = choice.sweep.results[choice.batch]
    else:
        # per layer, as the sweep measured it: the budget holds for that schedule
        at_batch = replace(options, batch=choice.batch, plan="per-layer")
        result = tune_network(network, machine, at_batch, progress_reporter(progress))
    t = result.totals
    if t.cycles > choice.point.cycles or t.latency_s > latency_budget_s:
        raise RuntimeError(
            f"batch {choice.batch} tuned to {t.latency_s * 1e3:.6g} ms, more than the "
            f"{choice.point.latency_s * 1e3:.6g} ms of the sweep "
            f"(budget {latency_budget_s * 1e3:.6g} ms)"
        )
    return choice, result
