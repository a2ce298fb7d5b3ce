"""Validations against the seeds' measurements: swDNN (seed 004), KaNN (seed 003), Fig. 9.

Each validation lives in ``autotune/report/validation/`` and is imported lazily, so a tree
that lacks one still runs the others (it prints "not available").

    python benchmarks/bench_validation.py [--only {swdnn,kann,fig9}] [--no-refine] [--trials N]
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


def run_kann(args: argparse.Namespace) -> None:
    module = importlib.import_module("autotune.report.validation.kann")
    v = module.validate_kann(refine=args.refine, trials=args.trials)
    print(v.summary())


def run_generic(name: str, args: argparse.Namespace) -> None:
    module = importlib.import_module(f"autotune.report.validation.{name}")
    for attr in (f"validate_{name}", "validate", "main"):
        fn = getattr(module, attr, None)
        if callable(fn):
            result = fn()
            print(result.summary() if hasattr(result, "summary") else result)
            return
    print(f"{name}: the module has no validate function")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=VALIDATIONS)
    parser.add_argument("--no-refine", dest="refine", action="store_false",
                        help="kann: the integer program's mappings only (faster)")
    parser.add_argument("--trials", type=int, default=24,
                        help="kann: refinement trials per distinct layer shape")
    args = parser.parse_args()
    for name in ([args.only] if args.only else VALIDATIONS):
        print(f"== {name}")
        start = time.perf_counter()
        try:
            if name == "kann":
                run_kann(args)
            else:
                run_generic(name, args)
        except ImportError as exc:
            print(f"{name}: not available ({exc})")
            continue
        print(f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
