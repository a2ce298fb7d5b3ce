"""End to end: tune -> JSON -> show / verify / simulate, from the library and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources

import pytest
from typer.testing import CliRunner

import autotune
import autotune.files
from autotune import Layer, Network
from autotune.api import TuneResult
from autotune.cli.app import app
from autotune.io.schedule_json import json_schema

runner = CliRunner()

NET = Network(
    "small",
    (
        Layer("c1", "conv", 16, 16, 8, 16, 3, 3, pad_h=1, pad_w=1),
        Layer("c2", "conv", 16, 16, 8, 16, 3, 3, pad_h=1, pad_w=1),
        Layer(
            "dw", "conv", 16, 16, 16, 16, 3, 3, stride_h=2, stride_w=2, pad_h=1, pad_w=1, groups=16
        ),
        Layer.fc("fc", 8, 8, 16, 10),
    ),
)


@pytest.fixture(scope="module")
def tuned():
    return autotune.tune(NET, trials=6, storage="memory")


def test_tune_library(tuned):
    assert [r.layer.name for r in tuned.layers] == ["c1", "c2", "dw", "fc"]
    for r in tuned.layers:
        assert r.verified.ok, r.verified.errors
        assert r.simulated.cycles > 0
        assert r.predicted.fits
        # refinement keeps the integer program's winner unless the simulator prefers another
        assert r.ilp_simulated_cycles is None or r.simulated.cycles <= r.ilp_simulated_cycles
    assert tuned.layers[1].search.shared_with == "c1"
    t = tuned.totals
    assert t.cycles == sum(r.simulated.cycles for r in tuned.layers)
    assert 0 < t.peak_fraction <= 1


def test_json_round_trip_and_schema(tuned, tmp_path):
    path = tmp_path / "s.json"
    tuned.save(path)
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1 and data["tool"]["name"] == "autotune"
    layer = data["layers"][0]
    assert set(layer) == {
        "name",
        "kind",
        "shape",
        "mapping",
        "predicted",
        "simulated",
        "search",
        "verified",
    }
    assert set(layer["shape"]) == {
        "h_in",
        "w_in",
        "c_in",
        "c_out",
        "kernel_h",
        "kernel_w",
        "stride_h",
        "stride_w",
        "pad_h",
        "pad_w",
        "groups",
    }
    assert {
        "algorithm",
        "report_algorithm",
        "delta_o",
        "batch_tile",
        "share_group",
        "tile",
        "buffers",
    } <= set(layer["mapping"])
    assert {
        "cycles",
        "macs",
        "offchip_bytes",
        "intercluster_bytes",
        "l1_bytes",
        "ccr",
        "bound",
    } == set(layer["predicted"])
    assert layer["simulated"]["cycles"] > 0 and layer["verified"]["ok"]
    loaded = TuneResult.load(path)
    assert [r.mapping for r in loaded.layers] == [r.mapping for r in tuned.layers]
    assert [r.predicted.cycles for r in loaded.layers] == [r.predicted.cycles for r in tuned.layers]
    shipped = resources.files("autotune") / "schema" / "schedule.schema.json"
    assert json.loads(shipped.read_text()) == json_schema()


def test_same_input_same_json():
    a = autotune.tune(NET, refine=False, verify=False, storage="memory")
    b = autotune.tune(NET, refine=False, verify=False, storage="memory")
    strip = [
        {k: v for k, v in layer.items() if k != "search"}
        for layer in json.loads(a.to_json())["layers"]
    ]
    assert strip == [
        {k: v for k, v in layer.items() if k != "search"}
        for layer in json.loads(b.to_json())["layers"]
    ]


#: AlexNet's operators (conv, relu, maxpool, grouped conv, flatten, fc) at a fraction of its
#: size: the command line's whole path, tuning, refinement, verification of every layer and
#: of the network end to end, in seconds instead of minutes (``examples/alexnet.yaml`` runs
#: in the README's snippets).
SMALL_ALEXNET = """\
network: small-alexnet
batch: 1
precision: fp32
layers:
  - {name: features.0, kind: conv, in: [35, 35, 3], out_channels: 16, kernel: 11, stride: 4}
  - {name: features.1, kind: relu}
  - {name: features.2, kind: maxpool, kernel: 3, stride: 2}
  - {name: features.3, kind: conv, in: [3, 3, 16], out_channels: 32, kernel: 3, padding: 1,
     groups: 2}
  - {name: features.4, kind: relu}
  - {name: flatten, kind: flatten}
  - {name: classifier.1, kind: fc, in: [1, 1, 288], out_channels: 64}
  - {name: classifier.2, kind: relu}
  - {name: classifier.4, kind: fc, in: [1, 1, 64], out_channels: 10}
"""


def test_cli_tune_out_show_verify_simulate(tmp_path):
    out = tmp_path / "alex.json"
    network = tmp_path / "small-alexnet.yaml"
    network.write_text(SMALL_ALEXNET)
    result = runner.invoke(
        app,
        [
            "tune",
            str(network),
            "--trials",
            "4",
            "--storage",
            "memory",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "images/s" in result.output and "ok" in result.output and out.exists()
    for command in (
        ["show", str(out)],
        ["verify", str(out)],
        ["simulate", str(out), "--layer", "features.3", "--trace", str(tmp_path / "t.json")],
    ):
        r = runner.invoke(app, command)
        assert r.exit_code == 0, (command, r.output)
    trace = json.loads((tmp_path / "t.json").read_text())
    assert trace["traceEvents"]


def test_cli_verify_fails_on_a_corrupted_file(tmp_path, tuned):
    path = tmp_path / "s.json"
    tuned.save(path)
    data = json.loads(path.read_text())
    data["machine"]["parameters"]["l1_size"]["value"] = 512  # the buffers no longer fit
    path.write_text(json.dumps(data))
    r = runner.invoke(app, ["verify", str(path)])
    assert r.exit_code == 1  # not the preset it names: rejected before anything runs
    assert "machine.parameters.l1_size.value" in r.output and "rejected" in r.output
    data["machine"]["name"] = "my-small-chip"  # a machine of its own: every figure re-derived
    path.write_text(json.dumps(data))
    r = runner.invoke(app, ["verify", str(path)])
    assert r.exit_code == 1 and "do not fit L1" in r.output


@pytest.mark.parametrize(
    "content, words",
    [
        ("{", "not valid JSON"),
        ('{"schema_version": 99}', "schema_version"),
        ('{"schema_version": 1, "layers": [{"name": "x"}]}', "required key is missing"),
    ],
)
def test_bad_schedule_files_exit_2(tmp_path, content, words):
    path = tmp_path / "bad.json"
    path.write_text(content)
    r = subprocess.run(
        [sys.executable, "-m", "autotune", "show", str(path)], capture_output=True, text=True
    )
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_out_is_written_atomically(tmp_path, monkeypatch, tuned):
    path = tmp_path / "s.json"
    path.write_text("previous")

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(autotune.files.os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        tuned.save(path)
    assert path.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]


def test_schema_command():
    r = runner.invoke(app, ["schema"])
    assert r.exit_code == 0 and json.loads(r.output)["title"] == "ScheduleFile"


def test_roofline_png(tuned, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "s.json"
    tuned.save(path)
    png = tmp_path / "roof.png"
    r = runner.invoke(app, ["roofline", str(path), "-o", str(png)])
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
