"""A sampled comparison end to end on the embedded engine: `servediff run --temperature 0.7
--samples k` for stock twice and tuned once on MMLU, then `servediff compare`: the Summary says
whether per-request seeds reproduced, and the sampled block gives pass rates and paired Δ."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from servediff.cli import main
from servediff.compare.divergence import first_difference
from tests.test_report_consistency import check

K, ITEMS = 3, 8


def run(out: Path, config: str, repeat: int = 1, *extra: str) -> None:
    args = ["run", "--engine", "llamacpp", "--config", config, "--suite", "mmlu", "--limit", str(ITEMS)]
    args += ["--temperature", "0.7", "--samples", str(K), "--threads", "1", "--no-progress"]
    assert main([*args, "--repeat", str(repeat), "--out", str(out), *extra]) == 0


def test_sampled_comparison(tmp_path: Path) -> None:
    paths = [tmp_path / "s1.jsonl", tmp_path / "s2.jsonl", tmp_path / "t.jsonl"]
    run(paths[0], "stock")
    run(paths[1], "stock", 2)
    run(paths[2], "tuned")
    md = tmp_path / "r.md"
    assert main(["compare", *map(str, paths), "--md", str(md)]) == 0
    text = md.read_text()
    n = K * ITEMS
    assert f"Control `stock` (mmlu): per-request seeds reproduce: **{n}/{n}** samples identical" in text
    assert "## Sampled generation: pass rates over draws" in text
    shown = text.replace("\\_", "_")  # Markdown escapes the underscore of top_p in prose
    assert "temperature 0.7, seed 42 (each draw's own seed derived from it), top_p 1.0, top_k none" in shown
    summary = check(paths)  # every sampled number reads the same in summary.json, Markdown, HTML
    rates = summary["sampled"]["rates"]
    assert [(r["label"], r["k"], r["draws"], r["pass_rate"]["n"]) for r in rates] == [
        ("stock", K, n, ITEMS),
        ("stock", K, n, ITEMS),
        ("tuned", K, n, ITEMS),
    ]
    # the pass rate is the mean over items of each item's share of right draws, from the record
    lines = [json.loads(x) for x in paths[0].read_text().splitlines()[1:]]
    per_item: dict[str, list[bool]] = {}
    for x in lines:
        per_item.setdefault(x["metadata"]["item"], []).append(x["correct"])
    direct = sum(sum(v) / len(v) for v in per_item.values()) / len(per_item)
    assert rates[0]["pass_rate"]["mean"] == direct
    control, pair = summary["sampled"]["pairs"]
    assert control["kind"] == "control" and control["identical"] == control["compared"] == n
    assert control["delta"]["mean"] == 0 and pair["kind"] == "pair" and pair["same_seeds"]
    # where coupled draws first differ: the control never; the pair at the first differing token id
    counts = ("compared", "positions", "unknown", "diverged")
    assert {k: control["first"][k] for k in counts} == {
        "compared": n,
        "positions": [],
        "unknown": 0,
        "diverged": 0,
    }
    a, b = ({x["id"]: x["token_ids"] for x in records(p)} for p in (paths[0], paths[2]))
    firsts = sorted(first_difference(a[i], b[i]) for i in a if a[i] != b[i])
    assert {k: pair["first"][k] for k in counts} == {
        "compared": n,
        "positions": firsts,
        "unknown": 0,
        "diverged": len(firsts),
    }
    # the within-t shares the report shows are in the summary, computed from the same positions
    assert pair["first"]["within"] == [[t, sum(p < t for p in firsts) / n] for t in (1, 10, 50)]
    # a sampled divergence is a draw, not a greedy flip: no near-tie/rank-change/unexplained class
    diverged = re.findall(r"\*\*(\d+) divergence\(s\):\*\* (.*)", text)
    assert diverged and all(
        rest.startswith(f"{n} sampled draw (sampled runs: a draw, not an argmax") for n, rest in diverged
    ), diverged
    assert pair["sizing"]["margin"] == 0.01 and [d["k"] for d in pair["sizing"]["sizes"]] == [1, 3, 4, 8, 16]


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()[1:]]


def test_samples_without_temperature_is_a_usage_error(tmp_path: Path) -> None:
    args = ["run", "--engine", "llamacpp", "--suite", "prompts", "--samples", "4"]
    assert main([*args, "--out", str(tmp_path / "x.jsonl")]) == 2
    assert not (tmp_path / "x.jsonl").exists()
