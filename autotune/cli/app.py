"""The ``autotune`` command line: each command loads, makes one library call, prints.

Exit codes: 0 success; 2 bad input or infeasible request (one line on stderr naming the file,
layer and field, no traceback); 1 internal error.
"""

from __future__ import annotations

import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autotune import __version__
from autotune.io.errors import InputError
from autotune.io.limits import check_fits
from autotune.io.machine_yaml import preset_names, resolve_machine
from autotune.io.network_yaml import load_network
from autotune.ir.precision import word_bytes

app = typer.Typer(
    name="autotune",
    help="Map the conv and fc layers of a CNN onto the Manticore many-core processor.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _console(stderr: bool = False) -> Console:
    """A console; when piped (not a terminal) wide enough that tables do not wrap."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=200)


stdout = _console()
stderr = _console(stderr=True)

#: ``tune --batch auto`` tries the powers of two up to this batch unless --max-batch says.
AUTO_MAX_BATCH = 256


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one line to stderr and exit (2: bad input)."""
    stderr.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _si(value: float, unit: str) -> str:
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def _bytes(value: float) -> str:
    for factor, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if value >= factor:
            return f"{value / factor:.1f} {unit}"
    return f"{value:.0f} B"


def _version(value: bool) -> None:
    if value:
        stdout.print(f"autotune {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Map the conv and fc layers of a CNN onto the Manticore many-core processor."""


@app.command()
def check(
    network: Annotated[Path, typer.Argument(help="network.yaml or .onnx model to validate")],
    machine: Annotated[str | None, typer.Option(help="machine preset name or YAML file")] = None,
    precision: Annotated[
        str | None, typer.Option(help="fp64 | fp32 | fp16 (default: the file's)")
    ] = None,
) -> None:
    """Validate a network file and print each layer's shape, MACs and weight bytes."""
    try:
        net = load_network(network)
        mach = resolve_machine(machine)
        if precision is not None:
            word_bytes(precision)
        prec = precision or net.precision
        mach.check_precision(prec)
        check_fits(net, mach, prec)
    except (InputError, ValueError) as exc:
        fail(str(exc))
    wb = word_bytes(prec)
    table = Table(
        title=f"{net.name}: {len(net.layers)} layers, batch {net.batch}, {prec}",
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
    ):
        table.add_column(col, justify="left" if col in ("layer", "kind") else "right")
    for layer in net.layers:
        table.add_row(
            layer.name,
            layer.kind,
            f"{layer.h_in}×{layer.w_in}×{layer.c_in}",
            f"{layer.h_out}×{layer.w_out}×{layer.c_out}",
            f"{layer.kernel_h}×{layer.kernel_w}",
            f"{layer.stride_h}×{layer.stride_w}",
            f"{layer.pad_h}×{layer.pad_w}",
            str(layer.groups),
            _si(layer.macs, "MAC"),
            _bytes(layer.weight_words * wb),
        )
    stdout.print(table)
    if net.skipped:
        ops = Counter(entry.split(" ", 1)[0] for entry in net.skipped)
        stdout.print(
            f"skipped {len(net.skipped)} ONNX nodes that are not conv/fc layers: "
            + ", ".join(f"{op} ×{n}" for op, n in ops.items())
        )
    total_weights = sum(layer.weight_words for layer in net.layers) * wb
    stdout.print(
        f"total: {_si(net.macs, 'MAC')} for the batch of {net.batch}, "
        f"{_bytes(total_weights)} of weights; machine {mach.name} "
        f"({_si(mach.peak_flops(prec), 'flop/s')} peak {prec})"
    )


@app.command()
def machines() -> None:
    """List the bundled machine presets with their key figures."""
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
    for name in preset_names():
        m = resolve_machine(name)
        peaks = [
            (_si(m.peak_flops(p), "flop/s") if m.supports(p) else "-")
            for p in ("fp64", "fp32", "fp16")
        ]
        table.add_row(
            name,
            str(m.chiplets),
            str(m.total_clusters),
            str(m.total_clusters * m.cores_per_cluster),
            _bytes(m.l1_bytes),
            *peaks,
            _si(m.hbm_bytes_per_s, "B/s"),
        )
    stdout.print(table)
    for name in preset_names():
        stdout.print(f"{name}: {resolve_machine(name).description.get('summary', '')}")


def _tile_text(mapping) -> str:
    t = mapping.tile
    h = "all" if t.out_h is None else str(t.out_h)
    w = "all" if t.out_w is None else str(t.out_w)
    return f"{h}×{w}×{t.in_c}"


@app.command()
def tune(
    network: Annotated[Path, typer.Argument(help="network.yaml or .onnx file to tune")],
    machine: Annotated[str | None, typer.Option(help="machine preset name or YAML file")] = None,
    precision: Annotated[str | None, typer.Option(help="fp32 | fp64 (default: the file's)")] = None,
    batch: Annotated[
        str | None,
        typer.Option(
            metavar="N|auto",
            help="images per inference (default: the file's); 'auto' picks the "
            "batch with the most images/s within --latency-budget",
        ),
    ] = None,
    latency_budget: Annotated[
        str | None,
        typer.Option(
            metavar="MS", help="with --batch auto: the largest latency per batch, in milliseconds"
        ),
    ] = None,
    max_batch: Annotated[
        int | None,
        typer.Option(
            help="with --batch auto: try the powers of two from 1 to this batch "
            f"(default {AUTO_MAX_BATCH})"
        ),
    ] = None,
    objective: Annotated[str, typer.Option(help="latency | traffic | energy")] = "latency",
    search: Annotated[str, typer.Option(help="ilp (CP-SAT, proven optimal) | exhaustive")] = "ilp",
    trials: Annotated[
        int | None,
        typer.Option(min=1, help="refinement trials per distinct layer shape (default 24)"),
    ] = None,
    time_limit: Annotated[
        float | None,
        typer.Option(min=0.1, help="seconds per layer for the integer program and for refinement"),
    ] = None,
    storage: Annotated[
        str | None,
        typer.Option(
            help="Optuna storage: sqlite:///file.db, postgresql://..., or 'memory' "
            "(default: SQLite in the user cache, so runs resume and reuse results)"
        ),
    ] = None,
    workers: Annotated[
        int, typer.Option(min=1, help="refinement processes sharing each layer's study")
    ] = 1,
    no_refine: Annotated[
        bool, typer.Option("--no-refine", help="skip the Optuna refinement against the simulator")
    ] = False,
    no_verify: Annotated[
        bool, typer.Option("--no-verify", help="skip the numerical verification of the winners")
    ] = False,
    seed: Annotated[int, typer.Option(help="seed for CP-SAT, Optuna and verification data")] = 0,
    out: Annotated[Path | None, typer.Option(help="write the schedules as JSON here")] = None,
) -> None:
    """Choose, refine, simulate and verify every layer's mapping; print the schedule table.

    With --batch auto --latency-budget MS, first sweep the powers of two from 1 to
    --max-batch without refinement or verification (integer program + simulator), take the
    batch with the most images/s whose simulated latency is within the budget, then tune
    that batch as usual. Refinement never raises a layer's simulated cycles above the
    integer program's winner, so the budget still holds (checked; exit 1 if it does not).
    """
    from autotune.api import tune as run_tune
    from autotune.search.solve import InfeasibleError

    n_batch, auto = _tune_batch(batch)
    if latency_budget is not None and not auto:
        fail("option '--latency-budget': only with --batch auto")
    if max_batch is not None and not auto:
        fail("option '--max-batch': only with --batch auto")
    if auto and latency_budget is None:
        fail("option '--batch': 'auto' needs --latency-budget MS")
    budget_ms = None if latency_budget is None else _positive_ms(latency_budget)
    if max_batch is not None and max_batch < 1:
        fail(f"option '--max-batch': must be a positive integer, got {max_batch}")
    _check_common(objective, search, precision)
    if out is not None and not out.parent.exists():
        fail(f"option '--out': folder {str(out.parent)!r} does not exist")
    net, mach = _load(network, machine, precision)
    choice = None
    if auto:
        choice = _choose_batch(
            network,
            net,
            mach,
            budget_ms / 1e3,
            max_batch or AUTO_MAX_BATCH,
            precision,
            objective,
            seed,
            search,
            time_limit,
        )
        n_batch = choice.batch
    stages = ["solve"] + ([] if no_refine else ["refine"]) + ([] if no_verify else ["verify"])
    if choice is not None and no_refine and no_verify:
        result = choice.sweep.results[choice.batch]  # exactly this run, already done
    else:
        with _progress_bar(f"tuning {net.name}", _shapes(net) * len(stages)) as progress:
            try:
                result = run_tune(
                    net,
                    mach,
                    precision=precision,
                    objective=objective,
                    refine=not no_refine,
                    verify=not no_verify,
                    trials=trials,
                    storage=storage,
                    seed=seed,
                    progress=progress,
                    batch=n_batch,
                    search=search,
                    time_limit=time_limit or 60.0,
                    timeout=time_limit,
                    workers=workers,
                )
            except InfeasibleError as exc:
                fail(f"{network}: {exc}")
            except InputError as exc:
                fail(str(exc))
    print_result(result)
    if choice is not None:
        _print_choice(choice, result)
    if out is not None:
        result.save(out)
        stdout.print(f"wrote {out}")
    failed = [r.layer.name for r in result.layers if r.verified is not None and not r.verified.ok]
    if failed:
        fail(f"verification failed for {len(failed)} layer(s): {', '.join(failed)}", code=1)


def _tune_batch(text: str | None) -> tuple[int | None, bool]:
    """``--batch`` of ``tune``: (batch or None, auto?)."""
    if text is None:
        return None, False
    if text.strip().lower() == "auto":
        return None, True
    value = text.strip()
    if not value.isdigit() or int(value) < 1:
        fail(f"option '--batch': expected a positive integer or 'auto', got {text!r}")
    return int(value), False


def _positive_ms(text: str) -> float:
    """``--latency-budget``: a positive, finite number of milliseconds."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        fail(f"option '--latency-budget': expected a positive number of milliseconds, got {text!r}")
    return value


def _check_common(objective: str, search: str, precision: str | None) -> None:
    from autotune.search.solve import SEARCH_MODES

    if objective not in ("latency", "traffic", "energy"):
        fail(
            f"option '--objective': unknown objective {objective!r} "
            f"(choose latency, traffic, energy)"
        )
    if search not in SEARCH_MODES:
        fail(f"option '--search': unknown search mode {search!r} (choose ilp, exhaustive)")
    if precision is not None and precision not in ("fp64", "fp32", "fp16"):
        fail(f"option '--precision': unknown precision {precision!r}")


def _load(network: Path, machine: str | None, precision: str | None):
    """The network and the machine, or exit 2 naming the file and field."""
    try:
        net = load_network(network)
        mach = resolve_machine(machine)
        mach.check_precision(precision or net.precision)
    except (InputError, ValueError) as exc:
        fail(str(exc))
    return net, mach


def _shapes(net) -> int:
    return len({layer.shape_key() for layer in net.layers})


@contextmanager
def _progress_bar(description: str, total: int):
    """A transient progress bar on stderr; yields the ``progress(stage, name)`` callback."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

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
            bar.update(task, advance=1, layer=f"{stage} {name}")

        yield progress


def _run_sweep(network: Path, net, mach, batches, **kwargs):
    """``autotune.batching.sweep`` under a progress bar; bad input or infeasible: exit 2."""
    from autotune.batching import sweep as run_sweep
    from autotune.search.solve import InfeasibleError

    stages = 1 + bool(kwargs.get("refine")) + bool(kwargs.get("verify"))
    with _progress_bar(f"sweeping {net.name}", len(batches) * _shapes(net) * stages) as progress:
        try:
            return run_sweep(net, mach, batches=batches, progress=progress, **kwargs)
        except InfeasibleError as exc:
            fail(f"{network}: {exc}")
        except InputError as exc:
            fail(str(exc))


def _choose_batch(
    network: Path,
    net,
    mach,
    budget_s: float,
    max_batch: int,
    precision: str | None,
    objective: str,
    seed: int,
    search: str,
    time_limit: float | None,
):
    """``tune --batch auto``: ``autotune.choose_batch`` under a progress bar; no batch
    within the budget, bad input or infeasible: exit 2."""
    from autotune.batching import BudgetError, choose_batch, powers_of_two
    from autotune.search.solve import InfeasibleError

    steps = len(powers_of_two(max_batch)) * _shapes(net)
    with _progress_bar(f"choosing a batch for {net.name}", steps) as progress:
        try:
            return choose_batch(
                net,
                mach,
                latency_budget_s=budget_s,
                max_batch=max_batch,
                precision=precision,
                objective=objective,
                seed=seed,
                search=search,
                time_limit=time_limit or 60.0,
                progress=progress,
            )
        except BudgetError as exc:
            fail(f"{network}: option '--latency-budget': {exc}")
        except InfeasibleError as exc:
            fail(f"{network}: {exc}")
        except InputError as exc:
            fail(str(exc))


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:,.3f}" if ms >= 1 else f"{ms:#.4g}"


def _print_choice(choice, result) -> None:
    """The ``batch auto`` line; exit 1 if the tuned latency broke the budget."""
    budget = choice.latency_budget_s
    candidates = ", ".join(
        f"{p.batch}: {_ms(p.latency_s)} ms {p.images_per_s:,.0f}/s"
        + ("" if p.latency_s <= budget else " over budget")
        for p in choice.sweep.points
    )
    t = result.totals
    stdout.print(
        f"batch auto: chose batch {choice.batch} (latency {_ms(t.latency_s)} ms <= "
        f"budget {_ms(budget)} ms, {t.images_per_s:,.1f} images/s); candidates: "
        f"{candidates}",
        highlight=False,
    )
    # Refinement keeps or lowers every layer's simulated cycles (the integer program's winner
    # is its incumbent), so the tuned batch is at most as slow as the swept one.
    if t.cycles > choice.point.cycles or t.latency_s > budget:
        fail(
            f"internal error: batch {choice.batch} tuned to {_ms(t.latency_s)} ms, more than "
            f"the {_ms(choice.point.latency_s)} ms of the sweep (budget {_ms(budget)} ms)",
            code=1,
        )


@app.command()
def sweep(
    network: Annotated[Path, typer.Argument(help="network.yaml or .onnx file to sweep")],
    batch: Annotated[
        str,
        typer.Option(
            metavar="LIST",
            help="batches to tune: a comma list (sorted, duplicates dropped) or a "
            "progression ending '...,LAST': 1,2,4,...,256 doubles, "
            "1,2,3,...,8 counts",
        ),
    ] = "1,2,4,...,256",
    machine: Annotated[str | None, typer.Option(help="machine preset name or YAML file")] = None,
    precision: Annotated[str | None, typer.Option(help="fp32 | fp64 (default: the file's)")] = None,
    objective: Annotated[str, typer.Option(help="latency | traffic | energy")] = "latency",
    search: Annotated[str, typer.Option(help="ilp (CP-SAT, proven optimal) | exhaustive")] = "ilp",
    refine: Annotated[
        bool,
        typer.Option(
            help="refine every batch against the simulator with Optuna (off: a sweep is a "
            "planning tool; the integer program and the simulator give the latency tune "
            "reports, and refinement only lowers it)"
        ),
    ] = False,
    verify: Annotated[bool, typer.Option(help="verify every batch's schedules in numpy")] = False,
    trials: Annotated[
        int | None, typer.Option(min=1, help="with --refine: trials per distinct layer shape")
    ] = None,
    time_limit: Annotated[
        float | None,
        typer.Option(min=0.1, help="seconds per layer for the integer program and for refinement"),
    ] = None,
    storage: Annotated[
        str | None, typer.Option(help="with --refine: Optuna storage, as for tune")
    ] = None,
    seed: Annotated[int, typer.Option(help="seed for CP-SAT, Optuna and verification data")] = 0,
    out: Annotated[Path | None, typer.Option(help="write the sweep as JSON here")] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            help="draw latency and images/s against the batch, fc turning batches marked "
            "(PNG, SVG or PDF; needs the plot extra)"
        ),
    ] = None,
) -> None:
    """Tune the network at several batch sizes; print latency, images/s, and which fc layers
    are memory- or compute-bound at each batch (the turning batch is marked →)."""
    from autotune.batching import parse_batches

    try:
        batches = parse_batches(batch)
    except ValueError as exc:
        fail(f"option '--batch': {exc}")
    _check_common(objective, search, precision)
    if out is not None and not out.parent.exists():
        fail(f"option '--out': folder {str(out.parent)!r} does not exist")
    if plot is not None:
        _check_plot(plot)
    net, mach = _load(network, machine, precision)
    result = _run_sweep(
        network,
        net,
        mach,
        batches,
        precision=precision,
        objective=objective,
        refine=refine,
        verify=verify,
        seed=seed,
        storage=storage,
        trials=trials,
        search=search,
        time_limit=time_limit or 60.0,
        timeout=time_limit,
    )
    print_sweep(result)
    if out is not None:
        result.save(out)
        stdout.print(f"wrote {out}")
    if plot is not None:
        from autotune.report.sweep_plot import draw_sweep

        draw_sweep(result, plot)
        stdout.print(f"wrote {plot}")
    failed = [p.batch for p in result.points if p.verified is False]
    if failed:
        fail(
            f"verification failed at batch {', '.join(map(str, failed))} "
            f"(run tune --batch B for the layers)",
            code=1,
        )


def _check_plot(path: Path) -> None:
    """Before any work: matplotlib importable, the folder there, the format known."""
    try:
        import matplotlib
    except ImportError:
        fail("option '--plot': needs matplotlib: pip install 'autotune[plot]'")
    matplotlib.use("Agg")
    from matplotlib.backend_bases import FigureCanvasBase

    if not path.parent.exists():
        fail(f"option '--plot': folder {str(path.parent)!r} does not exist")
    kinds = FigureCanvasBase.get_supported_filetypes()
    suffix = path.suffix.lower().lstrip(".")
    if suffix and suffix not in kinds:
        fail(
            f"option '--plot': unknown image format {path.suffix!r} of {str(path)!r} "
            f"(use .png, .svg or .pdf)"
        )


def print_sweep(result) -> None:
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
            _ms(p.latency_s),
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
        f"({_si(m.peak_flops(prec), 'flop/s')} {prec} peak × "
        f"{m.fpu_utilization:.0%} FPU utilisation / "
        f"{_si(m.hbm_bytes_per_s, 'B/s')} HBM); fc layers below it are memory-bound",
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
        f"{_ms(best.latency_s)} ms per batch)",
        highlight=False,
    )


def print_result(result) -> None:
    """The per-layer schedule table and the network totals."""
    mach, prec = result.machine, result.precision
    peak = mach.peak_macs_per_cycle(prec)
    table = Table(
        title=f"{result.network}: batch {result.batch}, {prec}, objective "
        f"{result.objective}, machine {mach.name}",
        title_justify="left",
    )
    package = mach.chiplets > 1  # a package adds the chiplet split of each layer
    for col in (
        "layer",
        "algorithm",
        *(("chiplets",) if package else ()),
        "ΔO",
        "batch tile",
        "share",
        "tile h×w×c",
        "L1",
        "cycles",
        "% peak",
        "bound",
        "verified",
        "search",
    ):
        table.add_column(
            col,
            justify="left"
            if col in ("layer", "algorithm", "chiplets", "bound", "verified", "search")
            else "right",
        )
    for r in result.layers:
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
            _tile_text(m),
            _bytes(a.l1_bytes),
            f"{cycles:,}",
            f"{100 * a.macs / (cycles * peak):.1f}",
            a.bound,
            verified,
            status,
        )
    stdout.print(table)
    t = result.totals
    simulated = all(r.simulated is not None for r in result.layers)
    stdout.print(
        f"total ({'simulated' if simulated else 'predicted'}): {t.cycles:,} cycles = "
        f"{t.latency_s * 1e3:.3f} ms per batch of {result.batch}, {t.images_per_s:,.1f} "
        f"images/s, {t.tflops:.2f} Tflop/s ({100 * t.peak_fraction:.1f} % of peak), off-chip "
        f"{_bytes(t.offchip_bytes)}"
    )


def _load_schedule(path: Path):
    from autotune.api import TuneResult

    try:
        return TuneResult.load(path)
    except (InputError, ValueError) as exc:
        fail(str(exc))


@app.command()
def show(schedules: Annotated[Path, typer.Argument(help="schedules.json written by tune")]) -> None:
    """Print the schedule table of a schedules file."""
    print_result(_load_schedule(schedules))


@app.command("verify")
def verify_command(
    schedules: Annotated[Path, typer.Argument(help="schedules.json written by tune")],
    seed: Annotated[int, typer.Option(help="seed of the random test data")] = 0,
) -> None:
    """Re-verify every layer of a schedules file in numpy; exit 1 on any failure."""
    from autotune.verify import verify as verify_layer

    result = _load_schedule(schedules)
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
    failures = 0
    for r in result.layers:
        v = verify_layer(
            r.layer, r.mapping, result.machine, result.precision, result.batch, seed=seed
        )
        failures += not v.ok
        table.add_row(
            r.layer.name,
            r.mapping.algorithm,
            "ok" if v.ok else "FAILED",
            f"{v.max_abs_error:.2e}",
            f"{v.max_rel_error:.2e}",
            f"{v.tolerance:.2e}",
            "; ".join(v.errors)[:120],
        )
    stdout.print(table)
    if failures:
        fail(f"{schedules}: {failures} of {len(result.layers)} layers failed verification", code=1)
    stdout.print(f"all {len(result.layers)} layers verified")


@app.command()
def simulate(
    schedules: Annotated[Path, typer.Argument(help="schedules.json written by tune")],
    layer: Annotated[str | None, typer.Option(help="simulate only this layer")] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            help="write the per-cluster timeline as Chrome trace JSON (open in Perfetto); "
            "needs --layer"
        ),
    ] = None,
) -> None:
    """Simulate the layers of a schedules file on its machine; print cycles and breakdown."""
    from autotune.sim import simulate as simulate_layer

    result = _load_schedule(schedules)
    chosen = [r for r in result.layers if layer is None or r.layer.name == layer]
    if not chosen:
        fail(f"{schedules}: no layer named {layer!r}")
    if trace is not None and len(chosen) != 1:
        fail("option '--trace': name one layer with --layer")
    table = Table(
        title=f"{result.network}: simulated on {result.machine.name}", title_justify="left"
    )
    package = result.machine.chiplets > 1  # a package adds the die-to-die stage-in
    parts = ("compute", "dma_wait", "contention", "sync", "idle", *(("d2d",) if package else ()))
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
        "FPU util",
    ):
        table.add_column(col, justify="left" if col in ("layer", "algorithm") else "right")
    total = 0
    for r in chosen:
        sim = simulate_layer(
            r.layer,
            r.mapping,
            result.machine,
            result.precision,
            result.batch,
            trace=trace is not None,
        )
        total += sim.cycles
        b = sim.breakdown.as_dict()
        table.add_row(
            r.layer.name,
            r.mapping.algorithm,
            f"{sim.cycles:,}",
            f"{r.predicted.cycles:,}",
            f"{sim.cycles / r.predicted.cycles:.2f}",
            *(f"{100 * b.get(k, 0.0) / sim.cycles:.0f}%" for k in parts),
            f"{sim.hbm_bytes_per_cycle:.1f}",
            f"{100 * sim.fpu_utilization:.1f}%",
        )
        if trace is not None:
            sim.write_trace(trace)
    stdout.print(table)
    stdout.print(f"total: {total:,} cycles")
    if trace is not None:
        stdout.print(f"wrote {trace} (open it in https://ui.perfetto.dev)")


@app.command()
def roofline(
    schedules: Annotated[Path, typer.Argument(help="schedules.json written by tune")],
    output: Annotated[Path, typer.Option("-o", "--output", help="PNG (or SVG/PDF) to write")],
) -> None:
    """Draw the machine's roofline with every layer as a labelled point (needs `plot`)."""
    try:
        import matplotlib
    except ImportError:
        fail("the roofline needs matplotlib: pip install 'autotune[plot]'")
    matplotlib.use("Agg")
    from autotune.report.roofline import draw_roofline

    result = _load_schedule(schedules)
    if not output.parent.exists():
        fail(f"option '--output': folder {str(output.parent)!r} does not exist")
    draw_roofline(result, output)
    stdout.print(f"wrote {output}")


@app.command()
def schema() -> None:
    """Print the JSON Schema of schedules files."""
    import json

    from autotune.io.schedule_json import json_schema

    typer.echo(json.dumps(json_schema(), indent=2, sort_keys=True))


def main() -> None:
    """Console entry point: run the app, mapping unexpected errors to exit code 1."""
    try:
        app()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        stderr.print("interrupted")
        sys.exit(130)
    except Exception as exc:  # an internal error: one line, exit 1 (details with AUTOTUNE_DEBUG)
        import os

        if os.environ.get("AUTOTUNE_DEBUG"):
            raise
        stderr.print(
            f"[bold red]internal error:[/] {type(exc).__name__}: {exc} "
            f"(set AUTOTUNE_DEBUG=1 for the traceback)",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(1)
