"""What the simulator reports, checked against the report's algorithms and the cost model's
traffic (an independent implementation of the same task structure)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from hypothesis import assume, given, settings

import autotune
from autotune import Buffers, Layer, Mapping, MappingError, Tile, analyze, simulate
from autotune.sim import CapacityError
from autotune.tiling import output_stacks, task_clusters, task_grid
from tests.strategies import mapped_layers

SETTINGS = settings(max_examples=60, deadline=None)
REPORT_CONV = Layer("c", "conv", 32, 32, 128, 128, 3, 3, pad_h=1, pad_w=1)  # report Sec. 2


def test_exported_and_independent_of_the_cost_model():
    assert autotune.simulate is simulate
    # autotune/sim is the check of autotune/model: it must not import it (STYLE.md).
    sim_dir = Path(autotune.__file__).parent / "sim"
    for path in sim_dir.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n.startswith("autotune.model") for n in names), path.name


@SETTINGS
@given(mapped_layers())
def test_bytes_agree_with_the_cost_models_traffic(manticore, case):
    layer, mapping, batch, precision = case
    a = analyze(layer, mapping, manticore, precision, batch)
    assume(a.fits and a.tasks <= 5000)
    r = simulate(layer, mapping, manticore, precision, batch)
    assert r.hbm_load_bytes == a.offchip_load_words * a.word_bytes
    assert r.hbm_store_bytes == a.offchip_store_words * a.word_bytes
    assert abs(r.intercluster_bytes - a.intercluster_bytes) <= 1
    assert r.tasks == a.tasks
    # the layer's work; a fused depthwise is computed again by every stack of a tile
    again = (output_stacks(layer, mapping.delta_o).count - 1) * batch * layer.prologue_result_words
    assert r.macs == a.macs + again * layer.prologue_pixels
    assert r.ops == a.ops + again * layer.prologue_ops


@SETTINGS
@given(mapped_layers())
def test_refuses_exactly_what_does_not_fit(manticore, case):
    layer, mapping, batch, precision = case
    a = analyze(layer, mapping, manticore, precision, batch)
    assume(a.tasks <= 5000)
    if a.fits:
        simulate(layer, mapping, manticore, precision, batch)
    else:
        with pytest.raises(CapacityError):
            simulate(layer, mapping, manticore, precision, batch)


@SETTINGS
@given(mapped_layers())
def test_breakdown_accounts_for_every_cycle(manticore, case):
    layer, mapping, batch, precision = case
    assume(analyze(layer, mapping, manticore, precision, batch).fits)
    r = simulate(layer, mapping, manticore, precision, batch)
    parts = r.breakdown.as_dict()
    assert sum(parts.values()) == pytest.approx(r.cycles, rel=1e-6, abs=1)
    assert all(v >= -1e-6 * r.cycles for v in parts.values()), parts
    op_cycles = r.ops / (manticore.fpu_utilization * r.peak_macs_per_cycle)
    if mapping.algorithm == "input_parallel":
        assert parts["compute"] >= op_cycles * (1 - 1e-9)  # plus the reduction's adds
    else:
        assert parts["compute"] == pytest.approx(op_cycles, rel=1e-9)
    assert 0 < r.fpu_utilization <= manticore.fpu_utilization + 1e-12


def test_deterministic(manticore):
    mapping = Mapping.from_report(3, delta_o=23)
    assert simulate(REPORT_CONV, mapping, manticore) == simulate(REPORT_CONV, mapping, manticore)


def test_alg3_loads_each_slice_once_per_share_group(manticore):
    # delta_o = 8: 16 stacks fill one L2 quadrant (16 clusters), report Sec. 2.3.
    alg2 = simulate(REPORT_CONV, Mapping.from_report(2, delta_o=8), manticore)
    alg3 = simulate(REPORT_CONV, Mapping.from_report(3, delta_o=8), manticore)
    slices = 128 * 32 * 32 * 4
    filters = 128 * 128 * 9 * 4
    assert alg2.hbm_load_bytes == 16 * slices + filters
    assert alg3.hbm_load_bytes == slices + filters  # Eq. 10
    assert alg3.intercluster_bytes == 15 * slices  # Eq. 9
    assert alg3.breakdown.sync >= 0 and alg2.intercluster_bytes == 0


def test_alg4_reduction_moves_127_stacks(manticore):
    # Report Sec. 3.1.3: 127 * D_O * B words between clusters on 128 clusters.
    fc = Layer.fc("fc", 7, 7, 256, 64)
    r = simulate(fc, Mapping.from_report(4, delta_o=64, batch_tile=8), manticore, batch=8)
    assert r.intercluster_bytes == 127 * 64 * 8 * 4
    assert r.breakdown.sync > 0
    # Reads between subtrees cross their uplinks up and down: 31 reads leave an L1 quadrant,
    # 7 an L2 quadrant, 1 an L3 quadrant; the chiplet's link to HBM carries only HBM traffic.
    stack = 64 * 8 * 4
    crossings = [31, 7, 1, 0]
    assert list(r.level_bytes.values()) == [r.hbm_bytes + 2 * n * stack for n in crossings]


def test_small_transfers_are_slower(manticore):
    """The effect of swDNN's Table II (seed 004): bandwidth grows with the block size."""
    achieved = []
    for side in (2, 4, 8, 16, 32, 64):  # one cluster streams 64 slices of side^2 words
        layer = Layer("c", "conv", side, side, 64, 1)
        mapping = Mapping(
            "output_stack",
            buffers=Buffers(input_bytes=min(65536, 16 * side * side * 4), filter_bytes=1024),
        )
        r = simulate(layer, mapping, manticore)
        achieved.append(r.hbm_load_bytes / r.cycles)
    assert achieved == sorted(achieved)
    assert achieved[0] < 0.02 * manticore.dma_bytes_per_cycle
    assert 0.7 * manticore.dma_bytes_per_cycle < achieved[-1] < manticore.dma_bytes_per_cycle


def test_double_buffering_hides_the_latency(manticore):
    layer = Layer("c", "conv", 16, 16, 256, 8, 3, 3, pad_h=1, pad_w=1)
    single = Mapping("output_stack", delta_o=8, buffers=Buffers(input_depth=1, filter_depth=1))
    double = Mapping(
        "output_stack", delta_o=8, buffers=Buffers(input_bytes=16384, filter_bytes=4096)
    )
    r1, r2 = simulate(layer, single, manticore), simulate(layer, double, manticore)
    assert r2.cycles < 0.5 * r1.cycles
    assert r2.breakdown.dma_wait < 0.1 * r1.breakdown.dma_wait


def test_errors(manticore):
    with pytest.raises(MappingError, match="fully-connected"):
        simulate(REPORT_CONV, Mapping("input_parallel"), manticore)
    with pytest.raises(ValueError, match="does not compute 'fp16'"):
        simulate(REPORT_CONV, Mapping.from_report(2, delta_o=4), manticore, "fp16")
    with pytest.raises(CapacityError, match="L1"):
        simulate(REPORT_CONV, Mapping.from_report(2, delta_o=32), manticore)
    with pytest.raises(ValueError, match="trace=True"):
        simulate(REPORT_CONV, Mapping.from_report(2, delta_o=8), manticore).write_trace("x")


@pytest.mark.parametrize(
    "mapping, batch",
    [
        (Mapping.from_report(3, delta_o=8, tile=Tile(out_h=16)), 1),
        (Mapping("output_stack", delta_o=8, buffers=Buffers(output_depth=2)), 1),
        (Mapping.from_report(5, delta_o=16, batch_tile=2), 2),
        (Mapping("input_parallel", delta_o=16, batch_tile=2, buffers=Buffers(output_depth=2)), 2),
    ],
)
def test_trace_is_chrome_json_with_events_per_cluster(manticore, tmp_path, mapping, batch):
    layer = REPORT_CONV if mapping.algorithm != "input_parallel" else Layer.fc("fc", 2, 2, 300, 32)
    r = simulate(layer, mapping, manticore, batch=batch, trace=True)
    path = r.write_trace(tmp_path / "t.json")
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temporary left over
    doc = json.loads(path.read_text())
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    busy = {e["tid"] for e in spans if e["pid"] == 1}
    grid = task_grid(layer, mapping, batch, manticore)
    assert busy == set(task_clusters(grid, manticore).tolist())
    end = max(e["ts"] + e["dur"] for e in spans)
    assert end == pytest.approx(r.cycles * 1e6 / manticore.clock_hz, rel=1e-6, abs=1e-3)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert "cluster 0" in names
    background = {e["pid"] for e in spans if e["pid"] != 1}
    if mapping.buffers.output_depth == 2:
        assert 2 in background  # stores behind the next task
    if mapping.algorithm == "input_parallel" and mapping.buffers.input_depth == 2:
        assert 3 in background  # input batches prefetched
    assert any(e["ph"] == "C" for e in doc["traceEvents"])
