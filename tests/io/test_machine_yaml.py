from __future__ import annotations

import re
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest
import yaml

from autotune import InputError, Machine
from autotune.io.machine_yaml import resolve_machine

PRESETS = Path(str(resources.files("autotune") / "machines"))


def test_manticore_figures(manticore):
    m = manticore
    assert m.clusters == 128 and m.cores_per_cluster == 8
    assert m.macs_per_cycle_per_core == {"fp32": 2, "fp64": 1}
    assert m.l1_bytes == 128 * 1024 and m.l1_banks == 32
    assert m.dma_bytes_per_cycle == 64 and m.hbm_latency_cycles == 256
    assert m.hbm_bytes_per_cycle == 256.0
    assert [lv.fanout for lv in m.levels] == [4, 4, 4, 2]
    assert m.share_group_sizes() == (4, 16, 64)
    assert m.peak_flops("fp64") == pytest.approx(2.048e12)  # 1024 cores x 1 DP MAC x 1 GHz
    assert Machine.preset() == m


def test_every_parameter_has_unit_and_provenance():
    for path in PRESETS.glob("*.yaml"):
        raw = yaml.safe_load(path.read_text())
        params = list(raw["parameters"].values())
        for level in raw.get("hierarchy", []):  # a preset with ``base`` may inherit it
            params += [v for k, v in level.items() if k != "name"]
        for p in params:
            assert p["unit"]
            assert ("source" in p) != ("assumption" in p), p
            if "source" in p:  # a seed with its section, or a public page
                assert re.search(r"seed 00\d|https?://", p["source"]), p["source"]


def test_other_presets():
    package = Machine.preset("manticore-package")
    chiplet = Machine.preset("manticore")
    assert package.chiplets == 4 and package.total_clusters == 512
    assert package.peak_flops("fp32") == 4 * chiplet.peak_flops("fp32")
    assert package.hbm_bytes_per_s == 4 * chiplet.hbm_bytes_per_s  # 4 x 256 GB/s
    assert package.chiplet().peak_flops("fp32") == chiplet.peak_flops("fp32")
    mppa = Machine.preset("mppa3")
    assert mppa.clusters == 5 and mppa.dma_multicast
    # each cluster's 4 MB local memory: a 1 MB working part (L1) and a 3 MB share of the L2
    assert mppa.l1_bytes == 2**20 and mppa.l2_bytes == 5 * 3 * 2**20 and mppa.has_l2
    assert mppa.l1_bytes + mppa.l2_bytes // mppa.clusters == 4 * 2**20
    assert mppa.l2_bytes_per_cycle == pytest.approx(5 * mppa.dma_bytes_per_cycle)  # 192 GB/s
    assert mppa.l2_latency_cycles == mppa.levels[0].latency_cycles
    assert mppa.peak_flops("fp16") == pytest.approx(3.072e12)  # '3 TFLOPS FP16'
    with pytest.raises(ValueError, match="does not compute 'fp32'"):
        mppa.check_precision("fp32")
    sw = Machine.preset("sw26010-cg")
    assert sw.clusters == 64 and sw.share_group_sizes() == (8,)
    assert sw.peak_flops("fp64") == pytest.approx(742.4e9)
    assert sw.hbm_bytes_per_s == pytest.approx(36e9)
    # Table II: 4096-byte gets reach 32.05 of 36 GB/s; 100-byte blocks fall back to 64 B's
    assert sw.dma_efficiency(4096) == pytest.approx(32.05 / 36, abs=1e-3)
    assert sw.dma_efficiency(100) == pytest.approx(9.0 / 36, abs=1e-3)
    assert sw.dma_efficiency(8) == sw.dma_efficiency(32)
    assert chiplet.dma_efficiency(8) == 1.0


def test_no_manticore_number_in_code():
    # The machine is data: figures like 256 GB/s, 128 KiB or 16 KiB buffers of the *machine*
    # live only in the preset. (16 KiB buffers are the report's algorithm choice, in ir.mapping.)
    root = Path(__file__).resolve().parents[2] / "autotune"
    for path in root.rglob("*.py"):
        text = path.read_text()
        for pattern in (
            r"131072",
            r"\b256\s*\*\s*1e9",
            r"hbm_latency_cycles\s*=\s*256",
            r"\b1\.0?e9\b",
        ):
            assert not re.search(pattern, text), (path, pattern)


def mutate(tmp_path, edit) -> Path:
    raw = yaml.safe_load((PRESETS / "manticore.yaml").read_text())
    edit(raw)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(
    "edit, field, words",
    [
        (
            lambda r: r["parameters"]["hbm_bandwidth"].update(unit="B/cycle"),
            "hbm_bandwidth",
            "unit must be 'GB/s'",
        ),
        (lambda r: r["parameters"]["clock"].pop("source"), "parameters.clock", "exactly one"),
        (lambda r: r["parameters"].pop("l1_size"), "l1_size", "missing"),
        (
            lambda r: r["parameters"].update(turbo={"value": 1, "unit": "x", "assumption": "a"}),
            "turbo",
            "unknown parameter",
        ),
        (
            lambda r: r["parameters"]["fpu_utilization"].update(value=1.5),
            "fpu_utilization",
            "(0, 1]",
        ),
        (lambda r: r.update(colour="red"), "colour", "unknown key"),
        (
            lambda r: r["energy"]["static_power"].update(unit="pJ"),
            "energy.static_power",
            "unit must be 'W'",
        ),
        (
            lambda r: r["energy"]["hbm_byte"].update(unit="W"),
            "energy.hbm_byte",
            "unit must be 'pJ'",
        ),
    ],
)
def test_bad_machine_files(tmp_path, edit, field, words):
    path = mutate(tmp_path, edit)
    with pytest.raises(InputError) as info:
        Machine.from_file(path)
    assert info.value.field == field and words in str(info.value)


def test_static_power_is_energy_per_cycle(tmp_path):
    """2 W at 1 GHz is 2000 pJ each cycle; at half the clock each cycle costs twice as much."""
    assert Machine.preset("manticore").energy_pj["static_per_cycle"] == pytest.approx(2000.0)
    path = mutate(tmp_path, lambda r: r["parameters"]["clock"].update(value=0.5e9))
    assert Machine.from_file(path).energy_pj["static_per_cycle"] == pytest.approx(4000.0)


def test_machine_file_round_trip(tmp_path):
    path = mutate(tmp_path, lambda r: r["parameters"]["hbm_bandwidth"].update(value=512))
    m = resolve_machine(str(path))
    assert m.hbm_bytes_per_cycle == 512.0 and m.clusters == 128


def test_unknown_machine():
    with pytest.raises(InputError, match="unknown machine 'nonesuch'"):
        resolve_machine("nonesuch")


@pytest.mark.parametrize(
    "edit, field",
    [
        (
            lambda r: r["parameters"].update(
                d2d_bandwidth={"value": 1, "unit": "GB/s", "assumption": "x"}
            ),
            "d2d_bandwidth",
        ),
        (
            lambda r: r["parameters"].update(
                chiplets={"value": 2, "unit": "chiplets", "assumption": "x"}
            ),
            "d2d_bandwidth",
        ),
        (
            lambda r: r["parameters"].update(
                dma_read_efficiency={"value": {64: 1.5}, "unit": "fraction", "assumption": "x"}
            ),
            "dma_read_efficiency",
        ),
        (
            lambda r: r["parameters"].update(
                dma_multicast={"value": 2, "unit": "flag", "assumption": "x"}
            ),
            "dma_multicast",
        ),
        (lambda r: r["parameters"]["clock"].update(value={"a": 1}), "clock"),
    ],
)
def test_optional_parameters_are_checked(tmp_path, edit, field):
    with pytest.raises(InputError, match=field):
        Machine.from_file(mutate(tmp_path, edit))


def test_base_preset_is_overlaid(tmp_path):
    package = Machine.preset("manticore-package")
    chiplet = Machine.preset("manticore")
    assert package.levels == chiplet.levels and package.energy_pj == chiplet.energy_pj
    assert replace(package.chiplet(), name="manticore") == chiplet
    # schedule files embed the resolved, self-contained description
    assert "base" not in package.description and package.description["hierarchy"]
    raw = {
        "name": "faster",
        "base": "manticore",
        "parameters": {"hbm_bandwidth": {"value": 512, "unit": "GB/s", "assumption": "x"}},
    }
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(raw))
    m = Machine.from_file(path)
    assert m.hbm_bytes_per_cycle == 2 * chiplet.hbm_bytes_per_cycle
    assert m.clusters == chiplet.clusters and m.name == "faster"
    raw["base"] = "nonesuch"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InputError, match="base"):
        Machine.from_file(path)
