"""Simulator speed and agreement with the analytical model, on every ResNet-50 layer.

For each layer and two mappings (the report's recipe ``hand_choice``, and a many-task
mapping: stacks of 4 output channels x bands of 2 output rows, or for fc 100-output stacks of
4 input slices), prints the median wall time of ``simulate`` and of ``analyze`` over several
runs, their ratio, and the simulated / modelled cycles. Then the whole network (every layer,
hand choice) end to end, and the peak memory of the process.

    python benchmarks/bench_sim.py [--repeat 5] [--network examples/resnet50.yaml]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmark this tree, not an installed copy

from autotune import Layer, Machine, Mapping, Tile, analyze, load_network, simulate  # noqa: E402
from autotune.search.space import hand_choice  # noqa: E402


def many_tasks(layer: Layer) -> Mapping:
    """A mapping with many small tasks (thousands for the big layers)."""
    if layer.kind == "fc":
        return Mapping("input_parallel", delta_o=100, tile=Tile(in_c=4))
    return Mapping("output_stack", delta_o=min(4, layer.c_out), tile=Tile(out_h=2))


def median_seconds(fn: Callable[..., object], repeat: int, *args: object) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--network", type=Path, default=ROOT / "examples" / "resnet50.yaml")
    args = parser.parse_args()
    machine = Machine.preset("manticore")
    net = load_network(args.network)
    prec, batch = net.precision, net.batch

    print(
        f"{net.name}: {len(net.layers)} layers, batch {batch}, {prec}, "
        f"median of {args.repeat} runs; ratio = simulate time / analyze time"
    )
    head = (
        f"{'layer':22} {'mapping':5} {'tasks':>6} {'sim ms':>7} {'model ms':>8} "
        f"{'ratio':>6} {'sim cycles':>11} {'model cycles':>12} {'sim/model':>9} "
        f"{'events':>6}"
    )
    print(head)
    print("-" * len(head))
    worst = {"hand": 0.0, "many": 0.0}
    for layer in net.layers:
        for kind, mapping in (
            ("hand", hand_choice(layer, machine, prec, batch)),
            ("many", many_tasks(layer)),
        ):
            a = analyze(layer, mapping, machine, prec, batch)
            if not a.fits:
                print(f"{layer.name:22} {kind:5} does not fit: {a.reason}")
                continue
            r = simulate(layer, mapping, machine, prec, batch)
            run = (layer, mapping, machine, prec, batch)
            t_sim = median_seconds(simulate, args.repeat, *run)
            t_model = median_seconds(analyze, args.repeat, *run)
            worst[kind] = max(worst[kind], t_sim)
            print(
                f"{layer.name:22} {kind:5} {a.tasks:6d} {t_sim * 1e3:7.1f} "
                f"{t_model * 1e3:8.2f} {t_sim / t_model:6.0f} {r.cycles:11d} "
                f"{a.cycles:12d} {r.cycles / a.cycles:9.2f} {r.events:6d}"
            )

    choices = [hand_choice(layer, machine, prec, batch) for layer in net.layers]

    def whole_network() -> int:
        return sum(
            simulate(layer, m, machine, prec, batch).cycles
            for layer, m in zip(net.layers, choices, strict=True)
        )

    t_sim = median_seconds(whole_network, args.repeat)
    sim_cycles = whole_network()
    t_model = median_seconds(
        lambda: [
            analyze(layer, m, machine, prec, batch)
            for layer, m in zip(net.layers, choices, strict=True)
        ],
        args.repeat,
    )
    model_cycles = sum(
        analyze(layer, m, machine, prec, batch).cycles
        for layer, m in zip(net.layers, choices, strict=True)
    )
    tracemalloc.start()  # slows Python down: measured in a separate run
    whole_network()
    _, peak_traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print()
    print(
        f"slowest single layer: hand choice {worst['hand'] * 1e3:.1f} ms, "
        f"many-task {worst['many'] * 1e3:.1f} ms"
    )
    print(
        f"whole {net.name} (hand choice, {len(net.layers)} layers): simulate "
        f"{t_sim:.2f} s, analyze {t_model:.3f} s (ratio {t_sim / t_model:.0f}); "
        f"cycles sim {sim_cycles} / model {model_cycles} = {sim_cycles / model_cycles:.2f}"
    )
    print(
        f"peak memory: {peak_traced / 2**20:.1f} MiB traced during the whole-network run, "
        f"{rss_mib:.0f} MiB max RSS of the process"
    )


if __name__ == "__main__":
    main()
