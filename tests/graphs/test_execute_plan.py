"""A whole network executed in the L2 layout of a network plan: live tensors that share L2
bytes corrupt each other and the end-to-end check sees it; bytes reused after a tensor dies
do not; a plan that does not fit the network is refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from autotune import TuneOptions
from autotune.api import solve_network
from autotune.graphs.execute import (
    NetworkError,
    buffer_lifetimes,
    execute_network,
    network_inputs,
    output_arrays,
    verify_network,
)
from autotune.graphs.weights import seeded_weights, step_weights
from autotune.io.network_yaml import parse_network
from autotune.ir.lowering import Lowering
from autotune.ir.network import Network
from autotune.ir.placement import HBM_ONLY
from autotune.ir.plan import (
    L2_ALIGN,
    NetworkPlan,
    PlannedStep,
    PlannedTensor,
    check_plan,
    overlaps,
    weights_tensor,
)

#: A residual block (conv2's epilogue adds relu1), two branches written in place into a
#: concat that also copies the network input, a pool, and a flatten read by an fc.
RESIDUAL_CONCAT = """\
network: planned
batch: 2
layers:
  - {name: conv1, kind: conv, in: [8, 8, 4], out_channels: 8, kernel: 3, padding: 1, bias: true}
  - {name: bn1, kind: batchnorm}
  - {name: relu1, kind: relu}
  - {name: conv2, kind: conv, out_channels: 8, kernel: 3, padding: 1}
  - {name: add1, kind: add, inputs: [conv2, relu1]}
  - {name: relu2, kind: relu}
  - {name: left, kind: conv, out_channels: 4, kernel: 1, inputs: [relu2]}
  - {name: right, kind: conv, out_channels: 4, kernel: 3, padding: 1, inputs: [relu1]}
  - {name: cat, kind: concat, inputs: [left, right, input]}
  - {name: pool, kind: maxpool, kernel: 2, stride: 2}
  - {name: gap, kind: global_avgpool}
  - {name: flat, kind: flatten}
  - {name: fc, kind: fc, out_channels: 5, bias: true}
"""
#: The steps whose weights the test plans keep in L2 (the rest of the weights stay in HBM).
L2_WEIGHTS = ("conv1", "conv2", "right", "fc")
WORD = 4  # fp32


@pytest.fixture(scope="module")
def case(manticore):
    net = parse_network(yaml.safe_load(RESIDUAL_CONCAT), "<test>")
    sols = solve_network(net, manticore, options=TuneOptions(processes=1))
    assert net.graph is not None
    return net, {s.layer.name: s.mapping for s in sols}, seeded_weights(net.graph), manticore


def _aligned(n: int) -> int:
    return -(-n // L2_ALIGN) * L2_ALIGN


def plan_of(
    net: Network, weights, pinned: dict[str, int] | None = None, slack: int = 4096
) -> NetworkPlan:
    """Every buffer but the network input in L2, and the weights of ``L2_WEIGHTS`` (loaded
    during the step before theirs), laid out first fit: ``pinned`` tensors at their given
    offsets, each other one at the lowest aligned offset where it meets no tensor placed
    before it that is live during a common step. The L2 is ``slack`` bytes past the end."""
    lowering = net.lowering
    assert net.graph is not None and lowering is not None
    lives = buffer_lifetimes(lowering)
    outputs = {ref.buffer for ref in lowering.outputs}
    tensors = []
    for buffer in lowering.buffers:
        h, w, c = buffer.shape
        role = "input" if buffer.producer is None else "activation"
        role = "output" if buffer.name in outputs else role
        first, last = lives[buffer.name]
        size = _aligned(net.batch * c * h * w * WORD)
        level = "hbm" if role == "input" else "l2"
        tensors.append(PlannedTensor(buffer.name, role, level, size, first, last))
    for index, step in enumerate(lowering.steps):
        filters, _ = step_weights(step, net.graph, weights)
        if filters is None:
            continue
        level = "l2" if step.name in L2_WEIGHTS else "hbm"
        first = max(index - 1, 0) if level == "l2" else index
        size = _aligned(filters.size * WORD)
        name = weights_tensor(step.name)
        tensors.append(PlannedTensor(name, "weights", level, size, first, index, step=step.name))
    placed: list[PlannedTensor] = []
    pinned = pinned or {}
    for t in sorted(tensors, key=lambda t: (t.name not in pinned, t.first, t.name)):
        if t.level != "l2":
            placed.append(t)
            continue
        offset = pinned.get(t.name)
        if offset is None:
            offset = 0
            busy = sorted(
                (p.offset or 0, p.l2_end)
                for p in placed
                if p.level == "l2" and p.first <= t.last and t.first <= p.last
            )
            for start, end in busy:
                if offset + t.bytes <= start:
                    break
                offset = max(offset, end)
        placed.append(dataclasses.replace(t, offset=offset))
    order = {t.name: i for i, t in enumerate(tensors)}
    placed.sort(key=lambda t: order[t.name])
    capacity = max(t.l2_end for t in placed) + slack
    steps = tuple(
        PlannedStep(
            step.name,
            HBM_ONLY,
            tuple(
                t.name for t in placed if t.role == "weights" and t.level == "l2" and t.first == i
            ),
            0,
            0,
            0,
        )
        for i, step in enumerate(lowering.steps)
    )
    return NetworkPlan("network", capacity, tuple(placed), steps, "TEST", 0, 0, 0, 0)


def moved(plan: NetworkPlan, name: str, offset: int | None) -> NetworkPlan:
    tensors = tuple(
        dataclasses.replace(t, offset=offset) if t.name == name else t for t in plan.tensors
    )
    return dataclasses.replace(plan, tensors=tensors)


def _verify(case, plan):
    net, mappings, weights, machine = case
    return verify_network(net, mappings, machine, weights, plan=plan)


def _outputs(case, plan):
    net, mappings, weights, machine = case
    assert net.graph is not None and net.lowering is not None
    x = network_inputs(net.graph, net.batch)
    buffers = execute_network(net, mappings, machine, x, weights, plan=plan)
    return buffers, output_arrays(net.graph, net.lowering, buffers, net.batch)


def test_buffer_lifetimes_run_from_the_first_write_to_the_last_read(case):
    net = case[0]
    lowering: Lowering = net.lowering
    names = [s.name for s in lowering.steps]
    assert names == ["input@cat", "conv1", "conv2", "left", "right", "pool", "gap", "fc"]
    assert buffer_lifetimes(lowering) == {
        "input": (0, 1),  # copied into the concat, read by conv1
        "relu1": (1, 4),  # conv2's input and residual, right's input
        "relu2": (2, 3),
        "cat": (0, 5),  # the copy writes first, left and right write in place
        "pool": (5, 6),
        "gap": (6, 7),  # the fc reads it through the flatten
        "fc": (7, 7),  # the network output
    }


def test_a_sound_plan_verifies_and_computes_the_same_bits(case):
    plan = plan_of(case[0], case[2])
    assert check_plan(plan) == []
    l2 = [t for t in plan.tensors if t.level == "l2"]
    assert {t.role for t in l2} == {"activation", "output", "weights"}
    shared = [  # bytes the layout reuses once a tensor is dead
        (a.name, b.name)
        for a in l2
        for b in l2
        if a.name < b.name and (a.offset or 0) < b.l2_end and (b.offset or 0) < a.l2_end
    ]
    assert shared and overlaps(plan.tensors) == []
    check = _verify(case, plan)
    assert check.ok, check.errors
    plain = _verify(case, None)
    assert check.tensors == plain.tensors  # every tensor's error the same, to the bit
    buffers, outputs = _outputs(case, plan)
    plain_buffers, plain_outputs = _outputs(case, None)
    for got, want in zip(outputs, plain_outputs, strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    # some buffers were overwritten after they died: only their snapshots are theirs
    reused = [n for n in buffers if not np.array_equal(buffers[n], plain_buffers[n])]
    assert reused and set(reused) <= {a for pair in shared for a in pair}


@pytest.mark.parametrize(
    ("tensor", "onto", "failing"),
    [
        # conv2 writes relu2 over relu1, which right reads afterwards
        ("relu2", "relu1", {"relu1", "right", "cat"}),
        # right's weights, prefetched during left, land on relu2 before left reads it
        (weights_tensor("right"), "relu2", {"relu2", "left", "cat"}),
        # gap is written over the fc's weights, prefetched a step earlier: the fc is wrong
        ("gap", weights_tensor("fc"), {"fc"}),
    ],
)
def test_live_tensors_sharing_l2_bytes_fail_the_check(case, tensor, onto, failing):
    sound = plan_of(case[0], case[2])
    plan = moved(sound, tensor, sound.tensor(onto).offset or 0)
    assert check_plan(plan) != []  # the audit refuses it; execution must show it too
    check = _verify(case, plan)
    bad = {t.tensor for t in check.tensors if not t.ok}
    assert not check.ok and failing <= bad, (bad, check.errors)
    assert check.max_rel_error > 100 * check.tolerance


def test_a_tensor_on_the_bytes_of_a_dead_one_verifies(case):
    """relu2 dies at step 3, pool is born at step 5: pool on relu2's bytes is sound."""
    plan = plan_of(case[0], case[2], pinned={"relu2": 0, "pool": 0})
    assert check_plan(plan) == []
    check = _verify(case, plan)
    assert check.ok, check.errors
    assert check.tensors == _verify(case, None).tensors


def _refusals(plan: NetworkPlan):
    """Plans execution refuses, each with the words its NetworkError must contain."""
    outside = plan.l2_capacity - L2_ALIGN
    yield moved(plan, "relu1", outside), "'relu1'"
    yield moved(plan, weights_tensor("conv2"), plan.l2_capacity), "'conv2:weights'"
    yield moved(plan, "pool", -L2_ALIGN), "'pool'"
    yield moved(plan, "pool", None), "'pool'"
    missing = tuple(t for t in plan.tensors if t.name != "gap")
    yield dataclasses.replace(plan, tensors=missing), "'gap'"
    small = tuple(dataclasses.replace(t, bytes=64) if t.name == "cat" else t for t in plan.tensors)
    yield dataclasses.replace(plan, tensors=small), "'cat'"
    stray = PlannedTensor(weights_tensor("pool"), "weights", "hbm", 64, 5, 5, step="pool")
    yield dataclasses.replace(plan, tensors=(*plan.tensors, stray)), "'pool:weights'"
    late = tuple(
        dataclasses.replace(t, first=5, last=5) if t.name == weights_tensor("right") else t
        for t in plan.tensors
    )
    yield dataclasses.replace(plan, tensors=late), "'right:weights'"
    yield dataclasses.replace(plan, steps=plan.steps[:-1]), "'fc'"
    swapped = (*plan.steps[:3], plan.steps[4], plan.steps[3], *plan.steps[5:])
    yield dataclasses.replace(plan, steps=swapped), "'right'"


def test_a_plan_that_does_not_fit_the_network_is_refused(case):
    sound = plan_of(case[0], case[2])
    for plan, words in _refusals(sound):
        with pytest.raises(NetworkError, match=words):
            _verify(case, plan)
