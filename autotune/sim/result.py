"""What a simulation returns, and its timeline as Chrome trace JSON (opens in Perfetto)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.files import atomic_path
from autotune.ir.placement import HBM_ONLY, Placement


@dataclass(frozen=True)
class Breakdown:
    """Where the cycles went, averaged over clusters; the five parts sum to the makespan.

    ``compute``: the cores compute (FPU operations at the sustained MAC rate, peak x FPU
    utilisation; an operation takes one MAC slot).
    ``dma_wait``: stalled on DMA as an uncontended network would still stall them: round-trip
    latency, per-transfer setup, bus beats, loads a single buffer serialises, the final drain
    of background stores. ``contention``: stalled longer because ports, quadrant links or the
    HBM were shared with other flows. ``sync``: waiting for other clusters: the slowest member
    of an Alg. 3 share group, a reduction partner, a phase barrier. ``idle``: no work
    assigned: clusters without tasks, and the tail after a cluster's last task (load
    imbalance, waves that do not fill the machine).
    """

    compute: float
    dma_wait: float
    contention: float
    sync: float
    idle: float
    #: On a package: cycles the last chiplet to finish waited for its remote input over the
    #: die-to-die links before its part started (a sixth part, listed only when non-zero).
    d2d: float = 0.0

    def as_dict(self) -> dict[str, float]:
        parts = dict(
            compute=self.compute,
            dma_wait=self.dma_wait,
            contention=self.contention,
            sync=self.sync,
            idle=self.idle,
        )
        if self.d2d:
            parts["d2d"] = self.d2d
        return parts


@dataclass(frozen=True)
class Trace:
    """Per-cluster spans (track, cluster, start, end, label) and memory rate samples (cycle,
    HBM load, HBM store, L2 load, L2 store in B/cycle from that cycle on), in cycles."""

    spans: list[tuple]
    counters: list[tuple]


@dataclass(frozen=True)
class SimResult:
    """A simulated layer: makespan, where it went, and what moved where.

    ``level_bytes`` counts the payload carried over each quadrant level's links (a transfer
    between two clusters counts once on the way up and once down; an L2 transfer does not
    cross the root level's link); ``hbm_*_bytes`` is the off-chip payload, ``l2_*_bytes`` the
    payload from and to the shared L2 (the streams ``placement`` puts there);
    ``intercluster_bytes`` what clusters read from other clusters' L1 (Alg. 3 forwarding,
    Alg. 4/5 reduction). ``prefetch_bytes``: the background copy from HBM into L2 that ran
    beside the layer (also counted in ``hbm_load_bytes`` and ``l2_store_bytes``). ``events``
    is how many events were simulated.
    """

    layer: str
    algorithm: str
    precision: str
    batch: int
    cycles: int
    breakdown: Breakdown
    macs: int
    ops: int  # FPU operations (``Layer.ops``: MACs, a pool's taps, ..., the epilogue's)
    tasks: int
    clusters: int
    peak_macs_per_cycle: int
    clock_hz: float
    hbm_load_bytes: int
    hbm_store_bytes: int
    level_bytes: dict[str, int]
    intercluster_bytes: int
    events: int
    trace: Trace | None = field(default=None, repr=False)
    #: On a package (``autotune.chiplets.simulation``): the split, the chiplets that got a part, the
    #: bytes over all die-to-die links and the stage-in cycles of the last chiplet to finish.
    chiplet_split: str = "none"
    chiplets: int = 1
    d2d_bytes: int = 0
    d2d_cycles: int = 0
    l2_load_bytes: int = 0
    l2_store_bytes: int = 0
    prefetch_bytes: int = 0
    placement: Placement = HBM_ONLY

    @property
    def hbm_bytes(self) -> int:
        return self.hbm_load_bytes + self.hbm_store_bytes

    @property
    def l2_bytes(self) -> int:
        return self.l2_load_bytes + self.l2_store_bytes

    @property
    def hbm_bytes_per_cycle(self) -> float:
        """Achieved off-chip bandwidth over the whole layer."""
        return self.hbm_bytes / self.cycles

    @property
    def l2_bytes_per_cycle(self) -> float:
        """Achieved L2 bandwidth over the whole layer (its streams in L2 and the prefetch's
        writes)."""
        return self.l2_bytes / self.cycles

    @property
    def fpu_utilization(self) -> float:
        """FPU operations over what the machine's peak could do in the makespan (at most the
        machine's sustained FPU utilisation; MACs for a conv or fc without an epilogue)."""
        return self.ops / (self.cycles * self.peak_macs_per_cycle)

    def write_trace(self, path: str | Path) -> Path:
        """Write the timeline as Chrome Trace Event JSON (Perfetto, chrome://tracing).

        One thread per cluster for its program, one per cluster for its background stores
        and input prefetches, and an HBM bandwidth counter; with L2 traffic, an L2 bandwidth
        counter and the L2 prefetch's track besides. Written atomically (temporary
        file, then rename). Needs ``simulate(..., trace=True)``.
        """
        if self.trace is None:
            raise ValueError("no timeline recorded: call simulate(..., trace=True)")
        path = Path(path)
        doc = trace_events(self)
        with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        return path


_PIDS = {
    "cluster": 1,
    "store": 2,
    "load": 3,
    "hbm": 4,
    "l2": 5,
    "prefetch": 6,
    "next": 7,
    "stream": 8,
}


def trace_pid(track: str) -> int:
    """The Trace Event Format process id of a track of ``trace_events``."""
    return _PIDS[track]


_TRACKS = {
    "cluster": "clusters",
    "store": "background stores",
    "load": "input prefetches",
    "next": "next tasks' first tiles",
    "stream": "streamed tiles",
}


def trace_events(result: SimResult) -> dict[str, Any]:
    """The Trace Event Format document of a result (timestamps in microseconds)."""
    assert result.trace is not None
    us = 1e6 / result.clock_hz
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": _PIDS["hbm"], "args": {"name": "HBM"}}
    ]
    l2 = result.l2_bytes > 0
    if l2:
        events.append(
            {"ph": "M", "name": "process_name", "pid": _PIDS["l2"], "args": {"name": "L2"}}
        )
    if result.prefetch_bytes:
        pid = _PIDS["prefetch"]
        events += [
            {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": "L2 prefetch"}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": 0, "args": {"name": "HBM to L2"}},
        ]
    for track, title in _TRACKS.items():
        events.append(
            {"ph": "M", "name": "process_name", "pid": _PIDS[track], "args": {"name": title}}
        )
        for c in range(result.clusters):
            events.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": _PIDS[track],
                    "tid": c,
                    "args": {"name": f"cluster {c}"},
                }
            )
    for track, c, t0, t1, label in result.trace.spans:
        events.append(
            {
                "ph": "X",
                "name": label,
                "cat": track,
                "pid": _PIDS[track],
                "tid": c,
                "ts": t0 * us,
                "dur": (t1 - t0) * us,
                "args": {"start_cycle": t0, "cycles": t1 - t0},
            }
        )
    for t, load, store, l2_load, l2_store in result.trace.counters:
        series = [("HBM", load, store)] + ([("L2", l2_load, l2_store)] if l2 else [])
        for name, rd, wr in series:
            events.append(
                {
                    "ph": "C",
                    "name": f"{name} B/cycle",
                    "pid": _PIDS[name.lower()],
                    "ts": t * us,
                    "args": {"load": rd, "store": wr},
                }
            )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "layer": result.layer,
            "algorithm": result.algorithm,
            "cycles": result.cycles,
            "clock_hz": result.clock_hz,
        },
    }
