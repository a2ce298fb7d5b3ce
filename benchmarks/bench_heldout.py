"""Held-out ONNX models through the whole command line, as a user runs them.

For every ``*.onnx`` in a folder (smallest first; ``export_torchvision.py`` writes a set),
this runs, each as its own process with a time limit:

    autotune check M.onnx
    autotune tune M.onnx --no-refine --storage memory --out S.json   (plan, verification on)
    autotune verify S.json --network M.onnx
    autotune run M.onnx --schedules S.json --input X.npy --output Y.npz

with a random input ``X`` (seeded), and compares every output with onnxruntime's on the same
model and input (the largest absolute difference over the largest reference value). Then,
as issues 15 and 17 judge a held-out network, from the exported files alone:

    autotune tune M.onnx --plan per-layer --no-refine --no-verify --storage memory --out P.json
    python benchmarks/check_plans.py S.json          (the plan re-checked independently)
    python benchmarks/check_plans.py --tamper S.json T.json && autotune verify T.json ...

that is, the network plan's simulated cycles against the per-layer baseline's (``x``: how
much faster), the plan's L2 layout checked by a script that does not import autotune, and a
forged plan (one L2 tensor moved onto another live beside it) that ``verify`` must refuse
with exit code 1; and the model's agreement with the simulator over the layers of ``S.json``
(its ``predicted`` and ``simulated`` cycles per layer): the share within 5 % and 10 %, the
whole network's ratio and the worst layer. ``--no-compare`` skips these.

With ``--refine N`` each model is also tuned with refinement, as issue 15 judges a held-out
network "tuned with and without refinement":

    autotune tune M.onnx --trials N --storage memory --out R.json     (refined, verified)
    autotune verify R.json --network M.onnx

and a third table gives, from ``S.json`` and ``R.json`` alone, what refinement gained (the
integer program's simulated cycles over the refined ones, issue 15's "IP-only tuning within
3 % of fully refined tuning"), what it cost (the two tunes' seconds) and the model's agreement
with the simulator over the refined file's layers (refinement keeps the mapping the simulator
prefers, which the model may rank lower: this is where their disagreement shows). Each model
is then one of:

* ``ok``: every command exits 0 and the outputs agree within ``--tolerance``;
* ``refused``: ``check`` and ``tune`` refuse the model in one line with exit code 2 (an
  operator autotune does not map); the line is printed;
* ``BUG``: anything else (a traceback, another exit code, a refusal of more than one line,
  a time-out, outputs that differ or are missing, an unsound plan, a forged plan that
  ``verify`` does not refuse).

It prints one row per model (exit codes and seconds of each command, the error) and the
refusals by reason, and exits 1 if any model is a ``BUG``. ``--json FILE`` keeps the rows.

    python benchmarks/bench_heldout.py MODELS_DIR [--timeout 1500] [--tolerance 1e-4]
        [--work DIR] [--json FILE] [--no-compare] [--refine TRIALS]

Needs onnxruntime (the ``dev`` extra). A model whose output is independent of its input
(random weights can do that: see ``export_torchvision.py --calibrate``) agrees trivially;
its reference magnitude is printed beside the error for that reason.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_plans  # noqa: E402  (the independent plan checker beside this script)

COMMANDS = ("check", "tune", "verify", "run")
#: What ``--no-compare`` skips: the per-layer baseline and the forged plan's verify.
COMPARE = ("per-layer", "tamper")
#: What ``--refine`` adds: the refined tune and the verify of its file.
REFINE = ("refine", "verify-refined")


@dataclass
class Row:
    model: str
    exits: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    error: float | None = None  # max |ours - onnxruntime| / max |onnxruntime|
    reference: float | None = None  # max |onnxruntime|
    verdict: str = ""
    detail: str = ""
    #: simulated network cycles of the plan (S.json) and of the per-layer baseline (P.json)
    plan_cycles: int | None = None
    per_layer_cycles: int | None = None
    plan_check: str = ""  # check_plans' verdict on S.json's plan
    fidelity: dict[str, float | str] = field(default_factory=dict)
    #: ``--refine``: R.json's simulated network cycles and the model's agreement over it
    refined_cycles: int | None = None
    refined_fidelity: dict[str, float | str] = field(default_factory=dict)


def command(name: str, model: Path, work: Path, trials: int = 0) -> list[str]:
    schedules, refined = str(work / "S.json"), str(work / "R.json")
    args = {
        "check": ["check", str(model)],
        "tune": ["tune", str(model), "--no-refine", "--storage", "memory", "--out", schedules],
        "verify": ["verify", schedules, "--network", str(model)],
        "run": [
            "run",
            str(model),
            "--schedules",
            schedules,
            "--input",
            str(work / "X.npz"),
            "--output",
            str(work / "Y.npz"),
        ],
        "per-layer": [
            "tune",
            str(model),
            "--plan",
            "per-layer",
            "--no-refine",
            "--no-verify",
            "--storage",
            "memory",
            "--out",
            str(work / "P.json"),
        ],
        "tamper": ["verify", str(work / "T.json"), "--network", str(model)],
        "refine": ["tune", str(model), "--trials", str(trials), "--storage", "memory"]
        + ["--out", refined],
        "verify-refined": ["verify", refined, "--network", str(model)],
    }[name]
    return [sys.executable, "-m", "autotune", *args]


def write_inputs(session: ort.InferenceSession, work: Path) -> dict[str, np.ndarray]:
    """A seeded random array per model input, also written as X.npz for ``run``."""
    rng = np.random.default_rng(0)
    feeds = {
        i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(
            np.float32
        )
        for i in session.get_inputs()
    }
    np.savez(work / "X.npz", **feeds)  # type: ignore[arg-type]
    return feeds


def judge(row: Row, outputs: dict[str, str]) -> None:
    """The row's verdict from its exit codes, refusal lines and error (module docstring)."""
    if row.exits.get("check") == 2 and row.exits.get("tune") == 2:
        lines = [x for x in outputs["tune"].splitlines() if x.strip()]
        one = len(lines) == 1 and "Traceback" not in outputs["tune"]
        row.verdict = "refused" if one else "BUG"
        row.detail = lines[-1] if lines else ""
        return
    failed = [c for c in COMMANDS if row.exits.get(c) != 0]
    if failed:
        row.verdict = "BUG"
        tail = [x for x in outputs.get(failed[0], "").splitlines() if x.strip()]
        row.detail = f"{failed[0]} exited {row.exits.get(failed[0])}: {tail[-1] if tail else ''}"
        return
    row.verdict = "ok"


def execute(
    name: str, model: Path, work: Path, timeout: float, trials: int = 0
) -> tuple[int, str, float]:
    """Run one of ``COMMANDS``, ``COMPARE`` or ``REFINE``: (exit code, its output, seconds);
    -1 on a time-out."""
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command(name, model, work, trials), capture_output=True, text=True, timeout=timeout
        )
        code, output = done.returncode, done.stderr + done.stdout
    except subprocess.TimeoutExpired:
        code, output = -1, f"timed out after {timeout:g} s"
    return code, output, round(time.perf_counter() - start, 1)


def fidelity(schedules: dict) -> dict[str, float | str]:
    """The model against the simulator over a schedule file's layers (module docstring)."""
    pairs = [
        (x["predicted"]["cycles"], x["simulated"]["cycles"], x["name"]) for x in schedules["layers"]
    ]
    ratios = [(p / s if s else float("inf"), name) for p, s, name in pairs]
    worst = max(ratios, key=lambda r: abs(r[0] - 1))
    return {
        "layers": len(pairs),
        "within_5": sum(abs(r - 1) <= 0.05 for r, _ in ratios) / len(ratios),
        "within_10": sum(abs(r - 1) <= 0.10 for r, _ in ratios) / len(ratios),
        "network": sum(p for p, _, _ in pairs) / max(sum(s for _, s, _ in pairs), 1),
        "worst": worst[0],
        "worst_layer": worst[1],
    }


def compare(row: Row, model: Path, work: Path, timeout: float) -> None:
    """The per-layer baseline, the independent plan check, the forged plan and the model's
    agreement (module docstring), into ``row``; a failure makes it a ``BUG``."""
    schedules = json.loads((work / "S.json").read_text())
    row.plan_cycles = schedules["totals"]["cycles"]
    row.fidelity = fidelity(schedules)
    try:
        found = check_plans.problems(check_plans.load_plan(work / "S.json"))
        row.plan_check = "sound" if not found else f"UNSOUND: {found[0]}"
    except check_plans.NotAPlanError as e:  # a machine without an L2: per-layer only
        row.plan_check, found = f"no plan ({e})", []
    if found:
        row.verdict, row.detail = "BUG", f"plan unsound: {found[0]}"
    code, output, row.seconds["per-layer"] = execute("per-layer", model, work, timeout)
    row.exits["per-layer"] = code
    if code != 0:
        row.verdict, row.detail = "BUG", f"per-layer tune exited {code}: {_last_line(output)}"
        return
    row.per_layer_cycles = json.loads((work / "P.json").read_text())["totals"]["cycles"]
    if not row.plan_check.startswith("sound"):
        return
    try:
        check_plans.tamper(work / "S.json", work / "T.json")
    except check_plans.NotAPlanError:
        row.plan_check += "; nothing to forge (fewer than two L2 tensors live together)"
        return
    code, output, row.seconds["tamper"] = execute("tamper", model, work, timeout)
    row.exits["tamper"] = code
    if code != 1 or "Traceback" in output:
        row.verdict = "BUG"
        row.detail = f"verify of a forged plan exited {code}: {_last_line(output)}"


def refine(row: Row, model: Path, work: Path, timeout: float, trials: int) -> None:
    """The refined tune and the verify of its file (module docstring), into ``row``; a
    failure makes it a ``BUG``."""
    for name in REFINE:
        code, output, row.seconds[name] = execute(name, model, work, timeout, trials)
        row.exits[name] = code
        if code != 0:
            row.verdict, row.detail = "BUG", f"{name} exited {code}: {_last_line(output)}"
            return
    refined = json.loads((work / "R.json").read_text())
    row.refined_cycles = refined["totals"]["cycles"]
    if row.plan_cycles is None:  # (``--no-compare``: S.json not read yet)
        row.plan_cycles = json.loads((work / "S.json").read_text())["totals"]["cycles"]
    row.refined_fidelity = fidelity(refined)


def _last_line(output: str) -> str:
    lines = [x for x in output.splitlines() if x.strip()]
    return lines[-1] if lines else ""


def run_model(
    model: Path,
    work: Path,
    timeout: float,
    tolerance: float,
    comparing: bool = True,
    trials: int = 0,
) -> Row:
    row = Row(model.stem)
    outputs: dict[str, str] = {}
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    feeds = write_inputs(session, work)
    for name in COMMANDS:
        row.exits[name], outputs[name], row.seconds[name] = execute(name, model, work, timeout)
        if row.exits[name] != 0 and not (name == "check" and row.exits[name] == 2):
            break  # (a refusal by check: tune is asked too, to be judged together)
    judge(row, outputs)
    if row.verdict != "ok":
        return row
    names = [o.name for o in session.get_outputs()]
    want = dict(zip(names, session.run(None, feeds), strict=True))
    with np.load(work / "Y.npz") as got:
        missing = sorted(set(want) - set(got.files))
        if missing:
            row.verdict, row.detail = "BUG", f"outputs missing: {', '.join(missing)}"
            return row
        scale = max(float(np.abs(v).max()) for v in want.values())
        diff = max(
            float(np.abs(got[k].astype(np.float64) - v.reshape(got[k].shape)).max())
            for k, v in want.items()
        )
    row.reference = scale
    row.error = diff / max(scale, 1e-30)
    if not row.error <= tolerance:
        row.verdict, row.detail = "BUG", f"outputs differ from onnxruntime by {row.error:.2e}"
        return row
    if comparing:
        compare(row, model, work, timeout)
    if trials and row.verdict == "ok":
        refine(row, model, work, timeout, trials)
    return row


#: The model's agreement's columns (``agreement``).
AGREEMENT = "  <=5%  <=10%  model/sim  worst layer (model/sim)"


def agreement(f: dict[str, float | str]) -> str:
    """A ``fidelity`` dict as the tables' cells: share within 5 % and 10 %, network, worst."""
    worst = f"{str(f['worst_layer'])[-28:]} ({f['worst']:.3f})"
    return f"  {f['within_5']:4.0%}  {f['within_10']:5.0%}  {f['network']:9.3f}  {worst}"


def print_comparison(rows: list[Row]) -> None:
    """The second table: plan against per-layer, the plan check, the model's agreement."""
    done = [r for r in rows if r.per_layer_cycles and r.plan_cycles]
    if not done:
        return
    print(
        "\nmodel".ljust(29)
        + "per-layer".rjust(12)
        + "plan".rjust(12)
        + "x".rjust(7)
        + AGREEMENT
        + "   plan check"
    )
    for r in done:
        speedup = r.per_layer_cycles / r.plan_cycles
        print(
            f"{r.model:28s}{r.per_layer_cycles:>12,}{r.plan_cycles:>12,}{speedup:>7.2f}"
            f"{agreement(r.fidelity)}   {r.plan_check}"
        )


def print_refinement(rows: list[Row]) -> None:
    """The third table (``--refine``): refinement's gain and cost, the refined file's
    agreement."""
    done = [
        (r, r.plan_cycles, r.refined_cycles) for r in rows if r.refined_cycles and r.plan_cycles
    ]
    if not done:
        return
    print(
        "\nmodel".ljust(29)
        + "IP only".rjust(12)
        + "refined".rjust(12)
        + "  gain   IP tune  refined tune"
        + AGREEMENT
    )
    for r, ip_only, refined in done:
        print(
            f"{r.model:28s}{ip_only:>12,}{refined:>12,}{ip_only / refined - 1:>6.1%}"
            f"{r.seconds['tune']:>9.0f}s{r.seconds['refine']:>13.0f}s"
            f"{agreement(r.refined_fidelity)}"
        )
    within = sum(ip_only <= 1.03 * refined for _, ip_only, refined in done)
    print(f"IP-only tuning within 3 % of refined tuning: {within} of {len(done)} models")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", type=Path, help="folder of .onnx models")
    parser.add_argument("--timeout", type=float, default=1500.0, help="seconds per command")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="relative to max |ref|")
    parser.add_argument("--work", type=Path, help="keep each model's files here")
    parser.add_argument("--json", type=Path, help="write the rows as JSON")
    parser.add_argument(
        "--no-compare",
        action="store_true",
        help="skip the per-layer baseline, the plan checks and the model's agreement",
    )
    parser.add_argument(
        "--refine",
        type=int,
        default=0,
        metavar="TRIALS",
        help="also tune with refinement (TRIALS per distinct layer shape) and verify that file",
    )
    args = parser.parse_args(argv)
    if args.refine < 0:
        print(f"error: --refine must be >= 0, not {args.refine}", file=sys.stderr)
        return 2
    paths = sorted(args.models.glob("*.onnx"), key=lambda p: (p.stat().st_size, p.name))
    if not paths:
        print(f"error: no .onnx file in {args.models}", file=sys.stderr)
        return 2
    rows = []
    header = "model".ljust(28) + "".join(c.rjust(13) for c in COMMANDS) + "   error (max |ref|)"
    print(header)
    for path in paths:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp) if args.work is None else args.work / path.stem
            work.mkdir(parents=True, exist_ok=True)
            row = run_model(
                path, work, args.timeout, args.tolerance, not args.no_compare, args.refine
            )
        rows.append(row)
        cells = "".join(
            (f"{row.exits[c]} / {row.seconds[c]:g}s" if c in row.exits else "-").rjust(13)
            for c in COMMANDS
        )
        error = "" if row.error is None else f"   {row.error:.1e} ({row.reference:.2g})"
        print(f"{row.model:28s}{cells}{error}   {row.verdict} {row.detail}".rstrip(), flush=True)
    print_comparison(rows)
    print_refinement(rows)
    counts = {v: sum(r.verdict == v for r in rows) for v in ("ok", "refused", "BUG")}
    print(f"\n{len(rows)} models: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    return 1 if counts["BUG"] else 0


if __name__ == "__main__":
    sys.exit(main())
