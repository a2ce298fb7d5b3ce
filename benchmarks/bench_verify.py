"""Verify every layer of ResNet-50 at full size (batch 1, fp32) by executing its schedule.

Two mappings per layer: the report's recipe (``search.space.hand_choice``) and a many-task
mapping (>= 256 tasks: small stacks, spatial tiles, 64-slice steps; fc: 256 input-parallel
tasks), which stresses the per-operation overhead. Per layer it prints the time to build the
program and to run + check it, next to the time of one reference convolution (the baseline,
measured in the same run) and their ratio. Targets: total under 60 s, peak memory under
4 GiB (peak resident set size of this process).

    python benchmarks/bench_verify.py [network.yaml]
"""

from __future__ import annotations

import math
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's autotune, not whichever one is installed

from autotune import (  # noqa: E402
    Buffers,
    Layer,
    Machine,
    Mapping,
    MappingError,
    Tile,
    load_network,
)
from autotune.ir.precision import word_bytes  # noqa: E402
from autotune.search.space import delta_o_values, fits, hand_choice  # noqa: E402
from autotune.tiling import task_grid  # noqa: E402
from autotune.verification.build import build_program  # noqa: E402
from autotune.verification.check import random_inputs, verify_program  # noqa: E402
from autotune.verification.reference import reference  # noqa: E402

PRECISION, BATCH, MIN_TASKS, STEP = "fp32", 1, 256, 64


def many_task_mapping(layer: Layer, machine: Machine) -> Mapping:
    """A fitting mapping with at least ``MIN_TASKS`` tasks whose filter buffer holds a whole
    step of its stack (so the op count grows with the tasks, not with the channels)."""
    wb = word_bytes(PRECISION)
    if layer.kind == "fc":
        step = -(-layer.c_in // MIN_TASKS)
        for delta_o in reversed(delta_o_values(layer)):
            fb = 2 * delta_o * step * layer.h_in * layer.w_in * wb
            mapping = Mapping(
                "input_parallel",
                delta_o=delta_o,
                batch_tile=BATCH,
                tile=Tile(in_c=step),
                buffers=Buffers(filter_bytes=fb),
            )
            if fits(layer, mapping, machine, PRECISION, BATCH):
                return mapping
    deltas = [d for d in delta_o_values(layer) if d <= max(1, layer.c_out // 8)]
    for delta_o in reversed(deltas):
        stacks = task_grid(layer, Mapping("output_stack", delta_o=delta_o), BATCH).stacks.count
        for in_c in (STEP, STEP // 4, STEP // 16):
            in_c = min(in_c, layer.cin_per_group * max(1, delta_o // layer.cout_per_group))
            taps = min(in_c, layer.cin_per_group) * layer.kernel_h * layer.kernel_w
            buffers = Buffers(filter_bytes=2 * delta_o * taps * wb, output_depth=2)
            for tiles in (-(-MIN_TASKS // stacks) * k for k in (1, 2, 4, 8)):
                n_rows = min(layer.h_out, tiles)
                n_cols = min(layer.w_out, -(-tiles // n_rows))
                tile = Tile(
                    out_h=-(-layer.h_out // n_rows), out_w=-(-layer.w_out // n_cols), in_c=in_c
                )
                mapping = Mapping("output_stack", delta_o=delta_o, tile=tile, buffers=buffers)
                if task_grid(layer, mapping, BATCH).n_tasks >= MIN_TASKS and fits(
                    layer, mapping, machine, PRECISION, BATCH
                ):
                    return mapping
    raise MappingError(f"no many-task mapping fits layer {layer.name!r}")


def run(layer: Layer, mapping: Mapping, machine: Machine) -> dict[str, float | int | bool]:
    start = time.perf_counter()
    program = build_program(layer, mapping, machine, PRECISION, BATCH)
    built = time.perf_counter()
    v = verify_program(program, seed=0)
    done = time.perf_counter()
    return {
        "tasks": task_grid(layer, mapping, BATCH).n_tasks,
        "ops": len(program.ops),
        "build": built - start,
        "check": done - built,
        "ok": v.ok,
        "margin": v.max_rel_error / v.tolerance,
        "errors": "; ".join(v.errors),
    }


def reference_seconds(layer: Layer, repeats: int = 3) -> float:
    """Best of ``repeats`` runs of the reference convolution (fp64, as ``verify`` runs it)."""
    data = random_inputs(layer, BATCH, PRECISION)
    x, w = (data[name].astype(np.float64) for name in ("input", "filter"))
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        reference(layer, x, w)
        best = min(best, time.perf_counter() - start)
    return best


def main(path: Path) -> int:
    machine = Machine.preset("manticore")
    net = load_network(path)
    print(
        f"{net.name}: {len(net.layers)} layers, batch {BATCH}, {PRECISION}; seconds per "
        f"layer (build = program construction, check = execute + reference + compare; "
        f"ratio = (build + check) / reference; err/tol = max_rel_error / tolerance)"
    )
    head = (
        f"{'layer':22s} {'ref s':>6s} | {'hand: tasks':>11s} {'ops':>6s} {'build':>6s} "
        f"{'check':>6s} {'ratio':>6s} {'err/tol':>7s} | {'many: tasks':>11s} {'ops':>7s} "
        f"{'build':>6s} {'check':>6s} {'ratio':>6s} {'err/tol':>7s}"
    )
    print(head)
    print("-" * len(head))
    total_start = time.perf_counter()
    totals = {"ref": 0.0, "hand": 0.0, "many": 0.0}  # the reference: best of 3 per layer
    failures = []
    for layer in net.layers:
        ref = reference_seconds(layer)
        totals["ref"] += ref
        cells = []
        for kind, mapping in (
            ("hand", hand_choice(layer, machine, PRECISION, BATCH)),
            ("many", many_task_mapping(layer, machine)),
        ):
            r = run(layer, mapping, machine)
            seconds = float(r["build"]) + float(r["check"])
            totals[kind] += seconds
            if not r["ok"]:
                failures.append(f"{layer.name} ({kind}): {r['errors']}")
            width = 6 if kind == "hand" else 7
            cells.append(
                f"{r['tasks']:11d} {r['ops']:{width}d} {r['build']:6.2f} "
                f"{r['check']:6.2f} {seconds / ref:6.0f} "
                f"{float(r['margin']):7.3f}{'' if r['ok'] else ' FAIL'}"
            )
        print(f"{layer.name:22s} {ref:6.3f} | {cells[0]} | {cells[1]}", flush=True)
    total = time.perf_counter() - total_start
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    print("-" * len(head))
    print(
        f"reference {totals['ref']:.2f} s, hand-choice verification {totals['hand']:.2f} s "
        f"({totals['hand'] / totals['ref']:.0f}x), many-task verification "
        f"{totals['many']:.2f} s ({totals['many'] / totals['ref']:.0f}x)"
    )
    print(
        f"total {total:.1f} s (target < 60 s), peak memory {peak_gib:.2f} GiB "
        f"(target < 4 GiB), {2 * len(net.layers) - len(failures)} of "
        f"{2 * len(net.layers)} schedules verified"
    )
    for failure in failures:
        print(f"FAILED {failure}")
    return 0 if not failures and total < 60 and peak_gib < 4 else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "examples/resnet50.yaml"))
