"""What the command line prints: tables, totals and progress, on rich consoles.

The commands in ``app`` parse their arguments, make one library call and hand the result to
one of these functions; nothing here computes a figure the library does not return.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from autotune import interrupts
from autotune.api import Progress as ProgressCallback
from autotune.batching import BatchChoice, SweepResult
from autotune.graphs.execute import NetworkVerification
from autotune.io.machine_yaml import resolve_machine
from autotune.ir.layer import Layer
from autotune.ir.lowering import Lowering
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.ir.network import Network
from autotune.ir.placement import streams
from autotune.ir.plan import NetworkPlan
from autotune.ir.precision import word_bytes
from autotune.result import LayerResult, TuneResult
from autotune.sim.result import SimResult
from autotune.verification.check import Verification

#: Tables show at most this many rows (the first and last halves); a network of thousands of
#: layers would take a terminal minutes to draw, and the JSON has every layer anyway.
MAX_ROWS = 400

T = TypeVar("T")


def shown(rows: Sequence[T]) -> tuple[list[T], int]:
    """The rows a table shows and how many it leaves out (the middle ones)."""
    if len(rows) <= MAX_ROWS:
        return list(rows), 0
    half = MAX_ROWS // 2
    return [*rows[:half], *rows[-half:]], len(rows) - 2 * half


def _elided(table: Table, hidden: int, after: int) -> None:
    """Print ``table``; when rows were left out, say so where they would be."""
    if hidden:
        table.rows[after - 1].end_section = True
        table.caption = f"({hidden:,} rows in the middle not shown)"
    stdout.print(table)


def _console(stderr: bool = False) -> Console:
    """A console; when piped (not a terminal) wide enough that tables do not wrap."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=200)


stdout = _console()
stderr = _console(stderr=True)


def error(message: str) -> None:
    """One line on stderr (markup in ``message`` is printed as is)."""
    stderr.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def warning(message: str) -> None:
    """One line on stderr."""
    stderr.print(f"[bold yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True)


def si(value: float, unit: str) -> str:
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def size(value: float) -> str:
    for factor, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if value >= factor:
            return f"{value / factor:.1f} {unit}"
    return f"{value:.0f} B"


def ms(seconds: float) -> str:
    milli = seconds * 1e3
    return f"{milli:,.3f}" if milli >= 1 else f"{milli:#.4g}"


def pad_text(layer: Layer) -> str:
    """``1×1``, or each axis's two sides where they differ: ``0+1×0+1`` (TensorFlow's SAME
    padding of a stride-2 conv)."""
    rows = f"{layer.pad_h}" if layer.pad_bottom is None else f"{layer.pad_h}+{layer.pad_end_h}"
    cols = f"{layer.pad_w}" if layer.pad_right is None else f"{layer.pad_w}+{layer.pad_end_w}"
    return f"{rows}×{cols}"


def kernel_text(layer: Layer) -> str:
    """``3×3``, a dilated one's ``3×3 d2`` (``d2×4`` when the axes differ), a bilinear
    upsample's ``bilinear``."""
    text = f"{layer.kernel_h}×{layer.kernel_w}"
    dh, dw = layer.dilation_h, layer.dilation_w
    if (dh, dw) != (1, 1):
        text += f" d{dh}" if dh == dw else f" d{dh}×{dw}"
    if layer.upsample_mode != "nearest":
        text = layer.upsample_mode.replace("_", " ")
    return text


def tile_text(mapping: Mapping) -> str:
    t = mapping.tile
    h = "all" if t.out_h is None else str(t.out_h)
    w = "all" if t.out_w is None else str(t.out_w)
    return f"{h}×{w}×{t.in_c}"


@contextmanager
def progress_bar(description: str, total: int) -> Iterator[ProgressCallback]:
    """A transient progress bar on stderr; yields the ``progress(stage, name)`` callback."""
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[layer]}"),
        console=stderr,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total, layer="")

        def progress(stage: str, name: str) -> None:
            interrupts.check()  # a step ends: a Ctrl-C swallowed during it ends the run
            bar.update(task, advance=1, layer=f"{stage} {name}")

        yield progress


def absorbed_text(lowering: Lowering | None) -> dict[str, str]:
    """Per layer: what was folded or fused into it ("bn1 relu1"), or where a copy goes; a
    channel shuffle (a copy layer) says so; a fused pair, the step it absorbed before the
    arrow ("dw dw_bn dw_act → bn2", "expand expand_act → dw_bn dw_act")."""
    if lowering is None:
        return {}
    texts = {}
    for step in lowering.steps:
        text = " ".join(step.absorbed) if step.op else f"copy into {step.output.buffer}"
        if step.shuffle_groups:
            text = " ".join((f"channel shuffle of {step.shuffle_groups} groups", *step.absorbed))
        if step.prologue is not None:
            text = " ".join((step.prologue.op, *step.prologue.absorbed, "→", *step.absorbed))
        texts[step.name] = text
    return texts


def graph_summary(lowering: Lowering | None) -> str | None:
    """One line: how the graph's operators became layers."""
    if lowering is None:
        return None
    kinds: Counter[str] = Counter(f.kind for f in lowering.fates)
    prologues = [step.prologue for step in lowering.steps if step.prologue is not None]
    if prologues:  # the depthwise steps' operators are counted apart (their own line)
        kinds["fused"] -= sum(1 + len(p.absorbed) for p in prologues)
    parts = [f"{kinds.get('layer', 0)} mapped"]
    for kind, words in (
        ("folded", "folded into a conv"),
        ("fused", "fused into an epilogue"),
        ("view", "views (no copy)"),
        ("concat", "concats (zero-copy)"),
    ):
        if kinds.get(kind):
            parts.append(f"{kinds[kind]} {words}")
    copies = sum(1 for step in lowering.steps if not step.op)
    if copies:
        parts.append(f"{copies} concat operand copies")
    expansions = sum(1 for step in lowering.steps if step.layer.expansion is not None)
    if len(prologues) > expansions:
        parts.append(f"{len(prologues) - expansions} depthwise steps fused into the 1x1 after them")
    if expansions:
        parts.append(f"{expansions} 1x1 steps fused into the depthwise after them")
    return f"graph: {len(lowering.fates)} operators: " + ", ".join(parts)


def print_network(net: Network, machine: Machine, precision: str) -> None:
    """``check``: each layer's shape, MACs and weight bytes, and the totals."""
    wb = word_bytes(precision)
    table = Table(
        title=f"{net.name}: {len(net.layers)} layers, batch {net.batch}, {precision}",
        title_justify="left",
    )
    for col in (
        "layer",
        "kind",
        "in (h×w×c)",
        "out (h×w×c)",
        "kernel",
        "stride",
        "pad",
        "groups",
        "MACs/image",
        "weights",
        *(("fused",) if net.lowering is not None else ()),
    ):
        table.add_column(col, justify="left" if col in ("layer", "kind", "fused") else "right")
    absorbed = absorbed_text(net.lowering)
    layers, hidden = shown(net.layers)
    for layer in layers:
        table.add_row(
            layer.name,
            layer.kind,
            f"{layer.h_in}×{layer.w_in}×{layer.c_in}",
            f"{layer.h_out}×{layer.w_out}×{layer.c_out}",
            kernel_text(layer),
            f"{layer.stride_h}×{layer.stride_w}",
            pad_text(layer),
            str(layer.groups),
            si(layer.macs, "MAC"),
            size(layer.weight_words * wb),
            *((absorbed.get(layer.name, ""),) if net.lowering is not None else ()),
        )
    _elided(table, hidden, MAX_ROWS // 2)
    summary = graph_summary(net.lowering)
    if summary is not None:
        stdout.print(summary, highlight=False)
    if net.skipped:
        ops = Counter(entry.split(" ", 1)[0] for entry in net.skipped)
        stdout.print(
            f"skipped {len(net.skipped)} ONNX nodes that are not conv/fc layers: "
            + ", ".join(f"{op} ×{n}" for op, n in ops.items())
        )
    total_weights = sum(layer.weight_words for layer in net.layers) * wb
    stdout.print(
        f"total: {si(net.macs, 'MAC')} for the batch of {net.batch}, "
        f"{size(total_weights)} of weights; machine {machine.name} "
        f"({si(machine.peak_flops(precision), 'flop/s')} peak {precision})"
    )


def print_machines(names: tuple[str, ...]) -> None:
    """``machines``: the presets with their key figures and summaries."""
    table = Table(title="machine presets", title_justify="left")
    for col in (
        "name",
        "chiplets",
        "clusters",
        "cores",
        "L1/cluster",
        "peak fp64",
        "peak fp32",
        "peak fp16",
        "memory bandwidth",
    ):
        table.add_column(col, justify="left" if col == "name" else "right")
    machines = [resolve_machine(name) for name in names]
    for m in machines:
        peaks = [
            (si(m.peak_flops(p), "flop/s") if m.supports(p) else "-")
            for p in ("fp64", "fp32", "fp16")
        ]
        table.add_row(
            m.name,
            str(m.chiplets),
            str(m.total_clusters),
            str(m.total_clusters * m.cores_per_cluster),
            size(m.l1_bytes),
            *peaks,
            si(m.hbm_bytes_per_s, "B/s"),
        )
    stdout.print(table)
    for name, m in zip(names, machines, strict=True):
        stdout.print(f"{name}: {m.description.get('summary', '')}")


def print_network_verification(check: NetworkVerification) -> None:
    """``verify`` of a graph: the end-to-end line, and every tensor out of tolerance."""
    worst = check.worst
    stdout.print(
        f"end to end: {len(check.tensors)} stored tensors against the graph's reference, "
        f"worst {worst.tensor!r} relative error {worst.rel_error:.2e} "
        f"(tolerance {check.tolerance:.0e}): {'ok' if check.ok else 'FAILED'}",
        highlight=False,
    )
    for line in check.errors[:20]:
        stdout.print(f"  {escape(line)}", highlight=False)


def print_verification(result: TuneResult, checks: list[Verification], seed: int) -> None:
    """``verify``: one row per layer."""
    table = Table(
        title=f"{result.network}: verification ({result.precision}, batch "
        f"{result.batch}, seed {seed})",
        title_justify="left",
    )
    for col in (
        "layer",
        "algorithm",
        "ok",
        "max abs error",
        "max rel error",
        "tolerance",
        "reason",
    ):
        table.add_column(col)
    pairs, hidden = shown(list(zip(result.layers, checks, strict=True)))
    for r, v in pairs:
        table.add_row(
            r.layer.name,
            r.mapping.algorithm,
            "ok" if v.ok else "FAILED",
            f"{v.max_abs_error:.2e}",
            f"{v.max_rel_error:.2e}",
            f"{v.tolerance:.2e}",
            "; ".join(v.errors)[:120],
        )
    _elided(table, hidden, MAX_ROWS // 2)


def print_simulation(result: TuneResult, runs: list[tuple[LayerResult, SimResult]]) -> None:
    """``simulate``: cycles, prediction and breakdown per layer, and the total."""
    table = Table(
        title=f"{result.network}: simulated on {result.machine.name}", title_justify="left"
    )
    package = result.machine.chiplets > 1  # a package adds the die-to-die stage-in
    parts = ("compute", "dma_wait", "contention", "sync", "idle", *(("d2d",) if package else ()))
    l2 = any(sim.placement.uses_l2 or sim.l2_bytes for _, sim in runs)
    for col in (
        "layer",
        "algorithm",
        "cycles",
        "predicted",
        "sim/model",
        "compute",
        "DMA wait",
        "contention",
        "sync",
        "idle",
        *(("d2d",) if package else ()),
        "HBM B/cycle",
        *(("L2 B/cycle",) if l2 else ()),
        "FPU util",
    ):
        table.add_column(col, justify="left" if col in ("layer", "algorithm") else "right")
    rows, hidden = shown(runs)
    for r, sim in rows:
        b = sim.breakdown.as_dict()
        table.add_row(
            r.layer.name,
            r.mapping.algorithm,
            f"{sim.cycles:,}",
            f"{r.predicted.cycles:,}",
            f"{sim.cycles / r.predicted.cycles:.2f}",
            *(f"{100 * b.get(k, 0.0) / sim.cycles:.0f}%" for k in parts),
            f"{sim.hbm_bytes_per_cycle:.1f}",
            *((f"{sim.l2_bytes_per_cycle:.1f}",) if l2 else ()),
            f"{100 * sim.fpu_utilization:.1f}%",
        )
    _elided(table, hidden, MAX_ROWS // 2)
    total = sum(sim.cycles for _, sim in runs)
    if len(runs) < len(result.layers):
        stdout.print(f"total: {total:,} cycles")
        return
    seconds = total / result.machine.clock_hz
    stdout.print(
        f"network: {total:,} cycles = {seconds * 1e3:.3f} ms per batch of {result.batch}, "
        f"{result.batch / seconds:,.1f} images/s"
        if seconds
        else f"network: {total:,} cycles"
    )
    by_kind: Counter[str] = Counter()
    for r, sim in runs:
        by_kind[r.layer.kind] += sim.cycles
    stdout.print(
        "by kind: "
        + ", ".join(
            f"{kind} {100 * cycles / total:.1f} %" for kind, cycles in by_kind.most_common()
        )
        if total
        else "by kind: -",
        highlight=False,
    )


def print_choice(choice: BatchChoice, result: TuneResult) -> None:
    """The ``batch auto`` line."""
    budget = choice.latency_budget_s
    candidates = ", ".join(
        f"{p.batch}: {ms(p.latency_s)} ms {p.images_per_s:,.0f}/s"
        + ("" if p.latency_s <= budget else " over budget")
        for p in choice.sweep.points
    )
    t = result.totals
    stdout.print(
        f"batch auto: chose batch {choice.batch} (latency {ms(t.latency_s)} ms <= "
        f"budget {ms(budget)} ms, {t.images_per_s:,.1f} images/s); candidates: "
        f"{candidates}",
        highlight=False,
    )


def print_sweep(result: SweepResult) -> None:
    """The sweep table, one line per fc layer on where it turns, and the best batch."""
    turning = result.turning_batches()
    table = Table(
        title=f"{result.network}: batch sweep, {result.precision}, objective "
        f"{result.objective}, machine {result.machine.name}"
        + (", refined" if result.refine else ""),
        title_justify="left",
    )
    for col in ("batch", "latency (ms)", "images/s", "Tflop/s", "% peak"):
        table.add_column(col, justify="right")
    for name in result.fc_layers:
        table.add_column(name, justify="left")
    if result.verify:
        table.add_column("verified")
    for p in result.points:
        cells = []
        for f in p.fc:
            text = "mem" if f.bound == "memory" else "compute"
            cells.append(f"[bold]→ {text}[/]" if turning[f.layer] == p.batch else text)
        row = [
            str(p.batch),
            ms(p.latency_s),
            f"{p.images_per_s:,.1f}",
            f"{p.tflops:.3f}",
            f"{100 * p.peak_fraction:.1f}",
            *cells,
        ]
        if result.verify:
            row.append("ok" if p.verified else "FAILED")
        table.add_row(*row)
    stdout.print(table)
    m, prec = result.machine, result.precision
    stdout.print(
        f"ridge point {result.ridge_flop_per_byte:.1f} flop per off-chip byte "
        f"({si(m.peak_flops(prec), 'flop/s')} {prec} peak × "
        f"{m.fpu_utilization:.0%} FPU utilisation / "
        f"{si(m.hbm_bytes_per_s, 'B/s')} HBM); fc layers below it are memory-bound",
        highlight=False,
    )
    last = result.batches[-1]
    for name in result.fc_layers:
        turn = turning[name]
        if turn is None:
            f = result.point(last).fc_bound(name)
            stdout.print(
                f"{name} stays memory-bound up to batch {last} "
                f"({f.flop_per_byte:.1f} flop/B at batch {last})",
                highlight=False,
            )
            continue
        f = result.point(turn).fc_bound(name)
        again = result.memory_again(name)
        stdout.print(
            f"{name} turns compute-bound at batch {turn} ({f.flop_per_byte:.1f} "
            f"flop/B)" + ("" if again is None else f"; memory-bound again at batch {again}"),
            highlight=False,
        )
    if not result.fc_layers:
        stdout.print("no fc layers", highlight=False)
    best = result.point(result.best())
    stdout.print(
        f"most images/s: batch {best.batch} ({best.images_per_s:,.1f} images/s, "
        f"{ms(best.latency_s)} ms per batch)",
        highlight=False,
    )


#: Short names of a layer's streams in the ``in L2`` column.
STREAM_NAMES = {"input": "in", "weights": "w", "residual": "res", "output": "out"}


def shows_memory(result: TuneResult) -> bool:
    """Whether the schedule table gets the ``in L2``, HBM and L2 columns and the plan line:
    a layer keeps a stream in L2 or the result has a network plan. Per-layer schedules and
    machines without an L2 print as they always did."""
    return result.plan is not None or any(r.placement.uses_l2 for r in result.layers)


def placement_text(r: LayerResult) -> str:
    """The streams the layer keeps in L2 (``in w out``; ``-`` for none), the others being in
    HBM: short enough that the table still fits a 200-column pipe. Only streams the layer
    has are named (a pool has no weights, only an add epilogue has a residual)."""
    kept = streams(r.layer.weight_words > 0, r.layer.epilogue.residual)
    in_l2 = [STREAM_NAMES[s] for s in kept if r.placement.level(s) == "l2"]
    return " ".join(in_l2) or "-"


def memory_cells(r: LayerResult) -> tuple[str, str, str]:
    """The ``in L2``, HBM and L2 cells of a layer: the model's bytes of its own streams
    (weights it prefetches for later layers are in the plan line, not here)."""
    return placement_text(r), size(r.predicted.offchip_bytes), size(r.predicted.l2_bytes)


def plan_summary(plan: NetworkPlan) -> str:
    """One line on the network plan: how it was found (solver status, the model's cycles
    against the solver's bound on them: the simulated total, in the table, may be lower),
    the HBM traffic it leaves, and how much of the L2 it uses for what."""
    return (
        f"plan ({plan.mode}): {plan.status} in {plan.solve_s:.1f}s, {plan.cycles:,} model cycles, "
        f"bound {plan.bound_cycles:,} (gap {plan.gap:.1%}), HBM {size(plan.hbm_bytes)}, "
        f"L2 peak {size(plan.l2_peak_bytes)} of {size(plan.l2_capacity)}, "
        f"{len(plan.in_l2)} of {len(plan.tensors)} tensors in L2, "
        f"{size(plan.prefetched_bytes)} of weights prefetched"
    )


#: The schedule table's columns of words (left-justified; the others are figures).
RESULT_TEXT_COLUMNS = (
    "layer",
    "algorithm",
    "chiplets",
    "in L2",
    "bound",
    "verified",
    "search",
    "fused",
)


def print_result(result: TuneResult) -> None:
    """The per-layer schedule table and the network totals."""
    mach, prec = result.machine, result.precision
    peak = mach.peak_macs_per_cycle(prec)
    table = Table(
        title=f"{result.network}: batch {result.batch}, {prec}, objective "
        f"{result.objective}, machine {mach.name}",
        title_justify="left",
    )
    package = mach.chiplets > 1  # a package adds the chiplet split of each layer
    memory = shows_memory(result)
    for col in (
        "layer",
        "algorithm",
        *(("chiplets",) if package else ()),
        "ΔO",
        "batch tile",
        "share",
        "tile h×w×c",
        "L1",
        *(("in L2", "HBM", "L2") if memory else ()),
        "cycles",
        "% peak",
        "bound",
        "verified",
        "search",
        *(("fused",) if result.lowering is not None else ()),
    ):
        table.add_column(
            col,
            justify="left" if col in RESULT_TEXT_COLUMNS else "right",
        )
    absorbed = absorbed_text(result.lowering)
    rows, hidden = shown(result.layers)
    for r in rows:
        a, m = r.predicted, r.mapping
        cycles = r.simulated.cycles if r.simulated is not None else a.cycles
        s = r.search
        status = (
            f"{s.status} {s.wall_s:.1f}s {s.candidates / 1e3:.0f}k"
            + (f" gap {s.gap:.1%}" if s.gap else "")
            + (f" +{r.trials} trials" if r.trials else "")
            if s.shared_with is None
            else f"= {s.shared_with}"
        )
        verified = "-" if r.verified is None else ("ok" if r.verified.ok else "FAILED")
        split = (
            (f"{m.chiplet_split} ×{a.chiplets}" if m.chiplet_split != "none" else "none",)
            if package
            else ()
        )
        table.add_row(
            r.layer.name,
            m.algorithm,
            *split,
            str(m.delta_o),
            str(m.batch_tile),
            str(m.share_group),
            tile_text(m),
            size(a.l1_bytes),
            *(memory_cells(r) if memory else ()),
            f"{cycles:,}",
            f"{100 * a.macs / (cycles * peak):.1f}",
            a.bound,
            verified,
            status,
            *((absorbed.get(r.layer.name, ""),) if result.lowering is not None else ()),
        )
    _elided(table, hidden, MAX_ROWS // 2)
    summary = graph_summary(result.lowering)
    if summary is not None:
        stdout.print(summary, highlight=False)
    if result.plan is not None:
        stdout.print(plan_summary(result.plan), highlight=False)
    if result.network_verified is not None:
        print_network_verification(result.network_verified)
    t = result.totals
    simulated = all(r.simulated is not None for r in result.layers)
    stdout.print(
        f"total ({'simulated' if simulated else 'predicted'}): {t.cycles:,} cycles = "
        f"{t.latency_s * 1e3:.3f} ms per batch of {result.batch}, {t.images_per_s:,.1f} "
        f"images/s, {t.tflops:.2f} Tflop/s ({100 * t.peak_fraction:.1f} % of peak), off-chip "
        f"{size(t.offchip_bytes)}"
    )
