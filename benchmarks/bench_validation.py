"""Validation of autotune's predictions against the measurements the seed papers publish.

    python benchmarks/bench_validation.py [--only swdnn|kann|fig9] [--refine | --no-refine]
                                          [--trials N] [--unfitted] [--plan per-layer|network]

* ``swdnn``: seed 004 Table III, one SW26010 core group, fp64, B = 128, 3x3, 64x64 output;
  per configuration measured and predicted GFlop/s and their ratio. ``fpu_utilization`` of
  ``sw26010-cg`` is fitted on row 1 (128/128); rows 2-4 are the judgement (``--unfitted``
  shows the paper's instruction-level 0.928 instead).
* ``kann``: seed 003 Sec. V, MPPA3, YOLOv3-416, batch 1, FP16: predicted FPS vs ~20 FPS;
  per layer (every tensor in DDR) unless ``--plan network`` keeps activations in the L2 the
  preset makes of the clusters' local memories (as KaNN does).
* ``fig9``: seed 002 Fig. 9, where ResNet-50's conv layers land against the paper's >80 % of
  peak flop/s and its memory-bound layers against >90 % of peak bandwidth.

Each validation lives in ``autotune/report/validation/``; the run ends with one summary line
per validation with its ratio(s). Refinement against the simulator is on by default (as
``autotune tune`` does), with ``--trials`` trials per distinct layer shape.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmark this tree, not an installed copy

VALIDATIONS = ("swdnn", "kann", "fig9")


def run_swdnn(args: argparse.Namespace) -> str:
    from autotune.report.validation.swdnn import format_rows, swdnn_rows, unfitted_machine

    machine = unfitted_machine() if args.unfitted else "sw26010-cg"
    rows = swdnn_rows(refine=args.refine, trials=args.trials, machine=machine)
    print(
        "swDNN, seed 004 Table III: one SW26010 core group, fp64, B=128, 3x3, 64x64 output"
        + (
            " (unfitted: fpu_utilization 0.928)"
            if args.unfitted
            else " (fpu_utilization fitted on row 1 = 128/128; rows 2-4 judge it)"
        )
    )
    print(format_rows(rows))
    ratios = ", ".join(f"{r.n_i}/{r.n_o} {r.ratio:.2f}" for r in rows)
    judged = [r.ratio for r in rows[1:]] if not args.unfitted else [r.ratio for r in rows]
    return (
        f"swdnn  predicted/measured GFlop/s per row: {ratios} "
        f"(geomean of the judged rows {statistics.geometric_mean(judged):.2f})"
    )


def run_kann(args: argparse.Namespace) -> str:
    from autotune.report.validation.kann import validate_kann

    v = validate_kann(refine=args.refine, trials=args.trials, plan=args.plan)
    print(v.summary())
    kann = "" if v.kann_fps is None else f", KaNN's own strategies {v.kann_fps:.1f} FPS"
    return (
        f"kann   YOLOv3-416 on MPPA3 fp16 ({args.plan} plan): predicted "
        f"{v.predicted_fps:.1f} FPS vs measured {v.measured_fps:.0f} FPS, ratio "
        f"{v.ratio:.2f}{kann}"
    )


def run_fig9(args: argparse.Namespace) -> str:
    from autotune.report.validation.fig9 import COMPUTE_LINE, MEMORY_LINE, fig9, report

    figures = fig9(refine=args.refine, trials=args.trials)
    print(report(figures))
    parts = []
    for f in figures:
        c, m = f.compute, f.memory
        parts.append(
            f"{f.machine}: conv median {100 * c.median:.0f} % of peak "
            f"({c.above}/{c.count} > {100 * COMPUTE_LINE:.0f} %), memory-bound median "
            f"{100 * m.median:.0f} % of bandwidth ({m.above}/{m.count} > "
            f"{100 * MEMORY_LINE:.0f} %)"
        )
    return "fig9   " + "; ".join(parts)


RUNNERS = {"swdnn": run_swdnn, "kann": run_kann, "fig9": run_fig9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=VALIDATIONS, help="run one validation")
    parser.add_argument(
        "--refine",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="refine each mapping against the simulator (Optuna), as "
        "`autotune tune` does (default on)",
    )
    parser.add_argument(
        "--trials",
        type=int,
        default=24,
        help="refinement trials per distinct layer shape (default 24)",
    )
    parser.add_argument(
        "--unfitted",
        action="store_true",
        help="swdnn: the paper's execution efficiency 0.928 instead of the "
        "value fitted on Table III row 1",
    )
    parser.add_argument(
        "--plan",
        choices=("per-layer", "network"),
        default="per-layer",
        help="kann: every tensor in DDR (default), or the network plan's L2",
    )
    args = parser.parse_args()
    summary = []
    for name in [args.only] if args.only else VALIDATIONS:
        print(f"== {name}")
        start = time.perf_counter()
        summary.append(RUNNERS[name](args))
        print(f"({time.perf_counter() - start:.0f} s)\n")
    print("== summary (refine " + ("on" if args.refine else "off") + ")")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
