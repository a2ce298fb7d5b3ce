"""The one definition of how a chiplet split divides a layer among a package's chiplets.

The Manticore package (seed 002, Chiplet Architecture) has four chiplets, each with a private
HBM and "three short-range, multichannel, in-package chip-to-chip links, one to each
sibling" used for "chiplet-to-chiplet nonuniform memory access". A layer may run on one
chiplet or be divided among them (``Mapping.chiplet_split``):

``none``             the whole layer on chiplet 0.
``output_channels``  balanced blocks of output channels; a grouped convolution is divided by
                     whole groups (each part is itself a grouped convolution).
``spatial``          balanced bands of output rows; a band's sub-layer reads the input rows
                     its outputs need, halo included, with the zero padding rows made explicit
                     (``pad_h = 0`` on the band: the edge bands hold ``pad_h`` zero rows).
``images``           balanced blocks of the batch's images (batch 1: one part, P-1 chiplets
                     idle).

Layer kinds (``ir.layer``): the depthwise kinds (pools, add, activation, upsample) divide
their output channels by whole groups like a depthwise convolution (an add's group is its
``n`` interleaved operand channels). A softmax cannot divide its channels (every output
reads all of its pixel's channels): ``output_channels`` is refused. An upsample's bands are
balanced bands of *input* rows (output rows ``[a·u, b·u)`` read exactly input rows
``[a, b)``, which the chiplet holds: nothing crosses). A pool's spatial band holds its
padding rows as explicit zeros, which is exact only where a zero is what the padding stands
for: a max pool (zero is not neutral for a max), an average that excludes padding, or a last
window that overhangs the padded input (ceil mode) refuse ``spatial`` when a band would
read such rows.

Balanced: ``n`` items over ``P`` chiplets give the first ``n mod P`` parts ``ceil(n/P)`` items
and the rest ``floor(n/P)``; empty parts are dropped. Part 0 is therefore the largest, and
it is the sub-layer the search solves and the cost model charges (``autotune.chiplets.analysis``).

Data placement, the assumptions behind what crosses the die-to-die links (also listed in
``autotune/machines/manticore-package.yaml``):

* Weights are replicated in every chiplet's private HBM (read-only; 8 GB per chiplet is
  ample): no weight crosses a link.
* A layer's input is where its producer left it, and the producer is taken to have been
  divided the way this layer needs, so only what the split itself forces crosses:
  ``images`` needs nothing; ``spatial`` needs the halo rows held by the neighbouring bands
  (chiplet i holds input rows ``[r0 * stride, r1 * stride)`` for its output rows
  ``[r0, r1)``, the first from row 0 and the last to the bottom: with stride 1 exactly the
  rows a producer split into the same bands wrote, so a 3x3 band reads one row from each
  neighbour); ``output_channels`` of a dense layer needs the whole input, of which each
  chiplet holds a balanced block of input channels, so it reads the other blocks from its
  siblings (about (P-1)/P of the input); of a grouped layer it needs only its own groups'
  channels, which it holds; ``none`` runs where the input is. Re-laying out activations
  between two consecutive layers with different splits is not costed (the model is per
  layer).
* A chiplet reads each sibling's share over the direct link to that sibling, all links at
  once; each link direction carries one reader's flow. Rows are read whole (all columns).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from autotune.ir.layer import Layer
from autotune.ir.mapping import CHIPLET_SPLITS, Mapping, Tile
from autotune.tiling import MappingError, output_stacks

Span = tuple[int, int]
SPLITS = tuple(CHIPLET_SPLITS)


@dataclass(frozen=True)
class ChipletPart:
    """What one chiplet computes: a sub-layer for ``batch`` images, and where it sits.

    ``images``, ``out_channels``, ``out_rows`` locate the part's output in the layer's output;
    ``in_channels`` and ``in_rows`` the input it reads, rows counted in the input padded by
    the layer's ``pad_h`` (a sub-layer that keeps ``pad_h`` reads ``(pad_h, pad_h + h_in)``).
    Filters are those of ``out_channels``. ``remote`` maps a sibling chiplet to the bytes this
    chiplet reads from it over their link.
    """

    chiplet: int
    layer: Layer
    batch: int
    images: Span
    out_channels: Span
    out_rows: Span
    in_channels: Span
    in_rows: Span
    remote: dict[int, int] = field(default_factory=dict)


def balanced(n: int, parts: int) -> list[Span]:
    """``n`` items over ``parts``: (start, stop) of each non-empty part, largest first."""
    q, r = divmod(n, parts)
    sizes = [q + 1] * r + [q] * (parts - r)
    spans, start = [], 0
    for size in sizes:
        if size:
            spans.append((start, start + size))
            start += size
    return spans


def _overlap(a: Span, b: Span) -> int:
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def split_parts(
    layer: Layer, split: str, chiplets: int, batch: int = 1, word_bytes: int = 4
) -> tuple[ChipletPart, ...]:
    """The parts ``split`` divides ``layer`` (``batch`` images) into on ``chiplets`` chiplets.

    Example:
        >>> from autotune import Layer
        >>> conv = Layer("c", "conv", 8, 8, 4, 6, 3, 3, pad_h=1, pad_w=1)
        >>> [(p.out_rows, p.layer.h_in, p.remote) for p in split_parts(conv, "spatial", 2)]
        [((0, 4), 6, {1: 128}), ((4, 8), 6, {0: 128})]
    """
    if split not in CHIPLET_SPLITS:
        raise ValueError(f"unknown chiplet_split {split!r} (known: {', '.join(SPLITS)})")
    if chiplets < 1:
        raise ValueError(f"chiplets must be >= 1, got {chiplets}")
    if split != "none" and chiplets == 1:
        raise MappingError(f"chiplet_split {split!r} needs a package of several chiplets")
    whole = ChipletPart(
        0,
        layer,
        batch,
        images=(0, batch),
        out_channels=(0, layer.c_out),
        out_rows=(0, layer.h_out),
        in_channels=(0, layer.c_in),
        in_rows=(layer.pad_h, layer.pad_h + layer.h_in),
    )
    if split == "none":
        return (whole,)
    parts: list[ChipletPart] = []
    if split == "images":
        for i, images in enumerate(balanced(batch, chiplets)):
            parts.append(replace(whole, chiplet=i, batch=images[1] - images[0], images=images))
        return tuple(parts)
    if split == "output_channels":
        if layer.kind == "softmax":
            raise MappingError(
                f"layer {layer.name!r}: a softmax reads all channels of a pixel: "
                f"its output channels cannot be split among chiplets"
            )
        g_in, g_out = layer.cin_per_group, layer.cout_per_group
        if layer.groups > 1:
            # whole groups; each chiplet holds its own groups' input channels
            blocks = balanced(layer.groups, chiplets)
            for i, (g0, g1) in enumerate(blocks):
                sub = replace(
                    layer,
                    name=f"{layer.name}/oc{i}",
                    c_in=(g1 - g0) * g_in,
                    c_out=(g1 - g0) * g_out,
                    groups=g1 - g0,
                )
                parts.append(
                    replace(
                        whole,
                        chiplet=i,
                        layer=sub,
                        out_channels=(g0 * g_out, g1 * g_out),
                        in_channels=(g0 * g_in, g1 * g_in),
                    )
                )
            return tuple(parts)
        held = balanced(layer.c_in, chiplets)  # chiplet j holds input channels held[j]
        per_channel = batch * layer.h_in * layer.w_in * word_bytes
        for i, (c0, c1) in enumerate(balanced(layer.c_out, chiplets)):
            sub = replace(layer, name=f"{layer.name}/oc{i}", c_out=c1 - c0)
            remote = {j: (span[1] - span[0]) * per_channel for j, span in enumerate(held) if j != i}
            parts.append(
                replace(
                    whole,
                    chiplet=i,
                    layer=sub,
                    out_channels=(c0, c1),
                    remote={j: b for j, b in remote.items() if b},
                )
            )
        return tuple(parts)
    if layer.upsample_mode != "nearest":
        raise MappingError(
            f"layer {layer.name!r}: no spatial split: a bilinear upsample's bands would read "
            f"their neighbours' rows"
        )
    if layer.upscale != 1:
        return _upsample_bands(layer, whole, chiplets)
    refused = _padding_not_zero(layer)
    if refused is not None:
        raise MappingError(f"layer {layer.name!r}: no spatial split: {refused}")
    # spatial: bands of output rows, the padding rows explicit in each band's input
    bands = balanced(layer.h_out, chiplets)
    s, k, p = layer.stride_h, layer.span_h, layer.pad_h
    starts = [0] + [min(r0 * s, layer.h_in) for r0, _ in bands[1:]]
    held_rows = [(a, b) for a, b in zip(starts, [*starts[1:], layer.h_in], strict=True)]
    per_row = batch * layer.w_in * layer.c_in * word_bytes
    for i, (r0, r1) in enumerate(bands):
        lo, hi = r0 * s, (r1 - 1) * s + k  # padded input rows the band reads
        needed = (max(lo - p, 0), min(hi - p, layer.h_in))  # real input rows
        sub = replace(layer, name=f"{layer.name}/rows{i}", h_in=hi - lo, pad_h=0, pad_bottom=None)
        if layer.expansion is not None:
            # explicit zero rows would be expanded to the 1x1's bias and activation, not to
            # the depthwise's zeros: a band at an edge keeps its share of the padding instead
            top, bottom = needed[0] + p - lo, hi - (needed[1] + p)
            sub = replace(sub, h_in=needed[1] - needed[0], pad_h=top, pad_bottom=bottom)
            lo, hi = needed[0] + p, needed[1] + p
        remote = {j: _overlap(needed, rows) * per_row for j, rows in enumerate(held_rows) if j != i}
        parts.append(
            replace(
                whole,
                chiplet=i,
                layer=sub,
                out_rows=(r0, r1),
                in_rows=(lo, hi),
                remote={j: b for j, b in remote.items() if b},
            )
        )
    return tuple(parts)


def _padding_not_zero(layer: Layer) -> str | None:
    """Why a band of ``layer`` cannot read its padding rows as explicit zeros (None: it can).
    A convolution multiplies padding by weights and a sum with zeros is unchanged; a pool's
    padding is skipped instead."""
    if layer.kind not in ("maxpool", "avgpool"):
        return None
    if (layer.h_out - 1) * layer.stride_h + layer.kernel_h > layer.h_in + 2 * layer.pad_h:
        return "its last window overhangs the padded input (ceil mode)"
    if layer.pad_h and (layer.kind == "maxpool" or not layer.count_include_pad):
        what = "a max" if layer.kind == "maxpool" else "an average that excludes padding"
        return f"its padding rows are skipped by {what}, not zeros"
    return None


def _upsample_bands(layer: Layer, whole: ChipletPart, chiplets: int) -> tuple[ChipletPart, ...]:
    """Bands of an upsample: balanced bands of input rows, each upscaled whole (an output
    band starting inside a block of ``upscale`` rows would not be an upsample)."""
    u = layer.upscale
    return tuple(
        replace(
            whole,
            chiplet=i,
            layer=replace(layer, name=f"{layer.name}/rows{i}", h_in=b - a),
            out_rows=(a * u, b * u),
            in_rows=(a, b),
        )
        for i, (a, b) in enumerate(balanced(layer.h_in, chiplets))
    )


def link_bytes(parts: tuple[ChipletPart, ...]) -> dict[tuple[int, int], int]:
    """Bytes over each die-to-die link direction: (from sibling, to reader) -> bytes."""
    return {(j, p.chiplet): b for p in parts for j, b in p.remote.items()}


def part_mapping(mapping: Mapping, part: ChipletPart) -> Mapping:
    """The single-chiplet mapping a part runs: ``mapping`` without its split, with the
    stack depth, batch tile and step clamped to a smaller part (part 0, the largest, runs
    ``mapping`` unchanged)."""
    m = mapping.with_(chiplet_split="none")
    sub = part.layer
    if m.delta_o > sub.c_out:
        m = m.with_(delta_o=sub.c_out)
    if m.batch_tile > part.batch:
        m = m.with_(batch_tile=part.batch)
    if m.algorithm != "input_parallel":
        slices = int(output_stacks(sub, m.delta_o).in_size.max())
        if m.tile.in_c > slices:
            m = m.with_(tile=Tile(m.tile.out_h, m.tile.out_w, slices))
    return m


def coverage(layer: Layer, parts: tuple[ChipletPart, ...], batch: int) -> np.ndarray:
    """How many parts write each output word (images x channels x rows; 1 everywhere for a
    correct split)."""
    count = np.zeros((batch, layer.c_out, layer.h_out), dtype=np.int64)
    for p in parts:
        count[
            p.images[0] : p.images[1],
            p.out_channels[0] : p.out_channels[1],
            p.out_rows[0] : p.out_rows[1],
        ] += 1
    return count
