"""Where a layer's operands live: the chiplet's main memory (HBM) or its shared L2.

A layer reads its input (all its operand tensors), its weights and the epilogue's residual,
and writes its output. Each of these streams comes from or goes to one memory level. Today's
per-layer tuning keeps everything in HBM (``HBM_ONLY``); a network plan keeps activations and
prefetched weights in the L2 (seed 002: "27-MB on-chip shared L2 memory for critical data
storage such as neural network weights"), and each layer is then costed with the level of
each of its streams.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from itertools import product
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from autotune.ir.machine import Machine

MemoryLevel = Literal["hbm", "l2"]
MEMORY_LEVELS: tuple[MemoryLevel, ...] = get_args(MemoryLevel)
#: The streams of a layer, in the order ``Placement``'s fields list them.
STREAMS = ("input", "weights", "residual", "output")


@dataclass(frozen=True)
class Placement:
    """The memory level of each stream of one layer (``hbm`` or ``l2``)."""

    input: MemoryLevel = "hbm"
    weights: MemoryLevel = "hbm"
    residual: MemoryLevel = "hbm"
    output: MemoryLevel = "hbm"

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) not in MEMORY_LEVELS:
                raise ValueError(
                    f"placement {f.name}: {getattr(self, f.name)!r} is not one of "
                    + ", ".join(MEMORY_LEVELS)
                )

    @property
    def uses_l2(self) -> bool:
        return any(getattr(self, s) == "l2" for s in STREAMS)

    def level(self, stream: str) -> MemoryLevel:
        """The memory level of ``stream`` (one of ``STREAMS``)."""
        if stream not in STREAMS:
            raise ValueError(f"unknown stream {stream!r} (one of {', '.join(STREAMS)})")
        level: MemoryLevel = getattr(self, stream)
        return level

    def of_layer(self, has_weights: bool, has_residual: bool) -> Placement:
        """This placement for a layer that may lack weights or a residual: a stream the layer
        does not have moves nothing, so it is put in HBM (equal placements then cost alike)."""
        return replace(
            self,
            weights=self.weights if has_weights else "hbm",
            residual=self.residual if has_residual else "hbm",
        )

    def check(self, machine: Machine) -> None:
        """Raise ``ValueError`` if a stream is placed in an L2 that ``machine`` lacks."""
        if self.uses_l2 and not machine.has_l2:
            raise ValueError(
                f"placement {self.label()}: machine {machine.name!r} has no L2 "
                "the DMA can reach (l2_size, l2_bandwidth); keep every stream in hbm"
            )

    def label(self) -> str:
        """A short name, e.g. ``in:l2 w:hbm out:l2`` (streams in L2 only: ``in,out@l2``)."""
        in_l2 = [s for s in STREAMS if getattr(self, s) == "l2"]
        return ",".join(in_l2) + "@l2" if in_l2 else "hbm"


HBM_ONLY = Placement()


def streams(has_weights: bool, has_residual: bool) -> tuple[str, ...]:
    """The streams a layer moves, in ``STREAMS`` order: a layer without weights or without
    a residual epilogue has no such stream, so its placement there means nothing."""
    return tuple(
        s for s in STREAMS if (s != "weights" or has_weights) and (s != "residual" or has_residual)
    )


def placements(has_weights: bool, has_residual: bool) -> tuple[Placement, ...]:
    """Every placement of a layer's streams (weights and residual only when it has them)."""
    choices = [
        MEMORY_LEVELS,
        MEMORY_LEVELS if has_weights else ("hbm",),
        MEMORY_LEVELS if has_residual else ("hbm",),
        MEMORY_LEVELS,
    ]
    return tuple(Placement(*levels) for levels in product(*choices))
