"""Two `autotune tune` processes share one network's studies on a real PostgreSQL server.

`.ci/run` starts the server (`.ci/postgres.sh`) and sets AUTOTUNE_TEST_POSTGRES; without it
the test is skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys

import optuna
import pytest

URL = os.environ.get("AUTOTUNE_TEST_POSTGRES")
pytestmark = pytest.mark.skipif(not URL, reason="needs AUTOTUNE_TEST_POSTGRES (see .ci/run)")

NETWORK = """\
network: shared
layers:
  - {name: a, kind: conv, in: [14, 14, 32], out_channels: 64, kernel: 3, padding: 1}
  - {name: b, kind: conv, in: [14, 14, 64], out_channels: 64, kernel: 3, padding: 1}
  - {name: c, kind: conv, in: [14, 14, 64], out_channels: 64, kernel: 3, padding: 1}
  - {name: fc, kind: fc, in: [7, 7, 64], out_channels: 100}
"""


def test_two_processes_complete_one_network(tmp_path):
    for summary in optuna.get_all_study_summaries(URL):
        optuna.delete_study(study_name=summary.study_name, storage=URL)
    net = tmp_path / "net.yaml"
    net.write_text(NETWORK)
    budget = 16
    command = [
        sys.executable,
        "-m",
        "autotune",
        "tune",
        str(net),
        "--storage",
        URL,
        "--trials",
        str(budget),
        "--no-verify",
        "--plan",
        "per-layer",  # every layer refined (a plan's L2 layers keep the model's mapping)
        "--out",
    ]
    env = {**os.environ, "COLUMNS": "200"}
    procs = [
        subprocess.Popen(
            [*command, str(tmp_path / f"out{i}.json")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    summaries = optuna.get_all_study_summaries(URL)
    assert len(summaries) == 3  # distinct shapes: a, b (= c), fc
    for summary in summaries:
        study = optuna.load_study(study_name=summary.study_name, storage=URL)
        states = [t.state for t in study.trials]
        finished = [
            s
            for s in states
            if s in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        ]
        # nothing lost (every trial finished) and nothing beyond one per extra process
        assert budget <= len(finished) <= budget + 1, summary.study_name
        assert optuna.trial.TrialState.RUNNING not in states
        numbers = [t.number for t in study.trials]
        assert len(numbers) == len(set(numbers))
        # no duplicated work: the enqueued seed mappings ran once each
        seeded = [t for t in study.trials if t.system_attrs.get("fixed_params")]
        keys = [tuple(sorted(t.params.items())) for t in seeded]
        assert len(keys) == len(set(keys))
    # a third run finds every study complete and tunes nothing
    third = subprocess.run(
        [*command, str(tmp_path / "out2.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert third.returncode == 0, third.stderr
    again = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(URL)}
    assert again == {s.study_name: s.n_trials for s in summaries}
