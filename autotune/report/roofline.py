"""The roofline plot: the machine's compute and bandwidth roofs, each layer as a point.

On a machine with a shared L2 the plot has a second bandwidth roof, the L2's, and each layer
that moves L2 bytes a second (hollow triangle) point at its flop per L2 byte: a network plan
moves activations and weights from HBM to L2, and a layer that then reads nothing from HBM
has no point on the HBM roofline at all.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

from autotune.report.figure import save_figure


class Point(NamedTuple):
    """One layer's point: its name, intensity (flop per byte of one memory level),
    performance (flop/s) and group (``GROUP_COLORS``)."""

    name: str
    intensity: float
    flops_per_s: float
    group: str


def draw_roofline(result, path: str | Path) -> None:
    """Plot performance (flop/s) against operational intensity (flop per off-chip byte).

    Each layer is placed at its predicted intensity and its simulated performance when the
    file has one (else the predicted), labelled with its name and coloured by its kind, so
    that seed 002's Fig. 9 split shows: convolutions near the compute roof, linear and
    pooling layers (and the other elementwise ones) on the bandwidth roof. With an L2, its
    roof and the layers' L2 points besides (``roofline_figure``). The file is written
    atomically.
    """
    save_figure(roofline_figure(result), path)


def roofline_figure(result):
    """The roofline figure of ``result`` (a matplotlib ``Figure``, still open: the caller
    saves or closes it); separate from the writing so that its roofs and points can be read
    back."""
    import matplotlib.pyplot as plt

    machine, precision = result.machine, result.precision
    peak = machine.peak_flops(precision)
    bandwidth = machine.hbm_bytes_per_s
    l2_bandwidth = machine.l2_bytes_per_cycle * machine.clock_hz if machine.has_l2 else 0.0
    hbm, l2 = layer_points(result, l2=l2_bandwidth > 0)
    both = hbm + l2
    lo = min(p.intensity for p in both) / 2
    hi = max(max(p.intensity for p in both) * 2, 4 * peak / bandwidth)
    fig, ax = plt.subplots(figsize=(9, 6), dpi=120)
    label = f"roof: {peak / 1e12:.2f} Tflop/s {precision}, {bandwidth / 1e9:,.0f} GB/s"
    _roof(
        ax,
        lo,
        hi,
        peak,
        bandwidth,
        color="black",
        lw=1.5,
        label=label + " HBM" * bool(l2_bandwidth),
    )
    if l2_bandwidth:
        label = f"L2 roof: {l2_bandwidth / 1e9:,.0f} GB/s"
        _roof(ax, lo, hi, peak, l2_bandwidth, color="tab:purple", lw=1, ls="-.", label=label)
    ax.loglog(
        [lo, hi],
        [peak * machine.fpu_utilization] * 2,
        color="grey",
        ls="--",
        lw=1,
        label=f"FPU utilisation {machine.fpu_utilization:.0%}",
    )
    how = "simulated" if all(r.simulated is not None for r in result.layers) else "predicted"
    _scatter(ax, hbm, l2, how)
    if l2:
        _scatter_l2(ax, l2)
    _annotate(ax, hbm, l2)
    per = "per HBM byte; hollow ▲: per L2 byte" if l2_bandwidth else "per off-chip byte"
    ax.set_xlabel(f"operational intensity (flop {per})")
    ax.set_ylabel("performance (flop/s)")
    ax.set_title(f"{result.network} on {machine.name}, batch {result.batch}")
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def layer_points(result, l2: bool) -> tuple[list[Point], list[Point]]:
    """Each layer's point against the HBM roof and (``l2``: the machine has one) against
    the L2 roof. A layer with no HBM bytes has no HBM point (its intensity is infinite), one
    with no L2 bytes no L2 point."""
    hbm, in_l2 = [], []
    for r in result.layers:
        a = r.predicted
        cycles = r.simulated.cycles if r.simulated is not None else a.cycles
        performance = a.flops / (cycles / result.machine.clock_hz)
        group = _group(r.layer.kind)
        if math.isfinite(a.flop_per_byte):  # a layer with every stream in L2 has no HBM bytes
            hbm.append(Point(r.layer.name, a.flop_per_byte, performance, group))
        if l2 and a.l2_bytes and a.flops:
            in_l2.append(Point(r.layer.name, a.flops / a.l2_bytes, performance, group))
    return hbm, in_l2


def _roof(ax, lo: float, hi: float, peak: float, bandwidth: float, **style) -> None:
    """The roof ``min(peak, intensity × bandwidth)`` from ``lo`` to ``hi``, bent at its
    ridge point when that lies between them."""
    ridge = peak / bandwidth
    xs = [lo, *([ridge] if lo < ridge < hi else []), hi]
    ax.loglog(xs, [min(peak, x * bandwidth) for x in xs], **style)


def _scatter(ax, hbm: list[Point], l2: list[Point], how: str) -> None:
    """The layers' HBM points, filled, one legend entry per group; a group whose layers all
    keep their streams in L2 gets its entry anyway, its colour being on the triangles."""
    for group, color in GROUP_COLORS.items():
        chosen = [p for p in hbm if p.group == group]
        if chosen or any(p.group == group for p in l2):
            ax.scatter(
                [p.intensity for p in chosen],
                [p.flops_per_s for p in chosen],
                s=18,
                color=color,
                zorder=3,
                label=f"{group} ({how})",
            )


def _scatter_l2(ax, points: list[Point]) -> None:
    """The layers' L2 points: hollow triangles in their group's colour, under a single
    black legend entry (the filled points' entries name the colours); ``gid`` names them
    in an SVG."""
    style = dict(s=26, marker="^", facecolors="none", linewidths=0.9, zorder=3)
    ax.scatter(
        [p.intensity for p in points],
        [p.flops_per_s for p in points],
        edgecolors=[GROUP_COLORS[p.group] for p in points],
        gid="l2 points",
        **style,
    )
    ax.scatter([], [], edgecolors="black", label="per L2 byte (hollow ▲)", **style)


def _annotate(ax, hbm: list[Point], l2: list[Point]) -> None:
    """Name each layer once: at its HBM point, or at its L2 point when it reads and writes
    nothing in HBM (the other L2 points share their HBM point's height)."""
    named = {p.name for p in hbm}
    for p in hbm + [p for p in l2 if p.name not in named]:
        ax.annotate(
            p.name,
            (p.intensity, p.flops_per_s),
            fontsize=6,
            xytext=(3, 2),
            textcoords="offset points",
        )


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
