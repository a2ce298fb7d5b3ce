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
    bad.write_text(
        "network: n\nlayers:\n  - {name: c9, kind: conv, in: [8, 8, 3], "
        "out_channels: 4, kernel: 3, stride: 0}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "autotune", "check", str(bad)], capture_output=True, text=True
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(bad) in lines[0] and "'c9'" in lines[0] and "'stride'" in lines[0]
    assert "Traceback" not in result.stderr


def test_check_unsupported_precision_exits_2(tmp_path):
    net = tmp_path / "n.yaml"
    net.write_text(
        "network: n\nprecision: fp16\nlayers:\n  - {name: f, kind: fc, in: [1, 1, 4],"
        " out_channels: 2}\n"
    )
    result = runner.invoke(app, ["check", str(net)])
    assert result.exit_code == 2
    assert "does not compute 'fp16'" in result.output


def test_check_precision_option_selects_the_machine_format():
    alexnet = str(EXAMPLES / "alexnet.yaml")
    lacking = runner.invoke(app, ["check", alexnet, "--machine", "mppa3"])
    assert lacking.exit_code == 2 and "does not compute 'fp32'" in lacking.output
    assert "supports: fp16" in lacking.output
    ok = runner.invoke(app, ["check", alexnet, "--machine", "mppa3", "--precision", "fp16"])
    assert ok.exit_code == 0 and "3.07 Tflop/s peak fp16" in ok.output
    unknown = runner.invoke(app, ["check", alexnet, "--precision", "fp8"])
    assert unknown.exit_code == 2 and "unknown precision 'fp8'" in unknown.output


def test_machines_lists_presets():
    result = runner.invoke(app, ["machines"])
    assert result.exit_code == 0
    rows = {line.split()[1]: line for line in result.output.splitlines() if line.startswith("│")}
    assert set(rows) == {"manticore", "manticore-package", "mppa3", "sw26010-cg"}
    assert "4.10 Tflop/s" in rows["manticore"] and "256.00 GB/s" in rows["manticore"]
    assert "16.38 Tflop/s" in rows["manticore-package"] and "1.02 TB/s" in rows["manticore-package"]
    assert "3.07 Tflop/s" in rows["mppa3"] and "51.20 GB/s" in rows["mppa3"]
    assert "742.40 Gflop/s" in rows["sw26010-cg"] and "36.00 GB/s" in rows["sw26010-cg"]


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and "autotune" in result.output


def test_tune_prints_schedule_table(tmp_path):
    net = tmp_path / "n.yaml"
    net.write_text(
        "network: small\nlayers:\n"
        "  - {name: c1, kind: conv, in: [16, 16, 8], out_channels: 16, kernel: 3, "
        "padding: 1}\n"
        "  - {name: c2, kind: conv, in: [16, 16, 8], out_channels: 16, kernel: 3, "
        "padding: 1}\n"
        "  - {name: fc, kind: fc, in: [4, 4, 16], out_channels: 10}\n"
    )
    result = runner.invoke(
        app,
        [
            "tune",
            str(net),
            "--search",
            "exhaustive",
            "--trials",
            "4",
            "--storage",
            "memory",
            "--plan",
            "per-layer",  # a network plan may prefetch c2's weights: then c2 differs from c1
        ],
    )
    assert result.exit_code == 0, result.output
    for text in ("c1", "c2", "= c1", "fc", "OPTIMAL", "images/s", "% of peak", "ok"):
        assert text in result.output


def test_tune_bad_option_exits_2(tmp_path):
    result = runner.invoke(app, ["tune", str(EXAMPLES / "alexnet.yaml"), "--search", "magic"])
    assert result.exit_code == 2 and "--search" in result.output


def test_tune_infeasible_exits_2(tmp_path):
    import yaml

    from autotune.io.machine_yaml import PRESET_DIR

    raw = yaml.safe_load((PRESET_DIR / "manticore.yaml").read_text())
    raw["parameters"]["l1_size"]["value"] = 64
    machine = tmp_path / "tiny.yaml"
    machine.write_text(yaml.safe_dump(raw))
    net = tmp_path / "n.yaml"
    net.write_text(
        "network: n\nlayers:\n  - {name: big, kind: conv, in: [8, 8, 8], "
        "out_channels: 8, kernel: 3}\n"
    )
    result = runner.invoke(app, ["tune", str(net), "--machine", str(machine)])
    assert result.exit_code == 2
    assert "'big'" in result.output and "smallest footprint" in result.output


def test_a_bad_command_line_is_one_line_and_exit_2():
    """What click itself refuses (an unknown option or command, a value out of an option's
    range, a missing argument) reads as our own refusals: one line naming it, exit 2 (click
    draws a five-line box otherwise)."""
    net = str(EXAMPLES / "alexnet.yaml")
    cases = [
        (["tune", net, "--trials", "-3"], "'--trials'"),
        (["tune", net, "--bogus"], "--bogus"),
        (["tune"], "'network'"),
        (["nosuchcommand"], "nosuchcommand"),
    ]
    for argv, words in cases:
        result = subprocess.run(
            [sys.executable, "-m", "autotune", *argv], capture_output=True, text=True
        )
        assert result.returncode == 2, (argv, result.stderr)
        lines = (result.stdout + result.stderr).strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (argv, lines)
        assert lines[0].startswith("error: ") and "--help" in lines[0]
    bare = subprocess.run([sys.executable, "-m", "autotune"], capture_output=True, text=True)
    assert bare.returncode == 2 and bare.stdout.count("Usage") == 1  # the help, once
