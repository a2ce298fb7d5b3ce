"""The report's printed figures (seed 000), reproduced by the generalised model.

Each test names the section or equation. Where a printed example disagrees with its own
equation, the test follows the equation and pins the difference with a comment.
"""

from __future__ import annotations

import math

import pytest

from autotune import Buffers, Layer, Mapping, analyze
from autotune.model import report

KIB = 1024
# The report's "typical layer": W_I = W_O = 32 (S = 1, P = 1), F = 3, D_I = D_O = 128.
TYPICAL = Layer("typical", "conv", 32, 32, 128, 128, 3, 3, pad_h=1, pad_w=1)


def fc_layer(d_o: int, d_i: int = 512) -> Layer:
    """The report's fully-connected example, W_I = 7 (Sec. 3.1.2)."""
    return Layer.fc("fc", 7, 7, d_i, d_o)


def test_alg1_minimum_space_is_2057_words(manticore):
    # Sec. 2.1.2: W_O^2 + W_I^2 + F^2 = 2057 words, < 8.1 KiB sp, < 16.1 KiB dp.
    minimal = Mapping(
        "output_stack", delta_o=1, buffers=Buffers(input_depth=1, filter_depth=1, output_depth=1)
    )
    a = analyze(TYPICAL, minimal, manticore, "fp32")
    assert sum(a.buffer_tile_words.values()) == 2057 == report.alg1_min_words(32, 32, 3)
    assert a.l1_bytes / KIB < 8.1
    assert analyze(TYPICAL, minimal, manticore, "fp64").l1_bytes / KIB < 16.1


def test_alg1_ccr_8_9(manticore):
    # Eq. (2): ca. 8.9 MAC/word, 4.4 spflop/B, 2.2 dpflop/B.
    a = analyze(TYPICAL, Mapping.from_report(1), manticore, "fp32")
    assert a.report_algorithm == 1
    assert a.ccr == pytest.approx(report.eq2_ccr(32, 32, 3, 128))
    assert round(a.ccr, 1) == 8.9
    assert round(a.flop_per_byte, 1) == 4.4
    assert (
        round(analyze(TYPICAL, Mapping.from_report(1), manticore, "fp64").flop_per_byte, 1) == 2.2
    )
    # Alg. 1 with the report's 48 KiB of buffers (Sec. 2.1.2) fits easily.
    assert a.fits and a.l1_bytes == 48 * KIB


@pytest.mark.parametrize("precision, limit", [("fp32", 24), ("fp64", 12)])
def test_alg2_delta_o_limit(manticore, precision, limit):
    # Sec. 2.2.2: 32 KiB of buffers leave 96 KiB: delta_o <= 24 sp, <= 12 dp.
    assert analyze(TYPICAL, Mapping.from_report(2, delta_o=limit), manticore, precision).fits
    over = analyze(TYPICAL, Mapping.from_report(2, delta_o=limit + 1), manticore, precision)
    assert not over.fits and "L1" in over.reason


@pytest.mark.parametrize(
    "precision, delta_o, ccr, flop_per_byte", [("fp32", 24, 141.8, 70.9), ("fp64", 12, 87.8, 21.9)]
)
def test_alg2_ccr(manticore, precision, delta_o, ccr, flop_per_byte):
    # Eq. (8) at the delta_o limits: 141.8 MAC/word (70.9 spflop/B), 87.8 (21.9 dpflop/B).
    a = analyze(TYPICAL, Mapping.from_report(2, delta_o=delta_o), manticore, precision)
    assert a.report_algorithm == 2
    assert a.ccr == pytest.approx(report.eq8_ccr(32, 32, 3, 128, 128, delta_o))
    assert round(a.ccr, 1) == ccr
    # 87.77 MAC/word x 2 flop / 8 B = 21.94 dpflop/B; the report prints 21.9.
    assert round(a.flop_per_byte, 1) == flop_per_byte
    assert a.offchip_load_words == report.eq7_load_words(32, 3, 128, 128, delta_o)


@pytest.mark.parametrize("precision, limit", [("fp32", 23), ("fp64", 11)])
def test_alg3_delta_o_limit(manticore, precision, limit):
    # Sec. 2.3.2: a forwarding buffer of one input slice leaves 92 KiB sp / 88 KiB dp.
    a = analyze(TYPICAL, Mapping.from_report(3, delta_o=limit), manticore, precision)
    assert a.fits and a.report_algorithm == 3
    assert a.buffer_bytes["share"] == 32 * 32 * a.word_bytes
    assert not analyze(
        TYPICAL, Mapping.from_report(3, delta_o=limit + 1), manticore, precision
    ).fits


def test_alg3_traffic_matches_eq9_eq10_when_stacks_fill_share_groups(manticore):
    # With 16 stacks (delta_o = 8) every L2 quadrant's 16 clusters share: Eq. 9 and 10 exact.
    a = analyze(TYPICAL, Mapping.from_report(3, delta_o=8), manticore, "fp32")
    assert a.offchip_load_words == report.eq10_load_words(32, 3, 128, 128, 8)
    assert a.intercluster_words == report.eq9_intercluster_words(32, 128, 128, 8)


def test_alg3_printed_ccr_drops_a_factor_d_i(manticore):
    # The report prints an off-chip CCR of 541.4 (sp, delta_o = 23) and 540.6 (dp, 11).
    # Those numbers follow only if the input term of Eq. (10) is taken without its factor
    # D_I: 150 994 944 MAC / (6/16 * 1024 + 147 456 + 131 072) = 541.4. Eq. (10) itself gives
    # 460.8 (sp) and 400.7 (dp). Moreover with 6 stacks per L2 quadrant of 16 clusters the
    # 1/16 share cannot be reached: each input slice must still be loaded once, so the model
    # (which counts share groups that are really formed) gives 368.6 for both.
    macs = TYPICAL.macs
    printed_sp = macs / (6 / 16 * 1024 + 128 * 128 * 9 + 128 * 1024)
    assert round(printed_sp, 1) == 541.4
    eq10_sp = macs / (report.eq10_load_words(32, 3, 128, 128, 23) + 128 * 1024)
    eq10_dp = macs / (report.eq10_load_words(32, 3, 128, 128, 11) + 128 * 1024)
    assert (round(eq10_sp, 1), round(eq10_dp, 1)) == (460.8, 400.7)
    for precision, delta_o in (("fp32", 23), ("fp64", 11)):
        a = analyze(TYPICAL, Mapping.from_report(3, delta_o=delta_o), manticore, precision)
        assert round(a.ccr, 1) == 368.6
        assert a.input_load_words == 128 * 1024  # every slice once


def test_alg4_minimum_space_132689_words(manticore):
    # Sec. 3.1.2: D_O B + W_I^2 (B + 1) = 132 689 words for W_I = 7, D_O = 4096, B = 32,
    # ca. 519 KiB sp, 1037 KiB dp: too much for 128 KiB.
    layer = fc_layer(4096)
    minimal = Mapping(
        "input_parallel",
        delta_o=4096,
        batch_tile=32,
        buffers=Buffers(input_depth=1, filter_depth=1, output_depth=1),
    )
    a = analyze(layer, minimal, manticore, "fp32", batch=32)
    assert sum(a.buffer_tile_words.values()) == 132689 == report.alg4_min_words(7, 4096, 32)
    # 132 689 x 4 B = 518.3 KiB and x 8 B = 1036.6 KiB: the report rounds both up.
    assert math.ceil(a.l1_bytes / KIB) == 519 and not a.fits
    assert math.ceil(analyze(layer, minimal, manticore, "fp64", batch=32).l1_bytes / KIB) == 1037


@pytest.mark.parametrize("precision, limit", [("fp32", 768), ("fp64", 384)])
def test_alg4_d_o_limit(manticore, precision, limit):
    # Sec. 3.1.2: with 32 KiB of buffers, D_O <= 768 sp and <= 384 dp for B = 32.
    ok = analyze(
        fc_layer(limit),
        Mapping.from_report(4, delta_o=limit, batch_tile=32),
        manticore,
        precision,
        batch=32,
    )
    assert ok.fits and ok.report_algorithm == 4
    over = analyze(
        fc_layer(limit + 1),
        Mapping.from_report(4, delta_o=limit + 1, batch_tile=32),
        manticore,
        precision,
        batch=32,
    )
    assert not over.fits


@pytest.mark.parametrize(
    "precision, d_o, ccr, flop_per_byte", [("fp32", 768, 30.7, 15.4), ("fp64", 384, 29.5, 7.4)]
)
def test_alg4_ccr(manticore, precision, d_o, ccr, flop_per_byte):
    # Eq. (11): B D_O / (B + D_O) counts loads only ("the bulk of accesses").
    a = analyze(
        fc_layer(d_o),
        Mapping.from_report(4, delta_o=d_o, batch_tile=32),
        manticore,
        precision,
        batch=32,
    )
    assert a.ccr_loads == pytest.approx(report.eq11_ccr(d_o, 32))
    assert round(a.ccr_loads, 1) == ccr
    assert round(2 * a.ccr_loads / a.word_bytes, 1) == flop_per_byte
    # Sec. 3.1.3: the tree reduction moves 127 D_O B words on 128 clusters.
    assert a.intercluster_words == 127 * d_o * 32 == report.reduction_words(128, d_o, 32)


@pytest.mark.parametrize(
    "precision, delta_o, ccr, flop_per_byte", [("fp32", 768, 30.6, 15.3), ("fp64", 384, 29.5, 7.4)]
)
def test_alg5_ccr(manticore, precision, delta_o, ccr, flop_per_byte):
    # Eq. (12)-(14) for B = 32, D_O = 4096 at the delta_o limits.
    layer = fc_layer(4096)
    a = analyze(
        layer,
        Mapping.from_report(5, delta_o=delta_o, batch_tile=32),
        manticore,
        precision,
        batch=32,
    )
    assert a.fits and a.report_algorithm == 5
    assert a.offchip_load_words == report.eq12_load_words(7, 512, 4096, delta_o, 32)
    assert a.ccr_loads == pytest.approx(report.eq14_ccr(4096, delta_o, 32))
    assert round(a.ccr_loads, 1) == ccr
    assert round(2 * a.ccr_loads / a.word_bytes, 1) == flop_per_byte
    assert a.intercluster_words == 127 * 4096 * 32


def test_alg2_generalises_alg1(manticore):
    # Alg. 1 is Alg. 2 with delta_o = 1: Eq. (7) with delta_o = 1 is Sec. 2.1.3's traffic.
    a = analyze(TYPICAL, Mapping.from_report(1), manticore, "fp32")
    assert a.offchip_load_words == 128 * 128 * (32 * 32 + 9)
    assert a.offchip_store_words == 128 * 32 * 32
    assert a.tasks == 128
