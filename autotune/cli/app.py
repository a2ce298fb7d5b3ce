"""The ``autotune`` command line: each command loads, makes one library call, prints.

Exit codes: 0 success; 2 bad input or infeasible request (one line on stderr naming the file,
layer and field, no traceback); 1 internal error.
"""

from __future__ import annotations

import sys
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
    network: Annotated[Path, typer.Argument(help="network.yaml to validate")],
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


@app.command("simulate")
def simulate_cmd(
    network: Annotated[Path, typer.Argument(help="network.yaml to simulate")],
    layer: Annotated[str | None, typer.Option(help="simulate only the layer of this name")] = None,
    machine: Annotated[str | None, typer.Option(help="machine preset name or YAML file")] = None,
    trace: Annotated[Path | None, typer.Option(
        help="write the timeline as Chrome trace JSON (open in Perfetto); needs --layer")] = None,
) -> None:
    """Simulate each layer under the report's recipe; print cycles and where they went."""
    from autotune import analyze, simulate
    from autotune.search.space import hand_choice
    from autotune.tiling import MappingError

    try:
        net = load_network(network)
        mach = resolve_machine(machine)
        mach.check_precision(net.precision)
        layers = [net.layer(layer)] if layer is not None else list(net.layers)
    except (InputError, ValueError) as exc:
        fail(str(exc))
    except KeyError as exc:
        fail(str(exc.args[0]))
    if trace is not None and layer is None:
        fail("--trace needs --layer: a timeline is one layer's")
    table = Table(title=f"{net.name} on {mach.name}: the report's recipe per layer, batch "
                        f"{net.batch}, {net.precision}", title_justify="left")
    for col in ("layer", "mapping", "tasks", "cycles", "model", "sim/model", "compute",
                "dma wait", "contention", "sync", "idle", "HBM B/cycle", "FPU util"):
        table.add_column(col, justify="left" if col in ("layer", "mapping") else "right")
    total = model_total = 0
    for lay in layers:
        try:
            mapping = hand_choice(lay, mach, net.precision, net.batch)
        except MappingError as exc:
            fail(str(exc))
        r = simulate(lay, mapping, mach, net.precision, net.batch, trace=trace is not None)
        a = analyze(lay, mapping, mach, net.precision, net.batch)
        total, model_total = total + r.cycles, model_total + a.cycles
        share = {k: f"{v / r.cycles:.0%}" for k, v in r.breakdown.as_dict().items()}
        table.add_row(lay.name, f"{mapping.algorithm} ΔO={mapping.delta_o}", str(r.tasks),
                      f"{r.cycles:,}", f"{a.cycles:,}", f"{r.cycles / a.cycles:.2f}",
                      share["compute"], share["dma_wait"], share["contention"], share["sync"],
                      share["idle"], f"{r.hbm_bytes_per_cycle:.1f}", f"{r.fpu_utilization:.0%}")
        if trace is not None:
            r.write_trace(trace)
    stdout.print(table)
    stdout.print(f"total: {total:,} cycles simulated ({total / mach.clock_hz * 1e3:.3f} ms), "
                 f"{model_total:,} modelled")
    if trace is not None:
        stdout.print(f"timeline written to {trace}")


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
