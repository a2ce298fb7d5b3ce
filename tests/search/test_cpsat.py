"""Ctrl-C during a CP-SAT solve stops it and reaches the caller as KeyboardInterrupt (CP-SAT
would otherwise swallow it and return its best solution as if the time limit had hit)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from ortools.sat.python import cp_model

from autotune.search import cpsat


def hard_model() -> cp_model.CpModel:
    """A scheduling model CP-SAT does not prove optimal in seconds."""
    m = cp_model.CpModel()
    horizon = 10_000
    intervals, ends = [], []
    for j in range(60):
        start = m.new_int_var(0, horizon, f"s{j}")
        size = 7 + (j * 37) % 53
        end = m.new_int_var(0, horizon, f"e{j}")
        intervals.append(m.new_interval_var(start, size, end, f"i{j}"))
        ends.append(end)
    m.add_cumulative(intervals, [1 + (j * 13) % 7 for j in range(60)], 9)
    makespan = m.new_int_var(0, horizon, "makespan")
    m.add_max_equality(makespan, ends)
    m.minimize(makespan + sum(ends))
    return m


@pytest.fixture
def interactive() -> Iterator[None]:
    """Python's own Ctrl-C handler, as in an interactive run (a background job, or a test
    before this one, may have left SIGINT ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("interactive")
def test_ctrl_c_stops_the_solve_and_is_raised() -> None:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 60
    solver.parameters.num_search_workers = 1
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        cpsat.solve(solver, hard_model())
    assert time.monotonic() - start < 10


def test_a_solve_without_interrupt_returns_its_status() -> None:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 0.5
    status = cpsat.solve(solver, hard_model())
    assert status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
