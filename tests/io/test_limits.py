"""Input limits (``autotune.io.limits``): hostile inputs are refused before any work, with
exit code 2 and one line naming the file, the layer and the field."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from autotune import InputError, Layer, Machine, Network, load_network, tune
from autotune.cli.app import app
from autotune.io import limits
from autotune.io.bounded_yaml import _PyLoader, load_yaml
from autotune.model.formulas import SCALE
from autotune.search.exhaustive import ranking
from autotune.search.ilp.ops import LIMIT
from autotune.search.space import search_space
from tests.conftest import EXAMPLES

runner = CliRunner()

LAYER = "{name: %s, kind: conv, in: [8, 8, 4], out_channels: 4, kernel: 3, padding: 1}"


def network(tmp_path: Path, layers: list[str], head: str = "", name: str = "net.yaml") -> Path:
    path = tmp_path / name
    path.write_text("network: n\n" + head + "layers:\n" + "".join(f"  - {x}\n" for x in layers))
    return path


def bomb(key: str) -> str:
    """A network whose ``key`` in the last of nine layers expands to 9**9 nodes."""
    values = {"name": "lol", "in": "8"}
    text = "network: n\nlayers:\n"
    previous = None
    for level, anchor in enumerate("abcdefghi"):
        items = [previous and f"*{previous}" or values[key]] * 9
        fields = {"name": f"l{level}", "kind": "conv", "in": "[8, 8, 4]"}
        fields[key] = f"&{anchor} [{', '.join(items)}]"
        text += "  - {" + ", ".join(f"{k}: {v}" for k, v in fields.items()) + ", "
        text += "out_channels: 4, kernel: 3}\n"
        previous = anchor
    return text


@pytest.fixture
def no_work(monkeypatch):
    """Every stage that does work fails the test if it is reached."""

    def boom(*args, **kwargs):
        raise AssertionError("work started on an input that should have been refused")

    for module, name in (
        ("autotune.api", "solve_network"),
        ("autotune.api", "analyze"),
        ("autotune.api", "simulate"),
        ("autotune.api", "verify"),
        ("autotune.batching", "tune_network"),
        ("autotune.audit", "analyze"),
        ("autotune.audit", "simulate"),
        ("autotune.result", "analyze"),
    ):
        monkeypatch.setattr(sys.modules[module], name, boom)


def refused(result, *parts: str) -> str:
    """The one stderr line of an exit-2 refusal; it contains every one of ``parts``."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


# -- YAML structure ----------------------------------------------------------------------


def test_alias_bomb_in_a_layer_name_is_refused_at_once(tmp_path, no_work):
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb("name"))
    start = time.perf_counter()
    result = runner.invoke(app, ["tune", str(path), "--storage", "memory"])
    elapsed = time.perf_counter() - start
    refused(result, str(path), "layer '#", "field 'name'", "MAX_YAML_NODES")
    assert elapsed < 5  # 9**9 nodes once took minutes and gigabytes


def test_alias_bomb_in_in_names_the_layer(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb("in"))
    line = refused(runner.invoke(app, ["check", str(path)]), str(path), "field 'in'")
    assert "layer 'l" in line  # by its name: it was read before 'in'


def test_aliases_count_by_their_expanded_size():
    small = "a: &a [1, 2, 3]\nb: [*a, *a]\n"
    assert load_yaml(small, "x") == {"a": [1, 2, 3], "b": [[1, 2, 3], [1, 2, 3]]}
    wide = "a: &a [" + ", ".join(["x"] * 1000) + "]\nb: [" + ", ".join(["*a"] * 400) + "]\n"
    with pytest.raises(InputError, match="MAX_YAML_NODES") as err:
        load_yaml(wide, "x")
    assert err.value.field == "b.398"  # 399 x 1001 nodes > MAX_YAML_NODES


def test_recursive_alias_is_refused(tmp_path):
    path = network(tmp_path, [])
    path.write_text("network: n\nlayers: &x [*x]\n")
    refused(runner.invoke(app, ["check", str(path)]), "refers to a node that contains it")


def test_deep_nesting_is_refused(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("network: n\nlayers: " + "[" * 100_000 + "]" * 100_000 + "\n")
    refused(runner.invoke(app, ["check", str(path)]), str(path), "MAX_YAML_DEPTH")


def test_huge_file_is_refused_before_parsing(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text("network: n\n" + "#" * limits.MAX_YAML_BYTES)
    refused(runner.invoke(app, ["check", str(path)]), str(path), "MAX_YAML_BYTES")


def test_endless_file_is_refused():
    with pytest.raises(InputError, match="MAX_YAML_BYTES"):
        load_network("/dev/zero")


def test_string_of_a_million_characters(tmp_path):
    path = network(tmp_path, [LAYER % ("x" * 1_000_000)])
    line = refused(runner.invoke(app, ["check", str(path)]), str(path), "layer '#0'", "'name'")
    assert "MAX_STRING_CHARS" in line and len(line) < 300


def test_long_layer_name(tmp_path):
    path = network(tmp_path, [LAYER % "a", LAYER % ("y" * 600)])
    line = refused(runner.invoke(app, ["check", str(path)]), "layer '#1'", "field 'name'")
    assert "MAX_NAME_CHARS" in line and "yyyy" not in line


def test_too_many_layers(tmp_path):
    path = network(tmp_path, [LAYER % f"c{i}" for i in range(limits.MAX_LAYERS + 1)])
    refused(runner.invoke(app, ["check", str(path)]), str(path), "field 'layers'", "MAX_LAYERS")


# -- shapes ------------------------------------------------------------------------------


CONV = "{name: c, kind: conv, in: [%s], out_channels: %d, kernel: 3%s}"


@pytest.mark.parametrize(
    ("layer", "field", "limit"),
    [
        (CONV % ("100000000, 8, 4", 4, ""), "in", "MAX_SPATIAL"),
        (CONV % ("8, 8, 1000000", 4, ""), "in", "MAX_CHANNELS"),
        (CONV % ("8, 8, 4", 1_000_000, ""), "out_channels", "MAX_CHANNELS"),
        (CONV % ("8, 8, 4", 4, ", stride: 70000"), "stride", "MAX_SPATIAL"),
    ],
)
def test_dimension_over_its_limit_is_refused_before_tuning(tmp_path, no_work, layer, field, limit):
    path = network(tmp_path, [layer])
    result = runner.invoke(app, ["tune", str(path), "--storage", "memory"])
    refused(result, str(path), "layer 'c'", f"field '{field}'", limit)


def test_batch_of_a_billion(tmp_path, no_work):
    path = network(tmp_path, [LAYER % "c"], head="batch: 1000000000\n")
    result = runner.invoke(app, ["tune", str(path), "--storage", "memory"])
    refused(result, str(path), "field 'batch'", "MAX_BATCH")
    option = runner.invoke(
        app, ["tune", str(network(tmp_path, [LAYER % "c"], name="ok.yaml")), "--batch", "100000"]
    )
    refused(option, "field 'batch'", "MAX_BATCH")


def test_tensors_over_main_memory(tmp_path, no_work):
    conv = "{name: big, kind: conv, in: [224, 224, 64], out_channels: 64, kernel: 3, padding: 1}"
    path = network(tmp_path, [LAYER % "small", conv], head="batch: 1000\n")
    result = runner.invoke(app, ["tune", str(path), "--storage", "memory"])
    line = refused(result, str(path), "layer 'big'", "field 'batch'", "main memory of manticore")
    assert "fits up to batch 334" in line
    # the package has four chiplets, each with its own HBM
    runner_ok = runner.invoke(app, ["check", str(path), "--machine", "manticore-package"])
    assert runner_ok.exit_code == 0, runner_ok.output
    # a batch given on the command line is checked too, before any work
    small = network(tmp_path, [conv], name="small.yaml")
    refused(runner.invoke(app, ["tune", str(small), "--batch", "400"]), "field 'batch'")
    weights = network(tmp_path, ["{name: fc, kind: fc, in: [1, 1, 262144], out_channels: 65536}"])
    refused(runner.invoke(app, ["check", str(weights)]), "layer 'fc'", "weights need 64.00 GiB")


def test_sweep_refuses_before_tuning_any_batch(tmp_path, no_work):
    conv = "{name: big, kind: conv, in: [224, 224, 64], out_channels: 64, kernel: 3, padding: 1}"
    path = network(tmp_path, [conv])
    result = runner.invoke(app, ["sweep", str(path), "--batch", "1,2,4,...,512"])
    refused(result, "layer 'big'", "at batch 512", "fits up to batch 334")


def test_cost_guard_refuses_what_could_overflow(tmp_path, no_work):
    path = network(
        tmp_path, ["{name: k, kind: conv, in: [16384, 16384, 1], out_channels: 1, kernel: 8192}"]
    )
    refused(runner.invoke(app, ["check", str(path)]), "layer 'k'", "64-bit integers")


def test_cost_guard_is_enough():
    """At the largest batch the guard allows, no candidate's figure reaches the integer
    program's clamp (exhaustive search raises ``OverflowError`` at it)."""
    assert limits.COST_LIMIT == LIMIT and limits.RATE_SCALE == SCALE
    machine = Machine.preset("manticore")
    layer = Layer.fc("fc", 64, 64, 4096, 4096)  # few candidates, 6.9e10 MACs per image
    batch = (limits.COST_LIMIT - 1) // (layer.macs * limits.cost_scale(machine, "fp64"))
    assert batch > 1
    assert ranking(search_space(layer, machine, batch), machine, "fp64", "latency", 1)


def test_networks_built_in_code_are_checked_too(no_work):
    huge = Layer("huge", "conv", 100_000, 8, 4, 4, kernel_h=3, kernel_w=3)
    with pytest.raises(InputError, match="MAX_SPATIAL") as err:
        tune(Network("n", (huge,)), refine=False, verify=False)
    assert (err.value.layer, err.value.field) == ("huge", "h_in")


# -- machines and schedules ----------------------------------------------------------------


def machine_file(tmp_path: Path, old: str, new: str) -> Path:
    text = (Path(limits.__file__).parents[1] / "machines" / "manticore.yaml").read_text()
    assert old in text
    path = tmp_path / "machine.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        ("value: 4\n      unit: clusters", "value: 1000000000\n      unit: clusters",
         "hierarchy.0.fanout", "MAX_CLUSTERS"),
        ("value: 1.0e9", "value: .nan", "clock", "finite"),
        ("value: 131072", "value: .inf", "l1_size", "finite"),
        ("value: 8589934592\n    unit: B", "value: 8\n    unit: GB", "hbm_size", "must be 'B'"),
    ],
)  # fmt: skip
def test_machine_limits(tmp_path, old, new, field, message):
    path = machine_file(tmp_path, old, new)
    result = runner.invoke(app, ["check", str(EXAMPLES / "alexnet.yaml"), "--machine", str(path)])
    refused(result, str(path), f"field '{field}'", message)


def test_presets_give_main_memory_per_chiplet():
    assert Machine.preset("manticore").hbm_bytes == 8 * limits.GIB
    package = Machine.preset("manticore-package")
    assert limits.main_memory_bytes(package) == 4 * 8 * limits.GIB
    assert all(Machine.preset(name).hbm_bytes > 0 for name in Machine.presets())


@pytest.fixture(scope="module")
def schedule(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("schedule") / "tiny.json"
    net = tmp_path_factory.mktemp("net") / "tiny.yaml"
    net.write_text("network: tiny\nlayers:\n  - " + LAYER % "c1" + "\n")
    tune(net, refine=False, verify=False, storage="memory").save(path)
    return json.loads(path.read_text())


def test_schedule_with_a_huge_shape(tmp_path, schedule, no_work):
    broken = json.loads(json.dumps(schedule))
    broken["layers"][0]["shape"]["h_in"] = 100_000_000
    path = tmp_path / "s.json"
    path.write_text(json.dumps(broken))
    result = runner.invoke(app, ["verify", str(path)])
    refused(result, str(path), "layer 'c1'", "field 'shape.h_in'", "MAX_SPATIAL")
    broken["layers"][0]["shape"].update(h_in=16384, w_in=16384)
    path.write_text(json.dumps(broken))
    refused(runner.invoke(app, ["simulate", str(path)]), "layer 'c1'", "main memory")


def test_schedule_nested_too_deeply(tmp_path, no_work):
    path = tmp_path / "s.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    refused(runner.invoke(app, ["show", str(path)]), str(path), "nested too deeply")


# -- legitimate inputs ---------------------------------------------------------------------


def test_bounded_loader_reads_what_safe_load_reads():
    files = [*EXAMPLES.glob("*.yaml"), *(Path(limits.__file__).parents[1] / "machines").glob("*")]
    for path in files:
        text = path.read_text()
        expected = yaml.safe_load(text)
        assert load_yaml(text, path) == expected, path
        assert _PyLoader(text, {}).get_single_data() == expected, path  # without libyaml


def test_ten_thousand_small_layers_load(tmp_path):
    layers = [LAYER % f"c{i}" for i in range(limits.MAX_LAYERS)]
    net = load_network(network(tmp_path, layers))
    assert len(net.layers) == limits.MAX_LAYERS
    assert len({layer.shape_key() for layer in net.layers}) == 1
