"""Optuna refinement: incumbent kept, resumable, cached (with a stand-in simulator).

The real simulator is exercised in tests/test_pipeline.py; here a deterministic stand-in
(the analytical cycles, skewed so that some other mapping is better) keeps the tests fast
and lets them check the refinement logic itself.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from dataclasses import dataclass

import optuna
import pytest

from autotune import Layer, analyze
from autotune.ir.options import TuneOptions
from autotune.search.exhaustive import top_k
from autotune.search.refine import refine_layer
from autotune.search.solve import solve_layer
from autotune.search.space import search_space

LAYER = Layer("c", "conv", 14, 14, 64, 64, 3, 3, pad_h=1, pad_w=1)


@dataclass
class Sim:
    cycles: int


def skewed(layer, mapping, machine, precision, batch, *placed):
    """Analytical cycles, but single-buffered outputs are 'really' 30 % faster."""
    cycles = analyze(layer, mapping, machine, precision, batch).cycles
    return Sim(int(cycles * (0.7 if mapping.buffers.output_depth == 1 else 1.0)))


def slow_skewed(layer, mapping, machine, precision, batch, *placed):
    time.sleep(0.05)
    return skewed(layer, mapping, machine, precision, batch)


def incumbents(manticore, k=3):
    space = search_space(LAYER, manticore, 1)
    return [space.decode(i) for i in top_k(space, manticore, "fp32", "latency", k)]


def test_top_k_starts_with_the_optimum(manticore):
    best = solve_layer(LAYER, manticore, "fp32", options=TuneOptions(search="exhaustive"))
    assert incumbents(manticore)[0] == best.mapping


def test_never_worse_than_the_ilp_and_finds_better(manticore):
    seeds = incumbents(manticore)
    result = refine_layer(
        LAYER,
        manticore,
        "fp32",
        1,
        seeds,
        simulate=skewed,
        options=TuneOptions(trials=30, storage="memory"),
    )
    assert result.ilp_cycles == skewed(LAYER, seeds[0], manticore, "fp32", 1).cycles
    assert result.cycles <= result.ilp_cycles
    assert result.cycles == skewed(LAYER, result.mapping, manticore, "fp32", 1).cycles
    assert analyze(LAYER, result.mapping, manticore).fits
    assert result.trials == 30 and not result.cached


def test_deterministic_for_one_worker(manticore):
    seeds = incumbents(manticore)
    runs = [
        refine_layer(
            LAYER,
            manticore,
            "fp32",
            1,
            seeds,
            simulate=skewed,
            options=TuneOptions(trials=20, storage="memory", seed=5),
        )
        for _ in range(2)
    ]
    assert runs[0].mapping == runs[1].mapping and runs[0].cycles == runs[1].cycles


def test_cache_hit_and_budget_extension(manticore, tmp_path):
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    seeds = incumbents(manticore)
    first = refine_layer(
        LAYER,
        manticore,
        "fp32",
        1,
        seeds,
        simulate=skewed,
        options=TuneOptions(trials=12, storage=url),
    )
    again = refine_layer(
        LAYER,
        manticore,
        "fp32",
        1,
        seeds,
        simulate=skewed,
        options=TuneOptions(trials=12, storage=url),
    )
    assert again.cached and again.simulated == 0 and again.mapping == first.mapping
    more = refine_layer(
        LAYER,
        manticore,
        "fp32",
        1,
        seeds,
        simulate=skewed,
        options=TuneOptions(trials=20, storage=url),
    )
    assert not more.cached and more.trials == 20 and more.simulated <= 8


def test_default_storage_in_xdg_cache(manticore, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    refine_layer(
        LAYER,
        manticore,
        "fp32",
        1,
        incumbents(manticore, 1),
        simulate=skewed,
        options=TuneOptions(trials=3),
    )
    assert (tmp_path / "autotune" / "studies.db").exists()


def _run_until_killed(url: str, budget: int) -> None:
    from autotune import Machine

    machine = Machine.preset("manticore")
    refine_layer(
        LAYER,
        machine,
        "fp32",
        1,
        incumbents(machine),
        simulate=slow_skewed,
        options=TuneOptions(trials=budget, storage=url),
    )


def test_resume_after_sigkill(manticore, tmp_path):
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    budget = 40
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=_run_until_killed, args=(url, budget))
    proc.start()
    deadline = time.time() + 60
    name = None
    while time.time() < deadline:  # wait until some trials have finished
        time.sleep(0.5)
        try:
            summaries = optuna.get_all_study_summaries(url)
        except Exception:
            continue
        if summaries and summaries[0].n_trials >= 8:
            name = summaries[0].study_name
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    assert name is not None, "the first run never got going"
    study = optuna.load_study(study_name=name, storage=url)
    finished_before = {
        t.number: t.params
        for t in study.trials
        if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    }
    assert 0 < len(finished_before) < budget
    killed = [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    # no waiting here: the resumed run waits for the killed trial's heartbeat to go stale
    # (storage.GRACE_PERIOD_S) when it is the last one missing, fails it and retries it
    result = refine_layer(
        LAYER,
        manticore,
        "fp32",
        1,
        incumbents(manticore),
        simulate=skewed,
        options=TuneOptions(trials=budget, storage=url),
    )
    study = optuna.load_study(study_name=name, storage=url)
    finished = [
        t
        for t in study.trials
        if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    ]
    assert len(finished) == budget == result.trials
    # finished trials were kept, not repeated
    for number, params in finished_before.items():
        assert study.trials[number].params == params
    assert result.simulated <= budget - len(finished_before)
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    for trial in killed:
        assert study.trials[trial.number].state == optuna.trial.TrialState.FAIL
        retried = [t for t in study.trials if t.system_attrs.get("failed_trial") == trial.number]
        assert len(retried) == 1 and retried[0].state in (
            optuna.trial.TrialState.COMPLETE,
            optuna.trial.TrialState.PRUNED,
        )


def test_prunes_without_simulating(manticore):
    calls = []

    def counting(*args):
        calls.append(args[1])
        return skewed(*args)

    big = Layer("big", "conv", 56, 56, 256, 512, 3, 3, pad_h=1, pad_w=1)
    space = search_space(big, manticore, 1)
    seeds = [space.decode(i) for i in top_k(space, manticore, "fp32", "latency", 1)]
    result = refine_layer(
        big,
        manticore,
        "fp32",
        1,
        seeds,
        simulate=counting,
        options=TuneOptions(trials=40, storage="memory"),
    )
    assert len(calls) == result.simulated < 40  # some proposals did not fit L1
    assert all(analyze(big, m, manticore).fits for m in calls)


@pytest.fixture(autouse=True)
def quiet_optuna():
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_two_workers_share_one_study(manticore, tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    result = refine_layer(
        LAYER,
        manticore,
        "fp32",
        1,
        incumbents(manticore),
        simulate=slow_skewed,
        options=TuneOptions(trials=30, storage=url, refine_workers=2),
    )
    study = optuna.load_study(study_name=result.study, storage=url)
    finished = [
        t
        for t in study.trials
        if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    ]
    # Optuna's callback stops each worker at the budget; a worker may finish the trial it
    # had started, so the study holds the budget or one more per extra worker
    assert 30 <= len(finished) <= 31
    assert result.simulated < len([t for t in finished if t.user_attrs.get("simulated")])
    numbers = [t.number for t in study.trials]
    assert len(numbers) == len(set(numbers))


def test_finishing_over_processes_gives_the_serial_results(manticore):
    """Distinct layers are refined, simulated and verified in worker processes: the same
    mappings, trials and simulated cycles as one after the other, in the network's order."""
    from autotune.api import finish_network
    from autotune.ir.network import Network
    from autotune.search.solve import solve_layer as solve

    layers = [
        Layer(f"c{i}", "conv", 8 + 2 * i, 8, 8, 8 * (i + 1), 3, 3, pad_h=1, pad_w=1)
        for i in range(3)
    ]
    solutions = [solve(x, manticore, "fp32") for x in Network("n", tuple(layers)).layers]
    seen: list[tuple[str, str]] = []

    def run(processes):
        options = TuneOptions(
            precision="fp32", batch=1, trials=3, storage="memory", processes=processes
        )
        return finish_network(solutions, manticore, options, lambda s, n: seen.append((s, n)))

    serial, parallel = run(1), run(2)
    assert list(serial) == list(parallel)
    for a, b in zip(serial.values(), parallel.values(), strict=True):
        assert (a.mapping, a.trials, a.simulated.cycles) == (
            b.mapping,
            b.trials,
            b.simulated.cycles,
        )
        assert a.verified.ok and b.verified.ok
    assert seen.count(("refine", "c0")) == 2 and seen.count(("verify", "c2")) == 2
