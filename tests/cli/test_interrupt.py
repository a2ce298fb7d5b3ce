"""Ctrl-C while the layers are being solved in worker processes stops the run at once:
one line, exit 130, no worker left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _wait_for_workers(pid: int, timeout: float = 60.0) -> None:
    """Until process ``pid`` has child processes (the solve's worker pool) and a moment
    more: a fixed sleep raced the start-up, whose imports take longer in a fresh virtual
    environment (no bytecode yet), and Ctrl-C during them is not what this test is about."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if not children.exists():
        time.sleep(4)
        return
    end = time.monotonic() + timeout
    while time.monotonic() < end and not children.read_text().split():
        time.sleep(0.05)
    time.sleep(0.5)


def test_ctrl_c_during_the_parallel_solve(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "tune", "examples/resnet50.yaml", "--no-verify"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # a shell's background job starts with Ctrl-C ignored, and children inherit that;
        # the run under test is an interactive one
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _wait_for_workers(proc.pid)  # start-up (imports take seconds), then the pool solves
    proc.send_signal(signal.SIGINT)
    start = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert time.monotonic() - start < 15
    lines = [line for line in err.decode().splitlines() if line.strip()]
    assert lines == ["interrupted"], lines
