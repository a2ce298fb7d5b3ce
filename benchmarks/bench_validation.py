"""Validation of autotune's predictions against measured figures from the seed papers.

    python benchmarks/bench_validation.py [--only swdnn|kann|fig9] [--refine] [--trials N]
                                          [--unfitted]

``swdnn``: seed 004 Table III (SW26010 core group, fp64, B = 128, 3x3, 64x64 output): per
configuration the measured and predicted GFlop/s, their ratio, the bound and the mapping
(``autotune/report/validation/swdnn.py``). ``kann`` and ``fig9`` are printed when their
modules exist in ``autotune/report/validation``; until then they say so.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))   # benchmark this tree, not an installed copy

VALIDATIONS = ("swdnn", "kann", "fig9")


def run_swdnn(args: argparse.Namespace) -> None:
    from autotune.report.validation.swdnn import format_rows, swdnn_rows, unfitted_machine

    start = time.perf_counter()
    machine = unfitted_machine() if args.unfitted else "sw26010-cg"
    rows = swdnn_rows(refine=args.refine, trials=args.trials, machine=machine)
    print("swDNN, seed 004 Table III: one SW26010 core group, fp64, B=128, 3x3, 64x64 output"
          + (" (unfitted: fpu_utilization 0.928)" if args.unfitted else
             " (fpu_utilization fitted on row 1)"))
    print(format_rows(rows))
    print(f"({time.perf_counter() - start:.0f} s, refine={'on' if args.refine else 'off'})")


def run_other(name: str) -> None:
    try:
        module = importlib.import_module(f"autotune.report.validation.{name}")
    except ImportError:
        print(f"{name}: not yet available")
        return
    main = getattr(module, "main", None)
    if main is None:
        print(f"{name}: not yet available (the module has no main())")
        return
    main()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=VALIDATIONS, help="run one validation")
    parser.add_argument("--refine", action="store_true",
                        help="refine each mapping against the simulator (Optuna), as "
                             "`autotune tune` does; off by default to stay under ~2 min")
    parser.add_argument("--trials", type=int, default=8, help="refinement trials per layer")
    parser.add_argument("--unfitted", action="store_true",
                        help="swdnn: the paper's execution efficiency 0.928 instead of the "
                             "value fitted on Table III row 1")
    args = parser.parse_args()
    for name in VALIDATIONS if args.only is None else (args.only,):
        if name == "swdnn":
            run_swdnn(args)
        else:
            run_other(name)


if __name__ == "__main__":
    main()
