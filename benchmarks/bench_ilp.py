"""Integer program: wall time against exhaustive enumeration, and mapping quality.

Run: python benchmarks/bench_ilp.py [--networks resnet50,vgg16,yolov3] [--precision fp32]

For each network (batch and precision from its file unless given):
  * ILP wall time for the whole network (shapes deduplicated, 2 processes) and per distinct
    layer shape, against exhaustive enumeration of the same space in the same run (ratio);
  * quality per layer: the ILP mapping's estimated cycles against (a) the report's hand
    choice (Alg. 2 or 5 with the largest delta_o that fits, spatial bands only if forced)
    and (b) the physical lower bound max(MACs / peak MAC rate, compulsory bytes / HBM
    bandwidth); geomeans of both ratios.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from autotune import Machine, analyze, load_network
from autotune.api import solve_network
from autotune.ir.options import TuneOptions
from autotune.ir.precision import word_bytes
from autotune.model.analysis import compulsory_words
from autotune.search.solve import solve_layer
from autotune.search.space import hand_choice

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def lower_bound(layer, machine, precision: str, batch: int) -> float:
    loads, stores = compulsory_words(layer, batch)
    return max(
        batch * layer.macs / machine.peak_macs_per_cycle(precision),
        (loads + stores) * word_bytes(precision) / machine.hbm_bytes_per_cycle,
    )


def bench(name: str, machine: Machine, precision: str | None, verbose: bool) -> dict:
    net = load_network(EXAMPLES / f"{name}.yaml")
    precision = precision or net.precision
    start = time.perf_counter()
    sols = solve_network(net, machine, options=TuneOptions(precision=precision, processes=2))
    ilp_wall = time.perf_counter() - start
    rows, ilp_layer_s, exh_layer_s = [], 0.0, 0.0
    vs_hand, vs_bound = [], []
    for sol in sols:
        layer = sol.layer
        hand = analyze(
            layer, hand_choice(layer, machine, precision, net.batch), machine, precision, net.batch
        )
        bound = lower_bound(layer, machine, precision, net.batch)
        vs_hand.append(hand.cycles / sol.analysis.cycles)
        vs_bound.append(sol.analysis.cycles / bound)
        exh_s = None
        if sol.search.shared_with is None:
            t = time.perf_counter()
            exh = solve_layer(
                layer, machine, precision, net.batch, options=TuneOptions(search="exhaustive")
            )
            exh_s = time.perf_counter() - t
            assert exh.mapping == sol.mapping, layer.name
            ilp_layer_s += sol.search.wall_s
            exh_layer_s += exh_s
        rows.append(
            (
                layer.name,
                sol.mapping.algorithm,
                sol.mapping.delta_o,
                sol.search.status,
                sol.search.candidates,
                sol.search.wall_s,
                exh_s,
                sol.analysis.cycles,
                hand.cycles,
                bound,
            )
        )
    if verbose:
        print(f"\n{name} ({precision}, batch {net.batch}): per layer")
        print(
            f"{'layer':24} {'algorithm':20} {'dO':>5} {'status':8} {'cands':>9} "
            f"{'ilp s':>6} {'exh s':>6} {'cycles':>10} {'hand':>10} {'bound':>10} "
            f"{'hand/ilp':>8} {'ilp/bound':>9}"
        )
        for lname, alg, d, status, cands, ilp_s, exh_s, cyc, hand_c, bound in rows:
            exh_text = f"{exh_s:6.2f}" if exh_s is not None else "  same"
            print(
                f"{lname[:24]:24} {alg:20} {d:5} {status:8} {cands:9} {ilp_s:6.2f} "
                f"{exh_text} {cyc:10} {hand_c:10} {bound:10.0f} {hand_c / cyc:8.2f} "
                f"{cyc / bound:9.2f}"
            )
    return dict(
        network=name,
        layers=len(sols),
        shapes=sum(s.search.shared_with is None for s in sols),
        ilp_wall=ilp_wall,
        ilp_layer_s=ilp_layer_s,
        exh_layer_s=exh_layer_s,
        hand=geomean(vs_hand),
        bound=geomean(vs_bound),
        cycles=sum(s.analysis.cycles for s in sols),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", default="resnet50,vgg16,yolov3")
    parser.add_argument("--precision", default=None)
    parser.add_argument("--quiet", action="store_true", help="summary only")
    args = parser.parse_args()
    machine = Machine.preset("manticore")
    results = [bench(n, machine, args.precision, not args.quiet) for n in args.networks.split(",")]
    print("\nsummary (ILP = CP-SAT, 1 worker per layer, 2 processes per network)")
    print(
        f"{'network':12} {'layers':>6} {'shapes':>6} {'ILP wall s':>10} "
        f"{'ILP sum s':>9} {'exh sum s':>9} {'exh/ILP':>7} {'cycles':>10} "
        f"{'geo hand/ILP':>12} {'geo ILP/bound':>13}"
    )
    for r in results:
        print(
            f"{r['network']:12} {r['layers']:6} {r['shapes']:6} {r['ilp_wall']:10.2f} "
            f"{r['ilp_layer_s']:9.2f} {r['exh_layer_s']:9.2f} "
            f"{r['exh_layer_s'] / r['ilp_layer_s']:7.2f} {r['cycles']:10} "
            f"{r['hand']:12.2f} {r['bound']:13.2f}"
        )


if __name__ == "__main__":
    main()
