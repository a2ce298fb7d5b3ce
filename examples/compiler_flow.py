"""A compiler flow calling autotune as a library: build a network in code, tune it, and
emit one schedule record per layer for the code generator.

Run: python examples/compiler_flow.py
"""

from __future__ import annotations

import json

import autotune
from autotune import Layer, Network


def build_network() -> Network:
    """A small CNN as a front end would hand it over after shape inference."""
    layers = (
        Layer("stem", "conv", 64, 64, 3, 32, 3, 3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
        Layer("dw1", "conv", 32, 32, 32, 32, 3, 3, pad_h=1, pad_w=1, groups=32),
        Layer("pw1", "conv", 32, 32, 32, 64, 1, 1),
        Layer("conv2", "conv", 32, 32, 64, 64, 3, 3, pad_h=1, pad_w=1),
        Layer.fc("classifier", 8, 8, 64, 10),
    )
    return Network("tiny_cnn", layers, batch=1, precision="fp32")


def main() -> None:
    result = autotune.tune(build_network(), "manticore", trials=8, storage="memory")
    records = []
    for r in result.layers:
        records.append(
            {
                "layer": r.layer.name,
                "algorithm": r.mapping.algorithm,
                "delta_o": r.mapping.delta_o,
                "batch_tile": r.mapping.batch_tile,
                "share_group": r.mapping.share_group,
                "tile": [r.mapping.tile.out_h, r.mapping.tile.out_w, r.mapping.tile.in_c],
                "l1_buffers": r.predicted.buffer_bytes,
                "cycles": r.simulated.cycles,
                "verified": r.verified.ok,
            }
        )
    print(json.dumps(records, indent=1))
    t = result.totals
    print(
        f"# {result.network}: {t.latency_s * 1e6:.1f} us, {t.images_per_s:.0f} images/s, "
        f"{100 * t.peak_fraction:.1f} % of peak"
    )


if __name__ == "__main__":
    main()
