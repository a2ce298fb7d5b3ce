"""Network plans against per-layer schedules: simulated cycles, HBM bytes, L2 peak, CP-SAT.

For each network and each L2 bandwidth of the sweep (1x, 2x, 4x the chiplet's HBM bandwidth;
the machine file's default is 2x, an assumption), the same run builds every step's options
(the integer program per placement), then four plans of them: ``per-layer`` (today's: all
in HBM), ``greedy`` (first-fit L2 allocation, each step the option its levels allow), the
network CP-SAT without depthwise fusion (``unfused``: ``--no-fuse``) and with it (``network``,
as ``tune`` plans: the CP-SAT fuses a depthwise conv into the 1x1 after it where that pays,
``autotune.ir.fusion``); and simulates each plan step by step (``plans.simulation``). It
prints:

* predicted and simulated network cycles of each plan and the speed-up over per-layer;
* the network bound: max(peak MACs, compulsory HBM bytes at the HBM bandwidth), compulsory
  = the weights once plus the network's inputs and outputs; the plan's share of it;
* HBM bytes against compulsory, the L2 high-water mark, the CP-SAT's status, gap and time;
* the unfused bound: what any plan that runs the network layer by layer (each layer's input
  read from and its output written to HBM or L2, as every plan here does) cannot beat. Per
  step, max(its MACs at peak, the bytes it must read and, apart, the bytes it must write at
  what the quadrant tree carries into and out of the level the L2 sits at (the top level's
  fanout x its children's uplinks, per direction: Manticore 2 x 128 B/cycle); summed. The
  L2 sits beside the HBM at the chiplet root (seed 002, Fig. 2), so a faster L2 does not
  raise it; only keeping data inside the clusters across layers (fusion) would. Printed
  again with the MACs at the FPU's utilisation (the machine file's; 90 % on Manticore, seed
  002), the rate every schedule of the model and the simulator computes at: the figure a
  layer-by-layer plan can reach on this machine, which settles whether a target is in reach.
* the pair bound: the same, where each chain below may run one pair of neighbours as one
  step (an expansion and its depthwise, or a depthwise and the 1x1 after it), at the best of
  its splits: what the plans here (``ir.fusion``) cannot beat, however well they map.
* the fused bound: the same, where each chain of a 1x1 conv, a depthwise conv and a 1x1
  conv (MobileNet's inverted residual; or two of them) whose inner tensors have no other
  reader ran as one step that keeps those tensors in the clusters: the chain's MACs at peak,
  its outside reads and its last write through the tree. What fusing such chains could gain
  at most (the plan fuses the depthwise-then-1x1 pairs only, and recomputes the depthwise
  once per output stack). Also printed with the MACs at the FPU's utilisation.
* the compute bound: the network's MACs at the FPU utilisation of the machine file (90 % on
  Manticore, seed 002), the rate every schedule computes at: the speed-up over per-layer no
  plan can pass, however it keeps data (ResNet-50 at batch 1 is compute-bound).

    python benchmarks/bench_plan.py [--networks mobilenetv2,resnet50] [--sweep 1,2,4]
        [--batches 1,4,16,64] [--time-limit 60] [--machine manticore] [--precision fp16]

The precision is the network file's unless ``--precision`` says otherwise; on a machine
that does not compute it and computes one precision only, that one (MPPA3: fp16, as KaNN
converts FP32 operators, seed 003 Sec. IV). Each plan's line ends with its images/s: the
batch over its simulated seconds (clock / cycles at batch 1, as ``bench_validation``'s FPS).

``--batches`` adds a batch sweep (at the default bandwidth) of the first network: the largest
set of live activations against the L2, and throughput per batch.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmark this tree, not an installed copy

from autotune import Layer, Machine, load_network  # noqa: E402
from autotune.chiplets import simulate, solve_by_placement  # noqa: E402
from autotune.ir.lowering import TensorRef  # noqa: E402
from autotune.ir.network import Network  # noqa: E402
from autotune.ir.options import TuneOptions  # noqa: E402
from autotune.ir.plan import NetworkPlan  # noqa: E402
from autotune.ir.precision import word_bytes  # noqa: E402
from autotune.plans import (  # noqa: E402
    fused_network,
    greedy_plan,
    network_problem,
    per_layer_plan,
    solve_network_plan,
)
from autotune.plans.problem import PlanProblem  # noqa: E402
from autotune.plans.simulation import simulate_plan  # noqa: E402

EXAMPLES = ROOT / "examples"


def compulsory_bytes(network: Network, precision: str, batch: int) -> int:
    """Weights once, the network's inputs and outputs (the HBM traffic no plan avoids)."""
    assert network.lowering is not None
    wb = word_bytes(precision)
    weights = sum(layer.weight_words for layer in network.layers) * wb
    io = 0
    outputs = {ref.buffer for ref in network.lowering.outputs}
    for buffer in network.lowering.buffers:
        if buffer.producer is None or buffer.name in outputs:
            h, w, c = buffer.shape
            io += batch * h * w * c * wb
    return weights + io


def peak_compute_cycles(network: Network, machine: Machine, precision: str, batch: int) -> float:
    """The network's MACs at the machine's peak MAC rate."""
    macs = batch * sum(layer.macs for layer in network.layers)
    return macs / machine.peak_macs_per_cycle(precision)


def network_bound(network: Network, machine: Machine, precision: str, batch: int) -> int:
    compute = peak_compute_cycles(network, machine, precision, batch)
    hbm = machine.hbm_bytes_per_s / machine.clock_hz  # every chiplet's HBM
    memory = compulsory_bytes(network, precision, batch) / hbm
    return int(max(compute, memory))


def compute_bound(network: Network, machine: Machine, precision: str, batch: int) -> int:
    """The network's MACs at the FPU utilisation the machine file gives (Manticore: 90 %,
    seed 002's measured matrix multiplications): what the clusters need to compute it
    whatever the plan keeps where, since every schedule the model or the simulator knows
    computes at that rate. A plan faster than per-layer by more than per-layer's cycles over
    this is out of reach on this machine."""
    return int(peak_compute_cycles(network, machine, precision, batch) / machine.fpu_utilization)


def tree_bytes_per_cycle(machine: Machine) -> float:
    """Per direction, what the quadrant tree carries into its top level from below (the top
    level's fanout x its children's uplinks; the clusters' DMA when the tree has one level),
    on every chiplet."""
    top = machine.levels[-1]
    below = (
        machine.levels[-2].uplink_bytes_per_cycle
        if len(machine.levels) > 1
        else machine.dma_bytes_per_cycle
    )
    return top.fanout * below * machine.chiplets


def _conv_kind(layer: Layer) -> str:
    """``pw`` for a dense 1x1 conv, ``dw`` for a depthwise one, else ``""``."""
    if layer.kind != "conv":
        return ""
    if layer.kernel_h == layer.kernel_w == 1 and layer.groups == 1:
        return "pw"
    return "dw" if layer.is_depthwise else ""


def fusable_chains(network: Network) -> list[list[int]]:
    """Runs of consecutive steps: 1x1 conv, depthwise conv, 1x1 conv (or a 1x1 and a
    depthwise, or a depthwise and a 1x1), each reading only the previous one's output, which
    nothing else reads and which is not a network output."""
    assert network.lowering is not None
    steps = network.lowering.steps
    readers: dict[str, int] = {}
    for step in steps:
        for ref in (*step.inputs, step.residual, step.gate):
            if ref is not None:
                readers[ref.buffer] = readers.get(ref.buffer, 0) + 1
    outputs = {ref.buffer for ref in network.lowering.outputs}

    def feeds(i: int) -> bool:  # step i's output is step i + 1's only input, read once
        a, b = steps[i], steps[i + 1]
        out = a.output.buffer
        return (
            len(b.inputs) == 1
            and b.inputs[0].buffer == out
            and readers.get(out) == 1
            and out not in outputs
        )

    chains, i = [], 0
    while i < len(steps) - 1:
        kinds = [_conv_kind(s.layer) for s in steps[i : i + 3]]
        if kinds[:3] == ["pw", "dw", "pw"] and feeds(i) and feeds(i + 1):
            chains.append([i, i + 1, i + 2])
            i += 3
        elif kinds[:2] in (["pw", "dw"], ["dw", "pw"]) and feeds(i):
            chains.append([i, i + 1])
            i += 2
        else:
            i += 1
    return chains


class StepTerms(NamedTuple):
    """A step's terms of ``plan_bound``, in cycles: its MACs at peak, its reads and its
    write through the tree; ``input_reads`` is the part of ``reads`` that is its inputs."""

    compute: float
    reads: float
    write: float
    input_reads: float


def step_bound_terms(
    problem: PlanProblem,
    network: Network,
    machine: Machine,
    precision: str,
    batch: int,
    utilization: float = 1.0,
) -> list[StepTerms]:
    """Every step's ``StepTerms``; its MACs at ``utilization`` of the peak (1: the peak;
    the machine file's ``fpu_utilization``: the rate every schedule the model and the
    simulator know computes at, seed 002's measured 90 % on Manticore)."""
    assert network.lowering is not None
    peak = machine.peak_macs_per_cycle(precision) * utilization
    tree = tree_bytes_per_cycle(machine)
    wb = word_bytes(precision)

    def volume(ref: TensorRef | None) -> float:
        return 0.0 if ref is None else batch * math.prod(ref.stored) * wb

    terms = []
    for i, (layer, step) in enumerate(zip(network.layers, network.lowering.steps, strict=True)):
        # a stride above the kernel skips input pixels: only the touched share is compulsory
        touched = min(1.0, layer.kernel_h / layer.stride_h) * min(
            1.0, layer.kernel_w / layer.stride_w
        )
        weights = sum(
            t.bytes
            for t in problem.tensors
            if t.role == "weights" and i in t.readers and t.name not in problem.pair_weights
        )
        inputs = touched * sum(volume(ref) for ref in step.inputs)
        reads = weights + inputs + volume(step.residual) + volume(step.gate)
        terms.append(
            StepTerms(
                batch * layer.macs / peak, reads / tree, volume(step.output) / tree, inputs / tree
            )
        )
    return terms


def plan_bound(kind: str, terms: Sequence[StepTerms], network: Network) -> int:
    """The least cycles of any plan of ``kind`` (module docstring): per step the most of its
    ``terms`` (``step_bound_terms``: its MACs, its compulsory reads and its compulsory write
    through the tree), summed; each of ``fusable_chains`` at the best grouping of its steps
    the kind allows (``BOUND_SPLITS``): ``unfused``, layer by layer; ``pair``, a pair of
    neighbours as one step at most, as the plans here fuse (``ir.fusion``: an expansion with
    its depthwise or a depthwise with the 1x1 after it, not all three); ``fused``, the whole
    chain as one. What a step reads and writes are its refs (a DenseNet layer reads a slice
    of its block's concat buffer and writes another, not the whole buffer), and its
    weights."""
    chains = {chain[0]: chain for chain in fusable_chains(network)}
    inner = {i for chain in chains.values() for i in chain[1:]}
    total = 0.0
    for i in range(len(terms)):
        if i in inner:
            continue
        chain = [terms[j] for j in chains.get(i, [i])]
        total += min(
            sum(_run_cycles([chain[j] for j in run]) for run in split)
            for split in BOUND_SPLITS[kind](len(chain))
        )
    return int(total)


def _pair_splits(n: int) -> list[list[list[int]]]:
    """The ways to cut steps ``0..n-1`` into runs of one or two neighbours."""
    if n == 0:
        return [[]]
    splits = []
    for first in ([0], [0, 1])[: min(n, 2)]:
        k = len(first)
        splits += [[first, *[[j + k for j in run] for run in rest]] for rest in _pair_splits(n - k)]
    return splits


def _run_cycles(run: Sequence[StepTerms]) -> float:
    """The bound of ``run`` as one step: its MACs summed, its reads less the inner tensors'
    (their writes gone with them: only the last writes), its last write."""
    reads = sum(t.reads for t in run) - sum(t.input_reads for t in run[1:])
    return max(sum(t.compute for t in run), reads, run[-1].write)


#: How a plan of each kind may group a chain of ``n`` steps: the ways, each a list of runs
#: of step indices, one run fused into one step (``plan_bound``).
BOUND_SPLITS: dict[str, Callable[[int], list[list[list[int]]]]] = {
    "unfused": lambda n: [[[j] for j in range(n)]],
    "pair": _pair_splits,
    "fused": lambda n: [[list(range(n))]],
}


def simulated(
    problem: PlanProblem, plan: NetworkPlan, network: Network, machine: Machine, opts: TuneOptions
) -> int:
    """The plan's steps simulated (a fused step: the fused layer's option at its placement)."""
    index = {name: i for i, name in enumerate(problem.steps)}
    mappings = []
    for step in plan.steps:
        role = "fused" if step.name in plan.fused else "own"
        mappings.append(
            next(
                o.mapping
                for o in problem.options[index[step.name]]
                if o.role == role and o.placement == step.placement
            )
        )
    runs = simulate_plan(
        fused_network(network, plan.fused).layers,
        mappings,
        plan,
        machine,
        str(opts.precision),
        int(opts.batch or 1),
        simulate=simulate,
    )
    return sum(r.cycles for r in runs)


def without_fusion(problem: PlanProblem) -> PlanProblem:
    """The same problem without its fused options (``--no-fuse``)."""
    return replace(
        problem,
        options=tuple(tuple(o for o in row if o.role == "own") for row in problem.options),
        tensors=tuple(t for t in problem.tensors if t.name not in problem.pair_weights),
        fused=(),
    )


def precision_of(network: Network, machine: Machine, asked: str | None) -> str:
    """``asked``, else the network's precision if the machine computes it, else the
    machine's only one."""
    if asked:
        return asked
    if machine.supports(network.precision):
        return network.precision
    offered = sorted(machine.macs_per_cycle_per_core)
    if len(offered) != 1:
        raise SystemExit(
            f"{machine.name} does not compute {network.name}'s {network.precision}: "
            f"pass --precision (one of {', '.join(offered)})"
        )
    return offered[0]


def run(
    name: str, machine: Machine, batch: int, time_limit: float, precision: str | None = None
) -> dict[str, float]:
    # an example by name, or any network file (YAML or ONNX) by path
    path = Path(name) if Path(name).suffix.lower() in (".yaml", ".yml", ".onnx") else None
    network = load_network(path or EXAMPLES / f"{name}.yaml")
    precision = precision_of(network, machine, precision)
    opts = TuneOptions(
        refine=False,
        verify=False,
        storage="memory",
        batch=batch,
        precision=precision,
        plan_time_limit=time_limit,
    )
    t0 = time.perf_counter()
    problem, _ = network_problem(network, machine, opts, solver=solve_by_placement)
    t_options = time.perf_counter() - t0
    n_options = sum(len(o) for o in problem.options)
    base = per_layer_plan(problem)
    greedy = greedy_plan(problem)
    t0 = time.perf_counter()
    unfused_plan = solve_network_plan(without_fusion(problem), time_limit, 1, 0)
    t_unfused = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = solve_network_plan(problem, time_limit, 1, 0)  # as ``tune`` solves it
    t_solve = time.perf_counter() - t0
    bound = network_bound(network, machine, precision, batch)
    compulsory = compulsory_bytes(network, precision, batch)
    plans = (base, greedy, unfused_plan, plan)
    s_base, s_greedy, s_unfused, s_plan = (
        simulated(problem, p, network, machine, opts) for p in plans
    )
    # a step that absorbs its expansion is a depthwise (the other kind: a 1x1)
    expansions = sum(
        1 for name in plan.fused if network.layers[problem.steps.index(name)].groups > 1
    )
    print(
        f"  {precision}; options: {n_options} ({len(problem.steps)} steps, "
        f"{len(problem.fused)} fusable pairs) in {t_options:.1f} s; CP-SAT {plan.status} in "
        f"{t_solve:.1f} s, gap {plan.gap:.2%} (without fusion {unfused_plan.status} in "
        f"{t_unfused:.1f} s); the plan fuses {len(plan.fused)} pairs ({expansions} of them "
        f"an expansion into its depthwise)"
    )
    for label, p, s in (
        ("per-layer", base, s_base),
        ("greedy", greedy, s_greedy),
        ("unfused", unfused_plan, s_unfused),
        ("network", plan, s_plan),
    ):
        print(
            f"  {label:9s} predicted {p.cycles:>10,}  simulated {s:>10,}  "
            f"x{s_base / s:5.2f} vs per-layer  {bound / s:6.1%} of bound  "
            f"HBM {p.hbm_bytes / 1e6:8.2f} MB ({p.hbm_bytes / compulsory:5.2f}x compulsory)  "
            f"L2 peak {p.l2_peak_bytes / 1e6:6.2f} MB  "
            f"{batch * machine.clock_hz / s:,.2f} images/s"
        )
    live = max(
        sum(t.bytes for t in problem.tensors if t.role == "activation" and t.first <= i <= t.last)
        for i in range(len(problem.steps))
    )
    fpu = machine.fpu_utilization
    at_peak = step_bound_terms(problem, network, machine, precision, batch)
    at_fpu = step_bound_terms(problem, network, machine, precision, batch, fpu)
    chains = fusable_chains(network)
    what = {
        "unfused": "no layer-by-layer plan is faster",
        "pair": "a chain fuses two neighbours at most, as these plans do",
        "fused": f"{len(chains)} depthwise-separable chains of {sum(map(len, chains))} "
        "steps, each one step",
    }
    bounds = {}
    for kind in ("unfused", "pair", "fused") if chains else ("unfused",):
        peak, at = plan_bound(kind, at_peak, network), plan_bound(kind, at_fpu, network)
        bounds[kind], bounds[f"{kind}_fpu"] = peak, at
        print(
            f"  {kind} bound {peak:,} cycles ({what[kind]}): at most {bound / peak:.1%} of the "
            f"network bound and x{s_base / peak:.2f} vs per-layer; the plan reaches "
            f"{peak / s_plan:.1%} of it"
        )
        print(
            f"    with the MACs at the FPU's {fpu:.0%}: {at:,} cycles, at most "
            f"{bound / at:.1%} of the network bound and x{s_base / at:.2f}"
        )
    compute = compute_bound(network, machine, precision, batch)
    print(
        f"  compute at the FPU's {machine.fpu_utilization:.0%} (the machine file's "
        f"utilisation) {compute:,} cycles: no plan is faster than x{s_base / compute:.2f} "
        f"vs per-layer; the plan reaches {compute / s_plan:.1%} of it"
    )
    print(
        f"  network bound {bound:,} cycles; compulsory HBM {compulsory / 1e6:.2f} MB; "
        f"most activation bytes live at once {live / 1e6:.2f} MB "
        f"({'fits' if live <= machine.l2_bytes else 'exceeds'} the "
        f"{machine.l2_bytes / 1e6:g} MB L2)"
    )
    sys.stdout.flush()
    return {
        "per_layer": s_base,
        "greedy": s_greedy,
        "unfused_plan": s_unfused,
        "plan": s_plan,
        "bound": bound,
        **bounds,
        "compute": compute,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--networks",
        default="mobilenetv2,resnet50",
        help="comma list of example names or network files (.yaml, .onnx)",
    )
    parser.add_argument("--sweep", default="1,2,4", help="L2 bandwidth / HBM bandwidth")
    parser.add_argument("--batches", default="", help="batch sweep of the first network")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--machine", default="manticore", help="a preset with an L2")
    parser.add_argument(
        "--precision", default=None, help="default: the network's (module docstring)"
    )
    args = parser.parse_args()
    base = Machine.preset(args.machine)
    for name in args.networks.split(","):
        for factor in [float(f) for f in args.sweep.split(",")]:
            machine = replace(base, l2_bytes_per_cycle=factor * base.hbm_bytes_per_cycle)
            print(
                f"== {name}, batch 1, L2 bandwidth {factor:g}x HBM "
                f"({machine.l2_bytes_per_cycle:g} B/cycle)"
            )
            run(name, machine, 1, args.time_limit, args.precision)
    if args.batches:
        name = args.networks.split(",")[0]
        for batch in [int(b) for b in args.batches.split(",")]:
            print(f"== {name}, batch {batch}, default L2 bandwidth")
            r = run(name, base, batch, args.time_limit, args.precision)
            print(
                f"  throughput: per-layer {batch * base.clock_hz / r['per_layer']:,.0f} "
                f"images/s, network plan {batch * base.clock_hz / r['plan']:,.0f} images/s"
            )


if __name__ == "__main__":
    main()
