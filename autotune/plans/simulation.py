"""A plan simulated step by step: each layer with its streams at their planned levels and
the weights it prefetches for later steps competing for the HBM and the L2 (``sim``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.mapping import Mapping
from autotune.ir.plan import NetworkPlan
from autotune.sim.result import SimResult
from autotune.sim.simulate import simulate as simulate_chiplet

#: ``simulate(layer, mapping, machine, precision, batch, placement, prefetch_bytes)``
Simulator = Callable[..., SimResult]


def simulate_plan(
    layers: Sequence[Layer],
    mappings: Sequence[Mapping],
    plan: NetworkPlan,
    machine: Machine,
    precision: str,
    batch: int,
    progress: Callable[[str], None] | None = None,
    simulate: Simulator = simulate_chiplet,
) -> list[SimResult]:
    """Every step simulated at its placement with its prefetches; identical steps once.
    ``simulate``: the simulator of one layer (``chiplets.simulate`` for a package)."""
    done: dict[tuple[object, ...], SimResult] = {}
    out = []
    for layer, mapping, step in zip(layers, mappings, plan.steps, strict=True):
        extra = plan.prefetch_bytes(step.name)
        key = (layer.shape_key(), mapping, step.placement, extra)
        if key not in done:
            done[key] = simulate(
                layer,
                mapping,
                machine,
                precision,
                batch,
                step.placement,
                extra,
            )
            if progress is not None:
                progress(layer.name)
        out.append(done[key])
    return out
