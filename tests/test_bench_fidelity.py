"""The fidelity benchmark's own arithmetic: its figures are only worth reading if the rank
correlation is right and every layer record is complete and sane (``benchmarks/``)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import yaml

from autotune import Layer, Machine, Network
from autotune.io.network_yaml import parse_network
from tests.conftest import load_script
from tests.graphs.test_execute_plan import RESIDUAL_CONCAT

bench = load_script("bench_fidelity")

TINY = Network(
    "tiny",
    (
        Layer("c1", "conv", 16, 16, 8, 16, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1),
        Layer("c2", "conv", 16, 16, 8, 16, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1),
        Layer.fc("fc", 1, 1, 1024, 10),
    ),
)


def test_average_ranks_share_ties() -> None:
    assert bench.average_ranks([10, 20, 20, 30, 20]).tolist() == [1, 3, 3, 5, 3]


def test_spearman_hand_computed_with_ties() -> None:
    # ranks x = [1, 2.5, 2.5, 4], y = [1, 3, 2, 4]; centred: [-1.5, 0, 0, 1.5] and
    # [-1.5, .5, -.5, 1.5]; rho = 4.5 / sqrt(4.5 * 5) = sqrt(0.9)
    assert bench.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(math.sqrt(0.9))
    assert bench.spearman([3, 1, 2], [30, 10, 20]) == pytest.approx(1.0)
    assert bench.spearman([3, 1, 2], [10, 30, 20]) == pytest.approx(-1.0)


def test_spearman_undefined_without_spread() -> None:
    assert math.isnan(bench.spearman([5, 5, 5], [1, 2, 3]))
    assert math.isnan(bench.spearman([1], [1]))


@pytest.fixture(scope="module")
def records() -> list:
    machine = Machine.preset("manticore")
    sims = bench.Simulations()
    out = bench.measure_network(TINY, machine, "fp32", 1, 5, sims)
    # c2 repeats c1's shape: solved, ranked and simulated once
    assert sims.calls <= 2 * 5
    return out


def test_layer_records_complete_and_sane(records) -> None:
    assert [r.layer for r in records] == ["c1", "c2", "fc"]
    for r in records:
        assert r.model_cycles > 0 and r.sim_cycles > 0
        assert r.ratio == pytest.approx(r.model_cycles / r.sim_cycles) and r.ratio > 0
        assert 0 < r.roofline <= 1
        assert r.bound_cycles <= r.sim_cycles
        assert set(bench.PARTS) <= set(r.breakdown)
        # The parts sum to the makespan; the simulated cycles round it up to whole cycles.
        assert 0 <= r.sim_cycles - sum(r.breakdown.values()) < 1 + 1e-6
        assert 1 <= r.rank_candidates <= 5
        assert 1 <= r.rank_model_distinct <= r.rank_candidates
        assert r.rank_rho is None or -1 <= r.rank_rho <= 1
        assert 0 < r.top_sim_best <= r.sim_cycles  # the winner is the model's first candidate
        assert r.sim_cycles <= r.top_sim_worst
    assert records[1].model_cycles == records[0].model_cycles


def test_summary_and_json(records) -> None:
    summary = bench.summarize(records)
    assert summary["layers"] == 3
    assert summary["network_ratio"] == pytest.approx(
        sum(r.model_cycles for r in records) / sum(r.sim_cycles for r in records)
    )
    assert 0 <= summary["within_5"] <= summary["within_10"] <= 1
    assert 0 < summary["roofline_worst"] <= summary["roofline_geomean"] <= 1
    assert 1 <= summary["regret_geomean"] <= summary["regret_worst"]
    assert set(summary["targets"]) == {key for key, _, _ in bench.TARGETS}
    run = dict(
        network="tiny",
        machine="manticore",
        precision="fp32",
        batch=1,
        top=5,
        layers=records,
        summary=summary,
    )
    text = bench.to_json([run])
    assert text == bench.to_json([run])
    assert json.loads(text)["runs"][0]["layers"][2]["layer"] == "fc"
    line = bench.summary_line(run)
    for key, description, _ in bench.TARGETS:
        verdict = "met" if summary["targets"][key] else "NOT MET"
        assert f"{description}: " in line and verdict in line


def test_flat_rank_share_counts_the_layers_below_whose_set_the_simulator_holds_close(
    records,
) -> None:
    """``rank_flat``: of the layers ranked below 0.9 (or undefined), those whose candidates
    the simulator holds within FLAT of the best; a layer at 0.9 or above never counts, nor
    does one whose set spreads wider."""
    best = 1000
    flat = int(best * (1 + bench.FLAT))
    cases = [
        (0.5, flat),  # below, flat: counts
        (None, best),  # undefined, flat: counts
        (0.5, flat + 1),  # below, spread: does not
        (0.95, best),  # above: does not
    ]
    layers = [
        replace(records[0], layer=f"l{i}", rank_rho=rho, top_sim_best=best, top_sim_worst=worst)
        for i, (rho, worst) in enumerate(cases)
    ]
    summary = bench.summarize(layers)
    assert summary["rank_flat"] == pytest.approx(2 / 4)
    assert summary["rank_090"] == pytest.approx(1 / 4)
    assert "50% below it on a set within 2% in the simulator" in bench.targets_text(summary)


def test_pooled_summary_is_one_mean_over_every_runs_layers(records) -> None:
    """The issue's targets are over all layers of the networks: the pooled geomean is the
    mean over the layers of a machine's runs together, not the mean of the runs' means; the
    worst layer is named with its network; another machine's run is not pooled in."""
    # one layer against three: the mean of the two runs' means would weigh it as three
    low = [replace(r, roofline=r.roofline / 2) for r in records if r.layer == "fc"]
    runs = [
        dict(
            network=name,
            machine=machine,
            precision="fp32",
            batch=1,
            top=5,
            layers=rs,
            summary=bench.summarize(rs),
        )
        for name, machine, rs in (
            ("tiny", "manticore", records),
            ("low", "manticore", low),
            ("other", "mppa3", records),
        )
    ]
    pooled = bench.pooled_summaries(runs)
    assert list(pooled) == ["manticore"]  # mppa3 has one run: nothing to pool
    every = [r.roofline for rs in (records, low) for r in rs]
    assert pooled["manticore"]["layers"] == len(every) == 4
    assert pooled["manticore"]["roofline_geomean"] == pytest.approx(bench.geomean(every))
    means = [bench.geomean([r.roofline for r in rs]) for rs in (records, low)]
    assert pooled["manticore"]["roofline_geomean"] != pytest.approx(bench.geomean(means))
    assert pooled["manticore"]["roofline_worst_layer"] == "low/fc"
    assert pooled["manticore"]["roofline_worst"] == min(every)
    assert json.loads(bench.to_json(runs))["pooled"]["manticore"]["layers"] == 4
    assert "pooled" not in json.loads(bench.to_json(runs[:1]))


def test_random_network_is_seeded() -> None:
    a, b = bench.random_network(12, seed=3), bench.random_network(12, seed=3)
    assert a == b and len(a.layers) == 12
    assert a != bench.random_network(12, seed=4)


def test_network_plan_measures_each_layer_at_its_placement(manticore) -> None:
    """``--plan network``: the winners ``tune`` exports by default, each measured (model,
    simulator, ranked candidates) with its streams where the plan keeps them."""
    net = parse_network(yaml.safe_load(RESIDUAL_CONCAT), "<test>")
    planned = bench.measure_network(
        net, manticore, "fp32", 1, 3, bench.Simulations(), plan="network"
    )
    alone = bench.measure_network(net, manticore, "fp32", 1, 3, bench.Simulations())
    assert [r.layer for r in planned] == [r.layer for r in alone]
    assert all(r.placement == "" for r in alone)
    in_l2 = [r for r in planned if r.placement]
    assert in_l2 and set("".join(r.placement for r in in_l2)) <= set("iwro")
    for r in planned:
        assert r.ratio == pytest.approx(r.model_cycles / r.sim_cycles)
        assert 1 <= r.rank_candidates <= 3


def _measure(sims) -> list:
    return bench.measure_network(TINY, Machine.preset("manticore"), "fp32", 1, 5, sims)


def test_cached_simulations_are_read_back_not_rerun(records, tmp_path) -> None:
    cache = tmp_path / "sims.json"
    first = bench.Simulations(cache=cache)
    assert _measure(first) == records and first.calls > 0
    first.save()
    again = bench.Simulations(cache=cache)
    assert again.loaded == first.calls
    assert _measure(again) == records and again.calls == 0


def test_unsound_cache_entries_are_recomputed(records, tmp_path) -> None:
    cache = tmp_path / "sims.json"
    sims = bench.Simulations(cache=cache)
    _measure(sims)
    sims.save()
    data = json.loads(cache.read_text())
    name = next(iter(data["results"]))
    data["results"][name]["cycles"] //= 2  # its parts no longer sum to it
    cache.write_text(json.dumps(data))
    again = bench.Simulations(cache=cache)
    assert again.loaded == sims.calls - 1
    assert _measure(again) == records and again.calls == 1


def test_a_cache_of_another_simulator_is_ignored(tmp_path) -> None:
    cache = tmp_path / "sims.json"
    sims = bench.Simulations(cache=cache)
    _measure(sims)
    sims.save()
    data = json.loads(cache.read_text())
    data["simulator"] = "0" * 64
    cache.write_text(json.dumps(data))
    assert bench.Simulations(cache=cache).loaded == 0


def test_a_file_that_is_no_cache_is_refused_and_left_alone(tmp_path, capsys) -> None:
    cache = tmp_path / "notes.json"
    cache.write_text('{"my": "notes"}')
    with pytest.raises(SystemExit) as stop:
        bench.main(["--networks", "resnet50", "--quick", "1", "--cache", str(cache)])
    assert stop.value.code == 2
    assert "--cache" in capsys.readouterr().err
    assert cache.read_text() == '{"my": "notes"}'


def test_simulations_in_processes_match_one_at_a_time() -> None:
    machine = Machine.preset("manticore")
    layer = TINY.layers[0]
    space = bench.search_space(layer, machine, 1)
    ranked = bench.ranking(space, machine, "fp32", "latency", 4)
    requests = [
        (layer, space.decode(b.index), machine, "fp32", 1, bench.HBM_ONLY)
        for b in ranked
        if b.index
    ]
    serial, parallel = bench.Simulations(), bench.Simulations(processes=2)
    serial.fill(requests)
    parallel.fill(requests)
    assert parallel.calls == serial.calls == len(requests) > 1
    assert parallel.results == serial.results


def test_simulations_done_before_ctrl_c_are_kept(tmp_path, monkeypatch) -> None:
    cache = tmp_path / "sims.json"
    real, done = bench._simulate, []

    def interrupted(request):
        if len(done) == 3:
            raise KeyboardInterrupt
        done.append(request)
        return real(request)

    monkeypatch.setattr(bench, "_simulate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--networks", "resnet50", "--quick", "2", "--cache", str(cache)])
    assert bench.Simulations(cache=cache).loaded == 3


def test_parts_that_exceed_the_cycles_by_a_rounding_error_are_sound() -> None:
    # the simulator's parts are float sums: 16,050 cycles came back as 16050.000000000004
    parts = {p: 0.0 for p in bench.PARTS} | {
        "compute": 8745.138888888887,
        "idle": 7304.861111111117,
    }
    assert sum(parts.values()) > 16050
    assert bench.Simulated(16050, parts).sound()
    assert not bench.Simulated(16050, parts | {"idle": 7306.0}).sound()
    assert not bench.Simulated(16052, parts).sound()
