"""The embedded llama.cpp engine: deterministic within a configuration, knobs change the path."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from servediff.engines.knobs import CONFIGS, LlamaKnobs, load_config_file, resolve_config
from servediff.engines.llamacpp import LlamaCppEngine
from servediff.suites import SuiteOptions, load_suite
from servediff.types import Completion, SamplingParams

SUITE = load_suite("prompts", SuiteOptions(limit=3))


def generate(knobs: LlamaKnobs, max_tokens: int = 40, k: int = 0) -> dict[str, Completion]:
    engine = LlamaCppEngine(knobs, label="t")
    out: list[Completion] = []
    engine.generate(SUITE.samples, SamplingParams(max_tokens=max_tokens, top_logprobs=k), out.append)
    engine.close()
    return {c.item_id: c for c in out}


@pytest.fixture(scope="module")
def stock() -> Iterator[dict[str, Completion]]:
    yield generate(CONFIGS["stock"], k=5)


def test_stock_twice_is_identical(stock: dict[str, Completion]) -> None:
    again = generate(CONFIGS["stock"])
    assert {k: c.text for k, c in stock.items()} == {k: c.text for k, c in again.items()}
    assert all(c.error is None and c.token_source == "engine" for c in stock.values())


def test_logprobs_are_the_logits_that_chose_each_token(stock: dict[str, Completion]) -> None:
    for c in stock.values():
        assert c.logprobs is not None and c.token_ids is not None
        assert len(c.logprobs) == len(c.token_ids) == c.n_tokens
        for lp in c.logprobs:
            assert len(lp.top) == 5
            # greedy: the chosen token is the top-1 and its logprob is the top logprob
            assert lp.top[0][1] == lp.logprob and lp.logprob <= 0
            assert [v for _, v in lp.top] == sorted((v for _, v in lp.top), reverse=True)


def test_a_knob_changes_the_computation(stock: dict[str, Completion]) -> None:
    # n_batch=1 evaluates the prompt one token at a time: another reduction order.
    other = generate(LlamaKnobs(n_batch=1, n_ubatch=1), k=5)
    first = {k: c.logprobs[0].logprob for k, c in stock.items() if c.logprobs}
    second = {k: c.logprobs[0].logprob for k, c in other.items() if c.logprobs}
    assert first != second


def test_config_file_and_errors(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "c.toml"  # type: ignore[operator]
    path.write_text('[configs.tiny]\nn_batch = 8\nkv_cache_type = "q8_0"\n')
    assert load_config_file(path)["tiny"] == LlamaKnobs(n_batch=8, kv_cache_type="q8_0")
    assert resolve_config("tiny", path).n_batch == 8
    path.write_text("[configs.bad]\nflash = true\n")
    with pytest.raises(ValueError, match="unknown knob"):
        load_config_file(path)
    with pytest.raises(ValueError, match="unknown configuration"):
        resolve_config("nope")


def test_prompt_lookup_with_a_prompt_longer_than_n_batch() -> None:
    # llama-cpp-python sizes its all-positions logits buffer from logits_all, not from the draft
    # model that forces it on: a prompt longer than n_batch used to overflow it.
    out = generate(LlamaKnobs(prompt_lookup=4, n_batch=16, n_ubatch=16), max_tokens=8, k=2)
    assert all(c.error is None and c.n_tokens for c in out.values()), [c.error for c in out.values()]
