"""Objectives and the deterministic tie-break order shared by every search mode."""

from __future__ import annotations

from autotune.ir.options import OBJECTIVES, Objective

__all__ = ["OBJECTIVES", "ORDER", "VARIABLES", "Objective", "check_objective"]

#: Formula outputs compared in order: the objective, then tie-breaks (smaller buffers last).
ORDER: dict[str, tuple[str, ...]] = {
    "latency": ("cycles", "offchip_bytes", "l1"),
    "traffic": ("offchip_bytes", "cycles", "l1"),
    "energy": ("energy", "cycles", "l1"),
}

#: Order of the variables in a candidate's rank (the final tie-break: enumeration order).
VARIABLES = (
    "alg",
    "delta_o",
    "spatial",
    "batch_tile",
    "in_c",
    "share",
    "d_in",
    "d_f",
    "d_out",
    "multicast",
)


def check_objective(objective: str) -> None:
    if objective not in ORDER:
        raise ValueError(f"unknown objective {objective!r} (choose: {', '.join(ORDER)})")
