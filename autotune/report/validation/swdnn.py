"""Validation against swDNN on one SW26010 core group (seed 004, Table III).

swDNN (Fang et al., IPDPS 2017) reports the double-precision convolution performance of one
core group (64 CPEs, 36 GB/s DDR3) for batch ``B = 128``, ``K = 3`` (3x3 filters), a 64x64
output (66x66 input, stride 1, no padding) and four channel configurations (Table III):

    N_i / N_o   128/128   128/256   256/256   128/384
    GFlop/s       350       375       410       392

``swdnn_rows`` tunes each configuration with ``autotune.tune`` on the ``sw26010-cg`` preset
and predicts its performance as ``2 x MACs / seconds``, the seconds being the tuned
schedule's latency as ``tune`` reports it (the simulated cycles of the chosen mapping over
the clock). The row's ``ratio`` is predicted / measured.

Every number of the machine comes from the papers (``sw26010-cg.yaml``) except one:
``fpu_utilization``. With the paper's instruction-level execution efficiency (0.928, Sec. VI)
autotune predicted 688 GFlop/s for every row (ratios 1.97, 1.83, 1.68, 1.76: compute-bound
at 93% of peak, because the model has no LDM-to-register bandwidth, Sec. V-B Eq. 4-5, and
no register-communication cost). It is therefore fitted on row 1 alone (0.928 x 350 / 687.8
= 0.4722) and rows 2-4 are the judgement. ``unfitted_machine()`` gives the machine before
the fit.

Run: ``python benchmarks/bench_validation.py --only swdnn``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from autotune.api import tune
from autotune.ir.layer import Layer
from autotune.ir.machine import Machine
from autotune.ir.network import Network

#: seed 004, Table III: (N_i, N_o) -> measured double-precision GFlop/s of one core group.
TABLE_III = {(128, 128): 350.0, (128, 256): 375.0, (256, 256): 410.0, (128, 384): 392.0}
BATCH, KERNEL, OUT = 128, 3, 64
MACHINE = "sw26010-cg"
PRECISION = "fp64"
#: The preset's ``fpu_utilization`` before the fit on row 1: the paper's instruction-level
#: execution efficiency of the GEMM inner loop (seed 004 Sec. VI, 256/276 at N_i = 128).
UNFITTED_FPU_UTILIZATION = 0.928


def unfitted_machine() -> Machine:
    """``sw26010-cg`` with the paper's own execution efficiency instead of the fitted one."""
    return replace(Machine.preset(MACHINE), fpu_utilization=UNFITTED_FPU_UTILIZATION)


@dataclass(frozen=True)
class SwdnnRow:
    """One configuration of Table III against autotune's tuned schedule."""

    n_i: int
    n_o: int
    shape: str  # "B x N_i x H x W -> N_o x ...", kernel
    measured_gflops: float
    predicted_gflops: float
    ratio: float  # predicted / measured
    bound: str  # the model's classification of the chosen mapping
    simulated_cycles: int
    model_cycles: int
    algorithm: str
    mapping: str  # the chosen mapping, compactly
    hbm_gbs: float  # simulated main-memory traffic rate of the schedule

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def swdnn_layer(n_i: int, n_o: int) -> Layer:
    """The Table III layer: 66x66xN_i input, 3x3 filters, stride 1, no padding."""
    size = OUT + KERNEL - 1
    return Layer(f"swdnn_{n_i}_{n_o}", "conv", size, size, n_i, n_o, KERNEL, KERNEL)


def _describe(m) -> str:
    tile = m.tile
    parts = [
        f"dO={m.delta_o}",
        f"bt={m.batch_tile}",
        f"tile={tile.out_h or 'all'}x{tile.out_w or 'all'}x{tile.in_c}",
    ]
    if m.algorithm == "output_stack_shared":
        parts.append(f"share={m.share_group}")
    b = m.buffers
    parts.append(f"depth={b.input_depth}{b.filter_depth}{b.output_depth}")
    return " ".join(parts)


def swdnn_rows(
    configs: list[tuple[int, int]] | None = None,
    *,
    refine: bool = False,
    trials: int = 8,
    machine: Machine | str = MACHINE,
    time_limit: float | None = 60.0,
) -> list[SwdnnRow]:
    """Tune the Table III configurations (default: all four) and compare with swDNN.

    ``refine=False`` (default) takes the integer program's proven optimum under the cost
    model and simulates it; ``refine=True`` lets Optuna search ``trials`` mappings against the
    simulator as ``autotune tune`` does. Verification is off: executing a 128-image batch
    of these layers in numpy would take minutes per layer and tests nothing Table III does.
    """
    configs = list(TABLE_III) if configs is None else configs
    mach = Machine.preset(machine) if isinstance(machine, str) else machine
    layers = tuple(swdnn_layer(n_i, n_o) for n_i, n_o in configs)
    net = Network("swdnn_table3", layers, batch=BATCH, precision=PRECISION)
    result = tune(
        net,
        mach,
        refine=refine,
        verify=False,
        trials=trials,
        storage="memory",
        time_limit=time_limit,
    )
    rows = []
    for (n_i, n_o), r in zip(configs, result.layers, strict=True):
        simulated = r.simulated
        if simulated is None:  # tune simulates every layer
            raise ValueError(f"layer {r.layer.name} was not simulated")
        seconds = simulated.cycles / mach.clock_hz
        predicted = 2.0 * BATCH * r.layer.macs / seconds / 1e9
        measured = TABLE_III[(n_i, n_o)]
        rows.append(
            SwdnnRow(
                n_i=n_i,
                n_o=n_o,
                shape=f"{BATCH}x{n_i}x{r.layer.h_in}x{r.layer.w_in} -> {n_o}x{OUT}x{OUT}, "
                f"{KERNEL}x{KERNEL}",
                measured_gflops=measured,
                predicted_gflops=predicted,
                ratio=predicted / measured,
                bound=r.predicted.bound,
                simulated_cycles=simulated.cycles,
                model_cycles=r.predicted.cycles,
                algorithm=r.mapping.algorithm,
                mapping=_describe(r.mapping),
                hbm_gbs=simulated.hbm_bytes / seconds / 1e9,
            )
        )
    return rows


def format_rows(rows: list[SwdnnRow]) -> str:
    """A plain-text table of the rows."""
    head = (
        f"{'N_i/N_o':>8} {'measured':>9} {'predicted':>10} {'ratio':>6} {'bound':>8} "
        f"{'DDR GB/s':>9}  {'algorithm':<20} mapping"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.n_i:>4}/{r.n_o:<3} {r.measured_gflops:>9.0f} "
            f"{r.predicted_gflops:>10.1f} {r.ratio:>6.2f} {r.bound:>8} "
            f"{r.hbm_gbs:>9.1f}  {r.algorithm:<20} {r.mapping}"
        )
    return "\n".join(lines)
