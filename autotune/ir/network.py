"""A network: the layers to tune, with the graph they come from (when there is one)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from autotune.ir.graph import Graph
from autotune.ir.layer import Layer
from autotune.ir.lowering import Lowering, lower


@dataclass(frozen=True)
class Network:
    """A named sequence of layers with the batch and precision they are run at.

    ``graph``: the operators the layers were lowered from (``autotune.ir.lowering``), and
    ``lowering`` what became of each one (folded, fused, a view, a concat slice, a layer);
    None for a network known only by its layers (a schedule file read back). ``weights``:
    the parameters the file gave, by operator and role (an ONNX model's), if any. ``skipped``
    lists imported operations that are not layers (the conv/fc-only ONNX reader).
    ``output_names``: the names the file gives the graph's outputs where they differ from
    the graph's (an ONNX model's output tensors), by graph tensor.
    """

    name: str
    layers: tuple[Layer, ...]
    batch: int = 1
    precision: str = "fp32"
    source: str | None = field(default=None, compare=False)
    skipped: tuple[str, ...] = field(default=(), compare=False)
    graph: Graph | None = field(default=None, compare=False)
    lowering: Lowering | None = field(default=None, compare=False)
    weights: Mapping[str, Mapping[str, np.ndarray]] | None = field(
        default=None, compare=False, repr=False
    )
    output_names: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of_graph(
        cls,
        graph: Graph,
        batch: int = 1,
        precision: str = "fp32",
        source: str | None = None,
        weights: Mapping[str, Mapping[str, np.ndarray]] | None = None,
        fuse: bool = True,
        output_names: Mapping[str, str] | None = None,
    ) -> Network:
        """The network of ``graph``'s lowered layers (raises ``GraphError``; ``fuse``:
        ``lowering.lower``'s)."""
        lowering = lower(graph, fuse)
        return cls(
            graph.name,
            lowering.layers,
            batch,
            precision,
            source=source,
            graph=graph,
            lowering=lowering,
            weights=weights,
            output_names=dict(output_names or {}),
        )

    @property
    def macs(self) -> int:
        """MACs of the whole network for the whole batch."""
        return self.batch * sum(layer.macs for layer in self.layers)

    def layer(self, name: str) -> Layer:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(f"no layer named {name!r} in network {self.name!r}")
