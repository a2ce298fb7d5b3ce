"""One Perfetto timeline for a whole network: the layers' simulated timelines end to end.

Layers run one after another (each layer's tasks wait for the previous layer's outputs), so
the network's timeline is each layer's (``sim.result.trace_events``) shifted by the cycles of
the layers before it, under a ``network`` track with one span per layer (its name, kind and
cycles), which is what Perfetto shows first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.files import write_atomic
from autotune.sim.result import SimResult, trace_events, trace_pid

#: The process id of the network's own track (the layers' tracks use 1..6).
NETWORK_PID = 0
L2_PID = trace_pid("l2")


def network_trace(runs: Sequence[tuple[str, str, SimResult]]) -> dict[str, Any]:
    """The Trace Event Format document of ``runs`` (layer name, kind, traced simulation), in
    execution order. Raises ``ValueError`` for a run recorded without its timeline."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": NETWORK_PID, "args": {"name": "network"}},
        {
            "ph": "M",
            "name": "thread_name",
            "pid": NETWORK_PID,
            "tid": 0,
            "args": {"name": "layers"},
        },
    ]
    seen: set[tuple[Any, ...]] = set()
    offset = 0
    layers = []
    any_l2 = any(sim.l2_bytes > 0 for _, _, sim in runs)
    for name, kind, sim in runs:
        if sim.trace is None:
            raise ValueError(f"layer {name!r} was simulated without its timeline")
        us = 1e6 / sim.clock_hz
        if any_l2 and sim.l2_bytes == 0:
            # a layer without L2 traffic emits no L2 counter: zero it, or Perfetto would
            # hold the previous layer's last L2 rate over this layer
            events.append(
                {
                    "ph": "C",
                    "name": "L2 B/cycle",
                    "pid": L2_PID,
                    "ts": offset * us,
                    "args": {"load": 0.0, "store": 0.0},
                }
            )
        for event in trace_events(sim)["traceEvents"]:
            if event["ph"] == "M":
                key = (event["name"], event["pid"], event.get("tid"))
                if key not in seen:
                    seen.add(key)
                    events.append(event)
                continue
            shifted = dict(event)
            shifted["ts"] = event["ts"] + offset * us
            events.append(shifted)
        events.append(
            {
                "ph": "X",
                "name": name,
                "cat": kind,
                "pid": NETWORK_PID,
                "tid": 0,
                "ts": offset * us,
                "dur": sim.cycles * us,
                "args": {"kind": kind, "start_cycle": offset, "cycles": sim.cycles},
            }
        )
        layers.append({"layer": name, "kind": kind, "cycles": sim.cycles})
        offset += sim.cycles
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"cycles": offset, "layers": layers},
    }


def write_network_trace(path: str | Path, runs: Sequence[tuple[str, str, SimResult]]) -> Path:
    """Write ``network_trace(runs)`` as JSON, atomically."""
    write_atomic(path, json.dumps(network_trace(runs)))
    return Path(path)
