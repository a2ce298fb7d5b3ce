"""Whole networks as graphs: import, end-to-end verification, whole-network simulation, and
what folding and fusion save.

For each example network (full graphs, batch 1, fp32, the manticore chiplet):

1. ONNX: the graph written as an ONNX model with seeded weights (``io.onnx_export``), read
   back (``load_onnx_graph``; target < 5 s), the same operators; onnxruntime's outputs
   against the independent reference (relative error).
2. Tuned with the integer program only (no refinement), then simulated layer after layer
   (``simulate_schedule``; target < 10 s) and executed end to end through the tiled
   schedules against the reference (``verify_network_schedule``; target for ResNet-50 < 60 s
   and < 4 GiB peak memory of this process).
3. The same network lowered without folding or fusion (``lower(fuse=False)``: every batch
   norm, activation and add its own layer, concat operands copied), tuned and simulated:
   the share of simulated time in layers that are not conv or fc, before and after.

Run:  python benchmarks/bench_graphs.py [--networks resnet50,mobilenetv2] [--no-e2e]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

import autotune
from autotune.api import simulate_schedule, tune_network, verify_network_schedule
from autotune.graphs.reference import run_reference
from autotune.graphs.weights import seeded_weights
from autotune.io.network_yaml import load_network
from autotune.io.onnx_export import save_onnx
from autotune.io.onnx_import import load_onnx_graph
from autotune.ir.network import Network
from autotune.ir.options import TuneOptions

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NETWORKS = ("resnet50", "mobilenetv2", "googlenet", "yolov3", "mobilenetv3")


def peak_rss_gib() -> float:
    """This process's peak resident memory so far (Linux: KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def non_conv_share(network: Network, options: TuneOptions) -> tuple[int, float, Counter[str]]:
    """(simulated cycles, share in non conv/fc layers, cycles by kind) of the network tuned
    with the integer program only."""
    machine = autotune.Machine.preset("manticore")
    result = tune_network(network, machine, options, lambda stage, name: None)
    by_kind: Counter[str] = Counter()
    for r in result.layers:
        assert r.simulated is not None
        by_kind[r.layer.kind] += r.simulated.cycles
    total = sum(by_kind.values())
    other = total - by_kind["conv"] - by_kind["fc"]
    return total, other / total, by_kind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--networks", default=",".join(NETWORKS))
    parser.add_argument("--no-e2e", action="store_true", help="skip end-to-end execution")
    args = parser.parse_args()
    import onnxruntime as ort  # the test extra: a reference, never a runtime dependency

    options = TuneOptions(refine=False, verify=False, storage="memory", processes=1)
    folder = Path(tempfile.mkdtemp(prefix="bench_graphs_"))
    for name in args.networks.split(","):
        network = load_network(EXAMPLES / f"{name}.yaml")
        assert network.graph is not None
        weights = seeded_weights(network.graph, 0)
        print(f"== {name}: {len(network.graph.ops)} operators, {len(network.layers)} layers")

        path = folder / f"{name}.onnx"
        save_onnx(network.graph, weights, path)
        t0 = time.perf_counter()
        imported = load_onnx_graph(path)
        t_import = time.perf_counter() - t0
        same = [(o.kind, o.shape) for o in imported.graph.ops] == [
            (o.kind, o.shape) for o in network.graph.ops
        ]
        h, w, c = network.graph.inputs[0][1]
        x = np.random.default_rng(0).uniform(-1, 1, (1, c, h, w)).astype(np.float32)
        t0 = time.perf_counter()
        reference = run_reference(network.graph, {"input": x}, weights)
        t_ref = time.perf_counter() - t0
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        outs = session.run(None, {"input": x})
        err = max(
            float(np.abs(reference[o].reshape(v.shape) - v).max() / np.abs(v).max())
            for o, v in zip(network.graph.outputs, outs, strict=True)
        )
        print(
            f"onnx: import {t_import:.2f} s (target < 5 s), same operators: {same}; "
            f"reference {t_ref:.1f} s, onnxruntime vs reference: relative error {err:.1e}"
        )

        machine = autotune.Machine.preset("manticore")
        t0 = time.perf_counter()
        result = tune_network(network, machine, options, lambda stage, layer: None)
        t_tune = time.perf_counter() - t0
        t0 = time.perf_counter()
        runs = simulate_schedule(result)
        t_sim = time.perf_counter() - t0
        cycles = sum(sim.cycles for _, sim in runs)
        print(
            f"tune (integer program): {t_tune:.1f} s; whole-network simulation {t_sim:.2f} s "
            f"(target < 10 s): {cycles:,} cycles, "
            f"{machine.clock_hz / cycles:,.1f} images/s"
        )
        if not args.no_e2e:
            t0 = time.perf_counter()
            check = verify_network_schedule(result, network)
            t_e2e = time.perf_counter() - t0
            assert check is not None
            print(
                f"end to end: {t_e2e:.1f} s (target < 60 s for ResNet-50), peak memory "
                f"{peak_rss_gib():.2f} GiB (target < 4), {len(check.tensors)} tensors, worst "
                f"relative error {check.max_rel_error:.1e}: {'ok' if check.ok else 'FAILED'}"
            )

        fused_total, fused_share, fused_kinds = non_conv_share(network, options)
        plain = Network.of_graph(network.graph, network.batch, network.precision, fuse=False)
        plain_total, plain_share, plain_kinds = non_conv_share(plain, options)
        print(
            f"non-conv time: without folding/fusion {plain_share:.1%} of {plain_total:,} "
            f"cycles ({len(plain.layers)} layers: "
            + ", ".join(f"{k} {v:,}" for k, v in plain_kinds.most_common())
            + f"); folded and fused {fused_share:.1%} of {fused_total:,} cycles "
            f"({len(network.layers)} layers: "
            + ", ".join(f"{k} {v:,}" for k, v in fused_kinds.most_common())
            + f"); speed-up {plain_total / fused_total:.2f}x"
        )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
