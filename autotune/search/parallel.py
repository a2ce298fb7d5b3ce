"""Independent solves spread over worker processes, stoppable with Ctrl-C."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

Job = TypeVar("Job")
Out = TypeVar("Out")


def _ignore_interrupts() -> None:
    """Worker processes leave Ctrl-C to the parent, which stops them (``map_processes``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def map_processes(
    fn: Callable[[Job], Out], jobs: Sequence[Job], processes: int | None
) -> Iterator[Out]:
    """``fn`` over ``jobs`` in order, in ``processes`` worker processes (None: one per core,
    at most one per job; 1: in this process). ``fn`` and the jobs must pickle."""
    processes = processes or min(os.cpu_count() or 1, len(jobs))
    if processes <= 1 or len(jobs) <= 1:
        yield from map(fn, jobs)
        return
    pool = ProcessPoolExecutor(max_workers=processes, initializer=_ignore_interrupts)
    try:
        yield from pool.map(fn, jobs)
    except BaseException:
        # Ctrl-C (or any failure): stop the workers now instead of waiting for their
        # solves; the interrupt reaches only this process, which ends them.
        for worker in list(getattr(pool, "_processes", {}).values()):
            worker.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
