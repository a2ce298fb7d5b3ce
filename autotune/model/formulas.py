"""The analytical cost model as one closed-form formula over a mapping's quantities.

Written once against the ``ops`` interface (``model/ops.py``) so that ``analyze`` (Python
ints), exhaustive search (numpy arrays over all candidates) and the integer program (CP-SAT
constraints) evaluate *the same* model. Inputs are the quantities ``tiling.TaskGrid`` defines
(stack counts and sizes, tile extents, batch tiles); outputs are footprint, traffic and cycles.

Algorithms: 0 = ``output_stack`` (Alg. 1/2), 1 = ``output_stack_shared`` (Alg. 3),
2 = ``input_parallel`` (Alg. 4/5).

Latency (cycles), per phase (``input_parallel`` runs one phase per stack and batch tile,
Alg. 5's outer loop; the others run one):

    phase  = waves x task + phase_extra           waves = ceil(slots / C)
    task   = L + max(compute, dma_double) + dma_single + store
    total  = max(phases x phase + tail, offchip_bytes / HBM bandwidth)

``task`` is the largest task (full stack, full tile, full batch tile), so a wave lasts as long
as its largest task: remainders cost a whole wave, as on the machine. ``compute`` runs at the
cluster's MAC rate times the FPU utilisation. A cluster's streaming rate is the smallest of its
DMA port, its fair share of HBM and of each uplink above it when ``active`` clusters stream
(``rho``), and Little's law for what each double buffer keeps in flight (report Sec. 2.1.2:
256 cycles x 64 B/cycle = 16 KiB in flight), per stream. Single-buffered streams serialise
with compute and pay the round-trip latency ``L`` per load; each transfer pays the DMA
set-up. A task pays ``L`` to start and, unless its output is double buffered, ``L`` plus the
transfer to store. ``input_parallel`` phases end with the tree reduction of Sec. 3.1.3 and one
store.

DMA efficiency (machines with ``dma_read_efficiency``/``dma_write_efficiency`` tables, e.g.
the SW26010 core group: swDNN, seed 004 Sec. III-D and Table II, 4 GB/s with 32 B blocks up
to 32 GB/s with 4 KB of 36 GB/s): the per-candidate quantities ``ie_in``, ``ie_f`` and
``ie_out`` are SCALE / efficiency of the contiguous runs of the largest task's input step,
filter tile and output store (layout in ``tiling``). A stream's time is then the larger of
its payload over the ports and links (``rho_net``) and its main-memory occupancy
``bytes x ie`` over its share of the HBM (``rho_hbm``), and ``memory_floor`` is the total
occupancy over the HBM bandwidth. Traffic in bytes does not change. Without tables every
``ie`` is SCALE and the formula is built exactly as before (same numbers, same constraints).
The fc reduction's root store and forwarded tiles are costed at the DMA port, as before.

Multicast (``mc = 1``; ``output_stack`` on a machine with ``dma_multicast``, MPPA3's RDMA NoC,
seed 003 Sec. IV). A wave is a rectangle of ``a`` tiles x ``b`` stacks (``tiling``:
``b = min(n_s, C)``, ``a = floor(C / b)``), so, with ``T`` = batch tiles x spatial tiles:

    waves        = ceil(T / a) x ceil(n_s / b)   (slots = waves x C; unfilled slots idle)
    filter_load  = ceil(T / a) x weights          (a wave reads its b stacks' filters once)
    input_load   = ceil(n_s / b) x B x C_in x in_px_sum     (groups = 1; else as without)

Each receiving cluster's DMA port still receives every byte of its task, but the shared DDR/HBM
(and the NoC links above the clusters) carry each multicast datum once. So a multicast stream
of ``x`` bytes per cluster takes ``max(x / port, wave_bytes / shared)`` where ``wave_bytes`` is
what the whole wave reads (``a'`` tiles' inputs + ``b`` stacks' filters, ``a'`` = tiles in the
wave; stores are never shared) and ``shared`` is the slowest of the HBM and the level links:
exact for MPPA3's one-level NoC, pessimistic for deeper trees (their lower links carry only
their subtree's data). ``memory_floor`` uses the reduced off-chip bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.ir.layer import Layer
from autotune.ir.machine import Machine

OUTPUT_STACK, SHARED, INPUT_PARALLEL = 0, 1, 2
ALGORITHM_CODES = {
    "output_stack": OUTPUT_STACK,
    "output_stack_shared": SHARED,
    "input_parallel": INPUT_PARALLEL,
}
#: Fixed-point scale for rates: times are ceil(bytes * SCALE / (bytes per cycle * SCALE)).
SCALE = 1000

#: The per-mapping quantities the formula reads (see ``quantities.py``).
QUANTITIES = (
    "alg",
    "n_s",
    "s_max",
    "s_in_sum",
    "in_max",
    "n_sp",
    "out_px_max",
    "in_px_max",
    "in_px_sum",
    "n_b",
    "b_max",
    "tc",
    "tc_f",
    "nk",
    "g",
    "d_in",
    "d_f",
    "d_out",
    "ie_in",
    "ie_f",
    "ie_out",
    "mc",
)


@dataclass(frozen=True)
class Consts:
    """Integer constants of one layer on one machine at one precision and batch."""

    batch: int
    c_in: int
    c_out: int
    hw: int  # input pixels per depth slice
    kf: int  # MACs per output word: cin_per_group * kernel_h * kernel_w
    kernel: int  # kernel_h * kernel_w
    weights: int  # filter words
    outputs: int  # output words per image
    word: int  # bytes per word
    clusters: int
    latency: int  # round trip to main memory, cycles
    dma: int  # DMA bytes per cycle
    setup: int  # cycles per DMA transfer
    bank: int  # L1 bank width, bytes (allocation granularity)
    l1: int  # L1 bytes
    mac_rate: int  # cluster MACs per cycle x utilisation x SCALE
    hbm: int  # HBM bytes per cycle x SCALE
    rho: np.ndarray  # [active - 1] -> cycles per byte x SCALE for one cluster
    red_latency: np.ndarray  # [active - 1] -> sum over levels of steps x latency
    red_steps: tuple[np.ndarray, ...]  # per level: [active - 1] -> reduction steps
    red_link: tuple[int, ...]  # per level: link bytes per cycle x SCALE
    e_mac: int = 0  # energy per MAC, fJ
    e_hbm: int = 0  # energy per off-chip byte, fJ
    e_noc: int = 0  # energy per inter-cluster byte, fJ
    #: The machine has DMA efficiency tables: main-memory time per byte depends on the runs
    #: (``ie_*`` quantities); the HBM's share of ``rho`` is then applied separately.
    efficiency: bool = False
    rho_net: np.ndarray | None = None  # [active - 1] -> ``rho`` without the HBM term
    rho_hbm: np.ndarray | None = None  # [active - 1] -> the HBM term: active / HBM x SCALE
    groups: int = 1
    multicast: bool = False  # the machine multicasts: the mc = 1 branch is built
    rho_port: int = 0  # multicast: cycles per byte x SCALE of one cluster's DMA port
    rho_shared: int = 0  # multicast: cycles per byte x SCALE of the shared HBM / links


def consts(layer: Layer, machine: Machine, precision: str, word: int, batch: int) -> Consts:
    """The constants the formula needs, all integers (rates in fixed point)."""
    c = machine.clusters
    active = np.arange(1, c + 1, dtype=np.float64)
    inverse = np.full(c, 1.0 / machine.dma_bytes_per_cycle)
    below = 1
    for level in machine.levels:
        below *= level.fanout
        inverse = np.maximum(inverse, np.minimum(active, below) / level.uplink_bytes_per_cycle)
    rho_net = np.ceil(inverse * SCALE - 1e-9).astype(np.int64)
    rho_hbm = np.ceil(active / machine.hbm_bytes_per_cycle * SCALE - 1e-9).astype(np.int64)
    rho = np.maximum(rho_net, rho_hbm)  # = ceil(max(...) x SCALE): ceil is monotone
    steps, links, latency_sum = [], [], np.zeros(c, dtype=np.int64)
    nodes = np.arange(1, c + 1, dtype=np.int64)
    for level in machine.levels:
        width = np.minimum(level.fanout, nodes)
        level_steps = np.where(nodes > 1, np.ceil(np.log2(np.maximum(width, 1))), 0).astype(
            np.int64
        )
        steps.append(level_steps)
        links.append(
            int(round(min(machine.dma_bytes_per_cycle, level.uplink_bytes_per_cycle) * SCALE))
        )
        latency_sum += level_steps * level.latency_cycles
        nodes = -(-nodes // level.fanout)
    energy = machine.energy_pj
    return Consts(
        batch=batch,
        c_in=layer.c_in,
        c_out=layer.c_out,
        hw=layer.h_in * layer.w_in,
        kf=layer.cin_per_group * layer.kernel_h * layer.kernel_w,
        kernel=layer.kernel_h * layer.kernel_w,
        weights=layer.weight_words,
        outputs=layer.output_words,
        word=word,
        clusters=c,
        latency=machine.hbm_latency_cycles,
        dma=machine.dma_bytes_per_cycle,
        setup=machine.dma_setup_cycles,
        bank=machine.l1_bank_bytes,
        l1=machine.l1_bytes,
        mac_rate=int(
            round(machine.cluster_macs_per_cycle(precision) * machine.fpu_utilization * SCALE)
        ),
        hbm=int(round(machine.hbm_bytes_per_cycle * SCALE)),
        rho=rho,
        red_latency=latency_sum,
        red_steps=tuple(steps),
        red_link=tuple(links),
        e_mac=int(round(energy.get(f"mac_{precision}", 0.0) * 1000)),
        e_hbm=int(round(energy.get("hbm_byte", 0.0) * 1000)),
        e_noc=int(round(energy.get("noc_byte", 0.0) * 1000)),
        efficiency=bool(machine.dma_read_efficiency or machine.dma_write_efficiency),
        rho_net=rho_net,
        rho_hbm=rho_hbm,
        groups=layer.groups,
        multicast=machine.dma_multicast,
        rho_port=int(np.ceil(SCALE / machine.dma_bytes_per_cycle - 1e-9)),
        rho_shared=int(
            np.ceil(
                SCALE
                / min(
                    [machine.hbm_bytes_per_cycle]
                    + [lv.uplink_bytes_per_cycle for lv in machine.levels]
                )
                - 1e-9
            )
        ),
    )


def evaluate(
    ops: Any, q: dict[str, Any], k: Consts, alloc_override: dict[str, int | None] | None = None
) -> dict[str, Any]:
    """Footprint, traffic and cycles of the mapping(s) whose quantities are ``q``.

    ``alloc_override`` (scalar evaluation only) gives explicit buffer bytes, as the report's
    fixed 16 KiB buffers; otherwise each buffer is ``depth x tile`` rounded up to the bank.
    """
    mul, cdiv, mx, choose = ops.mul, ops.cdiv, ops.max, ops.choose
    alg, w, big_l = q["alg"], k.word, k.latency
    b, s, tc, n_s = q["b_max"], q["s_max"], q["tc"], q["n_s"]
    out = {}

    # -- tiles of the largest task, in words (report Sec. 2.1.2-3.2.2) -------------------------
    conv_in_tile = mul(mul(b, tc), q["in_px_max"])
    conv_out_tile = mul(mul(s, b), q["out_px_max"])
    ip_in_tile = mul(b, tc) * k.hw
    tile = {
        "input": choose(alg, [conv_in_tile, conv_in_tile, ip_in_tile]),
        # one filter slice per output channel and step (the report streams F[:, :, d_i, d_o])
        "filter": choose(alg, [q["tc_f"] * k.kernel, q["tc_f"] * k.kernel, tc * k.hw]),
        "output": choose(alg, [conv_out_tile, conv_out_tile, mul(s, b)]),
        "share": choose(alg, [0, conv_in_tile, 0]),
    }
    depth = {"input": q["d_in"], "filter": q["d_f"], "output": q["d_out"], "share": 1}
    alloc = {}
    for op in ("input", "filter", "output", "share"):
        given = None if alloc_override is None else alloc_override.get(op)
        need = mul(depth[op], tile[op]) * w
        alloc[op] = cdiv(need, k.bank) * k.bank if given is None else cdiv(given, k.bank) * k.bank
        out[f"need_{op}"] = need
    out.update({f"tile_{op}": tile[op] for op in tile})
    out.update({f"alloc_{op}": alloc[op] for op in alloc})
    out["l1"] = alloc["input"] + alloc["filter"] + alloc["output"] + alloc["share"]

    # -- the largest task: MACs and words it moves ------------------------------------------
    conv_macs = conv_out_tile * k.kf
    ip_macs = mul(mul(b, tc), s) * k.hw
    macs_task = choose(alg, [conv_macs, conv_macs, ip_macs])
    conv_in_words = mul(mul(b, q["in_max"]), q["in_px_max"])
    members = choose(alg, [1, ops.min(q["g"], n_s), 1])  # tasks of a share group
    in_words = choose(alg, [conv_in_words, conv_in_words, ip_in_tile])
    offchip_in = choose(alg, [in_words, cdiv(in_words, members), in_words])
    forwarded = in_words - offchip_in
    filter_words = choose(alg, [s * k.kf, s * k.kf, mul(s, tc) * k.hw])
    store_words = choose(alg, [conv_out_tile, conv_out_tile, 0])
    steps = choose(alg, [cdiv(q["in_max"], tc), cdiv(q["in_max"], tc), 1])

    # -- schedule: slots per phase, waves, phases ---------------------------------------------
    tiles_b_sp = mul(q["n_b"], q["n_sp"])
    groups = cdiv(n_s, q["g"])
    slots = choose(alg, [mul(tiles_b_sp, n_s), mul(tiles_b_sp, mul(groups, q["g"])), q["nk"]])
    if k.multicast:  # waves of a x b tasks (module docstring); mc = 0 outside output_stack
        mc = q["mc"]
        mc_b = ops.min(n_s, k.clusters)  # stacks per wave
        mc_a = ops.lookup(
            mc_b - 1,
            np.asarray(  # floor(C / b): tiles per wave
                [k.clusters // b for b in range(1, k.clusters + 1)], dtype=np.int64
            ),
        )
        tile_chunks, stack_chunks = cdiv(tiles_b_sp, mc_a), cdiv(n_s, mc_b)
        mc_tiles = ops.min(mc_a, tiles_b_sp)  # tiles in a wave
        slots = choose(mc, [slots, mul(mul(tile_chunks, stack_chunks), k.clusters)])
    waves = cdiv(slots, k.clusters)
    active = ops.min(slots, k.clusters)
    if k.multicast:
        active = choose(mc, [active, mul(mc_tiles, mc_b)])
    phases = choose(alg, [1, 1, mul(q["n_b"], n_s)])
    ie_in, ie_f, ie_out = q["ie_in"], q["ie_f"], q["ie_out"]
    if not k.efficiency:
        rho = ops.lookup(active - 1, k.rho)
    else:
        assert k.rho_net is not None and k.rho_hbm is not None
        rho_net = ops.lookup(active - 1, k.rho_net)
        rho_hbm = ops.lookup(active - 1, k.rho_hbm)

    def plain_stream(nbytes: Any, occupied: Any = None) -> Any:
        """Cycles to move ``nbytes`` at this cluster's share of the bandwidth.

        ``occupied``: main-memory bytes x SCALE the transfer takes, ``bytes x ie`` (the
        inverse DMA efficiency of its runs, seed 004 Table II). Only the HBM's term of the
        share is slowed by it; ports and links carry payload. Without efficiency tables
        ``ie = SCALE`` and this is ``nbytes x rho`` exactly, so it is not built at all.
        """
        if not k.efficiency:
            return cdiv(mul(nbytes, rho), SCALE)
        return mx(cdiv(mul(nbytes, rho_net), SCALE), cdiv(mul(occupied, rho_hbm), SCALE * SCALE))

    def stream(nbytes: Any, occupied: Any = None, wave_bytes: Any = None) -> Any:
        """As ``plain_stream``; with multicast, ``nbytes`` through this cluster's port while
        the shared HBM and links carry the wave's distinct ``wave_bytes`` (charged as payload:
        no preset both multicasts and has DMA efficiency tables)."""
        if not k.multicast:
            return plain_stream(nbytes, occupied)
        shared = mx(cdiv(nbytes * k.rho_port, SCALE), cdiv(wave_bytes * k.rho_shared, SCALE))
        return choose(mc, [plain_stream(nbytes, occupied), shared])

    in_bytes, filter_bytes = offchip_in * w, filter_words * w
    in_double, in_single = q["d_in"] - 1, 2 - q["d_in"]  # 0/1 flags
    f_double, f_single = q["d_f"] - 1, 2 - q["d_f"]
    double_bytes = mul(in_double, in_bytes) + mul(f_double, filter_bytes)
    single_bytes = mul(in_single, in_bytes) + mul(f_single, filter_bytes)
    double_occupied = single_occupied = store_occupied = None
    if k.efficiency:
        in_occupied, f_occupied = mul(in_bytes, ie_in), mul(filter_bytes, ie_f)
        double_occupied = mul(in_double, in_occupied) + mul(f_double, f_occupied)
        single_occupied = mul(in_single, in_occupied) + mul(f_single, f_occupied)
    wave_double = wave_single = wave_store = None
    if k.multicast:  # what the wave reads: inputs of its tiles (x stacks if groups > 1) + filters
        in_wave = mul(in_bytes, mc_tiles if k.groups == 1 else mul(mc_tiles, mc_b))
        f_wave = mul(filter_bytes, mc_b)
        wave_double = mul(in_double, in_wave) + mul(f_double, f_wave)
        wave_single = mul(in_single, in_wave) + mul(f_single, f_wave)
    # Little's law per stream: a double buffer keeps (allocated - one tile) bytes in flight,
    # and each stream needs its own (the report's footnotes 2/3: the input and the filter
    # buffer each cover the round trip), so a tiny filter buffer is not rescued by a big
    # input buffer: every filter tile then waits a whole round trip.
    in_flight_in = ops.max(alloc["input"] - tile["input"] * w, 1)
    in_flight_f = ops.max(alloc["filter"] - tile["filter"] * w, 1)
    little = mx(
        cdiv(mul(mul(in_double, in_bytes), big_l), in_flight_in),
        cdiv(mul(mul(f_double, filter_bytes), big_l), in_flight_f),
    )
    filter_loads = mul(steps, s)
    transfers = steps + filter_loads + choose(alg, [1, 1, 0])
    dma_double = (
        mx(stream(double_bytes, double_occupied, wave_double), little)
        + cdiv(forwarded * w, k.dma)
        + transfers * k.setup
    )
    single_loads = mul(in_single, steps) + mul(f_single, filter_loads)
    dma_single = stream(single_bytes, single_occupied, wave_single) + single_loads * big_l
    compute = cdiv(macs_task * SCALE, k.mac_rate)
    store_bytes = store_words * w
    if k.efficiency:
        store_occupied = mul(store_bytes, ie_out)
    if k.multicast:
        wave_store = mul(store_bytes, active)  # outputs are distinct: never shared
    out_single = 2 - q["d_out"]  # 1 if the store is exposed
    store_time = stream(store_bytes, store_occupied, wave_store) + big_l
    store = mul(out_single, choose(alg, [store_time, store_time, 0]))
    task = big_l + mx(compute, dma_double) + dma_single + store

    # -- input_parallel: tree reduction of the private stacks (Sec. 3.1.3) + one store --------
    stack_bytes = mul(s, b) * w
    reduce = ops.lookup(active - 1, k.red_latency) + big_l + cdiv(stack_bytes, k.dma)
    for level_steps, link in zip(k.red_steps, k.red_link, strict=True):
        if int(np.max(level_steps)) > 0:
            reduce = reduce + mul(
                ops.lookup(active - 1, level_steps), cdiv(stack_bytes * SCALE, link)
            )
    phase_extra = choose(alg, [0, 0, reduce])
    store_stream = stream(store_bytes, store_occupied, wave_store)
    tail = mul(q["d_out"] - 1, choose(alg, [store_stream, store_stream, 0]))
    total = mul(phases, mul(waves, task) + phase_extra) + tail

    # -- traffic (Eq. 7, 9, 10, 12/13 generalised) ---------------------------------------------
    px = q["in_px_sum"]
    stack_input = mul(q["s_in_sum"], px) * k.batch
    stack_filter = tiles_b_sp * k.weights
    if k.multicast:  # once per stack chunk (groups = 1) and once per tile chunk
        stack_input = choose(
            mc,
            [
                stack_input,
                mul(stack_chunks, px) * (k.batch * k.c_in) if k.groups == 1 else stack_input,
            ],
        )
        stack_filter = choose(mc, [stack_filter, tile_chunks * k.weights])
    input_load = choose(
        alg, [stack_input, mul(groups, px) * (k.batch * k.c_in), n_s * (k.batch * k.c_in * k.hw)]
    )
    filter_load = choose(alg, [stack_filter, tiles_b_sp * k.weights, q["n_b"] * k.weights])
    store_total = k.batch * k.outputs
    intercluster = choose(
        alg, [0, mul(n_s - groups, px) * (k.batch * k.c_in), (active - 1) * (k.c_out * k.batch)]
    )
    offchip_bytes = (input_load + filter_load + store_total) * w
    # Main-memory occupancy (bytes x SCALE): payload over the DMA efficiency of each
    # operand's runs; the traffic in bytes above is unchanged by it.
    if k.efficiency:
        occupied = (mul(input_load, ie_in) + mul(filter_load, ie_f) + store_total * ie_out) * w
    else:
        occupied = offchip_bytes * SCALE
    memory_floor = cdiv(occupied, k.hbm)
    # Energy (fJ): MACs are fixed by the layer; mappings differ in the bytes they move.
    energy = (
        k.batch * k.outputs * k.kf * k.e_mac
        + offchip_bytes * k.e_hbm
        + intercluster * (w * k.e_noc)
    )
    out.update(
        macs_task=macs_task,
        slots=slots,
        waves=mul(phases, waves),
        phases=phases,
        active=active,
        task=task,
        compute=compute,
        dma_double=dma_double,
        dma_single=dma_single,
        reduce=mul(phases, phase_extra),
        input_load=input_load,
        filter_load=filter_load,
        store=store_total,
        intercluster=intercluster,
        offchip_bytes=offchip_bytes,
        memory_floor=memory_floor,
        memory_occupied=occupied,
        cycles=mx(total, memory_floor),
        energy=energy,
    )
    return out
