"""Output files are written atomically with the mode any new file gets (0o666 less the umask),
not mkstemp's private 0o600."""

from __future__ import annotations

import os
import stat

import pytest

from autotune import Layer, Mapping, simulate
from autotune.files import atomic_path, write_atomic
from autotune.report.figure import save_figure

LAYER = Layer("c", "conv", 14, 14, 16, 16, 3, 3, pad_h=1, pad_w=1)


@pytest.fixture(params=[0o022, 0o002, 0o077])
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_write_atomic_respects_the_umask(tmp_path, umask):
    path = tmp_path / "schedules.json"
    write_atomic(path, "{}")
    assert path.read_text() == "{}"
    assert _mode(path) == 0o666 & ~umask
    assert os.listdir(tmp_path) == ["schedules.json"]


def test_traces_and_plots_respect_the_umask(tmp_path, umask, manticore):
    trace = simulate(LAYER, Mapping.from_report(2, delta_o=8), manticore, trace=True)
    path = trace.write_trace(tmp_path / "t.json")
    assert _mode(path) == 0o666 & ~umask
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    pytest.importorskip("matplotlib.pyplot")
    fig, _ = matplotlib.pyplot.subplots()
    save_figure(fig, tmp_path / "plot.png")
    assert _mode(tmp_path / "plot.png") == 0o666 & ~umask
    assert sorted(os.listdir(tmp_path)) == ["plot.png", "t.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.json"]
