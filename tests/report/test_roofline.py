"""The roofline figure: the L2's roof and the layers' points against it on a machine with an
L2, the HBM roof alone without one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.report.roofline import roofline_figure

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
plt = pytest.importorskip("matplotlib.pyplot")


@pytest.fixture
def figure():
    """Draws with ``roofline_figure`` and closes what it drew."""
    drawn = []

    def draw(result):
        drawn.append(roofline_figure(result))
        return drawn[-1].axes[0]

    yield draw
    for fig in drawn:
        plt.close(fig)


def test_l2_roof_and_a_point_per_layer_moving_l2_bytes(planned_result, figure):
    ax = figure(planned_result)
    machine = planned_result.machine
    l2_rate = machine.l2_bytes_per_cycle * machine.clock_hz
    labels = [line.get_label() for line in ax.get_lines()]
    assert f"L2 roof: {l2_rate / 1e9:,.0f} GB/s" in labels
    assert any(label.startswith("roof: ") and label.endswith(" HBM") for label in labels)
    l2_points = next(c for c in ax.collections if c.get_gid() == "l2 points")
    in_l2 = [r for r in planned_result.layers if r.predicted.l2_bytes]
    assert len(l2_points.get_offsets()) == len(in_l2)
    x = sorted(l2_points.get_offsets()[:, 0])
    assert x == pytest.approx(sorted(r.predicted.flops / r.predicted.l2_bytes for r in in_l2))
    # layers that move no HBM byte have no HBM point, and show through their L2 point
    hbm_free = {r.layer.name for r in planned_result.layers if r.predicted.offchip_bytes == 0}
    assert hbm_free and hbm_free <= {text.get_text() for text in ax.texts}
    assert len(ax.texts) == len(planned_result.layers)


def test_no_l2_roof_on_a_machine_without_l2(planned_result, figure):
    machine = replace(planned_result.machine, l2_bytes_per_cycle=0.0)
    hbm_only = replace(planned_result, machine=machine)
    ax = figure(hbm_only)
    labels = [line.get_label() for line in ax.get_lines()]
    assert not any("L2" in label for label in labels)
    assert labels[0].startswith("roof: ") and not labels[0].endswith("HBM")
    assert "per off-chip byte" in ax.get_xlabel()
