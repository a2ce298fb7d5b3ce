"""Words moved between main memory and L1, and between clusters, for a whole layer.

Generalises the report's communication complexities: Eq. 7 (Alg. 2; Alg. 1 with
``delta_o = 1``), Eq. 9 and 10 (Alg. 3), Eq. 12/13 (Alg. 5; Alg. 4 with one stack), and
Sec. 3.1.3 (the tree reduction of private outputs). With no spatial tiles, no batch tiles and
stacks that fill whole share groups, these are exactly the report's formulas; spatial tiles
add the halo rows each tile reloads, batch tiles reload filters once per batch tile, and a
share group that is not full loads its slices once for fewer members.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.tiling import TaskGrid


@dataclass(frozen=True)
class Traffic:
    """Whole-layer data movement in words (all clusters, all tasks)."""

    input_load_words: int       # input volume slices loaded from main memory
    filter_load_words: int      # filter parameters loaded from main memory
    store_words: int            # output words stored to main memory
    intercluster_words: int     # words read from another cluster's L1

    @property
    def load_words(self) -> int:
        return self.input_load_words + self.filter_load_words


def traffic(grid: TaskGrid, clusters: int) -> Traffic:
    layer, batch = grid.layer, grid.batch
    n_btiles = len(grid.batch_tiles)
    weights = layer.weight_words
    if grid.algorithm == "input_parallel":
        spatial = layer.h_in * layer.w_in
        input_words = grid.stacks.count * batch * layer.c_in * spatial    # Eq. 12, first term
        active = min(len(grid.in_steps), clusters)
        # Sec. 3.1.3: every active cluster but one sends its private stack (delta_o x images).
        reduce = (active - 1) * int(grid.stacks.out_size.sum()) * batch
        return Traffic(input_words, n_btiles * weights, batch * layer.c_out, reduce)
    sum_rows = int(grid.rows.in_size.sum())
    sum_cols = int(grid.cols.in_size.sum())
    per_slice_pixels = sum_rows * sum_cols  # input pixels of one depth slice over all tiles
    stack_slices = int(grid.stacks.in_size.sum())  # Eq. 7: ceil(D_O/dO) * D_I for groups = 1
    all_reads = batch * stack_slices * per_slice_pixels
    offchip_input = all_reads
    intercluster = 0
    if grid.algorithm == "output_stack_shared":
        # Eq. 9/10: one member of each share group loads a slice, the others forward it.
        # (groups = 1 here, so every stack reads all c_in slices.)
        offchip_input = batch * grid.share_groups_per_tile * layer.c_in * per_slice_pixels
        intercluster = all_reads - offchip_input
    filters = n_btiles * grid.n_spatial * weights  # every task loads its stack's filters
    stores = batch * layer.output_words
    return Traffic(offchip_input, filters, stores, intercluster)


def task_loads(grid: TaskGrid) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per task: (input words read, filter words loaded, output words stored, input steps)."""
    layer = grid.layer
    images = grid.task_images
    in_ch = grid.task_in_channels
    out_ch = grid.task_out_channels
    if grid.algorithm == "input_parallel":
        spatial = layer.h_in * layer.w_in
        inputs = images * in_ch * spatial
        filters = out_ch * in_ch * spatial
        stores = np.zeros_like(inputs)  # the reduction's root stores, not the task
        steps = np.ones_like(inputs)
        return inputs, filters, stores, steps
    inputs = images * in_ch * grid.task_in_pixels
    filters = out_ch * layer.cin_per_group * layer.kernel_h * layer.kernel_w
    stores = images * out_ch * grid.task_out_pixels
    steps = -(-in_ch // grid.mapping.tile.in_c)
    return inputs, filters, stores, steps
