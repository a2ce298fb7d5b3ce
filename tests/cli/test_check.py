from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from autotune.cli.app import app
from tests.conftest import EXAMPLES

runner = CliRunner()


def test_check_prints_every_layer():
    result = runner.invoke(app, ["check", str(EXAMPLES / "alexnet.yaml")])
    assert result.exit_code == 0, result.output
    for name in ("features.0", "features.3", "classifier.6"):
        assert name in result.output
    assert "724.41 MMAC" in result.output


def test_check_bad_file_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("network: n\nlayers:\n  - {name: c9, kind: conv, in: [8, 8, 3], "
                   "out_channels: 4, kernel: 3, stride: 0}\n")
    result = subprocess.run([sys.executable, "-m", "autotune", "check", str(bad)],
                            capture_output=True, text=True)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(bad) in lines[0] and "'c9'" in lines[0] and "'stride'" in lines[0]
    assert "Traceback" not in result.stderr


def test_check_unsupported_precision_exits_2(tmp_path):
    net = tmp_path / "n.yaml"
    net.write_text("network: n\nprecision: fp16\nlayers:\n  - {name: f, kind: fc, in: [1, 1, 4],"
                   " out_channels: 2}\n")
    result = runner.invoke(app, ["check", str(net)])
    assert result.exit_code == 2
    assert "does not compute 'fp16'" in result.output


def test_machines_lists_presets():
    result = runner.invoke(app, ["machines"])
    assert result.exit_code == 0
    assert "manticore" in result.output and "4.10 Tflop/s" in result.output


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and "autotune" in result.output


def test_simulate_prints_layers_and_writes_a_trace(tmp_path):
    trace = tmp_path / "t.json"
    result = runner.invoke(app, ["simulate", str(EXAMPLES / "alexnet.yaml"), "--layer",
                                 "classifier.6", "--trace", str(trace)])
    assert result.exit_code == 0, result.output
    assert "classifier.6" in result.output and "input_parallel" in result.output
    assert trace.exists()
    assert runner.invoke(app, ["simulate", str(EXAMPLES / "alexnet.yaml"), "--trace",
                               str(trace)]).exit_code == 2
    assert runner.invoke(app, ["simulate", str(EXAMPLES / "alexnet.yaml"), "--layer",
                               "nope"]).exit_code == 2
