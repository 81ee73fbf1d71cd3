"""The built-in embedded experiment (the demo's study): runs, reports, and resumes in-process."""

from __future__ import annotations

import json
from pathlib import Path

from servediff.experiment import run_experiment
from servediff.experiment.builtin import demo_experiment


def test_builtin_embedded_experiment_runs_and_resumes(tmp_path: Path) -> None:
    exp = demo_experiment(tmp_path / "demo", max_tokens=8, limit=1, mmlu_limit=0)
    first = run_experiment(exp, progress=False)
    # the interleaved runs are made first; the configurations' turn then finds them complete, and
    # they are not "already complete" runs of an earlier invocation
    assert len(first.ran) == 3 and first.skipped == [] and first.errors == 0 and first.flags == []
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert [(c["a"], c["total"]) for c in summary["controls"]] == [("stock", 1)]
    assert [(p["a"], p["b"]) for p in summary["pairs"]] == [("stock", "tuned")]
    # the tuned knobs claim prompt-lookup speculative decoding, which llama-cpp-python cannot confirm
    claims = {(c["label"], c["suite"], c["repeat"], c["claim"]): c for c in summary["claims"]}
    assert claims[("tuned", "prompts", 1, "speculative_decoding")]["status"] == "not verified"
    # one row for tuned's claims that end the same way over the same runs, not one per run and claim
    row = "| `speculative_decoding`, `flash_attention`, `prefix_caching` | not verified |"
    assert (tmp_path / "demo" / "report.md").read_text().count(row) == 1
    page = (tmp_path / "demo" / "report.html").read_text()
    assert "<code>stock</code> vs <code>tuned</code>" in page and "speculative_decoding" in page
    again = run_experiment(exp, progress=False)
    assert again.ran == [] and len(again.skipped) == 3


def test_an_interleaved_run_is_timed_over_its_own_blocks(tmp_path: Path) -> None:
    from servediff.compare import speed as sp
    from servediff.records import read_run

    # Eight prompts in blocks of four, ABBA: stock's two blocks lie either side of both of tuned's.
    exp = demo_experiment(tmp_path / "demo", max_tokens=8, limit=8, mmlu_limit=0)
    run_experiment(exp, progress=False)
    first = read_run(next((tmp_path / "demo" / "runs").glob("stock.*/prompts.*.r1.jsonl")))
    assert len(sp.stretch_starts(first)) == 2
    items = sp.run_items(first, 0)
    gap = float(items.start.max() - items.start.min())
    busy = float(items.latency.sum())
    # Timed from its first request to its last, the run would count tuned's blocks as its own
    # wall time: about half a request in flight. One at a time, over its own stretches, it is 1.
    assert busy / gap < 0.8
    assert items.in_flight is not None and 0.95 <= items.in_flight <= 1.0
