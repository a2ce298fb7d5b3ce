"""The machine a layer is mapped onto, as plain numbers.

Every number comes from a preset YAML file (``autotune/machines/*.yaml``) where it carries its
unit and its source; this module holds no machine figures of its own. ``Machine.preset`` and
``Machine.from_file`` delegate the parsing to the installed ``MachineSource``: the YAML reader
``autotune.io.machine_yaml`` installs itself when it is imported, which the ``autotune``
package does first. So ``ir`` imports nothing above it, and the parser (pydantic, YAML)
stays at the edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol


class MachineSource(Protocol):
    """Where ``Machine.preset`` and ``Machine.from_file`` find machine descriptions."""

    def preset(self, name: str) -> Machine: ...

    def from_file(self, path: Path) -> Machine: ...

    def preset_names(self) -> tuple[str, ...]: ...


_sources: list[MachineSource] = []


def install_machine_source(source: MachineSource) -> None:
    """Make ``source`` the one ``Machine.preset``/``from_file``/``presets`` use."""
    _sources[:] = [source]


def _source() -> MachineSource:
    if not _sources:
        raise RuntimeError(
            "no machine source installed: import autotune (it installs the YAML reader)"
        )
    return _sources[0]


#: ``Machine.energy_pj`` key of the energy drawn every cycle whatever runs (pJ per cycle; the
#: machine file gives it as ``energy.static_power`` in W).
STATIC_ENERGY = "static_per_cycle"


def whole_pj(picojoules: float) -> int:
    """An energy as the model counts it: an integer number of pJ. Fine enough (the MACs'
    energy is one constant from fJ per operation, the bytes' energies are per word: 31.2 pJ
    x 4 B = 124.8 -> 125 pJ), and coarse enough that a layer's static energy (cycles x 2000
    pJ on Manticore) keeps the integer program's figures within ``io.limits.COST_LIMIT``
    for every batch the other figures allow."""
    return int(round(picojoules))


@dataclass(frozen=True)
class Level:
    """One level of the quadrant tree: ``fanout`` children share one uplink.

    ``uplink_bytes_per_cycle`` is the bandwidth of the link from one node of this level to
    its parent; ``latency_cycles`` is the round-trip latency of a DMA transfer between two
    clusters whose lowest common ancestor is a node of this level.
    """

    name: str
    fanout: int
    uplink_bytes_per_cycle: float
    latency_cycles: int


@dataclass(frozen=True)
class Machine:
    """A cluster-based many-core: clusters with L1 scratchpads, DMA, a quadrant tree, HBM."""

    name: str
    clock_hz: float
    cores_per_cluster: int
    macs_per_cycle_per_core: dict[str, int]
    fpu_utilization: float
    l1_bytes: int
    l1_banks: int
    l1_bank_bytes: int
    dma_bytes_per_cycle: int
    dma_read_engines: int
    dma_write_engines: int
    dma_setup_cycles: int
    hbm_bytes_per_cycle: float
    hbm_latency_cycles: int
    levels: tuple[Level, ...]
    #: The chiplet's shared on-chip memory the DMA reaches (seed 002: "27 MB of L2"), its
    #: bandwidth to the clusters (shared by reads and writes) and round-trip latency; 0: none.
    l2_bytes: int = 0
    l2_bytes_per_cycle: float = 0.0
    l2_latency_cycles: int = 0
    hbm_bytes: int = 0  # main memory per chiplet; 0: not given
    energy_pj: dict[str, float] = field(default_factory=dict)
    #: Chiplets in the package, each a copy of the tree above with its own HBM (seed 002).
    chiplets: int = 1
    #: Die-to-die link between two chiplets: bytes per cycle per direction, round trip.
    d2d_bytes_per_cycle: float = 0.0
    d2d_latency_cycles: int = 0
    #: The DMA can deliver one read from main memory to several clusters (MPPA3's RDMA NoC).
    dma_multicast: bool = False
    #: Fraction of the main-memory bandwidth a DMA reaches when its contiguous blocks are
    #: ``bytes`` long: ((bytes, fraction), ...) ascending; empty means 1.0 for any block.
    dma_read_efficiency: tuple[tuple[int, float], ...] = ()
    dma_write_efficiency: tuple[tuple[int, float], ...] = ()
    description: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # -- derived figures -------------------------------------------------------------------
    @property
    def clusters(self) -> int:
        """Clusters in the machine: the product of the quadrant tree's fanouts."""
        n = 1
        for level in self.levels:
            n *= level.fanout
        return n

    @property
    def total_clusters(self) -> int:
        """Clusters in the whole package: chiplets x clusters per chiplet."""
        return self.chiplets * self.clusters

    def chiplet(self) -> Machine:
        """One chiplet of the package on its own (``self`` when there is one chiplet)."""
        if self.chiplets == 1:
            return self
        return replace(self, chiplets=1, d2d_bytes_per_cycle=0.0, d2d_latency_cycles=0)

    @property
    def has_l2(self) -> bool:
        """The DMA can keep tensors in a shared L2 (size, bandwidth and latency given)."""
        return self.l2_bytes > 0 and self.l2_bytes_per_cycle > 0

    def dma_efficiency(self, block_bytes: int, write: bool = False) -> float:
        """Fraction of main-memory bandwidth reached with contiguous blocks of this size.

        A step function over the measured table (e.g. swDNN's Table II, seed 004): the entry
        of the largest listed size not above ``block_bytes``; below the smallest size, the
        smallest size's fraction. 1.0 when the machine has no table.
        """
        table = self.dma_write_efficiency if write else self.dma_read_efficiency
        if not table:
            return 1.0
        fraction = table[0][1]
        for size, value in table:
            if size <= block_bytes:
                fraction = value
        return fraction

    def supports(self, precision: str) -> bool:
        return precision in self.macs_per_cycle_per_core

    def cluster_macs_per_cycle(self, precision: str) -> int:
        """Peak MACs per cycle of one cluster (all cores, no utilisation loss)."""
        self.check_precision(precision)
        return self.cores_per_cluster * self.macs_per_cycle_per_core[precision]

    def peak_macs_per_cycle(self, precision: str) -> int:
        """Peak MACs per cycle of the whole machine (all chiplets)."""
        return self.total_clusters * self.cluster_macs_per_cycle(precision)

    def peak_flops(self, precision: str) -> float:
        """Peak flop/s (one MAC = two flops, report Sec. 1.2.2)."""
        return 2.0 * self.peak_macs_per_cycle(precision) * self.clock_hz

    @property
    def hbm_bytes_per_s(self) -> float:
        """Main-memory bandwidth of the whole machine (one HBM per chiplet)."""
        return self.chiplets * self.hbm_bytes_per_cycle * self.clock_hz

    def check_precision(self, precision: str) -> None:
        if precision not in self.macs_per_cycle_per_core:
            known = ", ".join(sorted(self.macs_per_cycle_per_core))
            raise ValueError(
                f"machine {self.name!r} does not compute {precision!r} (it supports: {known})"
            )

    def share_group_level(self, share_group: int) -> Level:
        """The quadrant level whose subtree holds exactly ``share_group`` clusters."""
        n = 1
        for level in self.levels:
            n *= level.fanout
            if n == share_group:
                return level
        sizes = ", ".join(str(s) for s in self.share_group_sizes())
        raise ValueError(
            f"share group {share_group} is not a quadrant size of {self.name!r} (sizes: 1, {sizes})"
        )

    def wave_order(self) -> tuple[int, ...]:
        """The cluster that takes each slot of a wave (an ``output_stack`` task: slot ``s``
        runs on ``wave_order()[s mod C]``): consecutive slots alternate between the root's
        subtrees, then between their subtrees, and so on down (the slot's digits over the
        fanouts, reversed), so that a wave of ``n < C`` tasks keeps at most
        ``ceil(n x below / C)`` of them under any uplink with ``below`` clusters (what
        ``model.formulas.link_tables`` counts): a small layer's only wave gets every uplink's
        bandwidth, not one quadrant's (``tiling.task_clusters`` says which waves take this
        order). A static loop over clusters can take them in any order; this one costs
        nothing on a full wave."""
        fanouts = [level.fanout for level in self.levels]  # bottom up
        weights = [1]
        for fanout in fanouts[:-1]:
            weights.append(weights[-1] * fanout)
        order = []
        for slot in range(self.clusters):
            cluster, rest = 0, slot
            for fanout, weight in zip(reversed(fanouts), reversed(weights), strict=True):
                cluster += (rest % fanout) * weight
                rest //= fanout
            order.append(cluster)
        return tuple(order)

    def share_group_sizes(self) -> tuple[int, ...]:
        """Cluster counts of the quadrant subtrees below the root: e.g. (4, 16, 64)."""
        sizes, n = [], 1
        for level in self.levels[:-1]:
            n *= level.fanout
            sizes.append(n)
        return tuple(sizes)

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str = "manticore") -> Machine:
        """A bundled machine description by name, e.g. ``Machine.preset("manticore")``."""
        return _source().preset(name)

    @classmethod
    def from_file(cls, path: str | Path) -> Machine:
        """A machine description from a YAML file in the preset format."""
        return _source().from_file(Path(path))

    @classmethod
    def presets(cls) -> tuple[str, ...]:
        """Names of the bundled presets."""
        return _source().preset_names()
