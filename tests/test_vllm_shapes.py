"""What a live vLLM server answers, read by servediff's own parsers.

The files under tests/data/vllm were recorded from vLLM 0.24.0 serving Qwen2.5-Coder-1.5B-Instruct
on a GPU by ``scripts/record_server_fixtures.py`` (``stock-*``: prefix caching off, no speculation;
``ngram-*``: prefix caching and n-gram speculation, whose /metrics carry the speculative-decoding
counters), so CI checks the real shapes without a GPU. Nothing in them is written by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servediff.engines import tokenize
from servediff.engines.openai_http import RETRY_STATUS, next_token, parse_response
from servediff.engines.profiles import (
    NOT_ENGAGED,
    VERIFIED,
    flagged,
    prefix_check,
    speculative_check,
    verify_claims,
    vllm_snapshot,
)
from servediff.engines.run_counters import run_verification
from servediff.engines.score_api import vllm_positions
from servediff.engines.server_sampling import server_profile
from servediff.engines.sse import parse_stream
from servediff.engines.wire import ModelList, parse

DATA = Path(__file__).parent / "data" / "vllm"


def exchange(name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
    return found


def body(name: str) -> Any:
    return json.loads(exchange(name)["body"])


def test_the_recordings_are_vllm_0_24() -> None:
    for prefix in ("stock-", "ngram-"):
        index = json.loads((DATA / f"{prefix}index.json").read_text())
        assert index["engine"] == "vllm" and json.loads(index["version"])["version"] == "0.24.0"


def test_a_vllm_server_is_known_by_its_model_list() -> None:
    models = body("stock-models")
    assert server_profile(models, None) == "vllm"
    assert parse(ModelList, models, "model list").data[0].id == "qwen2.5-coder-1.5b-instruct"


@pytest.mark.parametrize("prefix", ["stock-", "ngram-"])
def test_chat_answers_with_logprobs(prefix: str) -> None:
    recorded = exchange(f"{prefix}chat_logprobs")
    assert recorded["status"] == 200
    c = parse_response("p", recorded["body"].encode(), 0.1)
    assert c.error is None and c.text and c.finish_reason in ("stop", "length")
    assert (
        c.logprobs is not None
        and len(c.logprobs) == c.n_tokens == body(f"{prefix}chat_logprobs")["usage"]["completion_tokens"]
    )
    assert "".join(t.token for t in c.logprobs) == c.text
    assert all(len(t.top) == 5 and t.top[0][1] >= t.top[-1][1] for t in c.logprobs)
    assert c.token_ids is None  # vLLM names no token ids: servediff asks /tokenize after the run


@pytest.mark.parametrize("prefix", ["stock-", "ngram-"])
def test_a_stream_reads_as_the_same_answer(prefix: str) -> None:
    whole = parse_response("p", exchange(f"{prefix}chat_logprobs")["body"].encode(), 0.1)
    streamed = parse_stream("p", exchange(f"{prefix}chat_stream")["body"].encode(), [], 0.0, 0.1)
    assert streamed.error is None
    assert streamed.text == whole.text and streamed.n_tokens == whole.n_tokens
    assert streamed.logprobs is not None and whole.logprobs is not None
    assert [t.token for t in streamed.logprobs] == [t.token for t in whole.logprobs]


def test_text_completions() -> None:
    c = parse_response("p", exchange("stock-completion_logprobs")["body"].encode(), 0.1)
    assert c.error is None and c.text and c.logprobs is not None and len(c.logprobs) == c.n_tokens
    streamed = parse_stream("p", exchange("stock-completion_stream")["body"].encode(), [], 0.0, 0.1)
    assert streamed.text == c.text


def test_tokenize_detokenize_and_the_rendered_chat_prompt() -> None:
    prompt = exchange("stock-tokenize_prompt")["request"]["body"]["prompt"]
    ids = tokenize.token_ids(exchange("stock-tokenize_prompt")["body"].encode(), prompt)
    assert ids and all(isinstance(i, int) for i in ids)
    assert body("stock-detokenize")["prompt"] == prompt  # HTTPEngine.detokenize reads "prompt"
    chat = body("stock-tokenize_messages")["tokens"]
    assert len(chat) > len(ids) and body("stock-tokenize_messages")["count"] == len(chat)


def test_a_probe_over_token_ids() -> None:
    """The answer to a one-token completion whose prompt is token ids: the probe's top-k."""
    result = next_token(body("stock-completion_ids_logprobs"), 5, "test")
    assert len(result.top) == 5 and result.top[0][1] >= result.top[-1][1]
    assert result.top[0][1] <= 0.0


def test_prompt_logprobs_score_every_position() -> None:
    ids = exchange("stock-prompt_logprobs")["request"]["body"]["prompt"]
    positions = vllm_positions(body("stock-prompt_logprobs"), ids, 5)
    assert [p.token_id for p in positions] == ids[1:]
    assert all(p.logprob <= 0.0 and 1 <= len(p.top_ids) <= 6 for p in positions)


def test_metrics_name_the_counters_servediff_reads() -> None:
    """The stock server registers no speculative-decoding counters (a claim of it is "NOT
    CONFIGURED"); the n-gram server does, and its counters moved over the recorder's requests (one
    of them repeats its prompt's text, which n-gram lookup drafts from): verified. The same scrape
    read as its own before and after moved nothing: a claim is then "NOT ENGAGED", flagged."""
    before, after = (vllm_snapshot(exchange(f"stock-metrics_{w}")["body"]) for w in ("before", "after"))
    assert before.spec is None and after.spec is None
    assert speculative_check(before, after, True)["status"] == "NOT CONFIGURED"
    assert before.prefix is not None and after.prefix is not None
    assert after.prefix["queries"] == before.prefix["queries"] == 0  # caching off: never consulted
    assert prefix_check(before, after, True)["status"] == NOT_ENGAGED  # a false claim is flagged
    ngram = [vllm_snapshot(exchange(f"ngram-metrics_{w}")["body"]) for w in ("before", "after")]
    assert ngram[0].spec is not None and ngram[1].spec is not None
    assert sorted(ngram[1].per_position, key=int) == [str(i) for i in range(8)]  # 8 speculative tokens
    checked = speculative_check(ngram[0], ngram[1], True)
    assert checked["status"] == VERIFIED and checked["drafts"] > 0
    assert 0 < checked["accepted_tokens"] <= checked["draft_tokens"]
    v = run_verification("vllm", ["speculative_decoding"], ngram[0], ngram[1], "whole run")
    assert v["flagged"] == [] and v["metrics"] == "read"
    still = run_verification("vllm", ["speculative_decoding"], ngram[1], ngram[1], "whole run")
    assert still["flagged"] == ["speculative_decoding"]
    assert speculative_check(ngram[1], ngram[1], True)["status"] == NOT_ENGAGED
    cached = prefix_check(ngram[0], ngram[1], True)  # the chat template's shared system turn
    assert cached["status"] == VERIFIED and 0 < cached["hit_tokens"] < cached["queried_tokens"]
    # speculation engaged though only caching was claimed: reported too, and not flagged
    checks = verify_claims("vllm", ["prefix_caching"], ngram[0], ngram[1])
    assert set(checks) == {"prefix_caching", "speculative_decoding"} and flagged(checks) == []


@pytest.mark.parametrize(
    "name", ["error_unknown_model", "error_too_long", "error_bad_logprobs", "error_not_json"]
)
def test_errors_are_client_errors_with_a_message(name: str) -> None:
    """Each is a request error, never retried, and its body says why (recorded as the item's error)."""
    recorded = exchange(f"stock-{name}")
    assert 400 <= recorded["status"] < 500 and recorded["status"] not in RETRY_STATUS
    assert recorded["body"]
    with pytest.raises(ValueError):
        parse_response("p", recorded["body"].encode(), 0.1)
