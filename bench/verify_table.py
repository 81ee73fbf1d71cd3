"""The verify table: one row per endpoint over its item orders (verdicts, the requests and tokens
each verdict took, the shape, the shift on the shared prefix, the identical texts), from the
``--out`` files of ``servediff verify``. bench/verify_cpu.py prints it after its runs; on records
brought back from elsewhere (a GPU study's ``NAME.sK.json``, one per item order):

    python bench/verify_table.py DIR [--plan PLAN.json]    # DIR/NAME.s0.json, NAME.s1.json, …
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

from servediff.compare.verify_result import read


def table(rows: list[tuple[str, list[dict[str, object]]]], plan: dict[str, object] | None) -> None:
    head = ("endpoint", "verdicts", "requests (median, max)", "tokens (median, max)", "shape", "mean d")
    print("| " + " | ".join(head) + " | mean abs d | identical |")
    print("|---|---|---|---|---|---|---|---|")
    for label, results in rows:
        verdicts = [str(r["verdict"]) for r in results]
        reqs = [int(r["requests_at_stop"]) for r in results]  # type: ignore[call-overload]
        toks = [int(r["tokens_at_stop"]) for r in results]  # type: ignore[call-overload]
        ev = [r["evidence"] for r in results if r["evidence"] is not None]
        shapes = sorted({str(e["shape"]) for e in ev if e["shape"]})  # type: ignore[index]
        shift = statistics.median(float(e["shift_mean"] or 0) for e in ev) if ev else 0.0  # type: ignore[index]
        dist = statistics.median(float(e["distance_mean"] or 0) for e in ev) if ev else 0.0  # type: ignore[index]
        same = sum(int(e["identical"]) for e in ev), sum(int(e["requests"]) for e in ev)  # type: ignore[index]
        counts = ", ".join(f"{verdicts.count(v)} {v}" for v in sorted(set(verdicts)))
        print(
            f"| {label} | {counts} | {statistics.median(reqs):g}, {max(reqs)} | {statistics.median(toks):g}, "
            f"{max(toks)} | {', '.join(shapes) or '—'} | {shift:+.4f} | {dist:.4f} | {same[0]}/{same[1]} |"
        )
    if plan is not None:
        print()
        print(json.dumps(plan["plan"], indent=1))
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path, help="a folder of verify files named NAME.sK.json")
    ap.add_argument("--plan", type=Path, help="a verify --plan file, printed after the table")
    args = ap.parse_args()
    rows = endpoints(args.dir)
    if not rows:
        raise SystemExit(f"{args.dir}: no verify files named NAME.sK.json")
    plan = json.loads(args.plan.read_text()) if args.plan else None
    table(rows, plan)


def endpoints(folder: Path) -> list[tuple[str, list[dict[str, object]]]]:
    """The verdicts of FOLDER/NAME.sK.json, grouped by NAME (sorted), the orders in file order."""
    groups: dict[str, list[dict[str, object]]] = {}
    for path in sorted(folder.glob("*.json")):
        m = re.fullmatch(r"(.+)\.s(\d+)\.json", path.name)
        if m is None:
            continue
        # read() validates the file; the table reads the plain dump
        groups.setdefault(m.group(1), []).append(read(path).model_dump())
    return sorted(groups.items())


if __name__ == "__main__":
    main()
