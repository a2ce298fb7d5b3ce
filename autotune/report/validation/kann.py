"""Validation against KaNN on the MPPA3 (seed 003, Sec. V): YOLOv3-416 at batch 1 in FP16.

Seed 003 (Sec. V): "Inference is performed using FP16.32 arithmetic, with KaNN targeting the
5 clusters of the MPPA3 processor ... When operating at 1.2 GHz, the performance is close to
20 FPS". ``validate_kann`` tunes ``examples/yolov3.yaml`` on the ``mppa3`` preset at fp16 and
batch 1 and sets the predicted frame rate (1 / the network latency ``autotune.tune``'s totals
report: simulated cycles of every conv layer) against that single measurement.

What the comparison can and cannot say:

* One data point. The preset's ``fpu_utilization`` (0.9) is an explicit assumption taken
  from Manticore (seed 002), NOT fitted to the 20 FPS: fitting the one number we have would
  leave nothing to judge. Other MPPA3 figures the seeds do not publish (DDR bandwidth, DMA
  width and set-up, latencies) are assumptions too, each stated in ``mppa3.yaml``.
* Only the 75 convolutions are timed. YOLOv3 also has 2 upsamplings, 4 routes (channel
  concatenations), 23 shortcut additions, leaky ReLUs and batch normalisations; KaNN folds
  batch norm, fuses the activations and eliminates concatenation copies (seed 003 Sec. IV),
  but the upsamplings and residual additions still move activations. autotune does not time
  them, so its frame rate is optimistic by their cost.
* KaNN's own strategy is reproduced too: every layer forced to the better (simulated) of
  KaNN's spatial and channel splitting (``search.space.kann_spatial`` / ``kann_channel``,
  seed 003 Sec. IV), which tells how much of the difference is the mapping and how much the
  machine model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from autotune.api import tune
from autotune.io.network_yaml import load_network
from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.network import Network
from autotune.ir.options import TuneOptions
from autotune.search.space import kann_channel, kann_spatial
from autotune.sim.simulate import simulate
from autotune.tiling import MappingError

#: The measurement (seed 003, Sec. V).
MEASURED_FPS = 20.0
SOURCE = (
    "seed 003 (Dupont de Dinechin et al., MPPA3), Sec. V: YOLOv3 416x416, FP16.32, "
    "KaNN on 5 clusters at 1.2 GHz, 'the performance is close to 20 FPS'"
)
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "yolov3.yaml"
#: YOLOv3's operators autotune does not time (darknet cfg/yolov3.cfg). Every other operator
#: of the full graph is: the 72 batch norms fold and the 72 leaky ReLUs and 23 shortcuts fuse
#: into the convolutions (as KaNN does), the 2 upsamples are layers, the 2 concat routes are
#: zero-copy (KaNN "eliminates the copies") and the 2 one-source routes are no operator.
UNTIMED = ("3 yolo detection heads (box decoding, after the network's last convolutions)",)


@dataclass(frozen=True)
class Contributor:
    """One layer's share of the predicted network time."""

    layer: str
    cycles: int
    share: float
    bound: str
    mapping: str
    kann_cycles: int | None


@dataclass(frozen=True)
class KannValidation:
    network: str
    layers: int
    precision: str
    batch: int
    clock_hz: float
    predicted_fps: float
    measured_fps: float
    ratio: float  # predicted / measured
    bound_layers: dict[str, int]  # layers per bound (compute / memory / latency)
    bound_time_share: dict[str, float]  # share of the predicted time per bound
    multicast_layers: int  # layers whose chosen mapping multicasts
    kann_fps: float | None  # every layer on KaNN's better strategy, simulated
    kann_strategy: dict[str, int]  # layers on spatial / channel splitting
    top: list[Contributor]
    untimed: tuple[str, ...] = UNTIMED
    source: str = SOURCE
    notes: list[str] = field(default_factory=list)
    plan: str = "per-layer"  # or "network": tensors kept in the clusters' L2 shares

    def summary(self) -> str:
        lines = [
            f"{self.network} on mppa3, {self.precision}, batch {self.batch}, "
            f"{self.layers} layers timed (the full graph, folded and fused), "
            f"{self.plan} plan",
            f"predicted {self.predicted_fps:.2f} FPS, measured {self.measured_fps:.0f} FPS "
            f"(ratio predicted/measured {self.ratio:.2f})",
        ]
        if self.kann_fps is not None:
            lines.append(
                f"KaNN's own strategies (better of spatial/channel per layer, "
                f"simulated): {self.kann_fps:.2f} FPS  {self.kann_strategy}"
            )
        lines.append(
            "bound (layers): " + ", ".join(f"{k} {v}" for k, v in self.bound_layers.items())
        )
        lines.append(
            "bound (time):   " + ", ".join(f"{k} {v:.0%}" for k, v in self.bound_time_share.items())
        )
        lines.append(f"layers mapped with multicast: {self.multicast_layers}")
        lines.append("largest contributors:")
        for c in self.top:
            kann = "" if c.kann_cycles is None else f", KaNN {c.kann_cycles} cycles"
            lines.append(
                f"  {c.layer:8} {c.cycles:>9} cycles {c.share:6.1%} {c.bound:8} {c.mapping}{kann}"
            )
        lines.append("not timed: " + "; ".join(self.untimed))
        lines.extend(self.notes)
        return "\n".join(lines)


def kann_cycles(
    layer: Layer, machine: Machine, precision: str, batch: int = 1
) -> tuple[int, str] | None:
    """Simulated cycles of the better of KaNN's two strategies for ``layer`` and its name
    ("spatial" / "channel"); None if neither fits."""
    best = None
    for name, make in (("spatial", kann_spatial), ("channel", kann_channel)):
        try:
            mapping = make(layer, machine, precision, batch)
        except MappingError:
            continue
        cycles = simulate(layer, mapping, machine, precision, batch).cycles
        if best is None or cycles < best[0]:
            best = (cycles, name)
    return best


def validate_kann(
    network: str | Path | Network = EXAMPLE,
    *,
    layers: int | None = None,
    refine: bool = True,
    trials: int = 24,
    kann: bool = True,
    top: int = 8,
    storage: str = "memory",
    precision: str = "fp16",
    plan: str = "per-layer",
) -> KannValidation:
    """Tune YOLOv3 on ``mppa3`` at fp16, batch 1, and compare with KaNN's 20 FPS.

    ``precision`` must be fp16, the only precision the MPPA3 preset computes (seed 003:
    FP16.32); anything else is refused with the machine's error. ``layers`` keeps only the
    first N conv layers (for fast tests: the frame rate is then of that prefix, not of the
    network). ``refine`` runs the Optuna refinement against the simulator (``trials`` per
    distinct shape: tune's defaults, about 1.5 minutes for the whole network on one core;
    ``refine=False`` takes half a minute). ``kann`` also simulates every layer under KaNN's
    better strategy. ``plan`` is ``per-layer`` (every tensor in DDR; the figure this
    validation has always reported) or ``network`` (the network plan keeps activations and
    prefetched weights in the L2 the preset makes of the clusters' local memories, as KaNN
    keeps activations there; ``benchmarks/bench_plan.py --machine mppa3`` compares the two).
    """
    net = network if isinstance(network, Network) else load_network(network)
    if layers is not None:
        net = Network(net.name, net.layers[:layers], net.batch, net.precision)
    machine = Machine.preset("mppa3")
    machine.check_precision(precision)
    result = tune(
        net,
        machine,
        options=TuneOptions(plan=plan),
        precision=precision,
        batch=1,
        refine=refine,
        verify=False,
        trials=trials,
        storage=storage,
    )
    total = result.totals.cycles
    predicted_fps = result.totals.images_per_s
    bound_layers = {"compute": 0, "memory": 0, "latency": 0}
    bound_cycles = {"compute": 0, "memory": 0, "latency": 0}
    for r in result.layers:
        cycles = r.cycles  # simulated: tune simulates every layer
        bound_layers[r.predicted.bound] += 1
        bound_cycles[r.predicted.bound] += cycles
    kann_of: dict[tuple[object, ...], tuple[int, str] | None] = {}
    kann_total, strategy = 0, {"spatial": 0, "channel": 0, "none": 0}
    if kann:
        for r in result.layers:
            key = r.layer.shape_key()
            if key not in kann_of:
                kann_of[key] = kann_cycles(r.layer, machine, "fp16", 1)
            found = kann_of[key]
            strategy["none" if found is None else found[1]] += 1
            kann_total += r.cycles if found is None else found[0]
    kann_cycles_of = {key: found[0] for key, found in kann_of.items() if found is not None}
    ranked = sorted(result.layers, key=lambda r: -r.cycles)[:top]
    contributors = [
        Contributor(
            r.layer.name,
            r.cycles,
            r.cycles / total,
            r.predicted.bound,
            _describe(r.mapping),
            kann_cycles_of.get(r.layer.shape_key()),
        )
        for r in ranked
    ]
    notes = [
        "predicted FPS = 1 / sum of every layer's simulated cycles at 1.2 GHz "
        "(autotune.tune totals): convolutions with their folded batch norms, fused leaky "
        "ReLUs and shortcuts, and the upsamples; fpu_utilization 0.9 is an assumption, "
        "not fitted"
    ]
    if strategy["none"]:
        notes.append(
            f"{strategy['none']} layers fit neither KaNN strategy: counted with autotune's mapping"
        )
    return KannValidation(
        network=net.name,
        layers=len(result.layers),
        precision="fp16",
        batch=1,
        clock_hz=machine.clock_hz,
        predicted_fps=predicted_fps,
        measured_fps=MEASURED_FPS,
        ratio=predicted_fps / MEASURED_FPS,
        bound_layers=bound_layers,
        bound_time_share={k: v / total for k, v in bound_cycles.items()},
        multicast_layers=sum(r.mapping.multicast for r in result.layers),
        kann_fps=machine.clock_hz / kann_total if kann and kann_total else None,
        kann_strategy=strategy if kann else {},
        top=contributors,
        notes=notes,
        plan="per-layer" if result.plan is None else "network",  # a prefix has no graph
    )


def _describe(mapping) -> str:
    t = mapping.tile
    tile = f"{t.out_h or '-'}x{t.out_w or '-'}"
    return f"{mapping.algorithm} d_o={mapping.delta_o} tile={tile} in_c={t.in_c}" + (
        " multicast" if mapping.multicast else ""
    )
