from __future__ import annotations

import pytest

from autotune import InputError, load_network
from tests.conftest import EXAMPLES, NETWORKS

GOOD = """\
network: tiny
batch: 2
precision: fp64
layers:
  - {name: c1, kind: conv, in: [16, 12, 3], out_channels: 8, kernel: [3, 1], stride: [2, 1],
     padding: [1, 0]}
  - {name: dw, kind: conv, in: [8, 12, 8], out_channels: 8, kernel: 3, padding: 1, groups: 8}
  - {name: fc, kind: fc, in: [8, 12, 8], out_channels: 10}
"""


def write(tmp_path, text: str):
    path = tmp_path / "net.yaml"
    path.write_text(text)
    return path


def test_loads_and_normalises(tmp_path):
    net = load_network(write(tmp_path, GOOD))
    assert (net.name, net.batch, net.precision, len(net.layers)) == ("tiny", 2, "fp64", 3)
    c1, dw, fc = net.layers
    assert (c1.kernel_h, c1.kernel_w, c1.stride_h, c1.stride_w, c1.pad_h, c1.pad_w) == (
        3,
        1,
        2,
        1,
        1,
        0,
    )
    assert (c1.h_out, c1.w_out) == (8, 12)
    assert dw.is_depthwise and dw.macs == 8 * 12 * 8 * 9
    assert (fc.kernel_h, fc.kernel_w, fc.macs) == (8, 12, 8 * 12 * 8 * 10)


def test_defaults(tmp_path):
    net = load_network(
        write(
            tmp_path,
            HEAD + "{name: a, kind: fc, in: [1, 1, 4], out_channels: 2}\n",
        )
    )
    assert (net.batch, net.precision) == (1, "fp32")


HEAD = "network: n\nlayers:\n  - "


@pytest.mark.parametrize(
    "text, layer, field, words",
    [
        (
            HEAD + "{name: a, kind: conv, in: [8, 8, 3], out_channels: 4, kernel: 3, strid: 1}\n",
            "a",
            "strid",
            "unknown key",
        ),
        (
            "network: n\nbatchsize: 2\nlayers:\n"
            "  - {name: a, kind: fc, in: [1, 1, 3], out_channels: 4}\n",
            None,
            "batchsize",
            "unknown key",
        ),
        ("network: n\nlayers: []\n", None, "layers", "at least 1 item"),
        (
            HEAD + "{name: a, kind: conv, in: [8, 8], out_channels: 4, kernel: 3}\n",
            "a",
            "in",
            "at least 3",
        ),
        (
            HEAD + "{name: a, kind: conv, in: [8, 8, 3], out_channels: 0, kernel: 3}\n",
            "a",
            "out_channels",
            "greater than or equal to 1",
        ),
        (
            HEAD + "{name: a, kind: conv, in: [8, 8, 3], out_channels: 4, kernel: [3, 0]}\n",
            "a",
            "kernel",
            ">= 1",
        ),
        (
            HEAD + "{name: a, kind: conv, in: [8, 8, 3], out_channels: 4}\n",
            "a",
            "kernel",
            "required",
        ),
        (
            HEAD + "{name: a, kind: pool, in: [8, 8, 3], out_channels: 4}\n",
            "a",
            "kind",
            "'maxpool'",
        ),
        (
            HEAD + "{name: a, kind: conv, in: [8, 8, 3], out_channels: 4, kernel: 3, groups: 2}\n",
            "a",
            "groups",
            "not divisible",
        ),
        (
            HEAD + "{name: a, kind: conv, in: [2, 2, 3], out_channels: 4, kernel: 5}\n",
            "a",
            "kernel",
            "exceeds",
        ),
        (
            HEAD + "{name: a, kind: fc, in: [1, 1, 3], out_channels: 4, kernel: 1}\n",
            "a",
            "kernel",
            "not allowed",
        ),
        (
            "network: n\nprecision: fp8\nlayers:\n"
            "  - {name: a, kind: fc, in: [1, 1, 3], out_channels: 4}\n",
            None,
            "precision",
            "fp32",
        ),
        (
            HEAD + "{name: a, kind: fc, in: [1, 1, 3], out_channels: 4}\n"
            "  - {name: a, kind: fc, in: [1, 1, 4], out_channels: 4}\n",
            "a",
            "name",
            "duplicate",
        ),
        (
            HEAD + "{kind: fc, in: [1, 1, 3], out_channels: 4}\n",
            "#0",
            "name",
            "missing",
        ),
        (
            "network: n\nbatch: true\nlayers:\n"
            "  - {name: a, kind: fc, in: [1, 1, 3], out_channels: 4}\n",
            None,
            "batch",
            "integer",
        ),
    ],
)
def test_bad_files_name_file_layer_and_field(tmp_path, text, layer, field, words):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_network(path)
    err = info.value
    assert err.path == str(path) and err.layer == layer and err.field == field
    assert words in str(err)
    assert "\n" not in str(err) and str(path) in str(err)


@pytest.mark.parametrize(
    "text, words",
    [
        ("network: [unclosed\n", "not valid YAML at line"),
        ("- just\n- a list\n", "expected a mapping"),
        ("!!python/object:os.system {}\n", "not valid YAML"),  # safe_load refuses tags
    ],
)
def test_unparseable_files(tmp_path, text, words):
    with pytest.raises(InputError, match=words):
        load_network(write(tmp_path, text))


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="cannot read network file"):
        load_network(tmp_path / "nope.yaml")


@pytest.mark.parametrize("name", NETWORKS)
def test_examples_load(name):
    net = load_network(EXAMPLES / f"{name}.yaml")
    assert net.name == name and net.layers
