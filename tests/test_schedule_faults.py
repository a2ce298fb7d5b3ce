"""Fault injection on a real exported schedule: every field edited, one edit at a time.

Each edit must be rejected (the reader refuses the file, or ``audit_schedule`` finds a claim
that does not hold) or provably harmless: the file still reads to the same schedule apart from
the fields ``autotune.audit`` documents as informational. The last test is the command line:
``autotune verify`` exits 1 on a tampered file and 0 on the original.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import autotune
from autotune import Layer, Network
from autotune.audit import audit_schedule
from autotune.cli.app import app
from autotune.io.errors import InputError
from autotune.io.schedule_json import load as read_file
from autotune.ir.layer import Activation, Epilogue

NETWORK = """\
network: small
layers:
  - {name: a, kind: conv, in: [6, 6, 4], out_channels: 8, kernel: 3, padding: 1}
  - {name: b, kind: conv, in: [6, 6, 8], out_channels: 8, kernel: 1}
  - {name: c, kind: conv, in: [6, 6, 8], out_channels: 8, kernel: 1}
  - {name: fc, kind: fc, in: [6, 6, 8], out_channels: 10}
"""

#: Fields that are information about the run, not claims about the schedule
#: (``autotune.audit``'s docstring); an accepted edit may change only these.
INFORMATIONAL = re.compile(
    r"^(tool(\..*)?|seed|network|machine\.name|verified(\..*)?|layers\[\d+\]\.(name|search\.wall_s|"
    r"search\.trials|verified(\..*)?)|plan\.solve_s)$"
)


#: Every kind beyond conv/fc, and epilogues with every field set somewhere (built in code:
#: network files describe conv and fc layers).
KINDS = Network(
    "kinds",
    (
        Layer(
            "conv", "conv", 6, 6, 4, 8, 3, 3, pad_h=1, pad_w=1,
            epilogue=Epilogue(bias=True, activation=Activation("leaky_relu", alpha=0.1)),
        ),
        Layer("max", "maxpool", 6, 6, 8, 8, 3, 3, 2, 2, 1, 1, groups=8, ceil_mode=True),
        Layer("avg", "avgpool", 3, 3, 8, 8, 3, 3, pad_h=1, pad_w=1, groups=8,
              count_include_pad=True),
        Layer("add", "add", 3, 3, 16, 8, groups=8,
              epilogue=Epilogue(activation=Activation("clip", low=-1.0, high=6.0))),
        Layer("up", "upsample", 3, 3, 8, 8, groups=8, upscale=2,
              epilogue=Epilogue(residual=True)),
        Layer("act", "activation", 6, 6, 8, 8, groups=8,
              epilogue=Epilogue(activation=Activation("hardswish"))),
        Layer("softmax", "softmax", 6, 6, 8, 8,
              epilogue=Epilogue(residual=True, activation=Activation("sigmoid"))),
        Layer("gap", "avgpool", 6, 6, 8, 8, 6, 6, groups=8),
    ),
)  # fmt: skip


def _tuned(folder: Path, name: str, network: str | Path | Network) -> tuple[Path, dict[str, Any]]:
    result = autotune.tune(network, refine=False, verify=True)
    path = folder / f"{name}.json"
    result.save(path)
    return path, json.loads(path.read_text())


@pytest.fixture(scope="module", params=["conv", "kinds"])
def schedule(request, tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    """A schedule of conv and fc layers from a network file; one of every layer kind with
    epilogues, from the library."""
    folder = tmp_path_factory.mktemp("faults")
    if request.param == "kinds":
        return _tuned(folder, "kinds", KINDS)
    (folder / "small.yaml").write_text(NETWORK)
    return _tuned(folder, "small", folder / "small.yaml")


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _leaves(inner, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from _leaves(inner, f"{path}[{i}]")
    yield path, value


def _edits(value: Any) -> list[tuple[str, Any]]:
    """(what, new value) edits of one field; ``_REMOVE`` removes the key."""
    if isinstance(value, bool):
        return [("negated", not value), ("wrong type", "yes"), ("removed", _REMOVE)]
    if isinstance(value, int):
        return [
            ("+1", value + 1),
            ("-1", value - 1),
            ("x2", value * 2),
            ("negative", -value - 1),
            ("huge", 10**18),
            ("wrong type", "1"),
            ("removed", _REMOVE),
        ]
    if isinstance(value, float):
        return [
            ("x2", value * 2 + 1.0),
            ("negative", -value - 1.0),
            ("huge", 1e300),
            ("wrong type", [value]),
            ("removed", _REMOVE),
        ]
    if isinstance(value, str):
        return [("changed", value + "x"), ("empty", ""), ("wrong type", 7), ("removed", _REMOVE)]
    if value is None:
        return [("set", 1), ("removed", _REMOVE)]
    if isinstance(value, list):
        edits = [("emptied", []), ("removed", _REMOVE)]
        if value:
            edits.append(("duplicated", [*value, copy.deepcopy(value[0])]))
        return edits
    return [("removed", _REMOVE)]  # dict


_REMOVE = object()


def _apply(doc: dict[str, Any], path: str, new: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))  # a deep copy, several times faster than copy's
    keys = [int(k) if k.isdigit() else k for k in re.findall(r"[^.\[\]]+", path)]
    parent = doc
    for key in keys[:-1]:
        parent = parent[key]
    if new is _REMOVE:
        del parent[keys[-1]]
    else:
        parent[keys[-1]] = new
    return doc


#: Optional claims: a file that leaves one out claims less, and says nothing false.
#: The graph section is one: without it the file says nothing about the operators.
OPTIONAL_CLAIM = re.compile(r"^(graph|layers\[\d+\]\.(simulated|search\.shared_with))$")


def _normal(path: Path) -> dict[str, Any]:
    """The file as read: its scalar fields, without the informational ones."""
    doc = read_file(path).model_dump(mode="json")
    return {
        p: v
        for p, v in _leaves(doc)
        if not isinstance(v, dict | list) and not INFORMATIONAL.match(p)
    }


#: An L2 offset is a choice, not a measurement: any layout the audit finds sound (aligned,
#: inside the L2, no two live tensors sharing a byte) is as valid a claim as the solver's,
#: and ``verify`` executes the network in it.
LAYOUT_CHOICE = re.compile(r"^plan\.tensors\[\d+\]\.offset$")


#: A mapping is a choice too: one the search ranks equal to its winner (every figure the same
#: under the model, which the audit re-derives, and under the simulator, which it runs again)
#: is as optimal a claim as the original, e.g. a one-wave layer's output single- or
#: double-buffered when both fit the same bank-aligned bytes.
MAPPING_CHOICE = re.compile(r"^layers\[\d+\]\.mapping\.")


def _harmless(edited: Path, reference: dict[str, Any], path: str, new: Any) -> bool:
    """The edited file reads to the original schedule (informational fields aside), the edit
    moved an L2 tensor to another sound place or chose another mapping the audit found
    equal in every figure, or it only left out an optional claim and everything else is as
    it was."""
    normal = _normal(edited)
    if normal == reference:
        return True
    if LAYOUT_CHOICE.match(path) or MAPPING_CHOICE.match(path):
        return {p: v for p, v in normal.items() if p != path} == {
            p: v for p, v in reference.items() if p != path
        }
    if OPTIONAL_CLAIM.match(path) and (new is _REMOVE or new is None):
        dropped = {p: v for p, v in reference.items() if not p.startswith(path)}
        return {p: v for p, v in normal.items() if not p.startswith(path)} == dropped
    return False


def test_every_edit_is_rejected_or_harmless(schedule, tmp_path):
    original_path, original = schedule
    assert audit_schedule(original_path).ok
    reference = _normal(original_path)
    tried = rejected = harmless = 0
    forged = []
    for path, value in _leaves(original):
        if not path:
            continue
        for what, new in _edits(value):
            tried += 1
            edited = tmp_path / "edited.json"
            edited.write_text(json.dumps(_apply(original, path, new)))
            try:
                audit = audit_schedule(edited)
            except InputError:
                rejected += 1
                continue
            if not audit.ok:
                rejected += 1
            elif _harmless(edited, reference, path, new):
                harmless += 1
            else:
                forged.append(f"{path} {what}")
    print(f"schedule fault injection: {tried} edits, {rejected} rejected, {harmless} harmless")
    assert not forged, forged
    assert tried > 1500 and rejected > 0.9 * tried


def test_verify_command_rejects_a_tampered_file(schedule, tmp_path):
    path, original = schedule
    runner = CliRunner()
    ok = runner.invoke(app, ["verify", str(path)])
    assert ok.exit_code == 0, ok.output
    tampered = _apply(original, "layers[0].mapping.buffers.input", 1_000_000)
    bad = tmp_path / "tampered.json"
    bad.write_text(json.dumps(tampered))
    result = runner.invoke(app, ["verify", str(bad)])
    assert result.exit_code == 1
    first = original["layers"][0]["name"]
    assert f"layer {first!r}: mapping.buffers" in result.output
    assert "Traceback" not in result.output


#: Forged verification figures, each on its own layer (from the last one back).
FORGED_VERIFICATION = [
    ("verified.max_rel_error", 0.0),
    ("verified.max_abs_error", float("nan")),
    ("verified.ok", False),
]


def test_verify_command_rejects_forged_verification_figures(schedule, tmp_path):
    """A layer's stored verification figures are the run's own (informational to the audit),
    but ``autotune verify`` executes the layer again with the run's seed and must see each
    one forged; with another seed it compares nothing (the figures are of other data)."""
    path, original = schedule
    tampered = original  # _apply copies
    names = []
    for back, (field, value) in enumerate(FORGED_VERIFICATION, start=1):
        index = len(original["layers"]) - back
        tampered = _apply(tampered, f"layers[{index}].{field}", value)
        if field == "verified.ok":
            tampered["layers"][index]["verified"]["errors"] = ["forged"]  # consistent with ok
        names.append((original["layers"][index]["name"], field))
    bad = tmp_path / "forged.json"
    bad.write_text(json.dumps(tampered))
    runner = CliRunner()
    result = runner.invoke(app, ["verify", str(bad)])
    assert result.exit_code == 1, result.output
    for name, field in names:
        assert f"layer {name!r}: {field}:" in result.output
    assert "Traceback" not in result.output
    other_seed = runner.invoke(app, ["verify", str(bad), "--seed", "7"])
    assert other_seed.exit_code == 0, other_seed.output
