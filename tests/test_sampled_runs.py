"""Sampled runs on the embedded engine: a draw's seed fixes its text, another seed changes it,
and a run's record holds one line per (item, draw) that resumes and retries like any other."""

from __future__ import annotations

from pathlib import Path

from servediff.engines.knobs import LlamaKnobs
from servediff.engines.llamacpp import LlamaCppEngine
from servediff.records import read_run
from servediff.runner import RunPlan, execute
from servediff.suites import SuiteOptions, load_suite
from servediff.suites.draws import draw_seed, expand
from servediff.types import Completion, SamplingParams

SUITE = load_suite("prompts", SuiteOptions(limit=2))
SAMPLED = SamplingParams(temperature=0.7, seed=7, samples=3, max_tokens=16)


def texts(params: SamplingParams) -> dict[str, str]:
    engine = LlamaCppEngine(LlamaKnobs(threads=1), label="t")
    out: list[Completion] = []
    try:
        engine.generate(expand(SUITE, params).samples, params, out.append)
    finally:
        engine.close()
    assert all(c.error is None for c in out)
    return {c.item_id: c.text for c in out}


def test_draw_seeds_are_fixed_by_base_item_and_index() -> None:
    assert draw_seed(7, "a", 0) == draw_seed(7, "a", 0)
    seeds = {draw_seed(b, i, s) for b in (7, 8) for i in ("a", "b") for s in range(4)}
    assert len(seeds) == 16 and all(0 <= x < 2**31 for x in seeds)
    drawn = expand(SUITE, SAMPLED).samples
    assert [d.id for d in drawn[:3]] == [f"{SUITE.samples[0].id}#{s}" for s in range(3)]
    assert drawn[1].metadata["item"] == SUITE.samples[0].id and drawn[1].metadata["sample"] == 1
    assert drawn[1].seed == drawn[1].metadata["seed"] == draw_seed(7, SUITE.samples[0].id, 1)
    assert expand(SUITE, SamplingParams()) is SUITE  # greedy runs are untouched


def test_same_seeds_reproduce_and_other_seeds_differ() -> None:
    first = texts(SAMPLED)
    # the same draws in another order: each request's text depends on its own seed only
    engine = LlamaCppEngine(LlamaKnobs(threads=1), label="t")
    out: list[Completion] = []
    engine.generate(tuple(reversed(expand(SUITE, SAMPLED).samples)), SAMPLED, out.append)
    engine.close()
    assert {c.item_id: c.text for c in out} == first
    other = texts(SamplingParams(temperature=0.7, seed=8, samples=3, max_tokens=16))
    assert sum(first[k] != other[k] for k in first) >= 4  # of 6 draws
    # and draws of one item differ from each other
    assert len({first[f"{SUITE.samples[0].id}#{s}"] for s in range(3)}) > 1


def test_a_sampled_record_has_one_line_per_draw(tmp_path: Path) -> None:
    engine = LlamaCppEngine(LlamaKnobs(threads=1), label="t")
    plan = RunPlan(SUITE, "t", tmp_path / "a.jsonl", SAMPLED)
    try:
        first = execute(plan, engine, progress=False, only=frozenset({f"{SUITE.samples[0].id}#0"}))
        rest = execute(plan, engine, progress=False)
    finally:
        engine.close()
    assert (first.done, rest.skipped, rest.done) == (1, 1, 5)
    run = read_run(plan.out)
    assert run.header.sampling.samples == 3 and run.header.sampling.temperature == 0.7
    assert len(run.header.suite.item_ids) == 6 == len(run.done_ids())
