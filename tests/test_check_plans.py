"""The independent plan checker (``benchmarks/check_plans.py``): it passes the plans
``tune`` exports, fails a layout whose live tensors share L2 bytes, and its forgery is one
that ``verify`` refuses."""

from __future__ import annotations

import json
from types import ModuleType

import pytest
import yaml
from typer.testing import CliRunner

from autotune.cli.app import app
from tests.conftest import load_script
from tests.graphs.test_execute_plan import RESIDUAL_CONCAT

runner = CliRunner()


@pytest.fixture(scope="module")
def check() -> ModuleType:
    return load_script("check_plans")


def tensor(name, first, last, offset, size, level="l2"):
    return {"name": name, "first": first, "last": last, "offset": offset, "bytes": size,
            "level": level}  # fmt: skip


def plan(*tensors, capacity=1024, steps=4):
    return {"l2_capacity": capacity, "steps": [{}] * steps, "tensors": list(tensors)}


def test_a_layout_is_sound_unless_live_tensors_share_a_byte(check):
    a = tensor("a", 0, 1, 0, 256)
    assert check.problems(plan(a, tensor("b", 1, 2, 256, 256))) == []
    assert check.problems(plan(a, tensor("b", 2, 3, 0, 256))) == []  # not live together
    found = check.problems(plan(a, tensor("b", 1, 2, 255, 256)))  # one byte shared
    assert found == ["tensors 'a' and 'b' are live together and share L2 bytes"]


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (tensor("x", 0, 0, 900, 200), "beyond 1024"),
        (tensor("x", 0, 0, None, 8), "without a valid offset"),
        (tensor("x", 2, 1, 0, 8), "lifetime 2..1"),
        (tensor("x", 0, 4, 0, 8), "lifetime 0..4 of 4 steps"),
        (tensor("x", 0, 0, 0, 8, level="hbm"), "in HBM with an L2 offset"),
        (tensor("x", 0, 0, 0, 8, level="l3"), "neither hbm nor l2"),
    ],
)
def test_each_unsound_entry_is_named(check, bad, says):
    found = check.problems(plan(bad))
    assert len(found) == 1 and says in found[0]


def test_an_exported_plan_is_sound_and_its_forgery_is_refused_by_verify(
    check, planned_result, tmp_path
):
    path, forged = tmp_path / "S.json", tmp_path / "T.json"
    planned_result.save(path)
    assert check.main([str(path)]) == 0
    network = tmp_path / "net.yaml"
    network.write_text(yaml.safe_dump(yaml.safe_load(RESIDUAL_CONCAT)))
    assert runner.invoke(app, ["verify", str(path), "--network", str(network)]).exit_code == 0
    assert check.main(["--tamper", str(path), str(forged)]) == 0
    assert check.main([str(forged)]) == 1
    moved = [
        (a["name"], a["offset"], b["offset"])
        for a, b in zip(
            json.loads(path.read_text())["plan"]["tensors"],
            json.loads(forged.read_text())["plan"]["tensors"],
            strict=True,
        )
        if a != b
    ]
    assert len(moved) == 1  # one offset changed, nothing else
    refused = runner.invoke(app, ["verify", str(forged), "--network", str(network)])
    assert refused.exit_code == 1 and "share L2 bytes" in refused.output


def test_a_file_without_a_plan_is_exit_2(check, planned_result, tmp_path):
    path = tmp_path / "S.json"
    planned_result.save(path)
    data = json.loads(path.read_text())
    data.pop("plan")
    path.write_text(json.dumps(data))
    assert check.main([str(path)]) == 2
    (tmp_path / "x.json").write_text("not json")
    assert check.main([str(tmp_path / "x.json")]) == 2
