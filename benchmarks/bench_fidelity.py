"""Model fidelity: how well the analytical model predicts the simulator, layer by layer.

The integer program optimises the cost model, so its winners are only as good as the model's
agreement with the machine. This benchmark measures that agreement against the tile-level
simulator (independent of the model) on every layer of the example networks:

* the integer program's winner: model cycles, simulated cycles, their ratio model / sim;
* the Spearman rank correlation between model and simulated cycles over the layer's ``--top``
  best candidates under the model (does the model *order* mappings as the simulator does,
  which is what the search relies on), and the regret: the winner's simulated cycles over
  the best simulated among those candidates;
* the simulator's breakdown of the winner (compute, dma_wait, contention, sync, idle) and its
  roofline efficiency: the physical lower bound ``max(MACs / peak MACs per cycle, compulsory
  bytes / HBM bytes per cycle)`` over the simulated cycles;
* per network: whole-network model and simulated cycles, the fraction of layers within 5 %
  and 10 %, the fraction ranked with rho >= 0.9, the roofline geomean and worst layer, and one
  line stating each of the issue's targets as met or not; with several runs on a machine,
  the same line pooled over all their layers (the issue states its targets over all layers
  of the networks: its roofline geomean is one mean over ResNet-50, YOLOv3 and
  MobileNetV2), also under ``pooled`` (per machine) in the JSON.

    python benchmarks/bench_fidelity.py [--networks resnet50,mobilenetv2] [--batch 1,8]
        [--precision fp32,fp64] [--top 50] [--quick [N]] [--random N] [--json out.json]
        [--plan per-layer|network]

``--plan network`` measures the winners ``autotune tune`` exports by default: each layer's
mapping at the placement the network plan gives its streams (input, weights, residual,
output in the chiplet's L2 or the HBM), the model, the simulator and the ranked candidates
all at that placement (the weights the step prefetches for later layers are left out: they
are the plan's, not the layer's). ``per-layer`` (the default) measures every stream in HBM.

YOLOv3 also runs on ``mppa3`` in fp16 (what KaNN runs). Layer shapes are solved, ranked and
simulated once per (machine, precision, batch); simulations are shared by (shape, mapping),
and run ``--processes`` at a time.

``--cache FILE`` keeps the simulated figures between runs (JSON): after a change to the model
alone a re-run simulates only the candidates it had not seen. The file names the simulator
it was made with (a hash of the simulator's sources and of everything it may import, which
the import contract bounds: ``autotune/sim``, ``tiling``, ``ir``; and of the machine files and
their parser); made by another simulator it is ignored and rewritten, and every entry read
back is checked (its parts must sum to its cycles) and simulated again if it is not sound.
It is saved after each network and on the way out (Ctrl-C too), merged with what another run
saved meanwhile. (The integer program's solves are not cached: they are most of a re-run.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from rich import box
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmark this tree, not an installed copy

from autotune import Layer, Machine, Mapping, Network, load_network, simulate  # noqa: E402
from autotune.api import solve_network  # noqa: E402
from autotune.cli.render import stdout as console  # noqa: E402
from autotune.cli.render import tile_text  # noqa: E402
from autotune.files import file_lock, write_atomic  # noqa: E402
from autotune.ir.options import TuneOptions  # noqa: E402
from autotune.ir.placement import HBM_ONLY, STREAMS, Placement  # noqa: E402
from autotune.ir.precision import word_bytes  # noqa: E402
from autotune.model.analysis import compulsory_words  # noqa: E402
from autotune.plans import plan_applies, plan_network  # noqa: E402
from autotune.result import step_placement  # noqa: E402
from autotune.search.exhaustive import ranking  # noqa: E402
from autotune.search.solve import LayerSolution  # noqa: E402
from autotune.search.space import search_space  # noqa: E402
from autotune.sim.result import Breakdown  # noqa: E402

EXAMPLES = ROOT / "examples"
NETWORKS = ("resnet50", "mobilenetv2", "yolov3", "googlenet", "alexnet", "vgg16", "mobilenetv3")
#: YOLOv3 is also measured where KaNN runs it (seed 003): MPPA3 in fp16.
KANN = ("yolov3", "mppa3", "fp16")
PARTS = ("compute", "dma_wait", "contention", "sync", "idle")
#: Candidates ranked per layer (the model's best) for the rank correlation.
TOP = 50
#: A ranked set the simulator holds within this of its best is flat: its rho measures the
#: model's error in the third digit, not an order the search could get wrong (``summarize``).
FLAT = 0.02
#: ``--quick`` without a number: layers per network, and candidates ranked per layer.
QUICK_LAYERS, QUICK_TOP = 4, 10

#: The issue's targets: (key in the summary, description, test on the summary).
TARGETS: tuple[tuple[str, str, Callable[[dict], bool]], ...] = (
    ("within_5", "<=5% for 95% of layers", lambda s: s["within_5"] >= 0.95),
    ("within_10", "<=10% for all layers", lambda s: s["within_10"] >= 1.0),
    ("network_ratio", "network within 3%", lambda s: abs(s["network_ratio"] - 1) <= 0.03),
    ("rank_090", "rho>=0.9 for 95% of layers", lambda s: s["rank_090"] >= 0.95),
    ("roofline_geomean", "roofline geomean>=0.80", lambda s: s["roofline_geomean"] >= 0.80),
    ("roofline_worst", "no layer below 0.50 roofline", lambda s: s["roofline_worst"] >= 0.50),
)


# -- statistics ------------------------------------------------------------------------------
def average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n of ``values``, tied values sharing the mean of the ranks they span (so that
    mappings the model cannot tell apart count as neither better nor worse)."""
    data = np.asarray(values, dtype=float)
    unique, inverse, counts = np.unique(data, return_inverse=True, return_counts=True)
    first = np.cumsum(counts) - counts  # 0-based rank of each distinct value's first member
    return (first + (counts + 1) / 2.0)[inverse.reshape(-1)]


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho (Pearson correlation of average ranks); NaN when either side has no
    spread (all tied) or fewer than two values: no order to agree with. scipy is not a
    dependency, and this is all of it we need."""
    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} values against {len(y)}")
    if len(x) < 2:
        return math.nan
    rx, ry = average_ranks(x), average_ranks(y)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    denom = math.sqrt(float(dx @ dx) * float(dy @ dy))
    return float(dx @ dy) / denom if denom > 0 else math.nan


def geomean(values: Sequence[float]) -> float:
    """The mean of ratios (efficiencies, regrets): a layer twice as good cancels one half."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def bound_cycles(layer: Layer, machine: Machine, precision: str, batch: int) -> float:
    """The physical lower bound on cycles: every MAC at peak, or every compulsory byte (each
    used input, weight and output once) at the HBM bandwidth, whichever is longer."""
    loads, stores = compulsory_words(layer, batch)
    return max(
        batch * layer.macs / machine.peak_macs_per_cycle(precision),
        (loads + stores) * word_bytes(precision) / machine.hbm_bytes_per_cycle,
    )


# -- measurement -----------------------------------------------------------------------------
@dataclass(frozen=True)
class LayerRecord:
    """One layer's figures (JSON-ready). ``rank_rho`` is None when undefined (all candidates
    tied under the model, or fewer than two); ``top_sim_best`` is the fewest simulated cycles
    among the ranked candidates (the winner's regret is ``sim_cycles / top_sim_best``),
    ``top_sim_worst`` the most (their spread, ``top_sim_worst / top_sim_best - 1``);
    ``breakdown`` is in cycles."""

    layer: str
    kind: str
    shape: str
    placement: str  # the streams in L2: i(nput), w(eights), r(esidual), o(utput); "" all HBM
    algorithm: str
    delta_o: int
    tile: str
    search_status: str
    model_cycles: int
    sim_cycles: int
    ratio: float
    rank_rho: float | None
    rank_candidates: int
    rank_model_distinct: int
    top_sim_best: int
    top_sim_worst: int
    breakdown: dict[str, float]
    bound_cycles: float
    roofline: float


#: What a simulation's figures depend on: the simulator and, by the import contract
#: (``pyproject.toml``: the layers below ``autotune.sim``), nothing but these, and the
#: machine files the presets are read from.
SIMULATOR_SOURCES = (
    "autotune/sim",
    "autotune/tiling.py",
    "autotune/ir",
    "autotune/io",
    "autotune/files.py",
    "autotune/version.py",
    "autotune/interrupts.py",
    "autotune/machines",
)
CACHE_FORMAT = "autotune-bench-fidelity-simulations"


def simulator_fingerprint(root: Path = ROOT) -> str:
    """A hash of every source file a simulation's figures may depend on."""
    digest = hashlib.sha256()
    for entry in SIMULATOR_SOURCES:
        path = root / entry
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for file in files:
            if file.is_file() and file.suffix in (".py", ".yaml"):
                digest.update(str(file.relative_to(root)).encode())
                digest.update(file.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class Simulated:
    """What the benchmark reads of a simulation: the cycles and where they went."""

    cycles: int
    breakdown: dict[str, float]

    def sound(self) -> bool:
        """Whole positive cycles and non-negative parts that sum to them (the simulator rounds
        the makespan up to whole cycles; the parts' sum may exceed it by a rounding error):
        what a cache entry must be to be used."""
        parts = self.breakdown
        return (
            type(self.cycles) is int
            and self.cycles > 0
            and set(PARTS) <= set(parts) <= set(Breakdown.__dataclass_fields__)
            and all(type(v) in (int, float) and 0 <= v < math.inf for v in parts.values())
            and -1e-9 * self.cycles <= self.cycles - sum(parts.values()) < 1 + 1e-9 * self.cycles
        )


Request = tuple[Layer, Mapping, Machine, str, int, Placement]


def _simulate(request: Request) -> Simulated:
    layer, mapping, machine, precision, batch, placement = request
    result = simulate(layer, mapping, machine, precision, batch, placement=placement)
    return Simulated(result.cycles, result.breakdown.as_dict())


@dataclass
class Simulations:
    """Simulated results shared by (machine, precision, batch, shape, mapping): the winner is
    usually the model's first candidate too, and repeated shapes rank the same candidates.
    ``processes``: simulations run at once (``fill``); ``cache``: the JSON file they are kept
    in between runs (module docstring)."""

    processes: int = 1
    cache: Path | None = None
    results: dict[str, Simulated] = field(default_factory=dict)
    calls: int = 0
    fingerprint: str = ""
    unsaved: int = 0
    loaded: int = 0  # entries read from the cache

    def __post_init__(self) -> None:
        if self.cache is not None:
            self.fingerprint = simulator_fingerprint()
            self.results.update(self._read(report=True))
            self.loaded = len(self.results)

    def _read(self, report: bool = False) -> dict[str, Simulated]:
        """The sound entries of the cache file made by this simulator (none if it is missing
        or was made by another); a file that is not such a cache stops the run unchanged."""
        assert self.cache is not None
        if not self.cache.exists():
            return {}
        try:
            data = json.loads(self.cache.read_text())
            if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
                raise ValueError(f"not a {CACHE_FORMAT} file")
            entries = data["results"]
            if not isinstance(entries, dict):
                raise ValueError("'results' is not an object")
        except (OSError, UnicodeDecodeError, ValueError, KeyError) as err:
            print(
                f"bench_fidelity: --cache {self.cache}: {err}; pass another file", file=sys.stderr
            )
            raise SystemExit(2) from None
        if data.get("simulator") != self.fingerprint:
            if report:
                print(
                    f"--cache {self.cache}: made by another simulator, starting afresh",
                    file=sys.stderr,
                )
            return {}
        kept: dict[str, Simulated] = {}
        for name, entry in entries.items():
            try:
                simulated = Simulated(entry["cycles"], dict(entry["breakdown"]))
            except (TypeError, KeyError, ValueError):
                continue
            if simulated.sound():
                kept[name] = simulated
        if report and len(kept) < len(entries):
            print(
                f"--cache {self.cache}: {len(entries) - len(kept)} unsound entries ignored",
                file=sys.stderr,
            )
        return kept

    def save(self) -> None:
        """Write the cache (atomically, merged under a lock with what another run saved)."""
        if self.cache is None or not self.unsaved:
            return
        with file_lock(self.cache.with_name(self.cache.name + ".lock")):
            merged = {**self._read(), **self.results}
            body = {
                "format": CACHE_FORMAT,
                "simulator": self.fingerprint,
                "results": {name: asdict(simulated) for name, simulated in sorted(merged.items())},
            }
            write_atomic(self.cache, json.dumps(body, separators=(",", ":")))
        self.unsaved = 0

    @staticmethod
    def key(request: Request) -> str:
        """A cache entry's name: a hash of the text of what the figures depend on (frozen
        dataclasses' reprs list every field, so two requests share a name only if equal)."""
        layer, mapping, machine, precision, batch, placement = request
        text = repr((machine.name, precision, batch, layer.shape_key(), mapping, placement))
        return hashlib.sha256(text.encode()).hexdigest()

    def fill(self, requests: Sequence[Request]) -> None:
        """Simulate those of ``requests`` not known yet, ``processes`` at a time."""
        todo: dict[str, Request] = {}
        for request in requests:
            name = self.key(request)
            if name not in self.results:
                todo[name] = request
        if not todo:
            return
        names = list(todo)
        if self.processes > 1 and len(names) > 1:
            with ProcessPoolExecutor(self.processes) as pool:
                done = pool.map(_simulate, [todo[n] for n in names], chunksize=4)
                for name, simulated in zip(names, done, strict=True):
                    self._add(name, simulated)
        else:
            for name in names:
                self._add(name, _simulate(todo[name]))

    def _add(self, name: str, simulated: Simulated) -> None:
        self.results[name] = simulated
        self.calls += 1
        self.unsaved += 1

    def get(
        self,
        layer: Layer,
        mapping: Mapping,
        machine: Machine,
        precision: str,
        batch: int,
        placement: Placement = HBM_ONLY,
    ) -> Simulated:
        request = (layer, mapping, machine, precision, batch, placement)
        self.fill([request])
        return self.results[self.key(request)]


def placement_text(placement: Placement) -> str:
    """The streams a placement keeps in L2, one letter each (input, weights, residual,
    output); empty when everything is in HBM."""
    return "".join(name[0] for name in STREAMS if getattr(placement, name) == "l2")


def shape_text(layer: Layer) -> str:
    """A compact shape for the tables, so that repeated shapes are seen to be one."""
    if layer.kind == "fc":
        return f"fc {layer.h_in}x{layer.w_in}x{layer.c_in}->{layer.c_out}"
    groups = "" if layer.groups == 1 else (" dw" if layer.is_depthwise else f" g{layer.groups}")
    return (
        f"{layer.h_in}x{layer.w_in}x{layer.c_in}->{layer.c_out} "
        f"k{layer.kernel_h}s{layer.stride_h}{groups}"
    )


def winner_text(mapping: Mapping) -> str:
    """Algorithm and what else sets its cost apart: share group, batch tile, multicast."""
    text = mapping.algorithm
    if mapping.share_group > 1:
        text += f" g{mapping.share_group}"
    if mapping.batch_tile > 1:
        text += f" b{mapping.batch_tile}"
    return text + (" mc" if mapping.multicast else "")


def rank_agreement(
    layer: Layer,
    machine: Machine,
    precision: str,
    batch: int,
    top: int,
    sims: Simulations,
    placement: Placement = HBM_ONLY,
) -> tuple[float, int, int, int, int]:
    """Spearman's rho between model and simulated cycles over the model's ``top`` best
    candidates, how many there were, how many distinct model cycles they have, and the fewest
    and the most simulated cycles among them: the search trusts the model's order, not only
    its winner, and a poor order matters only as far as a better candidate was passed over."""
    space = search_space(layer, machine, batch)
    ranked = ranking(space, machine, precision, "latency", top, placement=placement)
    best = [b for b in ranked if b.index]
    model = [b.values["cycles"] for b in best]
    requests = [(layer, space.decode(b.index), machine, precision, batch, placement) for b in best]
    sims.fill(requests)
    simulated = [sims.get(*request).cycles for request in requests]
    return spearman(model, simulated), len(best), len(set(model)), min(simulated), max(simulated)


def measure_network(
    network: Network,
    machine: Machine,
    precision: str,
    batch: int,
    top: int,
    sims: Simulations,
    processes: int = 1,
    progress: Callable[[str], None] | None = None,
    plan: str = "per-layer",
) -> list[LayerRecord]:
    """Solve ``network`` with the integer program (``plan="network"``: within the network
    plan, each layer at its planned placement) and measure every layer (each distinct shape
    and placement once; repeated ones get the first one's figures under their own name)."""
    if machine.chiplets != 1:
        raise ValueError(f"machine {machine.name!r}: the fidelity benchmark ranks one chiplet")
    options = TuneOptions(precision=precision, batch=batch, processes=processes, plan=plan)
    solutions: Sequence[LayerSolution]
    placements: dict[str, Placement] = {}
    if plan == "network" and plan_applies(network, machine):
        planned = plan_network(network, machine, options)
        solutions = planned.solutions
        placements = {
            sol.layer.name: step_placement(planned.plan, sol.layer.name)[0] for sol in solutions
        }
    else:
        solutions = solve_network(network, machine, options)
    done: dict[tuple[object, ...], LayerRecord] = {}
    records = []
    for sol in solutions:
        layer, mapping = sol.layer, sol.mapping
        placement = placements.get(layer.name, HBM_ONLY)
        key = (layer.shape_key(), placement)
        if key not in done:
            if progress:
                progress(layer.name)
            sim = sims.get(layer, mapping, machine, precision, batch, placement)
            rho, count, distinct, sim_best, sim_worst = rank_agreement(
                layer, machine, precision, batch, top, sims, placement
            )
            bound = bound_cycles(layer, machine, precision, batch)
            done[key] = LayerRecord(
                layer=layer.name,
                kind=layer.kind,
                shape=shape_text(layer),
                placement=placement_text(placement),
                algorithm=winner_text(mapping),
                delta_o=mapping.delta_o,
                tile=tile_text(mapping),
                search_status=sol.search.status,
                model_cycles=sol.analysis.cycles,  # at the layer's placement
                sim_cycles=sim.cycles,
                ratio=sol.analysis.cycles / sim.cycles,
                rank_rho=None if math.isnan(rho) else rho,
                rank_candidates=count,
                rank_model_distinct=distinct,
                top_sim_best=sim_best,
                top_sim_worst=sim_worst,
                breakdown=sim.breakdown,
                bound_cycles=bound,
                roofline=bound / sim.cycles,
            )
        first = done[key]
        records.append(first if first.layer == layer.name else replace(first, layer=layer.name))
    return records


def ranks_well(record: LayerRecord) -> bool:
    """The layer meets the rank target: rho over its candidates defined and >= 0.9."""
    return record.rank_rho is not None and record.rank_rho >= 0.9


def summarize(records: Sequence[LayerRecord]) -> dict:
    """The network's figures and, per issue target, whether it is met. Layers count once per
    occurrence in the network (a repeated block weighs as often as it runs). An undefined rank
    correlation (all candidates tied under the model) does not count as >= 0.9: the model
    gives the search no order there. The regret (winner's simulated cycles over the best
    simulated among the ranked candidates) says what a poor order costs; ``rank_flat`` is the
    share of layers ranked below 0.9 whose candidates the simulator holds within ``FLAT`` of
    each other (where rho weighs differences smaller than the model's error: beside the
    target, not in it)."""
    n = len(records)
    model = sum(r.model_cycles for r in records)
    simulated = sum(r.sim_cycles for r in records)
    worst = min(records, key=lambda r: r.roofline)
    summary: dict = dict(
        layers=n,
        model_cycles=model,
        sim_cycles=simulated,
        network_ratio=model / simulated,
        within_5=sum(abs(r.ratio - 1) <= 0.05 for r in records) / n,
        within_10=sum(abs(r.ratio - 1) <= 0.10 for r in records) / n,
        rank_090=sum(ranks_well(r) for r in records) / n,
        rank_undefined=sum(r.rank_rho is None for r in records),
        rank_flat=sum(
            not ranks_well(r) and r.top_sim_worst <= (1 + FLAT) * r.top_sim_best for r in records
        )
        / n,
        regret_geomean=geomean([r.sim_cycles / r.top_sim_best for r in records]),
        regret_worst=max(r.sim_cycles / r.top_sim_best for r in records),
        roofline_geomean=geomean([r.roofline for r in records]),
        roofline_worst=worst.roofline,
        roofline_worst_layer=worst.layer,
    )
    summary["targets"] = {key: bool(test(summary)) for key, _, test in TARGETS}
    return summary


def random_network(count: int, seed: int = 0) -> Network:
    """``count`` random layers (a quarter fc) off the example networks' beaten track, to see
    whether the agreement holds beyond shapes the model was written against. Conv: kernel
    1/3/5/7 (same padding), stride 1/2, dense or depthwise, channels 8..1024 and spatial
    7..112 log-uniform; fc: 64..4096 inputs (a 1x1 or 7x7 volume) to 10..4096 outputs."""
    rng = np.random.default_rng(seed)

    def log_int(lo: int, hi: int) -> int:
        return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))

    layers = []
    for i in range(count):
        if rng.random() < 0.25:
            side = int(rng.choice([1, 7]))
            c_in = log_int(64, 4096) // (side * side) if side > 1 else log_int(64, 4096)
            layers.append(Layer.fc(f"rand{i}.fc", side, side, max(c_in, 8), log_int(10, 4096)))
            continue
        k = int(rng.choice([1, 3, 5, 7]))
        stride = int(rng.choice([1, 2]))
        side = log_int(7, 112)
        c_in = log_int(8, 1024)
        depthwise = k > 1 and rng.random() < 0.3
        c_out = c_in if depthwise else log_int(8, 1024)
        layers.append(
            Layer(
                f"rand{i}.conv",
                "conv",
                side,
                side,
                c_in,
                c_out,
                kernel_h=k,
                kernel_w=k,
                stride_h=stride,
                stride_w=stride,
                pad_h=k // 2,
                pad_w=k // 2,
                groups=c_in if depthwise else 1,
            )
        )
    return Network(f"random{count}-seed{seed}", tuple(layers))


# -- output ----------------------------------------------------------------------------------
def pct(value: float) -> str:
    return f"{100 * value:.0f}%"


def run_title(run: dict) -> str:
    title = f"{run['network']} on {run['machine']}, {run['precision']}, batch {run['batch']}"
    return title + (", network plan" if run.get("plan") == "network" else "")


def print_layers(run: dict) -> None:
    """The per-layer table; breakdown parts as % of the simulated cycles."""
    table = Table(title=run_title(run), box=box.SIMPLE_HEAD, title_justify="left")
    for name in ("layer", "shape", "in L2", "winner", "tile", "model", "sim", "model/sim"):
        left = name in ("layer", "shape", "in L2", "winner")
        table.add_column(name, justify="left" if left else "right")
    table.add_column("rho distinct/top", justify="right")
    table.add_column("sim/best", justify="right")
    for part in PARTS:
        table.add_column(part.replace("contention", "contend").replace("dma_wait", "dma"))
    table.add_column("roofline", justify="right")
    for r in run["layers"]:
        ratio = f"{r.ratio:.3f}"
        if abs(r.ratio - 1) > 0.10:
            ratio = f"[red]{ratio}[/]"
        elif abs(r.ratio - 1) > 0.05:
            ratio = f"[yellow]{ratio}[/]"
        rho = "n/a" if r.rank_rho is None else f"{r.rank_rho:.2f}"
        table.add_row(
            r.layer,
            r.shape,
            r.placement,
            f"{r.algorithm} d{r.delta_o}",
            r.tile,
            f"{r.model_cycles:,}",
            f"{r.sim_cycles:,}",
            ratio,
            f"{rho} {r.rank_model_distinct}/{r.rank_candidates}",
            f"{r.sim_cycles / r.top_sim_best:.2f}",
            *(pct(r.breakdown.get(p, 0.0) / r.sim_cycles) for p in PARTS),
            f"{r.roofline:.2f}",
        )
    console.print(table)


def worst_layers(records: Sequence[LayerRecord], count: int = 5) -> list[LayerRecord]:
    """The ``count`` distinct shapes farthest from ratio 1 (repeats of a shape add nothing)."""
    seen, out = set(), []
    for r in sorted(records, key=lambda r: -abs(r.ratio - 1)):
        if r.shape not in seen:
            seen.add(r.shape)
            out.append(r)
    return out[:count]


def print_worst(run: dict) -> None:
    parts = ", ".join(PARTS)
    console.print(f"  worst layers by |model/sim - 1| (breakdown: {parts}, % of sim cycles):")
    for r in worst_layers(run["layers"]):
        shares = " ".join(pct(r.breakdown.get(p, 0.0) / r.sim_cycles) for p in PARTS)
        console.print(
            f"    {r.layer:24} {r.shape:28} {r.algorithm:20} ratio {r.ratio:.3f}  {shares}",
            highlight=False,
        )


def summary_line(run: dict) -> str:
    """One line per run: every target with its measured value and met / NOT MET."""
    return f"{run_title(run)}: " + targets_text(run["summary"])


def pooled_summaries(runs: Sequence[dict]) -> dict[str, dict]:
    """Per machine with more than one run, ``summarize`` over the layers of all its runs at
    once: the issue states its targets over all layers of the networks (its roofline geomean
    is one mean over ResNet-50's, YOLOv3's and MobileNetV2's layers together, at every batch
    and precision it names), which no single run's figures give; a machine's layers are not
    pooled with another's."""
    machines: dict[str, list[dict]] = {}
    for run in runs:
        machines.setdefault(run["machine"], []).append(run)
    return {
        machine: summarize(
            [
                replace(record, layer=f"{run['network']}/{record.layer}")
                for run in group
                for record in run["layers"]
            ]
        )
        for machine, group in machines.items()
        if len(group) > 1
    }


def targets_text(s: dict) -> str:
    """Every target of the summary ``s`` with its measured value and met / NOT MET."""
    values = {
        "within_5": pct(s["within_5"]),
        "within_10": pct(s["within_10"]),
        "network_ratio": f"{s['network_ratio']:.3f}",
        "rank_090": f"{pct(s['rank_090'])} ({pct(s['rank_flat'])} below it on a set within "
        f"{FLAT:.0%} in the simulator)",
        "roofline_geomean": f"{s['roofline_geomean']:.2f}",
        "roofline_worst": f"{s['roofline_worst']:.2f} ({s['roofline_worst_layer']})",
    }
    items = [
        f"{desc}: {values[key]} {'met' if s['targets'][key] else 'NOT MET'}"
        for key, desc, _ in TARGETS
    ]
    return "; ".join(items)


def print_summary(runs: Sequence[dict]) -> None:
    table = Table(title="per network", box=box.SIMPLE_HEAD, title_justify="left")
    for name in (
        "network",
        "machine",
        "prec",
        "batch",
        "layers",
        "model cycles",
        "sim cycles",
        "model/sim",
        "<=5%",
        "<=10%",
        "rho>=0.9",
        "rho n/a",
        "regret geo/max",
        "roofline geo",
        "worst layer",
    ):
        table.add_column(name, justify="left" if name in ("network", "worst layer") else "right")
    for run in runs:
        s = run["summary"]
        table.add_row(
            run["network"],
            run["machine"],
            run["precision"],
            str(run["batch"]),
            str(s["layers"]),
            f"{s['model_cycles']:,}",
            f"{s['sim_cycles']:,}",
            f"{s['network_ratio']:.3f}",
            pct(s["within_5"]),
            pct(s["within_10"]),
            pct(s["rank_090"]),
            str(s["rank_undefined"]),
            f"{s['regret_geomean']:.2f}/{s['regret_worst']:.2f}",
            f"{s['roofline_geomean']:.2f}",
            f"{s['roofline_worst_layer']} {s['roofline_worst']:.2f}",
        )
    console.print(table)
    for run in runs:
        console.print(summary_line(run), highlight=False, soft_wrap=True)
    for machine, pooled in pooled_summaries(runs).items():
        count = sum(run["machine"] == machine for run in runs)
        console.print(
            f"pooled over the {count} runs on {machine} ({pooled['layers']} layers): "
            + targets_text(pooled),
            highlight=False,
            soft_wrap=True,
        )


def to_json(runs: Sequence[dict]) -> str:
    """All figures, deterministic (sorted keys, no wall times); undefined values are null."""

    def clean(value: object) -> object:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        return value

    doc = [
        {
            **run,
            "layers": [clean(asdict(r)) for r in run["layers"]],
            "summary": clean(run["summary"]),
        }
        for run in runs
    ]
    out: dict = {"runs": doc}
    pooled = pooled_summaries(runs)
    if pooled:
        out["pooled"] = clean(pooled)
    return json.dumps(out, indent=1, sort_keys=True) + "\n"


# -- command line ----------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--networks",
        default=",".join(NETWORKS),
        help="comma list of example names or network files (.yaml, .onnx)",
    )
    parser.add_argument("--batch", default="1", help="comma list of batches")
    parser.add_argument("--precision", default="fp32", help="comma list (manticore runs)")
    parser.add_argument(
        "--top", type=int, default=None, help=f"candidates ranked per layer (default {TOP})"
    )
    parser.add_argument(
        "--quick",
        type=int,
        nargs="?",
        const=QUICK_LAYERS,
        default=None,
        metavar="N",
        help=f"first N layers per network (default {QUICK_LAYERS}) and top {QUICK_TOP}",
    )
    parser.add_argument("--random", type=int, default=0, metavar="N", help="N random layers")
    parser.add_argument("--seed", type=int, default=0, help="seed of --random")
    parser.add_argument(
        "--processes", type=int, default=1, help="solver processes and simulations at once"
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=None,
        metavar="FILE",
        help="keep simulated figures in this JSON file between runs",
    )
    parser.add_argument("--json", type=Path, default=None, help="write all figures here")
    parser.add_argument("--no-layers", action="store_true", help="summary tables only")
    parser.add_argument(
        "--plan",
        choices=("per-layer", "network"),
        default="per-layer",
        help="per-layer: every stream in HBM; network: the network plan's placements",
    )
    return parser.parse_args(argv)


def network_named(name: str) -> Network:
    """An example network by name, or any network file (YAML or ONNX) by path: held-out
    networks are measured as the examples are, named by their file (an exporter's graph
    name, PyTorch's ``main_graph``, would not tell them apart)."""
    if name in NETWORKS:
        return load_network(EXAMPLES / f"{name}.yaml")
    return replace(load_network(name), name=Path(name).stem)


def plan(args: argparse.Namespace) -> list[tuple[Network, str, str, int]]:
    """(network, machine, precision, batch) of every run the arguments ask for."""
    names = [n for n in args.networks.split(",") if n]
    unknown = sorted(n for n in names if n not in NETWORKS and not Path(n).is_file())
    if unknown:
        raise SystemExit(
            f"unknown network(s) {', '.join(unknown)} "
            f"(known: {', '.join(NETWORKS)}, or a network file)"
        )
    batches = [int(b) for b in args.batch.split(",")]
    precisions = args.precision.split(",")
    networks = [network_named(n) for n in names]
    if args.random:
        networks.append(random_network(args.random, args.seed))
    if args.quick is not None:
        networks = [Network(n.name, n.layers[: args.quick], n.batch, n.precision) for n in networks]
    runs = [
        (net, "manticore", prec, batch)
        for net in networks
        for prec in precisions
        for batch in batches
    ]
    runs += [
        (net, KANN[1], KANN[2], batch)
        for net in networks
        if net.name == KANN[0]
        for batch in batches
    ]
    return runs


def main(argv: Sequence[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    top = args.top or (QUICK_TOP if args.quick is not None else TOP)
    if args.processes < 1:
        print(f"bench_fidelity: --processes {args.processes}: must be at least 1", file=sys.stderr)
        raise SystemExit(2)
    sims = Simulations(processes=args.processes, cache=args.cache)
    try:
        return run_all(args, top, sims)
    finally:
        saved = sims.unsaved
        sims.save()
        if saved and sims.cache is not None:
            print(f"{saved} simulations saved to {sims.cache}", file=sys.stderr)


def run_all(args: argparse.Namespace, top: int, sims: Simulations) -> list[dict]:
    runs = []
    start = time.perf_counter()
    for net, machine_name, precision, batch in plan(args):
        machine = Machine.preset(machine_name)
        t0 = time.perf_counter()

        def progress(name: str, net: Network = net) -> None:
            print(f"  {net.name}: {name}", file=sys.stderr, flush=True)

        records = measure_network(
            net, machine, precision, batch, top, sims, args.processes, progress, args.plan
        )
        run = dict(
            network=net.name,
            plan=args.plan,
            machine=machine_name,
            precision=precision,
            batch=batch,
            top=top,
            layers=records,
            summary=summarize(records),
        )
        runs.append(run)
        sims.save()
        if not args.no_layers:
            print_layers(run)
            print_worst(run)
        print(
            f"{run_title(run)}: {time.perf_counter() - t0:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    print_summary(runs)
    print(
        f"{sims.calls} simulations ({sims.loaded} figures read from the cache), "
        f"{time.perf_counter() - start:.0f} s in all",
        file=sys.stderr,
    )
    if args.json:
        args.json.write_text(to_json(runs))
    return runs


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the cache is saved on the way out (``main``)
        print("bench_fidelity: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
