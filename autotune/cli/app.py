"""The ``autotune`` command line: each command parses, makes one library call, renders.

Exit codes: 0 success; 2 bad input or infeasible request (one line on stderr naming the file,
layer and field, no traceback); 1 a failed check (verification) or an internal error;
130 interrupted. The tables and progress bars are ``autotune.cli.render``'s.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from autotune import interrupts
from autotune.api import (
    NetworkError,
    WeightsError,
    audit_schedule,
    load_inputs,
    load_schedule,
    run_network,
    simulate_schedule,
    tune_network,
    verification_findings,
    verify_network_schedule,
    verify_schedule,
)
from autotune.batching import BudgetError, parse_batches, powers_of_two, tune_within_budget
from autotune.batching import sweep as sweep_batches
from autotune.cli.render import (
    error,
    print_choice,
    print_machines,
    print_network,
    print_network_verification,
    print_result,
    print_simulation,
    print_sweep,
    print_verification,
    progress_bar,
    stderr,
    stdout,
    warning,
)
from autotune.graphs.timeline import write_network_trace
from autotune.io.arrays_npy import check_output_path, load_arrays, load_weights, save_arrays
from autotune.io.errors import InputError
from autotune.io.machine_yaml import preset_names
from autotune.io.schedule_json import json_schema
from autotune.ir.network import Network
from autotune.ir.options import OptionsError, TuneOptions
from autotune.report.roofline import draw_roofline
from autotune.report.sweep_plot import draw_sweep
from autotune.result import TuneResult
from autotune.search.solve import InfeasibleError
from autotune.version import __version__

app = typer.Typer(
    name="autotune",
    help="Map the conv and fc layers of a CNN onto the Manticore many-core processor.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

#: ``tune --batch auto`` tries the powers of two up to this batch unless --max-batch says.
AUTO_MAX_BATCH = 256
#: Options whose command-line flag is not ``--`` + the field name.
FLAGS = {
    "refine_workers": "--workers",
    "refine_timeout": "--time-limit",
    "refine": "--no-refine",
    "fuse_depthwise": "--no-fuse",
}


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one line to stderr and exit (2: bad input)."""
    error(message)
    raise typer.Exit(code)


@contextmanager
def refusing(source: Path | None = None) -> Iterator[None]:
    """Bad input met by the library becomes one line and exit 2: an unreadable or invalid
    file, an option no stage accepts, a layer no mapping fits (named with ``source``).
    Ctrl-C is one line and exit 130 (the library has left its storage consistent)."""
    try:
        yield
        interrupts.check()  # a Ctrl-C swallowed where it landed still ends the run
    except KeyboardInterrupt:
        stderr.print("interrupted")
        raise typer.Exit(130) from None
    except OptionsError as exc:
        fail(
            f"option {FLAGS.get(exc.option, '--' + exc.option.replace('_', '-'))!r}: {exc.problem}"
        )
    except InfeasibleError as exc:
        fail(f"{source}: {exc}" if source is not None else str(exc))
    except (InputError, ValueError) as exc:
        fail(str(exc))


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
    with refusing():
        net, mach, prec = load_inputs(network, machine, precision)
    print_network(net, mach, prec)


@app.command()
def machines() -> None:
    """List the bundled machine presets with their key figures."""
    print_machines(preset_names())


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
    plan: Annotated[
        str,
        typer.Option(
            help="network: one CP-SAT model keeps tensors in the shared L2 where it pays "
            "(graphs on a machine with an L2) | per-layer: every tensor in HBM"
        ),
    ] = "network",
    plan_time_limit: Annotated[
        float, typer.Option(min=0.1, help="seconds for the network CP-SAT (best plan kept)")
    ] = 60.0,
    no_fuse: Annotated[
        bool,
        typer.Option(
            "--no-fuse",
            help="the network plan never fuses a depthwise conv with a 1x1 conv next to it",
        ),
    ] = False,
    out: Annotated[Path | None, typer.Option(help="write the schedules as JSON here")] = None,
) -> None:
    """Choose, refine, simulate and verify every layer's mapping; print the schedule table.

    With --batch auto --latency-budget MS, first sweep the powers of two from 1 to
    --max-batch without refinement or verification (integer program + simulator), take the
    batch with the most images/s whose simulated latency is within the budget, then tune
    that batch as usual. Refinement never raises a layer's simulated cycles above the
    integer program's winner, so the budget still holds (checked; exit 1 if it does not).
    """
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
    with refusing(network):
        options = TuneOptions(
            precision=precision,
            batch=n_batch,
            objective=objective,
            search=search,
            time_limit=time_limit or 60.0,
            refine=not no_refine,
            trials=trials or TuneOptions.trials,
            refine_timeout=time_limit,
            storage=storage,
            refine_workers=workers,
            verify=not no_verify,
            seed=seed,
            plan=plan,
            plan_time_limit=plan_time_limit,
            fuse_depthwise=not no_fuse,
        )
    _check_out(out, "--out")
    with refusing(network):
        net, mach, _ = load_inputs(network, machine, precision)
    stages = 1 + options.refine + options.verify
    if budget_ms is not None:
        steps = (len(powers_of_two(max_batch or AUTO_MAX_BATCH)) + stages) * _shapes(net)
        with progress_bar(f"tuning {net.name}", steps) as progress, refusing(network):
            try:
                choice, result = tune_within_budget(
                    net,
                    mach,
                    options,
                    latency_budget_s=budget_ms / 1e3,
                    max_batch=max_batch or AUTO_MAX_BATCH,
                    progress=progress,
                )
            except BudgetError as exc:
                fail(f"{network}: option '--latency-budget': {exc}")
        print_result(result)
        print_choice(choice, result)
    else:
        with progress_bar(f"tuning {net.name}", _shapes(net) * stages) as progress:
            with refusing(network):
                result = tune_network(net, mach, options, progress)
        print_result(result)
    _finish(result, out)


def _finish(result: TuneResult, out: Path | None) -> None:
    """Write the schedules if asked; exit 1 if any layer failed verification."""
    if out is not None:
        result.save(out)
        stdout.print(f"wrote {out}")
    failed = result.failed_layers
    if failed:
        fail(f"verification failed for {len(failed)} layer(s): {', '.join(failed)}", code=1)


def _check_out(path: Path | None, option: str) -> None:
    """Before any work: an output file can be written where it is asked for (its folder
    exists and takes a new file, its name is not too long for the file system), so that a
    long run does not end in an error; nothing is left behind by the check."""
    if path is None:
        return
    folder = path.parent
    if not folder.is_dir():
        fail(f"option {option!r}: folder {str(folder)!r} does not exist")
    try:
        longest = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        longest = 255
    # the file is written as a temporary sibling first (".NAME.XXXXXXXX.tmp", then renamed);
    # checked before anything looks the name up (a stat of a too-long name raises)
    if len(os.fsencode(path.name)) + 14 > longest:
        fail(f"option {option!r}: file name {path.name[:40]!r}... is too long for {str(folder)!r}")
    if path.is_dir():
        fail(f"option {option!r}: {str(path)!r} is a folder, not a file name")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        fail(f"option {option!r}: cannot write in {str(folder)!r}: {exc.strerror}")


def _tune_batch(text: str | None) -> tuple[int | None, bool]:
    """``--batch`` of ``tune``: (batch or None, auto?)."""
    if text is None:
        return None, False
    if text.strip().lower() == "auto":
        return None, True
    value = text.strip()
    if not value.isdigit() or len(value) > 9 or int(value) < 1:
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


def _shapes(net: Network) -> int:
    return len({layer.shape_key() for layer in net.layers})


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
    try:
        batches = parse_batches(batch)
    except ValueError as exc:
        fail(f"option '--batch': {exc}")
    with refusing(network):
        options = TuneOptions(
            precision=precision,
            objective=objective,
            search=search,
            time_limit=time_limit or 60.0,
            refine=refine,
            trials=trials or TuneOptions.trials,
            refine_timeout=time_limit,
            storage=storage,
            verify=verify,
            seed=seed,
        )
    _check_out(out, "--out")
    if plot is not None:
        _check_plot(plot)
    with refusing(network):
        net, mach, _ = load_inputs(network, machine, precision)
    stages = 1 + refine + verify
    with progress_bar(f"sweeping {net.name}", len(batches) * _shapes(net) * stages) as progress:
        with refusing(network):
            result = sweep_batches(net, mach, batches=batches, options=options, progress=progress)
    print_sweep(result)
    if out is not None:
        result.save(out)
        stdout.print(f"wrote {out}")
    if plot is not None:
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

    _check_out(path, "--plot")
    kinds = FigureCanvasBase.get_supported_filetypes()
    suffix = path.suffix.lower().lstrip(".")
    if suffix and suffix not in kinds:
        fail(
            f"option '--plot': unknown image format {path.suffix!r} of {str(path)!r} "
            f"(use .png, .svg or .pdf)"
        )


def _load_schedule(path: Path) -> TuneResult:
    with refusing():
        return load_schedule(path)


@app.command()
def show(schedules: Annotated[Path, typer.Argument(help="schedules.json written by tune")]) -> None:
    """Print the schedule table of a schedules file."""
    print_result(_load_schedule(schedules))


@app.command("verify")
def verify_command(
    schedules: Annotated[Path, typer.Argument(help="schedules.json written by tune")],
    network: Annotated[
        Path | None,
        typer.Option(help="the network.yaml or .onnx the schedules must be for (layers, shapes)"),
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="seed of the random test data")] = 0,
) -> None:
    """Check every claim of a schedules file against the model and the simulator, then
    execute every layer in numpy, then the whole network end to end against an independent
    reference; exit 1 if any claim, layer or tensor fails."""
    with refusing():
        net = None if network is None else load_inputs(network)[0]
        audit = audit_schedule(schedules, net)
    if not audit.ok:
        for line in audit.lines():
            error(line)
        fail(f"{schedules}: rejected: {len(audit.lines())} failing claim(s)", code=1)
    assert audit.result is not None
    checks = verify_schedule(audit.result, seed)
    print_verification(audit.result, checks, seed)
    failures = sum(not v.ok for v in checks)
    if failures:
        fail(f"{schedules}: {failures} of {len(checks)} layers failed verification", code=1)
    claims = verification_findings(audit, checks, seed)
    if claims:
        for finding in claims:
            error(finding.line(str(schedules)))
        fail(f"{schedules}: rejected: {len(claims)} verification figure(s) of the file", code=1)
    with refusing():
        whole = verify_network_schedule(audit.result, net, seed)
    if whole is not None:
        print_network_verification(whole)
        if not whole.ok:
            fail(f"{schedules}: the network failed end-to-end verification", code=1)
    stdout.print(
        f"all {len(checks)} layers verified"
        + (", and the whole network end to end" if whole is not None else "")
        + " (every claim of the file re-derived)"
    )


@app.command("run")
def run_command(
    network: Annotated[Path, typer.Argument(help="the network.yaml or .onnx model to run")],
    schedules: Annotated[Path, typer.Option(help="schedules.json written by tune for it")],
    input: Annotated[
        Path,
        typer.Option(
            "--input",
            help="the network input, NCHW (batch, channels, height, width): .npy, or .npz "
            "with one array per input name",
        ),
    ],
    output: Annotated[
        Path, typer.Option(help=".npy for one output, .npz (by tensor name) for several")
    ],
    weights: Annotated[
        Path | None,
        typer.Option(
            help="parameters as .npz keyed '<operator>/<role>' (default: the ONNX model's "
            "own, else seeded random ones)"
        ),
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="seed of the random weights")] = 0,
) -> None:
    """Execute the network through its tiled schedules and write its outputs: golden
    results for the code a compiler generates from the schedules."""
    _check_out(output, "--output")
    with refusing():
        net = load_inputs(network)[0]
        if net.graph is not None:
            check_output_path(output, net.graph.outputs)
        audit = audit_schedule(schedules, net)
        if not audit.ok:
            # bad input, as any other file that does not fit: one line (verify lists all)
            lines = audit.lines()
            more = f" (+{len(lines) - 1} more: see verify)" if len(lines) > 1 else ""
            fail(f"{lines[0]}: not a valid schedule of {str(network)!r}{more}")
        assert audit.result is not None
        names = [] if net.graph is None else list(net.graph.input_names)
        arrays = load_arrays(input, names)
        given = None if weights is None else load_weights(weights)
        try:
            outputs = run_network(
                audit.result,
                net,
                arrays,
                given,
                seed,
                lambda name: stderr.print(f"run     {name}", highlight=False),
            )
        except (NetworkError, WeightsError) as exc:
            fail(f"{network}: {exc}")
        # by the names the file gives them (an ONNX model's output tensors)
        outputs = {net.output_names.get(name, name): value for name, value in outputs.items()}
        save_arrays(output, outputs)
    if given is None and net.weights is None:
        warning(f"no weights given: the outputs are for seeded random weights (seed {seed})")
    shapes = ", ".join(f"{name} {list(value.shape)}" for name, value in outputs.items())
    stdout.print(f"wrote {output} ({shapes})")


@app.command()
def simulate(
    schedules: Annotated[Path, typer.Argument(help="schedules.json written by tune")],
    layer: Annotated[str | None, typer.Option(help="simulate only this layer")] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            help="write the per-cluster timeline as Chrome trace JSON (open in Perfetto): "
            "the layer's with --layer, else the whole network's, layer after layer"
        ),
    ] = None,
) -> None:
    """Simulate the layers of a schedules file on its machine, in order; print cycles, the
    breakdown per layer, the network's latency and images/s, and the time per layer kind."""
    result = _load_schedule(schedules)
    _check_out(trace, "--trace")
    try:
        runs = simulate_schedule(result, layer, trace=trace is not None)
    except KeyError:
        fail(f"{schedules}: no layer named {layer!r}")
    print_simulation(result, runs)
    if trace is not None:
        if layer is not None:
            runs[0][1].write_trace(trace)
        else:
            write_network_trace(trace, [(r.layer.name, r.layer.kind, sim) for r, sim in runs])
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
    result = _load_schedule(schedules)
    _check_out(output, "--output")
    draw_roofline(result, output)
    stdout.print(f"wrote {output}")


@app.command()
def schema() -> None:
    """Print the JSON Schema of schedules files."""
    typer.echo(json.dumps(json_schema(), indent=2, sort_keys=True))


def _show_warning(message: Warning | str, *args: object, **kwargs: object) -> None:
    warning(str(message))


def _is_click_error(exc: BaseException, name: str) -> bool:
    """Click's exception ``name`` (by class name: typer >= 0.2x carries its own copy of click,
    older ones use click's, and neither exports the class)."""
    return any(cls.__name__ == name for cls in type(exc).__mro__)


def _usage_error(exc: Exception) -> NoReturn:
    """A bad command line click itself found (an unknown option, a value out of its range, a
    missing argument) in one line like ours, exit 2; bare ``autotune`` or ``autotune tune``
    prints the help, as click does."""
    ctx = getattr(exc, "ctx", None)
    code = int(getattr(exc, "exit_code", 2))
    if _is_click_error(exc, "NoArgsIsHelpError"):  # typer has printed the help already
        sys.exit(code)
    where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    message = getattr(exc, "format_message", lambda: str(exc))()
    error(f"{message}{where}")
    sys.exit(code)


def main() -> None:
    """Console entry point: run the app, mapping unexpected errors to exit code 1; warnings
    are one line each."""
    warnings.showwarning = _show_warning
    try:
        with interrupts.latched():
            code = app(standalone_mode=False)
    except SystemExit:
        raise
    except typer.Abort:  # Ctrl-C while click parses the command line
        stderr.print("interrupted")
        sys.exit(130)
    except KeyboardInterrupt:
        stderr.print("interrupted")
        sys.exit(130)
    except Exception as exc:  # an internal error: one line, exit 1 (details with AUTOTUNE_DEBUG)
        if _is_click_error(exc, "UsageError"):
            _usage_error(exc)
        if os.environ.get("AUTOTUNE_DEBUG"):
            raise
        stderr.print(
            f"[bold red]internal error:[/] {type(exc).__name__}: {exc} "
            f"(set AUTOTUNE_DEBUG=1 for the traceback)",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
