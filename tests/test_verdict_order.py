"""A verdict's numbers do not depend on the order the records are given in.

The verdict pools a configuration's suites, and the seeded bootstrap resamples the pooled items in
order: an experiment lists its runs in the order it made them (prompts before mmlu in the demo),
`servediff compare` in the order of its arguments (sorted paths: mmlu first). Both must give the
same interval, so a study's report can be re-made from its committed records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servediff.compare.loader import load
from servediff.report import render
from servediff.report.assembly import build

DEMO = Path(__file__).resolve().parent / "data" / "reference" / "demo"


def verdicts(files: list[Path]) -> list[dict[str, Any]]:
    s, options = load(files)
    out: list[dict[str, Any]] = render.summary(build(s, options))["verdicts"]
    return out


def test_the_suites_order_changes_no_verdict_number() -> None:
    runs = sorted((DEMO / "runs").glob("*/*.jsonl"))
    probes = sorted((DEMO / "probes").glob("*.jsonl"))
    as_made = sorted(runs, key=lambda p: (p.parent.name, not p.name.startswith("prompts"), p.name))
    assert [p.name.split(".")[0] for p in as_made[:4]] == ["prompts", "prompts", "mmlu", "mmlu"]
    first, second = verdicts(runs + probes), verdicts(as_made + probes)
    stock = next(v for v in first if v["label"] == "stock")
    assert stock["tokens_per_s"] is not None  # the pooled rate with its interval is compared below
    assert [v["label"] for v in first] == [v["label"] for v in second]
    for a, b in zip(first, second):
        assert (a["tokens_per_s"], a["speedup"]) == (b["tokens_per_s"], b["speedup"]), a["label"]
