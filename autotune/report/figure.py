"""Write a matplotlib figure atomically (temp file in the same folder + rename)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def save_figure(fig, path: str | Path) -> None:
    """Save ``fig`` to ``path`` (format from the suffix, PNG without one) and close it; an
    interrupted write never leaves a truncated file."""
    import matplotlib.pyplot as plt

    path = Path(path)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=path.suffix or ".png", dir=path.parent
    )
    os.close(fd)
    try:
        fig.savefig(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
