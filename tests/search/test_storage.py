"""The refinement storage under concurrency and faults: many runs at once on one SQLite file,
Ctrl-C, damaged or foreign cache files, an unwritable cache, bad URLs."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from autotune import Layer
from autotune.cli.app import app
from autotune.ir.options import TuneOptions
from autotune.search.exhaustive import top_k
from autotune.search.refine import storage
from autotune.search.refine.storage import (
    StorageError,
    StorageWarning,
    cache_dir,
    check_storage,
    open_storage,
    prepare_storage,
)
from autotune.search.refine.study import refine_layer
from autotune.search.space import search_space

runner = CliRunner()

TWO_LAYERS = """\
network: two
layers:
  - {name: a, kind: conv, in: [8, 8, 8], out_channels: 16, kernel: 3, padding: 1}
  - {name: fc, kind: fc, in: [1, 1, 64], out_channels: 10}
"""
#: A layer whose trials take long enough to be caught running.
SLOW_LAYER = """\
network: slow
layers:
  - {name: a, kind: conv, in: [28, 28, 64], out_channels: 64, kernel: 3, padding: 1}
"""
LAYER = Layer("c", "conv", 14, 14, 64, 64, 3, 3, pad_h=1, pad_w=1)
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


def _tune(network: Path, trials: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "autotune",
        "tune",
        str(network),
        "--trials",
        str(trials),
        "--no-verify",
        *extra,
    ]


def _env(cache: Path) -> dict[str, str]:
    # (faulthandler: a run that hangs is aborted with every thread's stack, see _finish)
    return {
        **os.environ,
        "XDG_CACHE_HOME": str(cache),
        "COLUMNS": "200",
        "PYTHONFAULTHANDLER": "1",
    }


def _start(command: list[str], cache: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command,
        env=_env(cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C reaches the child even when the tests run in the background
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _finish(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """``proc.communicate(timeout)``; a run still going then fails the test with the stacks of
    its threads (SIGABRT under faulthandler prints them)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        _out, err = proc.communicate(timeout=30)
        raise AssertionError(f"still running after {timeout} s:\n{err[-8000:]}") from None


def _studies(db: Path) -> list[optuna.Study]:
    url = f"sqlite:///{db}"
    return [
        optuna.load_study(study_name=s.study_name, storage=url)
        for s in optuna.get_all_study_summaries(url)
    ]


def _states(study: optuna.Study) -> list[optuna.trial.TrialState]:
    return [t.state for t in study.trials]


def test_concurrent_runs_on_a_fresh_cache_then_on_the_existing_one(tmp_path):
    net = tmp_path / "net.yaml"
    net.write_text(TWO_LAYERS)
    cache = tmp_path / "cache"
    db = cache / "autotune" / "studies.db"
    for runs, budget in ((4, 6), (3, 12)):
        procs = [_start(_tune(net, budget), cache) for _ in range(runs)]
        outputs = [_finish(p, 120) for p in procs]
        for p, (_out, err) in zip(procs, outputs, strict=True):
            assert p.returncode == 0, err
            assert not err.strip(), err
        studies = _studies(db)
        assert len(studies) == 2  # one per distinct layer shape, shared by every run
        for study in studies:
            states = _states(study)
            finished = sum(s in FINISHED for s in states)
            # the budget is met; a run that asked for a trial as another finished the budget
            # may add one
            assert budget <= finished <= budget + runs - 1, states
            assert optuna.trial.TrialState.RUNNING not in states
            numbers = [t.number for t in study.trials]
            assert len(numbers) == len(set(numbers))


@pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")
def test_processes_never_take_the_same_queued_trial(tmp_path):
    """SQLite has no SELECT ... FOR UPDATE: without immediate transactions two connections
    both move a WAITING trial to RUNNING and both run it."""
    url = f"sqlite:///{tmp_path / 'q.db'}"
    study = optuna.create_study(study_name="q", storage=open_storage(url))
    for x in range(24):
        study.enqueue_trial({"x": x})
    taken: list[int] = []

    def worker() -> None:
        own = optuna.load_study(study_name="q", storage=storage._open(url))  # own connections
        for _ in range(6):
            trial = own.ask()
            taken.append(trial.number)
            own.tell(trial, float(trial.suggest_int("x", 0, 100)))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == list(range(24))
    assert len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) == 24


def _wait_for_a_running_trial(db: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.time() + 90
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
        try:
            con = sqlite3.connect(db, timeout=5)
            try:
                counts = dict(con.execute("SELECT state, count(*) FROM trials GROUP BY state"))
            finally:
                con.close()
        except sqlite3.Error:
            continue
        if counts.get("COMPLETE", 0) >= 2 and counts.get("RUNNING", 0) >= 1:
            return
    raise AssertionError("refinement never got going")


def test_ctrl_c_fails_the_running_trial_and_the_next_run_resumes(tmp_path):
    net = tmp_path / "net.yaml"
    net.write_text(SLOW_LAYER)
    cache = tmp_path / "cache"
    db = cache / "autotune" / "studies.db"
    proc = _start(_tune(net, 400), cache)
    _wait_for_a_running_trial(db, proc)
    proc.send_signal(signal.SIGINT)
    _out, err = _finish(proc, 60)
    assert proc.returncode == 130, err
    assert [line for line in err.splitlines() if line.strip()] == ["interrupted"], err
    (study,) = _studies(db)
    states = _states(study)
    assert optuna.trial.TrialState.RUNNING not in states
    done = sum(s in FINISHED for s in states)
    interrupted = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    # the next run takes up the study: the interrupted trial again, then up to the budget
    budget = done + 3
    again = subprocess.run(
        _tune(net, budget), env=_env(cache), capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr
    (study,) = _studies(db)
    states = _states(study)
    assert sum(s in FINISHED for s in states) >= budget
    assert optuna.trial.TrialState.RUNNING not in states
    for trial in interrupted:
        retried = [t for t in study.trials if t.system_attrs.get("failed_trial") == trial.number]
        # (what it had drawn before Ctrl-C: all of its parameters, or none)
        assert retried and trial.params.items() <= retried[0].params.items()


def _bytes_unchanged(path: Path, before: bytes) -> None:
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # nothing added


@pytest.mark.parametrize("kind", ["random bytes", "another application"])
def test_a_bad_cache_file_is_named_and_left_alone(tmp_path, monkeypatch, kind):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    db = tmp_path / "autotune" / "studies.db"
    db.parent.mkdir()
    if kind == "random bytes":
        db.write_bytes(os.urandom(8192))
    else:
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT)")
        con.commit()
        con.close()
    before = db.read_bytes()
    net = tmp_path / "net.yaml"
    net.write_text(TWO_LAYERS)
    result = runner.invoke(app, ["tune", str(net), "--trials", "2"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert str(db) in lines[0] and "--storage" in lines[0] and "'memory'" in lines[0]
    assert ("another application" in lines[0]) == (kind == "another application")
    _bytes_unchanged(db, before)


def test_the_check_comes_before_any_solving(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "autotune").mkdir()
    (tmp_path / "autotune" / "studies.db").write_bytes(b"not a database" * 100)
    monkeypatch.setattr("autotune.api.solve_network", _no_solving)
    net = tmp_path / "net.yaml"
    net.write_text(TWO_LAYERS)
    assert runner.invoke(app, ["tune", str(net)]).exit_code == 2
    for bad in ("mysql://u@localhost/db", "foo"):
        assert runner.invoke(app, ["tune", str(net), "--storage", bad]).exit_code == 2
        assert (
            runner.invoke(app, ["tune", str(net), "--storage", bad, "--no-refine"]).exit_code == 2
        )


def _no_solving(*args: object, **kwargs: object) -> None:
    raise AssertionError("solved before checking the storage")


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("mysql://u@localhost/db", ["unsupported storage 'mysql'", "sqlite:///PATH"]),
        ("foo", ["'foo' is not a storage URL"]),
        ("postgresql+asyncpg://u@h/db", ["driver 'asyncpg' is not supported"]),
        ("sqlite+aiosqlite:///x.db", ["'aiosqlite' is not supported"]),
        ("sqlite:////no/such/folder/x.db", ["folder '/no/such/folder' does not exist"]),
    ],
)
def test_unsupported_or_malformed_urls(url, words):
    with pytest.raises(StorageError) as info:
        check_storage(url)
    assert info.value.option == "storage"
    for word in words:
        assert word in str(info.value)


def test_a_missing_postgres_driver_says_what_to_install(tmp_path, monkeypatch):
    real = storage.importlib.util.find_spec
    monkeypatch.setattr(
        storage.importlib.util,
        "find_spec",
        lambda name, *a: None if name.startswith(("psycopg", "pg8000")) else real(name, *a),
    )
    with pytest.raises(StorageError, match=r"pip install psycopg2-binary"):
        check_storage("postgresql+psycopg2://user:secret@localhost/db")
    with pytest.raises(StorageError, match=r"pip install 'psycopg\[binary\]'"):
        check_storage("postgresql+psycopg://localhost/db")
    with pytest.raises(StorageError, match=r"needs a driver: pip install psycopg2-binary"):
        check_storage("postgresql://localhost/db")
    net = tmp_path / "net.yaml"
    net.write_text(TWO_LAYERS)
    result = runner.invoke(
        app, ["tune", str(net), "--storage", "postgresql://user:secret@localhost/db"]
    )
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: option '--storage': postgresql://user:***@localhost/db")
    assert "secret" not in line


def test_plain_postgresql_gets_the_driver_that_is_installed(monkeypatch):
    real = storage.importlib.util.find_spec
    monkeypatch.setattr(
        storage.importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("psycopg", "pg8000") else real(name, *a),
    )
    url = check_storage("postgresql://user:p%40ss@host:5433/db")
    assert url == "postgresql+psycopg2://user:p%40ss@host:5433/db"


def test_memory_urls():
    assert check_storage("memory") is None
    assert check_storage("sqlite://") is None
    assert prepare_storage("memory") is None


def test_relative_xdg_cache_home_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert cache_dir() == tmp_path / ".cache" / "autotune"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "autotune"


def test_an_unwritable_cache_falls_back_to_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    with pytest.warns(StorageWarning, match="kept in memory"):
        assert prepare_storage(None) is None
    folder = tmp_path / "ro"
    (folder / "autotune").mkdir(parents=True)
    (folder / "autotune").chmod(0o500)
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    if os.geteuid() == 0:  # root writes anywhere: pretend it cannot
        monkeypatch.setattr(storage.os, "access", lambda path, mode: False)
    with pytest.warns(StorageWarning, match="cannot write the cache folder"):
        assert prepare_storage(None) is None
    assert list((folder / "autotune").iterdir()) == []


def test_an_unwritable_cache_is_one_warning_line_on_the_command_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    net = tmp_path / "net.yaml"
    net.write_text(TWO_LAYERS)
    run = subprocess.run(
        _tune(net, 2), env=_env(blocker), capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("warning: cannot create the cache folder")
    assert "kept in memory" in lines[0] and "--storage" in lines[0]


def test_a_failing_simulator_fails_its_trial_and_stops(manticore, tmp_path):
    url = f"sqlite:///{tmp_path / 'f.db'}"
    space = search_space(LAYER, manticore, 1)
    seeds = [space.decode(i) for i in top_k(space, manticore, "fp32", "latency", 2)]

    def broken(*args: object) -> None:
        raise RuntimeError("simulator bug")

    with pytest.raises(RuntimeError, match="simulator bug"):
        refine_layer(LAYER, manticore, "fp32", 1, seeds, TuneOptions(trials=4, storage=url), broken)
    (study,) = _studies(tmp_path / "f.db")
    states = _states(study)
    assert states.count(optuna.trial.TrialState.FAIL) == 1
    assert optuna.trial.TrialState.RUNNING not in states
    assert not [t for t in study.trials if "failed_trial" in t.system_attrs]  # not retried


def test_a_trial_killed_before_its_first_heartbeat_is_failed_and_queued_again(
    tmp_path, monkeypatch
):
    """A process killed between asking for a trial and its first heartbeat leaves a RUNNING
    trial Optuna never finds stale (it has no heartbeat): once older than the grace period
    it is failed and queued again like a stale one."""
    rdb = storage.open_storage(f"sqlite:///{tmp_path / 'orphan.db'}")
    study = optuna.create_study(storage=rdb, study_name="orphan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        study.ask()  # RUNNING, and no heartbeat: as if killed right here
    storage.fail_stale_trials(study)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.RUNNING]  # too young
    monkeypatch.setattr(storage, "GRACE_PERIOD_S", 0)
    time.sleep(0.01)
    storage.fail_stale_trials(study)
    states = [t.state for t in study.trials]
    assert states[0] == optuna.trial.TrialState.FAIL
    assert optuna.trial.TrialState.WAITING in states  # queued again once
