"""Write a matplotlib figure atomically (temp file in the same folder + rename)."""

from __future__ import annotations

from pathlib import Path

from autotune.files import atomic_path


def save_figure(fig, path: str | Path) -> None:
    """Save ``fig`` to ``path`` (format from the suffix, PNG without one) and close it; an
    interrupted write never leaves a truncated file."""
    import matplotlib.pyplot as plt

    path = Path(path)
    try:
        with atomic_path(path, suffix=path.suffix or ".png") as tmp:
            fig.savefig(tmp)
    finally:
        plt.close(fig)
