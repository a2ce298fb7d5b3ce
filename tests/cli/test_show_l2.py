"""``show``, ``tune`` and ``simulate`` with a network plan: the memory columns and the plan
line appear when layers keep streams in L2, and per-layer schedules print as before."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from autotune import TuneOptions
from autotune.api import tune_network
from autotune.cli.app import app
from autotune.cli.render import size
from autotune.io.network_yaml import parse_network
from tests.graphs.test_execute_plan import RESIDUAL_CONCAT

runner = CliRunner()


@pytest.fixture(scope="module")
def files(planned_result, manticore, tmp_path_factory):
    """The planned schedule and the same network's per-layer schedule, as files."""
    net = parse_network(yaml.safe_load(RESIDUAL_CONCAT), "<test>")
    options = TuneOptions(
        refine=False, verify=False, processes=1, search="exhaustive", plan="per-layer"
    )
    per_layer = tune_network(net, manticore, options, lambda stage, name: None)
    folder = tmp_path_factory.mktemp("show")
    planned_result.save(folder / "planned.json")
    per_layer.save(folder / "per_layer.json")
    return folder / "planned.json", folder / "per_layer.json"


def rows(output: str) -> dict[str, list[str]]:
    """The table's body rows by layer name, as lists of cells."""
    cells = (line.strip("│").split("│") for line in output.splitlines() if line.startswith("│"))
    return {row[0].strip(): [c.strip() for c in row] for row in cells}


def header(output: str) -> list[str]:
    line = next(line for line in output.splitlines() if line.startswith("┃"))
    return [c.strip() for c in line.strip("┃").split("┃")]


#: The ``in L2`` column's names of the streams, in its order.
SHORT = {"input": "in", "weights": "w", "residual": "res", "output": "out"}


def test_show_has_placement_traffic_and_plan_line_for_a_plan(files, planned_result):
    planned = planned_result
    shown = runner.invoke(app, ["show", str(files[0])])
    assert shown.exit_code == 0, shown.output
    columns = header(shown.output)
    assert columns[columns.index("L1") + 1 : columns.index("cycles")] == ["in L2", "HBM", "L2"]
    table, at = rows(shown.output), columns.index("in L2")
    for r in planned.layers:
        has = {"input", "output"}
        has |= {"weights"} if r.layer.weight_words else set()
        has |= {"residual"} if r.layer.epilogue.residual else set()
        in_l2 = [SHORT[s] for s in SHORT if s in has and r.placement.level(s) == "l2"]
        a = r.predicted
        cells = [" ".join(in_l2) or "-", size(a.offchip_bytes), size(a.l2_bytes)]
        assert table[r.layer.name][at : at + 3] == cells, r.layer.name
    assert table["conv2"][at] == "in w res out"  # all of it in L2, its residual too
    assert table["pool"][at] == "in out"  # no weights, no residual: not named
    plan = planned.plan
    line = next(line for line in shown.output.splitlines() if line.startswith("plan ("))
    assert line.startswith(f"plan (network): {plan.status} in ")
    assert f"{plan.cycles:,} model cycles, bound {plan.bound_cycles:,} (gap 0.0%)" in line
    assert f"HBM {size(plan.hbm_bytes)}, L2 peak {size(plan.l2_peak_bytes)} of 25.7 MiB" in line
    l2 = [t for t in plan.tensors if t.level == "l2"]
    assert f"{len(l2)} of {len(plan.tensors)} tensors in L2" in line
    prefetched = sum(r.prefetch_bytes for r in planned.layers)
    assert prefetched and f"{size(prefetched)} of weights prefetched" in line


def test_show_of_a_per_layer_schedule_is_unchanged(files):
    shown = runner.invoke(app, ["show", str(files[1])])
    assert shown.exit_code == 0, shown.output
    columns = header(shown.output)
    assert columns[columns.index("L1") + 1] == "cycles"
    assert not {"in L2", "HBM", "L2"} & set(columns)
    assert not any(line.startswith("plan (") for line in shown.output.splitlines())


def test_simulate_adds_the_l2_rate_only_with_l2_traffic(files):
    with_plan = runner.invoke(app, ["simulate", str(files[0]), "--layer", "conv2"])
    assert with_plan.exit_code == 0, with_plan.output
    columns = header(with_plan.output)
    assert columns[columns.index("HBM B/cycle") + 1] == "L2 B/cycle"
    assert float(rows(with_plan.output)["conv2"][columns.index("L2 B/cycle")]) > 0
    per_layer = runner.invoke(app, ["simulate", str(files[1]), "--layer", "conv2"])
    assert per_layer.exit_code == 0, per_layer.output
    assert "L2 B/cycle" not in header(per_layer.output)


def test_roofline_of_a_plan_writes_the_figure(files, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "roof.png"
    r = runner.invoke(app, ["roofline", str(files[0]), "-o", str(png)])
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
