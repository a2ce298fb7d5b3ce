"""Validation against the seeds' published figures: ``--only swdnn|kann|fig9`` (default all).

Each validation lives in ``autotune/report/validation/<name>.py`` with a ``main()``; one
that this checkout does not have prints "not available".

    python benchmarks/bench_validation.py --only fig9
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))   # validate this tree, not an installed copy

VALIDATIONS = ("swdnn", "kann", "fig9")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=VALIDATIONS, action="append",
                        help="run only this validation (repeatable)")
    args = parser.parse_args()
    for name in args.only or VALIDATIONS:
        print(f"== {name}")
        try:
            module = importlib.import_module(f"autotune.report.validation.{name}")
        except ImportError:
            print("not available")
            continue
        module.main()


if __name__ == "__main__":
    main()
