"""The ``autotune`` command line: each command loads, makes one library call, prints.

Exit codes: 0 success; 2 bad input or infeasible request (one line on stderr naming the file,
layer and field, no traceback); 1 internal error.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from autotune import __version__
from autotune.io.errors import InputError
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


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one line to stderr and exit (2: bad input)."""
    stderr.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
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
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Map the conv and fc layers of a CNN onto the Manticore many-core processor."""


@app.command()
def check(
    network: Annotated[Path, typer.Argument(help="network.yaml or .onnx model to validate")],
    machine: Annotated[str | None, typer.Option(help="machine preset name or YAML file")] = None,
) -> None:
    """Validate a network file and print each layer's shape, MACs and weight bytes."""
    try:
        net = load_network(network)
        mach = resolve_machine(machine)
        mach.check_precision(net.precision)
    except (InputError, ValueError) as exc:
        fail(str(exc))
    wb = word_bytes(net.precision)
    table = Table(title=f"{net.name}: {len(net.layers)} layers, batch {net.batch}, "
                        f"{net.precision}", title_justify="left")
    for col in ("layer", "kind", "in (h×w×c)", "out (h×w×c)", "kernel", "stride", "pad",
                "groups", "MACs/image", "weights"):
        table.add_column(col, justify="left" if col in ("layer", "kind") else "right")
    for layer in net.layers:
        table.add_row(
            layer.name, layer.kind, f"{layer.h_in}×{layer.w_in}×{layer.c_in}",
            f"{layer.h_out}×{layer.w_out}×{layer.c_out}",
            f"{layer.kernel_h}×{layer.kernel_w}", f"{layer.stride_h}×{layer.stride_w}",
            f"{layer.pad_h}×{layer.pad_w}", str(layer.groups), _si(layer.macs, "MAC"),
            _bytes(layer.weight_words * wb),
        )
    stdout.print(table)
    if net.skipped:
        ops = Counter(entry.split(" ", 1)[0] for entry in net.skipped)
        stdout.print(f"skipped {len(net.skipped)} ONNX nodes that are not conv/fc layers: "
                     + ", ".join(f"{op} ×{n}" for op, n in ops.items()))
    total_weights = sum(layer.weight_words for layer in net.layers) * wb
    stdout.print(f"total: {_si(net.macs, 'MAC')} for the batch of {net.batch}, "
                 f"{_bytes(total_weights)} of weights; machine {mach.name} "
                 f"({_si(mach.peak_flops(net.precision), 'flop/s')} peak {net.precision})")


@app.command()
def machines() -> None:
    """List the bundled machine presets with their key figures."""
    table = Table(title="machine presets", title_justify="left")
    for col in ("name", "clusters", "cores", "L1/cluster", "peak fp64", "peak fp32",
                "HBM bandwidth"):
        table.add_column(col, justify="left" if col == "name" else "right")
    for name in preset_names():
        m = resolve_machine(name)
        peaks = [(_si(m.peak_flops(p), "flop/s") if m.supports(p) else "-")
                 for p in ("fp64", "fp32")]
        table.add_row(name, str(m.clusters), str(m.clusters * m.cores_per_cluster),
                      _bytes(m.l1_bytes), *peaks,
                      _si(m.hbm_bytes_per_s, "B/s"))
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
    network: Annotated[Path, typer.Argument(help="network.yaml or .onnx model to tune")],
    machine: Annotated[str | None, typer.Option(help="machine preset name or YAML file")] = None,
    precision: Annotated[str | None, typer.Option(help="fp32 | fp64 (default: the file's)")]
    = None,
    batch: Annotated[int | None, typer.Option(min=1, help="images per inference "
                                                         "(default: the file's)")] = None,
    objective: Annotated[str, typer.Option(help="latency | traffic | energy")] = "latency",
    search: Annotated[str, typer.Option(help="ilp (CP-SAT) | exhaustive")] = "ilp",
    time_limit: Annotated[float, typer.Option(help="CP-SAT seconds per layer")] = 60.0,
    workers: Annotated[int, typer.Option(min=1, help="CP-SAT workers per layer "
                                                     "(1 is deterministic)")] = 1,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
) -> None:
    """Choose the best mapping of every layer and print the schedule table."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from autotune.search.solve import SEARCH_MODES, InfeasibleError, solve_network

    if objective not in ("latency", "traffic", "energy"):
        fail(f"option '--objective': unknown objective {objective!r} "
             f"(choose latency, traffic, energy)")
    if search not in SEARCH_MODES:
        fail(f"option '--search': unknown search mode {search!r} (choose ilp, exhaustive)")
    if precision is not None and precision not in ("fp64", "fp32", "fp16"):
        fail(f"option '--precision': unknown precision {precision!r}")
    try:
        net = load_network(network)
        mach = resolve_machine(machine)
        prec = precision or net.precision
        mach.check_precision(prec)
    except (InputError, ValueError) as exc:
        fail(str(exc))
    n_batch = batch or net.batch
    shapes = len({layer.shape_key() for layer in net.layers})
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                  MofNCompleteColumn(), TextColumn("{task.fields[layer]}"),
                  console=stderr, transient=True) as bar:
        task = bar.add_task(f"{search} {net.name}", total=shapes, layer="")
        try:
            sols = solve_network(net, mach, precision=prec, batch=n_batch,
                                 objective=objective, search=search, time_limit=time_limit,
                                 workers=workers, seed=seed,
                                 progress=lambda name: bar.update(task, advance=1, layer=name))
        except InfeasibleError as exc:
            fail(f"{network}: {exc}")
    peak = mach.peak_macs_per_cycle(prec)
    table = Table(title=f"{net.name}: batch {n_batch}, {prec}, objective {objective}, "
                        f"machine {mach.name}", title_justify="left")
    for col in ("layer", "algorithm", "ΔO", "batch tile", "share", "tile h×w×c", "L1",
                "cycles", "% peak", "bound", "search"):
        table.add_column(col, justify="left" if col in ("layer", "algorithm", "bound",
                                                        "search") else "right")
    for sol in sols:
        a, m = sol.analysis, sol.mapping
        r = sol.search
        status = (f"{r.status} {r.wall_s:.1f}s {r.candidates / 1e3:.0f}k"
                  + (f" gap {r.gap:.1%}" if r.gap else "")
                  if r.shared_with is None else f"= {r.shared_with}")
        table.add_row(sol.layer.name, m.algorithm, str(m.delta_o), str(m.batch_tile),
                      str(m.share_group), _tile_text(m), _bytes(a.l1_bytes), f"{a.cycles:,}",
                      f"{100 * a.macs / (a.cycles * peak):.1f}", a.bound, status)
    stdout.print(table)
    cycles = sum(s.analysis.cycles for s in sols)
    seconds = cycles / mach.clock_hz
    macs = sum(s.analysis.macs for s in sols)
    offchip = sum(s.analysis.offchip_bytes for s in sols)
    stdout.print(
        f"total: {cycles:,} cycles = {seconds * 1e3:.3f} ms per batch, "
        f"{n_batch / seconds:,.1f} images/s, {2 * macs / seconds / 1e12:.2f} Tflop/s "
        f"({100 * macs / (cycles * peak):.1f} % of peak), off-chip {_bytes(offchip)}; "
        f"search {sum(s.search.wall_s for s in sols if s.search.shared_with is None):.1f} s "
        f"over {shapes} distinct shapes")


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
        stderr.print(f"[bold red]internal error:[/] {type(exc).__name__}: {exc} "
                     f"(set AUTOTUNE_DEBUG=1 for the traceback)", highlight=False, soft_wrap=True)
        sys.exit(1)
