"""Hostile inputs through the CLI: each must be refused (exit 2) fast and in little memory.

Every case runs ``python -m autotune ...`` in its own subprocess (this checkout's package)
and prints its wall time and peak resident set size (the rusage of that one child, as
``os.wait4`` returns it), next to the same figures for a legitimate ``autotune check`` of
ResNet-50 as the baseline: a refusal should cost about what starting the CLI costs. A last
row times ``load_network`` on 10 000 small layers in this process. Each child runs under a
4 GiB address-space limit and a 60 s timeout, so a regression cannot take the machine down.
Targets: every hostile case exits 2 within 2 s of the baseline and below 2x its memory.

    python benchmarks/bench_input_limits.py
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's autotune, not whichever one is installed

from autotune import load_network, tune  # noqa: E402
from autotune.io import limits  # noqa: E402

MEMORY_CAP = 4 << 30
TIMEOUT_S = 60.0
LAYER = "{name: %s, kind: conv, in: [8, 8, 4], out_channels: 4, kernel: 3, padding: 1}"


def network(folder: Path, name: str, layers: list[str], head: str = "") -> Path:
    path = folder / name
    path.write_text("network: n\n" + head + "layers:\n" + "".join(f"  - {x}\n" for x in layers))
    return path


def bomb(folder: Path, name: str, key: str) -> Path:
    """Nine layers whose ``key`` doubles as a "billion laughs": 9**9 nodes expanded."""
    text, previous = "network: n\nlayers:\n", None
    for level, anchor in enumerate("abcdefghi"):
        item = f"*{previous}" if previous else ("lol" if key == "name" else "8")
        fields = {"name": f"l{level}", "in": "[8, 8, 4]"}
        fields[key] = f"&{anchor} [{', '.join([item] * 9)}]"
        text += "  - {" + ", ".join(f"{k}: {v}" for k, v in fields.items())
        text += ", kind: conv, out_channels: 4, kernel: 3}\n"
        previous = anchor
    path = folder / name
    path.write_text(text)
    return path


def cases(folder: Path) -> list[tuple[str, list[str]]]:
    """(label, CLI arguments) of every hostile input, written into ``folder``."""
    conv = "{name: c, kind: conv, in: [%s], out_channels: %d, kernel: 3}"
    huge = folder / "huge.yaml"
    huge.write_text("network: n\n" + "#" * (limits.MAX_YAML_BYTES + 1))
    deep = folder / "deep.yaml"
    deep.write_text("network: n\nlayers: " + "[" * 100_000 + "]" * 100_000 + "\n")
    big = "{name: big, kind: conv, in: [224, 224, 64], out_channels: 64, kernel: 3, padding: 1}"
    tiny = network(folder, "tiny.yaml", [LAYER % "c1"])
    schedule = folder / "huge_shape.json"
    tune(tiny, refine=False, verify=False, storage="memory").save(schedule)
    record = json.loads(schedule.read_text())
    record["layers"][0]["shape"].update(h_in=100_000_000)
    schedule.write_text(json.dumps(record))
    memory = json.loads(json.dumps(record))
    memory["layers"][0]["shape"].update(h_in=16384, w_in=16384)
    over = folder / "over_hbm.json"
    over.write_text(json.dumps(memory))
    many = [LAYER % f"c{i}" for i in range(limits.MAX_LAYERS + 1)]
    dim = network(folder, "dim.yaml", [conv % ("100000000, 8, 4", 4)])
    batch = network(folder, "batch.yaml", [LAYER % "c"], "batch: 1000000000\n")
    channels = network(folder, "chan.yaml", [conv % ("8, 8, 1000000", 1000000)])
    name = network(folder, "long.yaml", [LAYER % ("x" * 1_000_000)])
    hbm = network(folder, "hbm.yaml", [big], "batch: 1000\n")
    return [
        ("alias bomb in a name (tune)", ["tune", str(bomb(folder, "bomb_name.yaml", "name"))]),
        ("alias bomb in 'in' (check)", ["check", str(bomb(folder, "bomb_in.yaml", "in"))]),
        ("nesting 100 000 deep", ["check", str(deep)]),
        ("file of 8 MiB + 1 byte", ["check", str(huge)]),
        ("1e8 height (tune)", ["tune", str(dim)]),
        ("batch 1e9 (tune)", ["tune", str(batch)]),
        ("1e6 channels (tune)", ["tune", str(channels)]),
        ("name of 1e6 characters", ["check", str(name)]),
        ("10 001 layers", ["check", str(network(folder, "many.yaml", many))]),
        ("tensors over HBM (tune)", ["tune", str(hbm)]),
        ("verify of a 1e8 shape", ["verify", str(schedule)]),
        ("simulate of 2 x 64 GiB tensors", ["simulate", str(over)]),
    ]


def run(args: list[str]) -> tuple[int, float, float, str]:
    """(exit code, wall s, peak RSS MiB, first stderr line) of ``python -m autotune args``."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "autotune", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=cap,
        )
        # wait4 rather than Popen.wait: it returns this child's own rusage (peak RSS).
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        while pid == 0 and time.perf_counter() - start < TIMEOUT_S:
            time.sleep(0.01)
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid == 0:
            child.kill()
            pid, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = code = os.waitstatus_to_exitcode(status)
        err.seek(0)
        line = (err.read().decode(errors="replace").strip().splitlines() or [""])[0]
    return code, wall, usage.ru_maxrss / 1024, line


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _, base_s, base_mb, _ = run(["check", str(ROOT / "examples" / "resnet50.yaml")])
        print(f"baseline: autotune check resnet50.yaml  {base_s:6.2f} s  {base_mb:6.0f} MiB")
        print(f"{'case':32} {'exit':>4} {'wall s':>7} {'x base':>6} {'peak MiB':>8} {'x base':>6}")
        worst = 0.0
        for label, args in cases(folder):
            code, wall, peak, line = run(args)
            worst = max(worst, wall - base_s)
            print(
                f"{label:32} {code:4d} {wall:7.2f} {wall / base_s:6.2f} {peak:8.0f} "
                f"{peak / base_mb:6.2f}  {line[:110]}"
            )
        layers = [LAYER % f"c{i}" for i in range(10_000)]
        path = network(folder, "ten_thousand.yaml", layers)
        start = time.perf_counter()
        net = load_network(path)
        wall = time.perf_counter() - start
        print(f"legit: load_network of {len(net.layers)} small layers ({path.stat().st_size} B) "
              f"{wall:.2f} s in process")  # fmt: skip
        print(f"slowest refusal: {worst:+.2f} s over the baseline")


if __name__ == "__main__":
    main()
