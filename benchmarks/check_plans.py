"""Re-check the network plans of exported schedule files, independently of autotune.

A judge of a plan should not trust the tool that made it, so this script reads the JSON
with the standard library only (no autotune import) and checks the L2 layout on its own
terms, from the plan's tensor list (``plan.tensors``: name, level, offset, bytes, first
and last step):

* every L2 tensor has an offset, and its bytes ``[offset, offset + bytes)`` lie inside
  ``plan.l2_capacity``; an HBM tensor has none;
* every lifetime is ordered (``0 <= first <= last``, inside the plan's steps);
* no two L2 tensors that are live during a common step (lifetimes inclusive: a step reads
  its inputs while it writes its output) share a byte.

It prints one line per file (tensors in L2, the most L2 bytes live at once, and what is
wrong) and exits 1 if any plan is unsound, 2 if a file is not a schedule file with a plan.

    python benchmarks/check_plans.py S.json [S2.json ...]

``python benchmarks/check_plans.py --tamper S.json OUT.json`` writes a copy of ``S.json``
whose plan moves one L2 tensor onto another that is live beside it (the forgery
``bench_heldout.py`` hands to ``autotune verify``, which must refuse it); exit 2 if the plan
has no two L2 tensors live together.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


class NotAPlanError(Exception):
    """The file is not a schedule file with a network plan."""


def load_plan(path: Path) -> dict[str, Any]:
    """The ``plan`` object of a schedule file (``NotAPlanError`` if there is none)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise NotAPlanError(f"{path}: cannot read a JSON file ({e})") from e
    plan = data.get("plan") if isinstance(data, dict) else None
    if not isinstance(plan, dict) or not isinstance(plan.get("tensors"), list):
        raise NotAPlanError(f"{path}: no network plan (plan.tensors) in this file")
    return plan


def live_together(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Both tensors live during a common step (lifetimes inclusive)."""
    return a["first"] <= b["last"] and b["first"] <= a["last"]


def share_bytes(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["offset"] < b["offset"] + b["bytes"] and b["offset"] < a["offset"] + a["bytes"]


def problems(plan: dict[str, Any]) -> list[str]:
    """Everything unsound in ``plan``'s L2 layout (module docstring), one line each."""
    found = []
    capacity = plan.get("l2_capacity")
    steps = len(plan.get("steps") or [])
    in_l2 = []
    for t in plan["tensors"]:
        name = t.get("name")
        first, last, size = t.get("first"), t.get("last"), t.get("bytes")
        if not all(isinstance(v, int) for v in (first, last, size)):
            found.append(f"tensor {name!r}: first, last and bytes must be integers")
            continue
        if not 0 <= first <= last or (steps and last >= steps) or size < 0:
            found.append(f"tensor {name!r}: lifetime {first}..{last} of {steps} steps, {size} B")
        if t.get("level") == "hbm":
            if t.get("offset") is not None:
                found.append(f"tensor {name!r}: in HBM with an L2 offset")
            continue
        if t.get("level") != "l2":
            found.append(f"tensor {name!r}: level {t.get('level')!r} is neither hbm nor l2")
            continue
        offset = t.get("offset")
        if not isinstance(offset, int) or offset < 0:
            found.append(f"tensor {name!r}: in L2 without a valid offset ({offset!r})")
            continue
        if not isinstance(capacity, int) or offset + size > capacity:
            found.append(f"tensor {name!r}: bytes {offset}..{offset + size - 1} beyond {capacity}")
        in_l2.append(t)
    for i, a in enumerate(in_l2):
        for b in in_l2[i + 1 :]:
            if live_together(a, b) and share_bytes(a, b):
                found.append(
                    f"tensors {a['name']!r} and {b['name']!r} are live together and share L2 bytes"
                )
    return found


def peak_bytes(plan: dict[str, Any]) -> int:
    """The most L2 bytes live during one step."""
    in_l2 = [
        t
        for t in plan["tensors"]
        if t.get("level") == "l2"
        and all(isinstance(t.get(k), int) for k in ("first", "last", "bytes"))
    ]
    if not in_l2:
        return 0
    return max(
        sum(t["bytes"] for t in in_l2 if t["first"] <= s <= t["last"])
        for s in range(min(t["first"] for t in in_l2), max(t["last"] for t in in_l2) + 1)
    )


def tamper(source: Path, out: Path) -> tuple[str, str]:
    """Write ``source`` with one L2 tensor moved onto another live beside it; their names
    (moved, onto). ``NotAPlanError`` if no two L2 tensors are live together."""
    data = json.loads(source.read_text())
    plan = data.get("plan")
    if not isinstance(plan, dict):
        raise NotAPlanError(f"{source}: no network plan in this file")
    in_l2 = [t for t in plan.get("tensors", []) if t.get("level") == "l2" and t.get("bytes")]
    for a in in_l2:
        for b in in_l2:
            if a is not b and live_together(a, b) and not share_bytes(a, b):
                a["offset"] = b["offset"]
                out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
                return a["name"], b["name"]
    raise NotAPlanError(f"{source}: no two L2 tensors are live together")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", type=Path, nargs="+", help="schedule files (autotune tune --out)")
    parser.add_argument(
        "--tamper", action="store_true", help="write FILES[0] forged to FILES[1] (docstring)"
    )
    args = parser.parse_args(argv)
    if args.tamper:
        if len(args.files) != 2:
            parser.error("--tamper takes a source and an output file")
        try:
            moved, onto = tamper(*args.files)
        except NotAPlanError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"{args.files[1]}: {moved!r} moved onto {onto!r}")
        return 0
    unsound = 0
    for path in args.files:
        try:
            plan = load_plan(path)
        except NotAPlanError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        found = problems(plan)
        in_l2 = sum(t.get("level") == "l2" for t in plan["tensors"])
        verdict = "sound" if not found else f"UNSOUND ({len(found)} problems)"
        print(
            f"{path}: {len(plan['tensors'])} tensors, {in_l2} in L2, "
            f"peak {peak_bytes(plan):,} B: {verdict}"
        )
        for line in found:
            print(f"  {line}")
        unsound += bool(found)
    return 1 if unsound else 0


if __name__ == "__main__":
    sys.exit(main())
