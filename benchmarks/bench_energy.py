"""The energy objective against the latency objective, swept over the static power.

The machine files charge a static energy per cycle (``energy.static_power``, W; Manticore's
2 W is an assumption) beside the per-access energies. Without it, ``--objective energy``
would take any mapping that moves a few bytes less however slow. For each static power of
the sweep this tunes every distinct layer shape of the networks for energy and for latency
(the model's proven optima, exhaustive search) and prints per network: the energy winners'
total cycles and energy against the latency winners', and the worst layer's slow-down.

    python benchmarks/bench_energy.py [--networks resnet50,mobilenetv2] [--watts 0,1,2,4]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmark this tree, not an installed copy

from autotune import Machine, analyze, load_network  # noqa: E402
from autotune.ir.machine import STATIC_ENERGY  # noqa: E402
from autotune.ir.options import TuneOptions  # noqa: E402
from autotune.search.solve import solve_layer  # noqa: E402

EXAMPLES = ROOT / "examples"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--networks", default="resnet50,mobilenetv2")
    parser.add_argument("--watts", default="0,1,2,4", help="static power per chiplet, W")
    parser.add_argument("--machine", default="manticore")
    args = parser.parse_args()
    base = Machine.preset(args.machine)
    for name in args.networks.split(","):
        network = load_network(EXAMPLES / f"{name}.yaml")
        precision = network.precision
        shapes = {}
        for layer in network.layers:
            shapes.setdefault(layer.shape_key(), layer)
        count = {k: sum(1 for x in network.layers if x.shape_key() == k) for k in shapes}
        fast_opts = TuneOptions(objective="latency", search="exhaustive")
        fast = {k: solve_layer(x, base, precision, 1, fast_opts) for k, x in shapes.items()}
        print(f"== {name}: {len(network.layers)} layers, {len(shapes)} distinct shapes")
        for watts in [float(w) for w in args.watts.split(",")]:
            energy = dict(base.energy_pj, **{STATIC_ENERGY: watts / base.clock_hz * 1e12})
            machine = replace(base, energy_pj=energy)
            t0 = time.perf_counter()
            opts = TuneOptions(objective="energy", search="exhaustive")
            frugal = {k: solve_layer(x, machine, precision, 1, opts) for k, x in shapes.items()}
            wall = time.perf_counter() - t0

            c_fast, c_frugal = (
                sum(count[k] * s[k].analysis.cycles for k in shapes) for s in (fast, frugal)
            )
            e_fast, e_frugal = (
                sum(  # each mapping's energy at this static power
                    count[k] * analyze(x, s[k].mapping, machine, precision, 1).energy_pj
                    for k, x in shapes.items()
                )
                for s in (fast, frugal)
            )
            worst = max(frugal[k].analysis.cycles / fast[k].analysis.cycles for k in shapes)
            print(
                f"  static {watts:g} W: energy winners {c_frugal:>12,.0f} cycles "
                f"{e_frugal / 1e6:9.2f} uJ; latency winners {c_fast:>12,.0f} cycles "
                f"{e_fast / 1e6:9.2f} uJ; cycles x{c_frugal / c_fast:.3f}, energy "
                f"x{e_frugal / e_fast:.3f}, worst layer x{worst:.2f} slower ({wall:.1f} s)"
            )


if __name__ == "__main__":
    main()
