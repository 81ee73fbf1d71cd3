"""MMLU scored by letter log-likelihood: the standard way to score multiple choice (Hendrycks et
al. 2021; lm-evaluation-harness's ``mmlu`` task), for models that do not reply with a bare letter.

    servediff run --suite mmlu-letter --limit 400 --model-path qwen2.5-coder-0.5b --out mmlu-letter.jsonl

The same zero-shot chat prompt as ``mmlu``; the engine generates ONE token and records the top-20
logprobs at it, and the answer is the letter among A–D with the highest log-probability there.
Why: a generated reply is only scored when the model names a letter within the token cap; a coder
model at a 16-token cap starts reasoning ("To determine …") or leans on one letter, and scores at
chance (docs/studies/qwen-cpu.md). The log-likelihood asks what the model believes, whatever it would
have written.

The rule (``letter_logprobs``, ``choose``):

- A token counts for a letter when its text, stripped of whitespace, is exactly that capital
  letter: ``"A"`` and ``" A"`` (and ``"\\nA"``) are variants of A; ``"a"``, ``"(A"`` and ``"A."``
  are not (a lowercase "a" is usually the article).
- Variants are merged by log-sum-exp: they are different tokens, so mutually exclusive ways for
  the reply to begin with that letter, and the letter's probability is their sum. lm-eval scores
  one fixed continuation (" A" after "Answer:") on a raw prompt; under a chat template the reply
  begins a new turn and its first token is usually the bare "A", so fixing one variant would make
  the score depend on the template. Summing never lowers a letter against the single-variant
  rule, and equals it whenever only one variant is in the top-k.
- A letter with no variant in the top-k has log-probability −inf; when none of A–D is in the
  top-k, there is no answer (scored wrong and counted, as a generated reply with no letter is).
  vLLM writes −inf as −9999.0 (``ChatCompletionLogProb.logprob``'s default and floor in
  vllm/entrypoints/openai/protocol.py), so a logprob at or below that counts as absent too.
- An exact tie goes to the earlier letter (argmax order, as lm-eval's).
- A reply whose first token ends it (empty text) records no top-k: no answer. A reply with text
  but no logprobs is the engine ignoring the request: the runner records it as an error, never
  a wrong answer.

The top-k is the engine's own (embedded llama.cpp reads it from the logits that chose the token;
an OpenAI-compatible server returns ``top_logprobs``), so the score works on every engine that
records top logprobs. The record keeps the top-k, so every letter's log-probability can be
recomputed from it. The suite is its own name and version: a record of ``mmlu-letter`` never
pairs with one of ``mmlu`` (generated and scored by extraction), and the report names the scoring.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

from servediff.suites import mmlu
from servediff.suites.base import Score, Suite
from servediff.types import Completion, Sample, TokenLogprob

NAME = "mmlu-letter"
VERSION = "1"
MAX_TOKENS = 1  # only the first token's distribution is read
TOP_LOGPROBS = 20  # the most OpenAI-compatible servers return per position
ABSENT = -9999.0  # vLLM's stand-in for a logprob of −inf
SCORING = (
    f"letter log-likelihood: the highest of A–D among the first token's top-{TOP_LOGPROBS} "
    "logprobs (' A' and 'A' merged by log-sum-exp; none of A–D listed: no answer)"
)


def letter_logprobs(top: Sequence[tuple[str, float]]) -> dict[str, float]:
    """Each letter's log-probability from one position's top-k (−inf where it is not listed)."""
    out: dict[str, float] = {}
    for letter in mmlu.LETTERS:
        found = [lp for token, lp in top if token.strip() == letter and lp > ABSENT]  # NaN fails too
        out[letter] = _logsumexp(found)
    return out


def _logsumexp(values: Sequence[float]) -> float:
    if not values:
        return -math.inf
    m = max(values)
    return m + math.log(sum(math.exp(v - m) for v in values))


def choose(logprobs: Sequence[TokenLogprob] | None) -> str | None:
    """The letter with the highest log-probability at the first generated position, or None."""
    if not logprobs:
        return None
    scores = letter_logprobs(logprobs[0].top)
    best = max(mmlu.LETTERS, key=lambda letter: scores[letter])  # max keeps the first of a tie
    return best if math.isfinite(scores[best]) else None


def score(sample: Sample, completion: Completion) -> Score:
    gold = sample.target or ""
    answer = choose(completion.logprobs)
    return Score(answer=answer, gold=gold, correct=answer == gold)


def letter_suite(suite: Suite) -> Suite:
    """The ``mmlu`` suite's items (same prompts, same ids), scored by letter log-likelihood."""
    return dataclasses.replace(
        suite,
        name=NAME,
        version=VERSION,
        scorer=score,
        max_tokens=MAX_TOKENS,
        top_logprobs=TOP_LOGPROBS,
        scoring=SCORING,
    )


def load(path: Path | None = None, limit: int | None = None, seed: int = 0) -> Suite:
    """As ``mmlu.load`` (the same subject-stratified ``limit``), scored by letter log-likelihood."""
    return letter_suite(mmlu.load(path, limit, seed))
