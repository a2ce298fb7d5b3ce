"""Output files written atomically, with the permissions any new file gets.

Every file autotune writes for the user (schedules and sweeps JSON, traces, plots) is written
to a temporary file beside it and renamed over it, so an interrupted write never leaves a
truncated file. The temporary file is created with mode 0o666 less the process umask, as
``open(path, "w")`` would (``tempfile.mkstemp`` would make it 0o600, private to its owner).
Processes that share a file take turns under ``file_lock``.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

if sys.platform != "win32":
    import fcntl


@contextmanager
def atomic_path(path: str | Path, suffix: str = ".tmp") -> Iterator[Path]:
    """A new, empty temporary file beside ``path`` (named ``.NAME.RANDOM`` + ``suffix``) for
    the block to write; renamed over ``path`` when the block ends, removed if it raises."""
    path = Path(path)
    folder = path.parent
    while True:
        tmp = folder / f".{path.name}.{secrets.token_hex(4)}{suffix}"
        try:
            # the kernel applies the umask to 0o666, as for any new file
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            break
        except FileExistsError:
            continue
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: str | Path, text: str | bytes) -> None:
    """Write ``text`` (UTF-8; bytes as they are) to ``path`` atomically, flushed to disk
    before the rename."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created if need be) for the block, so that
    processes sharing a file take turns (a study database, a benchmark's cache). Without a
    lock file (a folder we cannot write, Windows) the block runs unlocked: what the block
    then opens reports what is wrong."""
    if sys.platform == "win32":
        yield
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
