"""Depthwise fusion through the product: the network plan fuses the pairs that pay, the
file says so (plan and graph), verify executes the fused network in the plan's L2, and a
file that fuses what cannot fuse, or disagrees with itself, is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from autotune import TuneOptions
from autotune.api import audit_schedule, tune_network
from autotune.cli.app import app
from autotune.io.network_yaml import parse_network
from autotune.ir.plan import check_plan
from tests.graphs.test_fusion import MOBILE_BLOCKS
from tests.plans.test_plan_pipeline import live_overlaps, quiet

runner = CliRunner()

#: The blocks at 56 x 56, where fusing pays (at 11 x 10 it does not): the first block's
#: expansion into its depthwise, the second block's depthwise into its 1x1.
LARGE = MOBILE_BLOCKS.replace("in: [11, 10, 3]", "in: [56, 56, 3]").replace("batch: 2", "batch: 1")


@pytest.fixture(scope="module")
def tuned(manticore, tmp_path_factory):
    net = parse_network(yaml.safe_load(LARGE), "<test>")
    options = TuneOptions(refine=False, processes=1, storage="memory")
    fused = tune_network(net, manticore, options, quiet)
    unfused = tune_network(
        net,
        manticore,
        TuneOptions(
            refine=False, verify=False, processes=1, storage="memory", fuse_depthwise=False
        ),
        quiet,
    )
    path = tmp_path_factory.mktemp("fusion") / "fused.json"
    fused.save(path)
    return fused, unfused, path


def test_the_plan_fuses_and_the_fused_network_verifies(tuned) -> None:
    fused, unfused, path = tuned
    plan = fused.plan
    assert plan is not None and plan.fused == ("dw", "pw2")
    assert [r.layer.name for r in fused.layers] == ["stem", "dw", "project", "pw2"]
    assert fused.layers[1].layer.expansion is not None
    assert fused.layers[3].layer.prologue is not None
    assert unfused.plan is not None and unfused.plan.fused == ()
    assert len(unfused.layers) == 6
    assert plan.cycles <= unfused.plan.cycles
    assert check_plan(plan) == []
    assert fused.network_verified is not None and fused.network_verified.ok
    record = json.loads(Path(path).read_text())
    assert record["plan"]["fused"] == ["dw", "pw2"]
    assert live_overlaps(record) == []
    # the inner tensors are no tensors of the plan: they never leave the clusters
    names = {t["name"] for t in record["plan"]["tensors"]}
    assert "expand_act" not in names and "dw2" not in names and "dw:weights" in names
    fates = {op["name"]: (op["fate"], op["into"]) for op in record["graph"]["operators"]}
    assert fates["expand"] == fates["expand_act"] == ("fused", "dw")
    assert fates["dw2"] == ("fused", "pw2")
    assert audit_schedule(path).ok


def _forged(path: Path, tmp_path: Path, edit) -> Path:
    record = json.loads(path.read_text())
    edit(record)
    out = tmp_path / "forged.json"
    out.write_text(json.dumps(record))
    return out


def _fate(name: str, fate: str, into: str):
    def edit(record: dict) -> None:
        for op in record["graph"]["operators"]:
            if op["name"] == name:
                op.update(fate=fate, into=into)

    return edit


def _prologue(name: str, absorbed: str):
    def edit(record: dict) -> None:
        for step in record["graph"]["steps"]:
            if step["layer"] == name:
                step["prologue"] = absorbed

    return edit


def _shape(record: dict, name: str) -> dict:
    return next(layer["shape"] for layer in record["layers"] if layer["name"] == name)


@pytest.mark.parametrize(
    "edit, field",
    [
        # a conv "fused" into a 1x1 step whose step before is no depthwise
        (_fate("stem", "fused", "expand"), "graph.fused"),
        # a depthwise "fused" into its 1x1 while it has its expansion fused into it
        (_fate("dw", "fused", "project"), "graph.fused"),
        # a 1x1 step that says it absorbed the depthwise before it, which has its expansion
        (_prologue("project", "dw"), "graph.fused"),
        # the plan says a pair is not fused that the graph fuses
        (lambda r: r["plan"].update(fused=["pw2"]), "plan.fused"),
        # the fused expansion dropped from its layer, or its activation
        (lambda r: _shape(r, "dw").pop("expansion"), "shape"),
        (lambda r: _shape(r, "dw")["expansion"].update(activation=None), "shape"),
    ],
    ids=["not-a-pair", "twice", "prologue", "plan", "expansion-dropped", "expansion-activation"],
)
def test_a_forged_fusion_is_refused(tuned, tmp_path, edit, field) -> None:
    _, _, path = tuned
    audit = audit_schedule(_forged(path, tmp_path, edit))
    assert not audit.ok
    assert field in [f.field for f in audit.findings], audit.findings


def test_unfused_schedule_still_verifies_from_its_file(tuned, tmp_path) -> None:
    _, unfused, _ = tuned
    path = tmp_path / "unfused.json"
    unfused.save(path)
    record = json.loads(path.read_text())
    assert "fused" not in record["plan"]  # files without fusion keep their layout
    assert audit_schedule(path).ok


def test_show_names_the_fused_depthwise_and_tune_no_fuse_fuses_nothing(tuned, tmp_path) -> None:
    _, _, path = tuned
    shown = runner.invoke(app, ["show", str(path)])
    assert shown.exit_code == 0, shown.output
    assert "expand expand_act →" in shown.output
    assert "1 depthwise steps fused into the 1x1 after them" in shown.output
    assert "1 1x1 steps fused into the depthwise after them" in shown.output
    net = tmp_path / "large.yaml"
    net.write_text(LARGE)
    out = tmp_path / "no_fuse.json"
    result = runner.invoke(
        app,
        ["tune", str(net), "--no-refine", "--no-verify", "--storage", "memory", "--no-fuse"]
        + ["--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text())
    assert [r["name"] for r in record["layers"]][2:] == ["dw", "project", "dw2", "pw2"]
    assert "fused" not in record["plan"]


def test_show_refuses_a_forged_fusion_in_one_line_naming_the_file(tuned, tmp_path) -> None:
    _, _, path = tuned
    forged = _forged(path, tmp_path, _fate("stem", "fused", "expand"))
    shown = runner.invoke(app, ["show", str(forged)])
    assert shown.exit_code == 2
    line = shown.output.strip()
    assert "\n" not in line and "Traceback" not in line
    assert str(forged) in line and "'expand'" in line and "graph.fused" in line
