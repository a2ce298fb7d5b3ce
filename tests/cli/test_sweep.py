"""``autotune sweep`` and ``autotune tune --batch auto``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli.app import app
from tests.conftest import TINY_FC_SEARCH

runner = CliRunner()


def _command(name: str, network: Path) -> list[str]:
    """``autotune NAME NETWORK`` with the sweeps' tests' search (``TINY_FC_SEARCH``)."""
    return [name, str(network), "--search", TINY_FC_SEARCH]


def _one_line(output: str) -> str:
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert "Traceback" not in output
    return lines[0]


def test_sweep_table_turning_batches_json_and_plot(tiny_fc_file, tmp_path):
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "sweep.json", tmp_path / "sweep.png"
    result = runner.invoke(
        app,
        [
            *_command("sweep", tiny_fc_file),
            "--batch",
            "1,8,...,64",
            "--out",
            str(out),
            "--plot",
            str(png),
        ],
    )
    assert result.exit_code == 0, result.output
    text = result.output
    for col in ("batch", "latency (ms)", "images/s", "Tflop/s", "% peak", "fc1", "fc2"):
        assert col in text
    rows = {int(m.group(1)): m.group(0) for m in re.finditer(r"│\s+(\d+) │.*", text)}
    assert sorted(rows) == [1, 8, 64]  # 1,8,...,64: ×8 each step
    assert "mem" in rows[1] and "compute" not in rows[1]
    assert "→ compute" in rows[64]
    assert "fc1 turns compute-bound at batch 64" in text
    assert "fc2 stays memory-bound up to batch 64" in text
    assert "ridge point 14.4 flop per off-chip byte" in text
    data = json.loads(out.read_text())
    assert data["batches"] == [1, 8, 64]
    assert data["fc_layers"][0] == {"layer": "fc1", "turning_batch": 64, "memory_again": None}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.json", "sweep.png"]

    again = tmp_path / "again.json"
    result = runner.invoke(
        app,
        [
            *_command("sweep", tiny_fc_file),
            "--batch",
            "64,8,1,8",
            "--out",
            str(again),
        ],
    )
    assert result.exit_code == 0, result.output
    assert again.read_bytes() == out.read_bytes()  # deterministic


@pytest.mark.parametrize(
    "batch, message",
    [
        ("0", "batch 0 is not a positive integer"),
        ("x", "'x' is not a positive integer"),
        ("1,2,4,...,100", "100 is not in the progression"),
        ("4,2,...,1", "neither a rising"),
    ],
)
def test_sweep_bad_batch_exits_2(tiny_fc_file, tmp_path, batch, message):
    out = tmp_path / "s.json"
    result = runner.invoke(app, ["sweep", str(tiny_fc_file), "--batch", batch, "--out", str(out)])
    assert result.exit_code == 2
    line = _one_line(result.output)
    assert "--batch" in line and message in line
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_sweep_bad_options_exit_2(tiny_fc_file, tmp_path):
    cases = [
        (["--objective", "speed"], "--objective"),
        (["--out", str(tmp_path / "no" / "s.json")], "--out"),
        (["--out", str(tmp_path / ("x" * 300 + ".json"))], "too long"),  # a stat raises
        (["--plot", str(tmp_path / "s.xyz")], "--plot"),
        (["--machine", "nosuch"], "nosuch"),
    ]
    for extra, text in cases:
        result = runner.invoke(app, ["sweep", str(tiny_fc_file), "--batch", "1", *extra])
        assert result.exit_code == 2, result.output
        assert text in _one_line(result.output)
    assert list(tmp_path.iterdir()) == []


def test_sweep_plot_without_matplotlib_exits_2(tiny_fc_file, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    png = tmp_path / "s.png"
    result = runner.invoke(app, ["sweep", str(tiny_fc_file), "--batch", "1", "--plot", str(png)])
    assert result.exit_code == 2
    assert "autotune[plot]" in _one_line(result.output)
    assert not png.exists()


def _candidates(output: str) -> dict[int, tuple[float, float]]:
    """{batch: (latency ms, images/s)} from the 'batch auto' line's candidates."""
    text = output.split("candidates:", 1)[1]
    return {
        int(b): (float(ms), float(ips.replace(",", "")))
        for b, ms, ips in re.findall(r"(\d+): ([\d.]+) ms ([\d,]+)/s", text)
    }


def test_tune_batch_auto_picks_most_images_within_budget(tiny_fc_file, tiny_fc_sweep, tmp_path):
    budget_s = tiny_fc_sweep.point(4).latency_s * 1.001
    out = tmp_path / "auto.json"
    result = runner.invoke(
        app,
        [
            *_command("tune", tiny_fc_file),
            "--batch",
            "auto",
            "--latency-budget",
            repr(budget_s * 1e3),
            "--max-batch",
            "8",
            "--trials",
            "2",
            "--storage",
            "memory",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    m = re.search(
        r"batch auto: chose batch (\d+) \(latency ([\d.]+) ms <= budget ([\d.]+) ms", result.output
    )
    assert m, result.output
    chosen = int(m.group(1))
    candidates = _candidates(result.output)
    assert sorted(candidates) == [1, 2, 4, 8]
    within = {b: ips for b, (ms, ips) in candidates.items() if ms <= budget_s * 1e3}
    assert 4 in within and chosen in within
    assert within[chosen] == max(within.values())
    assert "fc1" in result.output and " ok " in result.output  # refined and verified
    saved = json.loads(out.read_text())
    assert saved["batch"] == chosen
    assert saved["totals"]["latency_s"] <= budget_s
    assert all(layer["verified"]["ok"] for layer in saved["layers"])


def test_tune_batch_auto_without_refinement_reuses_the_sweep(tiny_fc_file):
    result = runner.invoke(
        app,
        [
            *_command("tune", tiny_fc_file),
            "--batch",
            "auto",
            "--latency-budget",
            "1000",
            "--max-batch",
            "2",
            "--no-refine",
            "--no-verify",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "batch auto: chose batch 2" in result.output
    assert "over budget" not in result.output


def test_tune_budget_too_small_exits_2(tiny_fc_file):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            *_command("tune", tiny_fc_file),
            "--batch",
            "auto",
            "--latency-budget",
            "0.000001",
            "--max-batch",
            "1",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2, result.stderr
    line = _one_line(result.stderr)
    assert str(tiny_fc_file) in line and "--latency-budget" in line
    assert re.search(r"smallest latency achievable is [\d.]+ ms \(batch 1\)", line)
    assert result.stdout.strip() == ""


@pytest.mark.parametrize(
    "args, text",
    [
        (["--batch", "auto"], "'auto' needs --latency-budget"),
        (["--batch", "0"], "expected a positive integer or 'auto', got '0'"),
        (["--batch", "abc"], "expected a positive integer or 'auto', got 'abc'"),
        (["--batch", "-3"], "expected a positive integer or 'auto'"),
        (["--latency-budget", "5"], "'--latency-budget': only with --batch auto"),
        (["--batch", "8", "--latency-budget", "5"], "'--latency-budget': only with --batch auto"),
        (["--max-batch", "8"], "'--max-batch': only with --batch auto"),
        (["--batch", "auto", "--latency-budget", "0"], "positive number of milliseconds"),
        (["--batch", "auto", "--latency-budget", "-1"], "positive number of milliseconds"),
        (["--batch", "auto", "--latency-budget", "soon"], "positive number of milliseconds"),
        (["--batch", "auto", "--latency-budget", "nan"], "positive number of milliseconds"),
        (["--batch", "auto", "--latency-budget", "5", "--max-batch", "0"], "'--max-batch'"),
    ],
)
def test_tune_batch_options_exit_2(tiny_fc_file, args, text):
    result = runner.invoke(app, ["tune", str(tiny_fc_file), *args])
    assert result.exit_code == 2, result.output
    assert text in _one_line(result.output)


def test_tune_integer_batch_still_works(tiny_fc_file):
    result = runner.invoke(
        app, ["tune", str(tiny_fc_file), "--batch", "2", "--no-refine", "--no-verify"]
    )
    assert result.exit_code == 0, result.output
    assert "tiny: batch 2" in result.output and "batch auto" not in result.output
