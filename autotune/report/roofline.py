"""The roofline plot: the machine's compute and bandwidth roofs, each layer as a point."""

from __future__ import annotations

import math
from pathlib import Path

from autotune.report.figure import save_figure


def draw_roofline(result, path: str | Path) -> None:
    """Plot performance (flop/s) against operational intensity (flop per off-chip byte).

    Each layer is placed at its predicted intensity and its simulated performance when the
    file has one (else the predicted), labelled with its name and coloured by its kind, so
    that seed 002's Fig. 9 split shows: convolutions near the compute roof, linear and
    pooling layers (and the other elementwise ones) on the bandwidth roof. The file is
    written atomically.
    """
    import matplotlib.pyplot as plt

    machine, precision = result.machine, result.precision
    peak = machine.peak_flops(precision)
    bandwidth = machine.hbm_bytes_per_s
    points = []
    for r in result.layers:
        a = r.predicted
        cycles = r.simulated.cycles if r.simulated is not None else a.cycles
        seconds = cycles / machine.clock_hz
        if math.isfinite(a.flop_per_byte):  # a layer with every stream in L2 has no HBM bytes
            points.append((r.layer.name, a.flop_per_byte, a.flops / seconds, _group(r.layer.kind)))
    lo = min(p[1] for p in points) / 2
    hi = max(max(p[1] for p in points) * 2, 4 * peak / bandwidth)
    fig, ax = plt.subplots(figsize=(9, 6), dpi=120)
    xs = [lo, peak / bandwidth, hi]
    ax.loglog(
        xs,
        [min(peak, x * bandwidth) for x in xs],
        color="black",
        lw=1.5,
        label=f"roof: {peak / 1e12:.2f} Tflop/s {precision}, {bandwidth / 1e9:.0f} GB/s",
    )
    ax.loglog(
        [lo, hi],
        [peak * machine.fpu_utilization] * 2,
        color="grey",
        ls="--",
        lw=1,
        label=f"FPU utilisation {machine.fpu_utilization:.0%}",
    )
    how = "simulated" if all(r.simulated is not None for r in result.layers) else "predicted"
    for group, color in GROUP_COLORS.items():
        chosen = [p for p in points if p[3] == group]
        if chosen:
            ax.scatter(
                [p[1] for p in chosen],
                [p[2] for p in chosen],
                s=18,
                color=color,
                zorder=3,
                label=f"{group} ({how})",
            )
    for name, x, y, _ in points:
        ax.annotate(name, (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points")
    ax.set_xlabel("operational intensity (flop per off-chip byte)")
    ax.set_ylabel("performance (flop/s)")
    ax.set_title(f"{result.network} on {machine.name}, batch {result.batch}")
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


#: Point colours by layer group (seed 002 Fig. 9: convolutions, linear, pooling).
GROUP_COLORS = {
    "convolution": "tab:blue",
    "linear": "tab:orange",
    "pooling": "tab:green",
    "elementwise": "tab:red",
}


def _group(kind: str) -> str:
    if kind == "conv":
        return "convolution"
    if kind == "fc":
        return "linear"
    if kind in ("maxpool", "avgpool"):
        return "pooling"
    return "elementwise"
