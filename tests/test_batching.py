"""``autotune.sweep`` / ``choose_batch``: fc layers turn compute-bound as the batch grows."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from autotune import BudgetError, Layer, Network, choose_batch, sweep
from autotune.batching import (
    BatchPoint,
    parse_batches,
    powers_of_two,
    regime,
    ridge_flop_per_byte,
)
from tests.conftest import TINY_FC_BATCHES, TINY_FC_SEARCH


def test_fc_memory_bound_at_batch_1_compute_bound_at_64(tiny_fc_sweep, manticore):
    s = tiny_fc_sweep
    ridge = ridge_flop_per_byte(manticore, "fp32")
    assert ridge == pytest.approx(14.4)  # 4.096 Tflop/s * 0.9 / 256 GB/s
    assert s.fc_layers == ("fc1", "fc2")
    at1, at64 = s.point(1).fc_bound("fc1"), s.point(64).fc_bound("fc1")
    assert at1.bound == "memory" and at1.flop_per_byte < 1 < ridge
    assert at1.memory_cycles > 10 * at1.compute_cycles
    assert at64.bound == "compute" and at64.flop_per_byte > ridge
    assert at64.compute_cycles > at64.memory_cycles
    # fc2 has 10 outputs: ~5 flop per weight byte at most, however large the batch.
    assert all(p.fc_bound("fc2").bound == "memory" for p in s.points)


def test_bound_is_the_models_rule(tiny_fc_sweep):
    """The sweep's verdict is ``Analysis.bound`` of the tuned schedule (minus 'latency')."""
    for batch, result in tiny_fc_sweep.results.items():
        point = tiny_fc_sweep.point(batch)
        for r in result.layers:
            if r.layer.kind != "fc":
                continue
            f = point.fc_bound(r.layer.name)
            assert f.bound == regime(r.predicted)
            assert f.model_bound == r.predicted.bound
            if r.predicted.bound in ("memory", "compute"):
                assert f.bound == r.predicted.bound
            below = f.flop_per_byte < tiny_fc_sweep.ridge_flop_per_byte
            assert (f.bound == "memory") == below


def test_turning_batch(tiny_fc_sweep):
    s = tiny_fc_sweep
    assert s.batches == TINY_FC_BATCHES
    assert s.turning_batches() == {"fc1": 32, "fc2": None}
    for name, turn in s.turning_batches().items():
        before = [p for p in s.points if turn is None or p.batch < turn]
        assert all(p.fc_bound(name).bound == "memory" for p in before)
        if turn is not None:
            assert s.point(turn).fc_bound(name).bound == "compute"
    # Observed for this shape (not a law: a larger batch may pick a schedule with more
    # traffic): once compute-bound, fc1 stays so within the sweep.
    assert s.memory_again("fc1") is None
    assert [p.fc_bound("fc1").bound for p in s.points] == ["memory"] * 3 + ["compute"] * 2
    # Intensity grows with the batch for this layer.
    fpb = [p.fc_bound("fc1").flop_per_byte for p in s.points]
    assert fpb == sorted(fpb)


def test_sweep_totals_are_tunes(tiny_fc_sweep):
    for p in tiny_fc_sweep.points:
        t = tiny_fc_sweep.results[p.batch].totals
        assert (p.cycles, p.latency_s, p.images_per_s, p.tflops, p.peak_fraction) == (
            t.cycles,
            t.latency_s,
            t.images_per_s,
            t.tflops,
            t.peak_fraction,
        )
        assert p.verified is None


def test_best_within_is_max_images_per_s_under_budget(tiny_fc_sweep):
    s = tiny_fc_sweep
    latencies = sorted(p.latency_s for p in s.points)
    budgets = [
        latencies[0] * 0.999,
        *latencies,
        latencies[-1] * 2,
        (latencies[0] + latencies[1]) / 2,
    ]
    for budget in budgets:
        batch = s.best_within(budget)
        within = [p for p in s.points if p.latency_s <= budget]
        if not within:
            assert batch is None
            continue
        chosen = s.point(batch)
        assert chosen.latency_s <= budget
        assert chosen.images_per_s == max(p.images_per_s for p in within)
    assert s.best_within(float("inf")) == s.best()


def test_best_within_ties_pick_the_smaller_batch(tiny_fc_sweep):
    p = tiny_fc_sweep.points[0]
    points = (
        replace(p, batch=2, latency_s=1.0, images_per_s=10.0),
        replace(p, batch=4, latency_s=2.0, images_per_s=10.0),
        replace(p, batch=8, latency_s=3.0, images_per_s=5.0),
    )
    s = replace(tiny_fc_sweep, points=points, results={})
    assert s.best_within(5.0) == 2 and s.best() == 2
    assert s.best_within(0.5) is None
    assert s.best_within(3.0) == 2


def test_json_is_deterministic(tiny_fc_file, tiny_fc_sweep, tmp_path):
    again = sweep(tiny_fc_file, batches=(64, 1, 64), search=TINY_FC_SEARCH)  # sorted, deduped
    assert again.batches == (1, 64)
    same = replace(tiny_fc_sweep, points=tuple(tiny_fc_sweep.point(b) for b in (1, 64)))
    assert again.to_json() == same.to_json()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    same.save(a)
    again.save(b)
    assert a.read_bytes() == b.read_bytes()
    assert sorted(tmp_path.iterdir()) == [a, b]  # no temp files left
    data = json.loads(tiny_fc_sweep.to_json())
    assert data["batches"] == list(TINY_FC_BATCHES)
    assert {d["layer"]: d["turning_batch"] for d in data["fc_layers"]} == {"fc1": 32, "fc2": None}
    assert data["points"][0]["fc"][0]["bound"] == "memory"


def test_choose_batch(tiny_fc_file, tiny_fc_sweep):
    budget = tiny_fc_sweep.point(4).latency_s * 1.001
    choice = choose_batch(tiny_fc_file, latency_budget_s=budget, max_batch=4, search=TINY_FC_SEARCH)
    assert choice.sweep.batches == (1, 2, 4)
    assert choice.batch == choice.sweep.best_within(budget) == 4
    assert choice.point.latency_s <= budget
    assert all(p.latency_s <= budget for p in choice.candidates)
    with pytest.raises(BudgetError, match=r"smallest latency achievable is .* \(batch 1\)"):
        choose_batch(tiny_fc_file, latency_budget_s=1e-9, max_batch=1, search=TINY_FC_SEARCH)
    with pytest.raises(ValueError, match="positive"):
        choose_batch(tiny_fc_file, latency_budget_s=0.0)


def test_sweep_with_refine_and_verify():
    net = Network("one", [Layer.fc("fc", 1, 1, 64, 64)])
    s = sweep(net, batches=(1, 2), refine=True, verify=True, trials=2, storage="memory")
    assert s.batches == (1, 2) and s.refine and s.verify
    assert all(p.verified is True for p in s.points)
    assert all(r.trials for res in s.results.values() for r in res.layers)


def test_sweep_no_fc_layers():
    net = Network("conv", [Layer("c", "conv", 8, 8, 4, 8, 3, 3, pad_h=1, pad_w=1)])
    s = sweep(net, batches=(1,))
    assert s.fc_layers == () and s.turning_batches() == {}
    assert json.loads(s.to_json())["fc_layers"] == []


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1,2,4,...,256", (1, 2, 4, 8, 16, 32, 64, 128, 256)),
        ("1,2,…,8", (1, 2, 4, 8)),
        ("1,2,3,...,6", (1, 2, 3, 4, 5, 6)),
        ("4,8,12,...,20", (4, 8, 12, 16, 20)),
        ("3,9,...,81", (3, 9, 27, 81)),
        ("8, 1, 8, 4", (1, 4, 8)),
        ("16", (16,)),
    ],
)
def test_parse_batches(text, expected):
    assert parse_batches(text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("0", "batch 0 is not a positive integer"),
        ("x", "'x' is not a positive integer"),
        ("1.5", "'1.5' is not a positive integer"),
        ("-4", "'-4' is not a positive integer"),
        ("", "empty entry"),
        ("1,,2", "empty entry"),
        ("1,...,8", "at least two batches before"),
        ("1,2,4,...,100", "100 is not in the progression"),
        ("1,2,...", "'...' must come once, just before the last batch"),
        ("1,2,...,8,16", "'...' must come once, just before the last batch"),
        ("8,4,...,1", "neither a rising"),
        ("2,4,8,...,4", "below 8"),
        ("1,2,3,...,100000", "more than 1024 batches"),
    ],
)
def test_parse_batches_errors(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_batches(text)


def test_powers_of_two():
    assert powers_of_two(1) == (1,)
    assert powers_of_two(256) == tuple(2**i for i in range(9))
    assert powers_of_two(100) == (1, 2, 4, 8, 16, 32, 64, 100)
    with pytest.raises(ValueError):
        powers_of_two(0)


def test_sweep_rejects_bad_batches(tiny_fc_file):
    for bad in ((), (0,), (2, -1), (True,)):
        with pytest.raises(ValueError):
            sweep(tiny_fc_file, batches=bad)


def test_batch_point_lookup(tiny_fc_sweep):
    with pytest.raises(KeyError):
        tiny_fc_sweep.point(3)
    assert isinstance(tiny_fc_sweep.point(4), BatchPoint)
