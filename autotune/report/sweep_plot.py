"""The batch sweep plot: latency and images/s against the batch, fc turning batches marked."""

from __future__ import annotations

from pathlib import Path

from autotune.report.figure import save_figure


def draw_sweep(result, path: str | Path) -> None:
    """Two panels over a log2 batch axis: latency (ms) above, images/s below.

    A dashed vertical line marks each batch at which fc layers turn compute-bound, labelled
    with their names. The file is written atomically.
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    batches = list(result.batches)
    latency_ms = [p.latency_s * 1e3 for p in result.points]
    images = [p.images_per_s for p in result.points]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 6.5), dpi=120)
    top.plot(batches, latency_ms, marker="o", color="tab:red")
    top.set_yscale("log")
    top.set_ylabel("latency per batch (ms, log)")
    bottom.plot(batches, images, marker="o", color="tab:blue")
    bottom.set_ylabel("images/s")
    best = result.best()
    bottom.scatter(
        [best],
        [result.point(best).images_per_s],
        s=90,
        facecolors="none",
        edgecolors="black",
        zorder=3,
        label=f"most images/s: batch {best}",
    )
    turning: dict[int, list[str]] = {}
    for name, batch in result.turning_batches().items():
        if batch is not None:
            turning.setdefault(batch, []).append(name)
    for i, (batch, names) in enumerate(sorted(turning.items())):
        for ax in (top, bottom):
            ax.axvline(
                batch,
                color=f"C{2 + i % 8}",
                ls="--",
                lw=1,
                label=(
                    f"{', '.join(names)} compute-bound from batch {batch}" if ax is bottom else None
                ),
            )
    for ax in (top, bottom):
        ax.set_xscale("log", base=2)
        ax.grid(True, which="major", lw=0.3, alpha=0.5)
    bottom.set_xticks(batches, [str(b) for b in batches])
    bottom.xaxis.set_minor_locator(NullLocator())
    bottom.set_xlabel("batch (images per inference)")
    bottom.legend(loc="best", fontsize=7)
    never = [n for n, b in result.turning_batches().items() if b is None]
    subtitle = f"; memory-bound throughout: {', '.join(never)}" if never else ""
    top.set_title(
        f"{result.network} on {result.machine.name}, {result.precision}, "
        f"objective {result.objective}{subtitle}",
        fontsize=9,
    )
    fig.tight_layout()
    save_figure(fig, path)
