"""The letter log-likelihood rule (suites/mmlu_letter.py) on first-token top-20s recorded by real
engines (tests/data/mmlu_letter/top20.jsonl, made by scripts/make_letter_fixtures.py): SmolLM2
through the chat template and as raw completions, and Qwen2.5-Coder baseline runs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from servediff.engines.sse import chat_logprobs
from servediff.engines.wire import ChatLogprobs
from servediff.suites import mmlu_letter
from servediff.suites.mmlu_letter import choose, letter_logprobs
from servediff.types import Completion, Sample, TokenLogprob

FIXTURE = Path(__file__).resolve().parent / "data" / "mmlu_letter" / "top20.jsonl"
ROWS: list[dict[str, Any]] = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]


def _top(row: dict[str, Any]) -> tuple[tuple[str, float], ...]:
    return tuple((str(t), float(v)) for t, v in row["top"])


def _position(row: dict[str, Any], top: tuple[tuple[str, float], ...] | None = None) -> list[TokenLogprob]:
    return [TokenLogprob(row["token"], row["logprob"], _top(row) if top is None else top)]


def test_the_fixture_covers_the_shapes_the_rule_must_handle() -> None:
    sources = {r["source"] for r in ROWS}
    assert any("SmolLM2" in s and "chat" in s for s in sources)
    assert any("raw completion" in s for s in sources)
    assert any("qwen2.5-coder" in s for s in sources)
    # both spellings of a letter in one top-20; tokens of several letters ("AB")
    assert any(_spelled_both_ways(r) for r in ROWS)
    assert any(any(len(t.strip()) > 1 and set(t.strip()) <= set("ABCD") for t, _ in _top(r)) for r in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['source'].split(',')[0]}:{r['id']}")
def test_a_greedy_letter_is_the_chosen_letter_unless_its_variants_outweigh_it(row: dict[str, Any]) -> None:
    scores = letter_logprobs(_top(row))
    answer = choose(_position(row))
    if answer is None:  # no letter listed at all (tested below)
        assert max(scores.values()) == -math.inf
        return
    assert scores[answer] == max(scores.values())
    greedy = row["token"].strip()
    if greedy in "ABCD" and greedy:
        # The engine's argmax over the vocabulary is a letter: only the other spelling of
        # another letter, summed with its own, can outweigh it.
        single = {x: max((v for t, v in _top(row) if t.strip() == x), default=-math.inf) for x in "ABCD"}
        assert answer == greedy or scores[answer] > single[greedy] >= single[answer]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['source'].split(',')[0]}:{r['id']}")
def test_variants_merge_by_log_sum_exp_and_only_single_letters_count(row: dict[str, Any]) -> None:
    scores = letter_logprobs(_top(row))
    for letter in "ABCD":
        variants = [v for t, v in _top(row) if t.strip() == letter]
        expected = math.log(sum(math.exp(v) for v in variants)) if variants else -math.inf
        assert scores[letter] == pytest.approx(expected, abs=1e-12)
    # multi-letter tokens ("AB") and lowercase letters are other answers: dropping them changes nothing
    kept = tuple((t, v) for t, v in _top(row) if t.strip() in ("A", "B", "C", "D"))
    assert letter_logprobs(kept) == scores


def _spelled_both_ways(row: dict[str, Any]) -> str | None:
    tokens = {t for t, _ in _top(row)}
    return next((x for x in "ABCD" if {x, f" {x}"} <= tokens), None)


def test_both_spellings_of_a_letter_add_up() -> None:
    rows = [(r, x) for r in ROWS if (x := _spelled_both_ways(r))]
    assert rows
    for row, x in rows:
        top = dict(_top(row))
        merged = letter_logprobs(_top(row))[x]
        assert merged == pytest.approx(math.log(math.exp(top[x]) + math.exp(top[f" {x}"])))
        assert merged > max(top[x], top[f" {x}"])


def test_a_top_20_without_a_letter_is_no_answer() -> None:
    # recorded: the 1.5B about to reason ("To", "Let", "1", "**", …) with no letter in its top-20
    rows = [r for r in ROWS if not any(t.strip() in ("A", "B", "C", "D") for t, _ in _top(r))]
    assert rows
    for row in rows:
        assert all(v == -math.inf for v in letter_logprobs(_top(row)).values())
        assert choose(_position(row)) is None


def test_a_letter_outside_the_top_k_is_minus_infinity_and_no_letter_is_no_answer() -> None:
    row = ROWS[0]
    top = _top(row)
    # what a server returns for a smaller top-k: the same list, cut
    letters_at = [i for i, (t, _) in enumerate(top) if t.strip() in ("A", "B", "C", "D")]
    cut = top[: letters_at[0] + 1]
    scores = letter_logprobs(cut)
    assert sum(math.isfinite(v) for v in scores.values()) == 1
    assert choose(_position(row, cut)) == cut[-1][0].strip()
    without = tuple((t, v) for t, v in top if t.strip() not in ("A", "B", "C", "D"))
    assert all(v == -math.inf for v in letter_logprobs(without).values())
    assert choose(_position(row, without)) is None
    assert choose([]) is None and choose(None) is None


def test_scored_items_record_no_answer_as_wrong() -> None:
    row = ROWS[0]
    sample = Sample(id=row["id"], prompt="x", target="A")
    none = mmlu_letter.score(sample, Completion(item_id=row["id"], logprobs=[]))
    assert none.answer is None and not none.correct
    chosen = mmlu_letter.score(sample, Completion(item_id=row["id"], logprobs=_position(row)))
    assert chosen.answer == choose(_position(row)) and chosen.correct == (chosen.answer == "A")


def test_a_vllm_response_of_the_same_top_20_gives_the_same_letter() -> None:
    """vLLM's chat logprobs (vllm/entrypoints/openai/protocol.py: ChatCompletionLogProbsContent =
    token, logprob, bytes, top_logprobs[ChatCompletionLogProb]; −inf written as −9999.0) carrying a
    recorded top-20, read by the HTTP engine's parser."""
    for row in ROWS:
        entries = [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in _top(row)]
        body = {"content": [{**entries[0], "top_logprobs": entries}]}
        parsed = chat_logprobs(ChatLogprobs.model_validate(body))
        assert choose(parsed) == choose(_position(row))
    floor = [{"token": "A", "logprob": -9999.0}, {"token": "The", "logprob": -0.01}]
    parsed = chat_logprobs(ChatLogprobs.model_validate({"content": [{**floor[1], "top_logprobs": floor}]}))
    assert choose(parsed) is None  # vLLM's −9999.0 is −inf, not a letter the model chose
