"""Seed 002, Fig. 9: the roofline of DNN training workloads on the full Manticore system.

The paper (Zaruba, Schuiki, Benini, IEEE Micro 2021, section "Roofline"): "The compute-bound
convolution layers in the workload reach >80% of the system's peak performance ... The
memory-bound linear and pooling layers reach >90% of the system's peak bandwidth", and the
overall performance "is almost identical to the convolution performance".

What is compared here. A network (ResNet-50 by default) is tuned on ``manticore`` (one
chiplet) and on ``manticore-package`` (the four-chiplet system, with chiplet splits) and each
conv/fc layer is placed on the roofline of the machine it ran on:

* classification by the roofline's definition: the operational intensity of the layer's
  *compulsory* traffic (every used input, weight and output word moved once,
  ``model.analysis.compulsory_words``; 2 flop per MAC) against the ridge point
  ``peak flop/s / HBM bytes/s``; at or above the ridge a layer is compute-bound;
* a compute-bound convolution's achievement: ``2 MACs / time / peak flop/s``;
* a memory-bound layer's achievement: ``off-chip bytes / time / HBM bandwidth`` (the bytes
  the schedule actually moves; the simulator's HBM bytes equal the model's);
* time: simulated cycles (the tile-level simulator), else predicted.

Batch. A training step runs a mini-batch; the default 8 gives every chiplet of the package
two images (so the ``images`` split has work for all four) and keeps the tuning of the 20
distinct ResNet-50 shapes on two machines within minutes. Only the forward convolutions and
the fc layer are tuned (autotune maps conv/fc layers; the backward pass, pooling and
element-wise layers of the paper's training step are not modelled).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from autotune.api import tune
from autotune.ir.precision import word_bytes
from autotune.model.analysis import compulsory_words

#: The paper's lines: compute-bound convolutions > 80 % of peak flop/s, memory-bound layers
#: > 90 % of peak bandwidth (seed 002, Roofline).
COMPUTE_LINE = 0.80
MEMORY_LINE = 0.90
DEFAULT_BATCH = 8
MACHINES = ("manticore", "manticore-package")
NETWORK = Path(__file__).resolve().parents[3] / "examples" / "resnet50.yaml"


@dataclass(frozen=True)
class LayerPoint:
    """One layer on the roofline of the machine it ran on."""

    name: str
    kind: str
    split: str
    macs: int  # whole batch
    compulsory_bytes: int
    intensity: float  # flop per compulsory byte
    ridge: float  # the machine's ridge point, flop per byte
    bound: str  # "compute" or "memory" (roofline classification)
    cycles: int
    offchip_bytes: int
    peak_fraction: float  # 2 MACs / time / peak flop/s
    bandwidth_fraction: float  # off-chip bytes / time / HBM bandwidth


@dataclass(frozen=True)
class Summary:
    count: int
    min: float
    median: float
    max: float
    above: int  # how many clear the paper's line

    @classmethod
    def of(cls, values: list[float], line: float) -> Summary:
        if not values:
            return cls(0, float("nan"), float("nan"), float("nan"), 0)
        return cls(
            len(values),
            min(values),
            statistics.median(values),
            max(values),
            sum(v > line for v in values),
        )


@dataclass(frozen=True)
class Fig9:
    """The figure for one machine."""

    machine: str
    network: str
    batch: int
    precision: str
    points: list[LayerPoint]
    overall_peak_fraction: float
    wall_s: float

    @property
    def compute(self) -> Summary:
        """Compute-bound convolutions: fraction of peak flop/s."""
        return Summary.of(
            [p.peak_fraction for p in self.points if p.bound == "compute" and p.kind == "conv"],
            COMPUTE_LINE,
        )

    @property
    def memory(self) -> Summary:
        """Memory-bound layers: fraction of peak bandwidth."""
        return Summary.of(
            [p.bandwidth_fraction for p in self.points if p.bound == "memory"], MEMORY_LINE
        )


def classify(layer, machine, precision: str, batch: int) -> tuple[float, float, str, int]:
    """(intensity, ridge, bound, compulsory bytes) of a layer on ``machine``'s roofline."""
    loads, stores = compulsory_words(layer, batch)
    nbytes = (loads + stores) * word_bytes(precision)
    intensity = 2 * batch * layer.macs / nbytes
    ridge = machine.peak_flops(precision) / machine.hbm_bytes_per_s
    return intensity, ridge, "compute" if intensity >= ridge else "memory", nbytes


def points(result) -> list[LayerPoint]:
    """Every layer of a ``TuneResult`` on its machine's roofline."""
    machine, precision, batch = result.machine, result.precision, result.batch
    out = []
    for r in result.layers:
        intensity, ridge, bound, nbytes = classify(r.layer, machine, precision, batch)
        cycles = r.simulated.cycles if r.simulated is not None else r.predicted.cycles
        offchip = r.simulated.hbm_bytes if r.simulated is not None else r.predicted.offchip_bytes
        seconds = cycles / machine.clock_hz
        out.append(
            LayerPoint(
                r.layer.name,
                r.layer.kind,
                r.mapping.chiplet_split,
                r.predicted.macs,
                nbytes,
                intensity,
                ridge,
                bound,
                cycles,
                offchip,
                2 * r.predicted.macs / seconds / machine.peak_flops(precision),
                offchip / seconds / machine.hbm_bytes_per_s,
            )
        )
    return out


def fig9(
    network=NETWORK,
    machines: tuple[str, ...] = MACHINES,
    *,
    batch: int = DEFAULT_BATCH,
    precision: str = "fp32",
    refine: bool = False,
    verify: bool = False,
    storage: str | None = "memory",
    trials: int | None = None,
    progress=False,
) -> list[Fig9]:
    """Tune ``network`` on each machine and place its layers on that machine's roofline.

    ``network`` is a path or a ``Network`` (e.g. a few layers for a quick check).
    """
    figures = []
    for name in machines:
        start = time.perf_counter()
        result = tune(
            network,
            name,
            precision=precision,
            batch=batch,
            refine=refine,
            verify=verify,
            storage=storage,
            trials=trials,
            progress=progress,
        )
        figures.append(
            Fig9(
                name,
                result.network,
                batch,
                precision,
                points(result),
                result.totals.peak_fraction,
                time.perf_counter() - start,
            )
        )
    return figures


def report(figures: list[Fig9]) -> str:
    """The figures as text: per machine, the two summaries against the paper's lines."""
    lines = []
    for f in figures:
        c, m = f.compute, f.memory
        lines.append(
            f"{f.network} on {f.machine} (batch {f.batch}, {f.precision}, "
            f"tuned in {f.wall_s:.0f} s): ridge {f.points[0].ridge:.1f} flop/B"
        )
        lines.append(
            f"  compute-bound conv layers: {c.count}, % of peak flop/s min "
            f"{100 * c.min:.1f} median {100 * c.median:.1f} max {100 * c.max:.1f}; "
            f"{c.above} of {c.count} above the paper's {100 * COMPUTE_LINE:.0f} %"
        )
        lines.append(
            f"  memory-bound layers: {m.count}, % of peak bandwidth min "
            f"{100 * m.min:.1f} median {100 * m.median:.1f} max {100 * m.max:.1f}; "
            f"{m.above} of {m.count} above the paper's {100 * MEMORY_LINE:.0f} %"
        )
        lines.append(f"  network overall: {100 * f.overall_peak_fraction:.1f} % of peak flop/s")
    return "\n".join(lines)


def main() -> None:
    print(report(fig9(progress=True)))


if __name__ == "__main__":
    main()
