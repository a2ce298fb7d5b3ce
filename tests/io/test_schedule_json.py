"""Schedule files with every layer kind: the shape's new fields, their defaults, their errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

import autotune
from autotune import Layer, Network
from autotune.audit import audit_schedule
from autotune.io.errors import InputError
from autotune.io.schedule_json import (
    LayerRecord,
    layer_from_record,
    load,
    shape_digest,
    shape_record,
)
from autotune.ir.layer import Activation, Epilogue
from tests.strategies import any_kind_layers

#: The keys a conv/fc shape has always had: such files keep exactly these.
PLAIN_KEYS = {
    "h_in", "w_in", "c_in", "c_out", "kernel_h", "kernel_w",
    "stride_h", "stride_w", "pad_h", "pad_w", "groups",
}  # fmt: skip

NETWORK = Network(
    "two",
    (
        Layer(
            "conv", "conv", 6, 6, 4, 8, 3, 3, pad_h=1, pad_w=1,
            epilogue=Epilogue(bias=True, activation=Activation("clip", low=0.0, high=6.0)),
        ),
        Layer("pool", "maxpool", 6, 6, 8, 8, 3, 3, 2, 2, 1, 1, groups=8, ceil_mode=True),
        Layer("plain", "conv", 4, 4, 8, 8, 1, 1),
        Layer("up", "upsample", 3, 3, 8, 8, groups=8, upscale=2),
    ),
)  # fmt: skip


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("kinds") / "two.json"
    autotune.tune(NETWORK, refine=False, verify=False).save(path)
    return path, json.loads(path.read_text())


def _record(layer: Layer) -> LayerRecord:
    """A layer record with only the fields ``layer_from_record`` reads filled in."""
    return LayerRecord.model_construct(name=layer.name, kind=layer.kind, shape=shape_record(layer))


@settings(max_examples=200, deadline=None)
@given(any_kind_layers())
def test_every_layer_reads_back_equal(layer):
    shape = shape_record(layer)
    dumped = shape.model_dump(mode="json")
    assert layer_from_record(_record(layer)) == layer
    plain = layer.kind in ("conv", "fc") and layer.epilogue.is_identity and not layer.prologue
    assert (set(dumped) == PLAIN_KEYS) == plain
    if not plain:
        assert dumped["digest"] == shape_digest(layer.kind, shape)


def test_only_the_fields_off_their_default_are_written(saved):
    _, doc = saved
    shapes = {rec["name"]: rec["shape"] for rec in doc["layers"]}
    assert set(shapes["plain"]) == PLAIN_KEYS
    assert set(shapes["pool"]) == PLAIN_KEYS | {"ceil_mode", "digest"}
    assert shapes["conv"]["epilogue"] == {
        "bias": True,
        "residual": False,
        "activation": {"kind": "clip", "alpha": 0.01, "low": 0.0, "high": 6.0},
    }
    assert audit_schedule(saved[0]).ok


def _edited(saved, tmp_path, layer: int, edit) -> Path:
    _, doc = saved
    doc = copy.deepcopy(doc)
    edit(doc["layers"][layer]["shape"])
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    return path


def _set(key: str, value: Any):
    def edit(shape: dict[str, Any]) -> None:
        target = shape
        *parents, last = key.split(".")
        for part in parents:
            target = target[part]
        target[last] = value

    return edit


@pytest.mark.parametrize(
    "layer, key, value, field, words",
    [
        (0, "epilogue.activation.kind", "mish", "shape.epilogue.activation.kind", "Input should"),
        (0, "epilogue.activation.alpha", float("nan"), "shape.epilogue.activation.alpha", "finite"),
        (0, "epilogue.activation.low", 7.0, "shape.epilogue.activation", "clip needs low <= high"),
        (0, "epilogue.bias", "maybe", "shape.epilogue.bias", "valid boolean"),
        (0, "epilogue.scale", 2, "shape.epilogue.scale", "unknown key"),
        (0, "upscale", 2, "shape.upscale", "only an upsample layer has a scale"),
        (0, "ceil_mode", True, "shape.ceil_mode", "only a pooling layer has a ceil mode"),
        (1, "upscale", 0, "shape.upscale", "must be a positive integer"),
        (3, "upscale", 100_000, "shape.upscale", "exceeds the limit of 65536"),
        (1, "epilogue", {"bias": True, "residual": False, "activation": None}, "shape.epilogue",
         "a maxpool layer has no bias"),
        (1, "groups", 1, "shape.groups", "a maxpool layer is depthwise"),
    ],
)  # fmt: skip
def test_bad_values_are_one_line_errors_naming_layer_and_field(
    saved, tmp_path, layer, key, value, field, words
):
    path = _edited(saved, tmp_path, layer, _set(key, value))
    with pytest.raises(InputError) as caught:
        load(path)
    error = caught.value
    name = NETWORK.layers[layer].name
    assert error.layer == name and error.field == field, str(error)
    assert words in str(error) and "\n" not in str(error)
    assert str(error).startswith(f"{path}, layer {name!r}, field {field!r}: ")


def test_an_edit_no_figure_depends_on_is_caught_by_the_digest(saved, tmp_path):
    """A clip's bound changes no cost figure: the digest is what reveals the edit."""
    path = _edited(saved, tmp_path, 0, _set("epilogue.activation.high", 5.0))
    audit = audit_schedule(path)
    assert not audit.ok
    assert [f.field for f in audit.findings] == ["shape.digest"]
    for where, edit in {
        "digest removed": lambda shape: shape.pop("digest"),
        "digest on a plain conv": _set("digest", "0123456789abcdef"),
    }.items():
        layer = 0 if where == "digest removed" else 2
        audit = audit_schedule(_edited(saved, tmp_path, layer, edit))
        assert [f.field for f in audit.findings] == ["shape.digest"], where


def test_a_file_without_the_new_fields_still_loads(saved, tmp_path):
    """A conv layer written before the kinds existed: the same keys, read as before."""
    path = _edited(saved, tmp_path, 2, lambda shape: None)
    schedule = load(path)
    layer = layer_from_record(schedule.layers[2])
    assert layer == NETWORK.layers[2]
    assert schedule.schema_version == 1


@pytest.mark.parametrize(
    "where, layer, field",
    [
        (("layers", 2, "mapping", "buffers", "input"), "plain", "mapping.buffers.input"),
        (("layers", 0, "shape", "h_in"), "conv", "shape.h_in"),
        (("totals", "cycles"), None, "totals.cycles"),
    ],
)
@pytest.mark.parametrize("value", [10**400, -(2**61)])
def test_an_integer_beyond_the_cost_range_is_refused_naming_its_field(
    saved, tmp_path, where, layer, field, value
):
    """Python reads any JSON integer exactly; one past 64 bits used to reach numpy and end
    in an OverflowError deep in the model instead of a line naming the field."""
    doc = copy.deepcopy(saved[1])
    target = doc
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as caught:
        load(path)
    assert (caught.value.layer, caught.value.field) == (layer, field)
    assert "MAX_JSON_INT" in str(caught.value) and "\n" not in str(caught.value)
