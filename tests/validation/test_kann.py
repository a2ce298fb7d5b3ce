"""KaNN on MPPA3 (seed 003): multicast traffic, KaNN's two strategies, the validation."""

from __future__ import annotations

import pytest

from autotune import Machine, analyze, load_network
from autotune.chiplets import solve_layer
from autotune.report.validation.kann import MEASURED_FPS, validate_kann
from autotune.search.space import kann_channel, kann_spatial
from tests.conftest import EXAMPLES

MPPA3 = Machine.preset("mppa3")
YOLO = {layer.name: layer for layer in load_network(EXAMPLES / "yolov3.yaml").layers}
#: A few YOLOv3 layers of each kind: large maps, the 52/26/13 scales, 1x1 and 3x3.
SAMPLE = ("conv_1", "conv_12", "conv_38", "conv_62", "conv_75", "conv_81", "conv_105")


@pytest.mark.parametrize("name", SAMPLE)
@pytest.mark.parametrize("strategy", [kann_spatial, kann_channel])
def test_multicast_saves_exactly_the_closed_forms_ddr_bytes(name, strategy):
    layer = YOLO[name]
    mapping = strategy(layer, MPPA3, "fp16")
    with_mc = analyze(layer, mapping, MPPA3, "fp16")
    without = analyze(layer, mapping.with_(multicast=False), MPPA3, "fp16")
    tiles = with_mc.tasks // (layer.c_out // mapping.delta_o + bool(layer.c_out % mapping.delta_o))
    stacks = with_mc.tasks // tiles
    b = min(stacks, MPPA3.clusters)
    a = MPPA3.clusters // b
    # filters once per tile chunk instead of once per tile; input once per stack chunk
    saved_filter = (tiles - -(-tiles // a)) * layer.weight_words
    one_pass = without.input_load_words // stacks
    saved_input = (stacks - -(-stacks // b)) * one_pass
    assert without.filter_load_words - with_mc.filter_load_words == saved_filter
    assert without.input_load_words - with_mc.input_load_words == saved_input
    assert without.offchip_bytes - with_mc.offchip_bytes == 2 * (saved_filter + saved_input)
    assert with_mc.offchip_store_words == without.offchip_store_words
    assert with_mc.waves == -(-tiles // a) * -(-stacks // b)


@pytest.mark.parametrize("name", SAMPLE)
def test_kann_spatial_reads_the_weights_once_when_its_tiles_fit_one_wave(name):
    layer = YOLO[name]
    mapping = kann_spatial(layer, MPPA3, "fp16")
    a = analyze(layer, mapping, MPPA3, "fp16")
    assert mapping.delta_o == layer.c_out and mapping.multicast and a.fits
    if a.tasks <= MPPA3.clusters:
        assert a.waves == 1 and a.filter_load_words == layer.weight_words
    else:
        assert a.filter_load_words == a.waves * layer.weight_words


# (conv_1's large map and two scales: conv_12's 27 s of proof add no kind; all of YOLOv3:
# ``python benchmarks/bench_validation.py --only kann``)
@pytest.mark.parametrize("name", ("conv_1", "conv_38", "conv_62"))
def test_the_integer_programs_choice_is_never_slower_than_kanns(name):
    layer = YOLO[name]
    best = solve_layer(layer, MPPA3, "fp16")
    assert best.search.status == "OPTIMAL"
    for strategy in (kann_spatial, kann_channel):
        kann = analyze(layer, strategy(layer, MPPA3, "fp16"), MPPA3, "fp16")
        assert kann.fits and best.analysis.cycles <= kann.cycles


def test_mppa3_computes_fp16_only():
    layer = YOLO["conv_12"]
    with pytest.raises(ValueError, match="does not compute 'fp32'.*supports: fp16"):
        analyze(layer, kann_spatial(layer, MPPA3, "fp16"), MPPA3, "fp32")
    with pytest.raises(ValueError, match="does not compute 'fp32'"):
        kann_channel(layer, MPPA3, "fp32")
    with pytest.raises(ValueError, match="does not compute 'fp32'"):
        validate_kann(layers=1, precision="fp32")


def test_kann_strategies_need_a_multicast_machine(manticore):
    from autotune.tiling import MappingError

    with pytest.raises(MappingError, match="cannot"):
        kann_spatial(YOLO["conv_12"], manticore, "fp32")


def test_validation_report_on_a_prefix_of_yolov3():
    v = validate_kann(layers=3, top=2, refine=False)
    assert v.layers == 3 and v.measured_fps == MEASURED_FPS == 20.0
    assert v.ratio == pytest.approx(v.predicted_fps / 20.0)
    assert sum(v.bound_layers.values()) == 3
    assert sum(v.bound_time_share.values()) == pytest.approx(1.0)
    assert v.kann_fps is not None and v.kann_fps > 0
    assert sum(v.kann_strategy.values()) == 3
    assert len(v.top) == 2 and v.top[0].cycles >= v.top[1].cycles
    cycles = MPPA3.clock_hz / v.predicted_fps
    assert v.top[0].share == pytest.approx(v.top[0].cycles / cycles)
    assert any("yolo" in item for item in v.untimed)
    assert "predicted" in v.summary() and "not timed" in v.summary()


@pytest.mark.parametrize("name", ("conv_62", "conv_105"))
def test_refinement_starts_from_kanns_strategies_and_ends_no_slower(name):
    """The refinement is seeded with KaNN's own mappings (``system_strategies``), so the
    simulated time it ends with is never above the faster of KaNN's two strategies."""
    from autotune import simulate
    from autotune.api import finish_layer
    from autotune.ir.options import TuneOptions
    from autotune.search.space import system_strategies

    layer = YOLO[name]
    kann = system_strategies(layer, MPPA3, "fp16")
    assert len(kann) == 2 and all(m.multicast for m in kann)
    assert system_strategies(layer, Machine.preset("manticore"), "fp32") == []
    options = TuneOptions(precision="fp16", trials=4, storage="memory", verify=False, processes=1)
    solution = solve_layer(layer, MPPA3, "fp16")
    done = finish_layer(solution, MPPA3, options, lambda stage, name: None)
    assert done.trials >= 3  # the incumbent and KaNN's two ran
    fastest_kann = min(simulate(layer, m, MPPA3, "fp16").cycles for m in kann)
    assert done.simulated is not None and done.simulated.cycles <= fastest_kann
