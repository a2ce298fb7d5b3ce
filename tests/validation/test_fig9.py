"""Seed 002 Fig. 9 validation (autotune/report/validation/fig9.py) on a few ResNet-50 layers:
the roofline classification, the percentages against the simulated cycles, the FPU ceiling,
and the package never slower than one chiplet."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune import Layer, Machine, Network
from autotune.chiplets import solve_layer
from autotune.report.validation.fig9 import COMPUTE_LINE, fig9, report
from tests.package_machine import small_package
from tests.strategies import conv_layers, fc_layers

# layer4's 3x3 (compute-bound at any batch), a 1x1 expansion and the classifier (memory-bound)
FEW = Network(
    "resnet50-few",
    (
        Layer("layer4.1.conv2", "conv", 7, 7, 512, 512, 3, 3, pad_h=1, pad_w=1),
        Layer("layer4.1.conv3", "conv", 7, 7, 512, 2048, 1, 1),
        Layer.fc("fc", 1, 1, 2048, 1000),
    ),
)


#: the same three bounds as at batch 4, in two thirds of the solving time (the package's
#: batch splits are test_package_never_slower_than_one_chiplet's)
BATCH = 1


@pytest.fixture(scope="module")
def figures():
    return fig9(FEW, batch=BATCH)


def test_classification_is_the_roofline_definition(figures):
    for f in figures:
        machine = Machine.preset(f.machine)
        ridge = machine.peak_flops("fp32") / machine.hbm_bytes_per_s
        for p, layer in zip(f.points, FEW.layers, strict=True):
            words = BATCH * (layer.input_words + layer.output_words) + layer.weight_words
            assert p.compulsory_bytes == 4 * words  # every word used, fp32
            assert p.intensity == pytest.approx(2 * BATCH * layer.macs / (4 * words))
            assert p.ridge == pytest.approx(ridge)
            assert p.bound == ("compute" if p.intensity >= ridge else "memory")
        assert [p.bound for p in f.points] == ["compute", "compute", "memory"]


def test_percentages_follow_the_simulated_cycles(figures):
    for f in figures:
        machine = Machine.preset(f.machine)
        for p in f.points:
            seconds = p.cycles / machine.clock_hz
            assert p.peak_fraction == pytest.approx(
                2 * p.macs / seconds / machine.peak_flops("fp32")
            )
            assert p.bandwidth_fraction == pytest.approx(
                p.offchip_bytes / seconds / machine.hbm_bytes_per_s
            )
            # nothing beats the FPUs' sustained rate or the memory's bandwidth
            assert p.peak_fraction <= machine.fpu_utilization + 1e-9
            assert p.bandwidth_fraction <= 1 + 1e-9
        assert f.compute.count == 2 and f.memory.count == 1
        assert f.compute.above == sum(p.peak_fraction > COMPUTE_LINE for p in f.points[:2])
    text = report(figures)
    assert "manticore-package" in text and "compute-bound conv layers: 2" in text


def test_package_is_at_least_as_fast_per_layer(figures):
    one, package = figures
    assert one.machine == "manticore" and package.machine == "manticore-package"
    for a, b in zip(one.points, package.points, strict=True):
        # simulated, so not a law of the model: the chosen split must still not lose here
        assert b.cycles <= a.cycles, (a.name, a.cycles, b.cycles, b.split)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layer=st.one_of(conv_layers(max_hw=12, max_c=24), fc_layers(max_c=64)), batch=st.integers(1, 4)
)
def test_package_never_slower_than_one_chiplet(layer, batch):
    """The split "none" is always a candidate, so the package's optimum is at most one
    chiplet's, on every layer."""
    package = small_package()
    on_package = solve_layer(layer, package, "fp32", batch)
    alone = solve_layer(layer, package.chiplet(), "fp32", batch)
    assert on_package.analysis.cycles <= alone.analysis.cycles
    assert on_package.analysis.macs == alone.analysis.macs
