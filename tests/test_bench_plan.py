"""The plan benchmark's bounds (``benchmarks/bench_plan.py``): the chains its fused bound
would fuse, and that bound never above the unfused one."""

from __future__ import annotations

from dataclasses import replace
from types import ModuleType

import pytest

from autotune import Machine, load_network
from autotune.ir.options import TuneOptions
from autotune.plans import network_problem
from autotune.search.solve import solve_by_placement
from tests.conftest import ROOT, load_script

MBCONV = """\
network: mbconv
layers:
  - {name: stem, kind: conv, in: [16, 16, 3], out_channels: 8, kernel: 3, padding: 1}
  - {name: b1.dw, kind: conv, out_channels: 8, kernel: 3, padding: 1, groups: 8}
  - {name: b1.pw, kind: conv, out_channels: 8, kernel: 1}
  - {name: b2.expand, kind: conv, out_channels: 48, kernel: 1}
  - {name: b2.relu, kind: relu6}
  - {name: b2.dw, kind: conv, out_channels: 48, kernel: 3, stride: 2, padding: 1, groups: 48}
  - {name: b2.project, kind: conv, out_channels: 16, kernel: 1}
  - {name: b3.expand, kind: conv, out_channels: 96, kernel: 1}
  - {name: b3.dw, kind: conv, out_channels: 96, kernel: 3, padding: 1, groups: 96}
  - {name: side, kind: relu, inputs: [b3.dw]}
  - {name: b3.project, kind: conv, out_channels: 16, kernel: 1, inputs: [b3.dw]}
  - {name: cat, kind: concat, inputs: [b3.project, side]}
"""


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script("bench_plan")


def test_chains_are_depthwise_separable_runs_whose_inner_tensors_nothing_else_reads(
    bench, tmp_path
):
    path = tmp_path / "mbconv.yaml"
    path.write_text(MBCONV)
    net = load_network(path)
    names = [[net.layers[i].name for i in chain] for chain in bench.fusable_chains(net)]
    # b3's depthwise output is read twice: only its expand and depthwise pair
    assert names == [
        ["b1.dw", "b1.pw"],
        ["b2.expand", "b2.dw", "b2.project"],
        ["b3.expand", "b3.dw"],
    ]
    machine = Machine.preset("manticore")
    opts = TuneOptions(refine=False, verify=False, storage="memory", batch=1, precision="fp32")
    problem, _ = network_problem(net, machine, opts, solver=solve_by_placement)
    at_peak = bench.step_bound_terms(problem, net, machine, "fp32", 1)
    bounds = {k: bench.plan_bound(k, at_peak, net) for k in ("unfused", "pair", "fused")}
    assert 0 < bounds["fused"] <= bounds["pair"] < bounds["unfused"]
    # at the FPU's utilisation the MACs take longer: every bound rises, none falls
    at_fpu = bench.step_bound_terms(problem, net, machine, "fp32", 1, machine.fpu_utilization)
    assert all(bench.plan_bound(k, at_fpu, net) >= v for k, v in bounds.items())


def test_a_chain_splits_into_runs_of_one_or_two_neighbours(bench):
    assert bench._pair_splits(1) == [[[0]]]
    assert sorted(bench._pair_splits(3)) == [[[0], [1], [2]], [[0], [1, 2]], [[0, 1], [2]]]
    assert len(bench._pair_splits(5)) == 8  # Fibonacci: the tilings of a row by 1s and 2s


def test_resnet_bottlenecks_have_no_chain(bench):
    net = load_network(ROOT / "examples" / "resnet50.yaml")
    assert bench.fusable_chains(net) == []


def test_the_compute_bound_is_the_macs_at_the_fpu_utilisation(bench):
    """ResNet-50 at batch 1 is compute-bound: at the FPU's 90 % its MACs take longer than
    the network bound (at peak) by 1 / 0.9; at full utilisation the two agree."""
    net = load_network(ROOT / "examples" / "resnet50.yaml")
    machine = Machine.preset("manticore")
    bound = bench.network_bound(net, machine, "fp32", 1)
    compute = bench.compute_bound(net, machine, "fp32", 1)
    assert compute == pytest.approx(bound / machine.fpu_utilization, rel=1e-6)
    full = replace(machine, fpu_utilization=1.0)
    assert bench.compute_bound(net, full, "fp32", 2) == bench.network_bound(net, full, "fp32", 2)
