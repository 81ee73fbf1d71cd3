"""A verdict's numbers do not depend on the order the records are given in.

The verdict pools a configuration's suites, and the seeded bootstrap resamples the pooled items in
order: an experiment lists its runs in the order it made them (prompts before mmlu in the demo),
`servediff compare` in the order of its arguments (sorted paths: mmlu first). Both must give the
same interval, so a study's report can be re-made from its committed records.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.reference import ReferenceStudy, summary_of

DEMO = "tests/data/reference/demo"


def suites(study: ReferenceStudy, scratch: Path) -> list[str]:
    """The suites of the study's runs, in the order its files are read."""
    return [p.name.split(".")[0] for p in study.files(scratch) if p.parent.parent.name == "runs"]


def test_the_suites_order_changes_no_verdict_number(tmp_path: Path) -> None:
    by_path = ReferenceStudy("demo", DEMO, ("runs/*/*.jsonl", "probes/*.jsonl"))
    made = ("prompts", "mmlu")  # the experiment's suite order
    as_made = ReferenceStudy(
        "demo",
        DEMO,
        (*(f"runs/{c}*/{s}.*" for c in ("stock", "tuned") for s in made), "probes/*"),
        ordered=True,
    )
    assert suites(by_path, tmp_path)[:4] == ["mmlu", "mmlu", "prompts", "prompts"]
    assert suites(as_made, tmp_path)[:4] == ["prompts", "prompts", "mmlu", "mmlu"]
    first = summary_of(by_path, tmp_path)["verdicts"]
    second = summary_of(as_made, tmp_path)["verdicts"]
    stock = next(v for v in first if v["label"] == "stock")
    assert stock["tokens_per_s"] is not None  # the pooled rate with its interval is compared below
    assert [v["label"] for v in first] == [v["label"] for v in second]
    for a, b in zip(first, second):
        assert (a["tokens_per_s"], a["speedup"]) == (b["tokens_per_s"], b["speedup"]), a["label"]
