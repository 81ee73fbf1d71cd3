"""Teacher-forced scoring runs against a server: the HTTP twin of ``LlamaCppEngine.score``.

    servediff run --engine http --base-url http://127.0.0.1:8000 --score texts.txt \\
        --score-api llama-cpp-python --bos-text '<|im_start|>' --label server --out b.jsonl

Each text item is sent as the model's BOS text followed by the text; the server's tokenizer
gives the token ids, its prompt logprobs give, at every position after the first scored one, the
top-k and the logprob of the text's own next token (``score_api.py`` reads each server's answer).
The record has the embedded path's shape: top-k texts and logprobs per position, their ids under
``metadata.engine.top_ids``, the number of context tokens before the scored ones under
``metadata.engine.context_tokens`` (so ``compare/kl_runs`` pairs the positions both scored).

Over llama-cpp-python's server the text's first token is not scored (its echo returns null
there), so a pair with the embedded engine compares positions 2.. of each text. On-policy corpora
(a record's completions after its chat prompt) are scored over vLLM only: the server renders the
chat prompt into token ids (``/tokenize`` with messages, as it did for generation), the recorded
completion ids follow, and only those are scored. Elsewhere the prompt's token ids are not in the
record, and a server would tokenize the rendered text its own way.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servediff.engines import Closing, EngineError, OnDone
from servediff.engines.openai_http import HTTPEngine, HTTPOptions
from servediff.engines.score_api import (
    APIS,
    Position,
    ScoreShapeError,
    llamacpp_positions,
    llamacpp_request,
    sglang_positions,
    sglang_request,
    vllm_positions,
    vllm_request,
)
from servediff.types import Completion, Sample, SamplingParams, TokenLogprob


@dataclass(frozen=True, slots=True)
class ScoreOptions:
    """Which server API scores, and the text of the model's BOS token put before each text (the
    embedded engine puts the BOS id first; a server that takes text needs its text)."""

    api: str = "llama-cpp-python"
    bos_text: str = ""

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise ValueError(f"score API {self.api!r}: one of {', '.join(APIS)}")


class HTTPScorer(Closing):
    """Scores fixed texts on a server, one request per item (concurrency 1: a scoring pass is
    one batch of the whole sequence, and a fixed batch keeps the control clean)."""

    kind = "http"

    def __init__(
        self,
        options: HTTPOptions,
        score: ScoreOptions,
        label: str = "",
        annotations: Mapping[str, Any] | None = None,
        server_version: str | None = None,
    ) -> None:
        # The generation engine finds the model and the server's version; we reuse its identity.
        self._http = HTTPEngine(options, label=label, annotations=annotations, server_version=server_version)
        self.options = options
        self.score = score
        self.base_url = self._http.base_url
        self._ids: dict[str, int | None] = {}  # token text → id (llama-cpp-python's top-k)

    def identity(self) -> dict[str, Any]:
        return self._http.identity() | {
            "mode": "score",
            "score_api": self.score.api,
            "bos_text": self.score.bos_text,
        }

    def generate(self, samples: Sequence[Sample], params: SamplingParams, on_done: OnDone) -> None:
        if self.score.api != "vllm" and any("continuation_ids" in s.metadata for s in samples):
            raise EngineError(
                "on-policy corpora are scored by the embedded engine or a vLLM server only: the "
                "record holds no token ids of the prompts, and this server would tokenize the "
                "rendered text its own way"
            )
        k = max(params.top_logprobs, 1)
        for sample in samples:
            t0 = time.perf_counter()
            try:
                completion = self._scored(sample, k)
            except (ScoreShapeError, OSError, ValueError, KeyError, TypeError) as exc:
                completion = Completion(item_id=sample.id, error=f"{type(exc).__name__}: {exc}")
            completion.latency_s = time.perf_counter() - t0
            on_done(completion)

    def _scored(self, sample: Sample, k: int) -> Completion:
        if "continuation_ids" in sample.metadata:
            return self._on_policy(sample, k)
        text = sample.prompt or ""
        sent = self.score.bos_text + text
        model = self._http.model
        if self.score.api == "llama-cpp-python":
            ids = self._tokenize(sent)
            raw = self._post("/v1/completions", llamacpp_request(model, sent, k))
            context = 2  # BOS, and the text's first token (null in the echo)
            positions = llamacpp_positions(raw, ids, text, k, lambda t: self._id_of(t, ids[0]))
        elif self.score.api == "vllm":
            ids = self._tokenize(sent)
            context = 1
            positions = vllm_positions(self._post("/v1/completions", vllm_request(model, ids, k)), ids, k)
        else:
            ids, positions = sglang_positions(self._post("/generate", sglang_request(sent, k)), k)
            context = 1
        if not positions:
            raise ScoreShapeError("nothing to score: the text has no token after the first")
        return _completion(sample.id, text, positions, context)

    def _on_policy(self, sample: Sample, k: int) -> Completion:
        """A recorded completion scored after the prompt as vLLM renders it: the prompt's ids
        are the context, the completion's recorded ids the scored tokens."""
        if sample.messages is not None:
            context = self._http.chat_ids(sample.messages, {})
        else:
            context = self._tokenize(sample.prompt or "")
        scored = [int(t) for t in sample.metadata["continuation_ids"]]
        ids = context + scored
        raw = self._post("/v1/completions", vllm_request(self._http.model, ids, k))
        positions = vllm_positions(raw, ids, k)[max(len(context), 1) - 1 :]
        if not positions:
            raise ScoreShapeError("nothing to score: the record's completion has no tokens")
        return _completion(sample.id, "".join(p.token for p in positions), positions, len(context))

    def _tokenize(self, text: str) -> list[int]:
        if self.score.api == "llama-cpp-python":
            out = self._post("/extras/tokenize", {"input": text})
        else:  # vLLM
            out = self._post(
                "/tokenize", {"model": self._http.model, "prompt": text, "add_special_tokens": True}
            )
        tokens = out.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ScoreShapeError(f"the tokenizer answered {json.dumps(out)[:200]}")
        return tokens

    def _id_of(self, token_text: str, bos: int) -> int | None:
        """The id of a top-k token text: the server's tokenization of it when that is one token
        (after a BOS its tokenizer adds), else None (the entry joins the tail bucket)."""
        if token_text not in self._ids:
            ids = self._tokenize(token_text) if token_text else []
            if len(ids) == 2 and ids[0] == bos:
                ids = ids[1:]
            self._ids[token_text] = ids[0] if len(ids) == 1 else None
        return self._ids[token_text]

    def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.options.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        req = urllib.request.Request(
            f"{self.base_url}{path}", data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=self.options.timeout_s) as resp:
                out = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise ValueError(f"{path}: HTTP {exc.code}: {exc.read()[:300].decode(errors='replace')}") from exc
        if not isinstance(out, dict):
            raise ScoreShapeError(f"{path}: the answer is not a JSON object")
        return out

    def close(self) -> None:
        self._http.close()


def _completion(item_id: str, text: str, positions: Sequence[Position], context: int) -> Completion:
    return Completion(
        item_id=item_id,
        text=text,
        finish_reason="scored",
        n_tokens=len(positions),
        token_ids=[p.token_id for p in positions],
        tokens=[p.token for p in positions],
        logprobs=[TokenLogprob(p.token, p.logprob, p.top, p.token_id) for p in positions],
        token_source="engine",
        engine_meta={"context_tokens": context, "top_ids": [list(p.top_ids) for p in positions]},
    )
