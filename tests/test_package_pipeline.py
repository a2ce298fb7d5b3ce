"""A package end to end: tune (with refinement) -> JSON with chiplet_split -> load, show,
verify, simulate; and files written before chiplet_split existed still load."""

from __future__ import annotations

import json

from typer.testing import CliRunner

import autotune
from autotune import Layer, Network
from autotune.api import TuneResult
from autotune.cli.app import app
from tests.package_machine import small_package

runner = CliRunner()
PACKAGE = small_package()
NET = Network(
    "small",
    (
        Layer("c1", "conv", 16, 16, 8, 16, 3, 3, pad_h=1, pad_w=1),
        Layer.fc("fc", 4, 4, 16, 10),
    ),
    batch=2,
)


def test_package_tune_json_and_cli(tmp_path):
    result = autotune.tune(NET, PACKAGE, trials=4, storage="memory")
    for r in result.layers:
        assert r.verified.ok, r.verified.errors
        assert r.simulated.chiplet_split == r.mapping.chiplet_split
        assert r.predicted.macs == 2 * r.layer.macs
    assert result.totals.cycles == sum(r.simulated.cycles for r in result.layers)
    path = tmp_path / "package.json"
    result.save(path)
    data = json.loads(path.read_text())
    for layer, r in zip(data["layers"], result.layers, strict=True):
        assert layer["mapping"]["chiplet_split"] == r.mapping.chiplet_split
        assert layer["predicted"]["d2d_bytes"] == r.predicted.d2d_bytes
        assert layer["simulated"]["d2d_bytes"] == r.simulated.d2d_bytes
    loaded = TuneResult.load(path)
    assert [r.mapping for r in loaded.layers] == [r.mapping for r in result.layers]
    assert loaded.machine.chiplets == 2
    shown = runner.invoke(app, ["show", str(path)])
    assert shown.exit_code == 0 and "chiplets" in shown.output
    assert runner.invoke(app, ["verify", str(path)]).exit_code == 0
    simulated = runner.invoke(app, ["simulate", str(path)])
    assert simulated.exit_code == 0 and "d2d" in simulated.output


def test_single_chiplet_file_without_chiplet_split_loads(tmp_path):
    result = autotune.tune(NET, refine=False, verify=False, storage="memory")
    data = json.loads(result.to_json())
    for layer in data["layers"]:
        assert "d2d_bytes" not in layer["predicted"] and "d2d_bytes" not in layer["simulated"]
        del layer["mapping"]["chiplet_split"]  # a file from before the field
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    loaded = TuneResult.load(path)
    assert [r.mapping for r in loaded.layers] == [r.mapping for r in result.layers]
    assert all(r.mapping.chiplet_split == "none" for r in loaded.layers)
