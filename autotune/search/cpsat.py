"""CP-SAT solves that Ctrl-C stops at once, with the usual ``KeyboardInterrupt``.

CP-SAT catches SIGINT itself by default and only ends its search early, so a run interrupted
during a solve would go on with the best solution found as if nothing had happened. Here the
solver does not catch it: the solve runs in a helper thread while the main thread waits in
short slices, receives the interrupt, stops the search and re-raises it.
"""

from __future__ import annotations

import threading

from ortools.sat.python import cp_model

#: Seconds between two checks for an interrupt while a solve runs.
POLL_S = 0.05


def solve(solver: cp_model.CpSolver, model: cp_model.CpModel) -> cp_model.cmh.CpSolverStatus:
    """``solver.solve(model)``, stopped and re-raised on Ctrl-C."""
    solver.parameters.catch_sigint_signal = False
    if threading.current_thread() is not threading.main_thread():
        return solver.solve(model)  # only the main thread receives signals
    outcome: list[cp_model.cmh.CpSolverStatus | BaseException] = []

    def run() -> None:
        try:
            outcome.append(solver.solve(model))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            outcome.append(exc)

    worker = threading.Thread(target=run, name="cp-sat", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(POLL_S)
    except BaseException:
        solver.stop_search()
        worker.join()
        raise
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result
