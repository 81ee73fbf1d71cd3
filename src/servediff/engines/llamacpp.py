"""Embedded llama.cpp (llama-cpp-python): the default engine, no server needed.

    servediff run --engine llamacpp --config tuned --suite prompts --out runs/tuned.jsonl

Generation is driven token by token through ``Llama.generate`` (greedy sampler at T=0) so that
we keep the token ids and, when asked, the logprobs of the very logits that chose each token.
Driving it token by token also times each token as it comes (time to first token, inter-token
latency), and llama.cpp's own perf counters (prompt and decode time) are read after each item.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from servediff.engines import Closing, EngineError, OnDone, ProbeResult
from servediff.engines.knobs import LlamaKnobs, default_model_path
from servediff.engines.scored import scored_completion
from servediff.models.cache import known_sha256
from servediff.types import Completion, Sample, SamplingParams, TokenLogprob


def top_logprobs(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and log-softmax values of the k largest logits, best first."""
    row = logits.astype(np.float64, copy=False)
    m = float(row.max())
    lse = m + float(np.log(np.exp(row - m).sum()))
    idx = np.argpartition(-row, k - 1)[:k] if k < row.size else np.arange(row.size)
    idx = idx[np.argsort(-row[idx], kind="stable")]
    return idx, row[idx] - lse


class LlamaCppEngine(Closing):
    """One llama.cpp configuration (a set of knobs) in this process."""

    kind = "llamacpp"

    def __init__(
        self, knobs: LlamaKnobs, model_path: Path | None = None, label: str = "", scoring: bool = False
    ) -> None:
        import llama_cpp
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.knobs = knobs
        self.label = label
        # Scoring reads the logits of every position of a fixed sequence (teacher forcing).
        self.scoring = scoring
        self.model_path = Path(model_path) if model_path else default_model_path()
        if not self.model_path.is_file():
            raise EngineError(f"model file not found: {self.model_path}")
        self._llama_cpp = llama_cpp
        self._llm: Any = self._load(seed=42)
        meta = self._llm.metadata
        template = meta.get("tokenizer.chat_template")
        if not template:
            raise EngineError(f"{self.model_path.name} has no chat template in its metadata")
        vocab = self._llm._model
        self._formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=vocab.token_get_text(vocab.token_eos()),
            bos_token=vocab.token_get_text(vocab.token_bos()),
        )
        self._pieces: dict[int, str] = {}  # token id → its text alone (see _piece)
        self._model_sha = known_sha256(self.model_path)  # a fetched model's marker spares a re-read
        self._vocab_sha = vocab_sha256(self._llm)

    def _load(self, seed: int) -> Any:
        k = self.knobs
        draft = None
        if k.prompt_lookup:
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            draft = LlamaPromptLookupDecoding(num_pred_tokens=k.prompt_lookup)
        # A quantised V cache needs flash attention in llama.cpp; K alone does not.
        kv = None if k.kv_cache_type == "f16" else self._llama_cpp.GGML_TYPE_Q8_0
        try:
            return self._llama_cpp.Llama(
                model_path=str(self.model_path),
                n_ctx=k.n_ctx,
                n_batch=k.n_batch,
                n_ubatch=k.n_ubatch,
                n_threads=k.resolved_threads,
                n_threads_batch=k.resolved_threads,
                flash_attn=k.flash_attn,
                type_k=kv,
                type_v=kv if k.flash_attn else None,
                draft_model=draft,
                # A draft model makes llama-cpp-python keep logits for every position, but it sizes
                # that buffer from this argument: without it a prompt longer than n_batch overflows.
                logits_all=draft is not None or self.scoring,
                seed=seed,
                verbose=False,
            )
        except (ValueError, RuntimeError) as exc:
            raise EngineError(f"llama.cpp could not load {self.model_path}: {exc}") from exc

    def identity(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "label": self.label,
            "model": self.model_path.name,
            "model_sha256": self._model_sha,
            # Two weight files of one model compare only when their tokenizers are the same.
            "vocab_sha256": self._vocab_sha,
            "server_version": f"llama-cpp-python {self._llama_cpp.__version__}",
            "knobs": self.knobs.as_dict(),
            # A scoring run is a different run from a generation run of the same knobs.
            **({"mode": "score"} if self.scoring else {}),
        }

    def prompt_tokens(self, sample: Sample) -> list[int]:
        """Token ids of the rendered prompt, exactly as the chat completion path builds them."""
        if sample.messages is not None:
            rendered = self._formatter(messages=list(sample.messages))  # type: ignore[arg-type]
            text, add_bos = rendered.prompt, not rendered.added_special
        else:
            text, add_bos = sample.prompt or "", True
        tokens: list[int] = self._llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)
        return tokens

    def generate(self, samples: Sequence[Sample], params: SamplingParams, on_done: OnDone) -> None:
        if self.scoring:  # an engine built for scoring scores its items instead of generating
            self.score(samples, params, on_done)
            return
        for sample in samples:
            # Every request starts its sampler from its own seed (a sampled run's draw seed), so a
            # sample does not depend on which requests came before it in this process.
            self._llm.set_seed(params.seed_for(sample))
            t0 = time.perf_counter()
            try:
                completion = self._one(sample, params)
            except Exception as exc:  # a failed item is recorded, the run goes on
                completion = Completion(item_id=sample.id, error=f"{type(exc).__name__}: {exc}")
            completion.latency_s = time.perf_counter() - t0
            on_done(completion)

    def _one(self, sample: Sample, params: SamplingParams) -> Completion:
        llm = self._llm
        prompt = self.prompt_tokens(sample)
        if len(prompt) + params.max_tokens > llm.n_ctx():
            raise ValueError(f"prompt ({len(prompt)}) + max_tokens exceeds n_ctx {llm.n_ctx()}")
        if not self.knobs.prefix_cache:
            llm.reset()  # stock: every request starts from an empty KV cache
        self._llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
        started = time.perf_counter()
        stamps: list[float] = []
        cached = _reused_prefix(list(llm._input_ids), prompt)
        ids: list[int] = []
        pieces: list[bytes] = []
        lps: list[TokenLogprob] | None = [] if params.logprobs else None
        stop_lp: TokenLogprob | None = None
        finish = "length"
        gen = llm.generate(
            prompt,
            temp=params.temperature,
            top_k=params.top_k,
            top_p=params.top_p,
            min_p=params.min_p,
            repeat_penalty=params.repeat_penalty,
            presence_penalty=params.presence_penalty,
            frequency_penalty=params.frequency_penalty,
        )
        for token in gen:
            if self._llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
                finish = "stop"
                if lps is not None:  # the end token's top-k too: a divergence may be here
                    stop_lp = self._logprob_at(len(prompt) - 1 + len(ids), token, b"", params)
                break
            piece = llm.detokenize([token], prev_tokens=prompt + ids)
            if lps is not None:
                lps.append(self._logprob_at(len(prompt) - 1 + len(ids), token, piece, params))
            ids.append(token)
            pieces.append(piece)
            stamps.append(time.perf_counter())
            if len(ids) >= params.max_tokens:
                break
        gen.close()
        return Completion(
            ttft_s=stamps[0] - started if stamps else None,
            itl_s=(stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else None,
            engine_timings=self._perf(),
            item_id=sample.id,
            text=b"".join(pieces).decode("utf-8", errors="replace"),
            finish_reason=finish,
            n_tokens=len(ids),
            token_ids=ids,
            tokens=[p.decode("utf-8", errors="replace") for p in pieces],
            logprobs=lps,
            stop_logprob=stop_lp,
            token_source="engine",
            # how much of the prompt came from the KV cache: the prefix-cache factor's evidence
            engine_meta={"prompt_tokens": len(prompt), "cached_prompt_tokens": cached},
        )

    def score_tokens(self, sample: Sample) -> tuple[list[int], list[int]]:
        """(context, continuation) of a scoring item: the continuation's tokens are scored.

        An on-policy item carries the control's completion ids (``continuation_ids``) after its
        rendered prompt; a text item is the text itself after the BOS token, every token scored.
        """
        ids = sample.metadata.get("continuation_ids")
        if ids is not None:
            return self.prompt_tokens(sample), [int(t) for t in ids]
        text = (sample.prompt or "").encode("utf-8")
        tokens: list[int] = self._llm.tokenize(text, add_bos=False, special=False)
        return [self._llm.token_bos()], tokens

    def score_matrix(self, context: Sequence[int], continuation: Sequence[int]) -> np.ndarray:
        """Full-vocabulary log-softmax (continuation × vocabulary, float64) predicting each
        continuation token from everything before it, in one teacher-forced pass."""
        if not self.scoring:
            raise EngineError("this llama.cpp engine was built without scoring (logits of every position)")
        llm = self._llm
        n_ctx, n = len(context), len(continuation)
        if not n or n_ctx + n > llm.n_ctx():
            raise ValueError(f"{n_ctx} context + {n} scored tokens: need 1 to n_ctx {llm.n_ctx()} in all")
        llm.reset()
        llm.eval(list(context) + list(continuation))
        rows: np.ndarray = np.array(llm.scores[n_ctx - 1 : n_ctx - 1 + n], dtype=np.float64)
        llm.reset()
        # rows − max − log Σ exp(rows − max), in place: the same operations in the same order as
        # the textbook one-liner (bit for bit), without its three temporaries of rows' size
        # (n × vocabulary float64: 39 MB for 100 positions of SmolLM2) and one of its passes.
        np.subtract(rows, rows.max(axis=1, keepdims=True), out=rows)
        total = np.exp(rows).sum(axis=1, keepdims=True)
        np.subtract(rows, np.log(total, out=total), out=rows)
        return rows

    def score(self, samples: Sequence[Sample], params: SamplingParams, on_done: OnDone) -> None:
        """Teacher-forced scoring: at every continuation position the top-k (k =
        ``params.top_logprobs``) and the logprob of the text's own next token; nothing generated."""
        for sample in samples:
            t0 = time.perf_counter()
            try:
                completion = self._scored(sample, max(params.top_logprobs, 1))
            except Exception as exc:  # a failed item is recorded, the run goes on
                completion = Completion(item_id=sample.id, error=f"{type(exc).__name__}: {exc}")
            completion.latency_s = time.perf_counter() - t0
            on_done(completion)

    def _scored(self, sample: Sample, k: int) -> Completion:
        context, continuation = self.score_tokens(sample)
        logp = self.score_matrix(context, continuation)
        # The top-k of every position at once (one pass over the matrix, not one per row).
        if k < logp.shape[1]:
            idx = np.argpartition(-logp, k - 1, axis=1)[:, :k]
        else:
            idx = np.broadcast_to(np.arange(logp.shape[1]), logp.shape)
        vals = np.take_along_axis(logp, idx, axis=1)
        order = np.argsort(-vals, axis=1, kind="stable")
        top_ids: list[list[int]] = np.take_along_axis(idx, order, axis=1).tolist()
        top_vals: list[list[float]] = np.take_along_axis(vals, order, axis=1).tolist()
        own = logp[np.arange(len(continuation)), list(continuation)].tolist()
        text = bytes(self._llm.detokenize(continuation)).decode("utf-8", errors="replace")
        return scored_completion(
            sample.id, len(context), continuation, own, top_ids, top_vals, self._piece, text
        )

    def _perf(self) -> dict[str, Any]:
        """llama.cpp's own counters for this item (reset before it): time in prompt evaluation
        and in decoding, and how many tokens each evaluated. Sampling and Python are outside."""
        d = self._llama_cpp.llama_perf_context(self._llm._ctx.ctx)
        return {
            "source": "llama_perf_context",
            "prompt_eval_ms": round(d.t_p_eval_ms, 3),
            "prompt_eval_n": d.n_p_eval,
            "eval_ms": round(d.t_eval_ms, 3),
            "eval_n": d.n_eval,
        }

    def _logits_at(self, position: int) -> np.ndarray:
        llm = self._llm
        if llm._logits_all:
            row: np.ndarray = np.asarray(llm.scores[position])
            return row
        # Only the last decoded position has logits; it is the one that was just sampled.
        ptr = self._llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        last: np.ndarray = np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).copy()
        return last

    def _logprob_at(self, position: int, token: int, piece: bytes, p: SamplingParams) -> TokenLogprob:
        idx, vals = top_logprobs(self._logits_at(position), max(p.top_logprobs, 1))
        top = tuple((self._piece(int(i)), float(v)) for i, v in zip(idx, vals))
        chosen = float(vals[0]) if int(idx[0]) == token else self._logprob_of(position, token)
        return TokenLogprob(piece.decode("utf-8", errors="replace"), chosen, top, token)

    def _logprob_of(self, position: int, token: int) -> float:
        row = self._logits_at(position).astype(np.float64)
        m = float(row.max())
        return float(row[token] - m - np.log(np.exp(row - m).sum()))

    def _piece(self, token: int) -> str:
        # Cached: a scoring run names k pieces per position, mostly the same few hundred tokens,
        # and detokenizing each again was 3 % of a scoring run's CPU (bench/scoring.py).
        piece = self._pieces.get(token)
        if piece is None:
            piece = bytes(self._llm.detokenize([token])).decode("utf-8", errors="replace")
            self._pieces[token] = piece
        return piece

    def probe(
        self,
        sample: Sample,
        prefix_ids: Sequence[int] | None,
        prefix_text: str,
        k: int,
        *,
        prefix_pieces: Sequence[str] | None = None,
        chat_kwargs: Mapping[str, Any] | None = None,
    ) -> ProbeResult:
        """Top-k for the token after prompt + prefix, replaying generation's geometry.

        Stock generation evaluates the prompt in n_batch chunks, then one token per step; the
        replay does the same, so for a configuration without speculation the probe reproduces
        the logits of the run itself. With prompt lookup, the run verified drafts in chunks,
        which a replay cannot know, so that probe is step-by-step: an estimate.
        """
        llm = self._llm
        prompt = self.prompt_tokens(sample)
        if prefix_ids is None:
            prefix_ids = list(llm.tokenize(prefix_text.encode("utf-8"), add_bos=False, special=False))
        llm.reset()
        llm.eval(prompt)
        for tok in prefix_ids:
            llm.eval([tok])
        idx, vals = top_logprobs(self._logits_at(llm.n_tokens - 1), k)
        llm.reset()
        method = "embedded replay: prompt in n_batch chunks, then one token per step"
        if self.knobs.prompt_lookup:
            method += " (the run verified speculative drafts in chunks: an estimate)"
        top = tuple((self._piece(int(i)), float(v)) for i, v in zip(idx, vals))
        return ProbeResult(top, method, tuple(int(i) for i in idx))

    def diverging_tokens(
        self, a_ids: Sequence[int] | None, b_ids: Sequence[int] | None, index: int
    ) -> tuple[str | None, str | None] | None:
        return None  # in-process runs record the engine's own token texts

    def close(self) -> None:
        self._llm.close() if hasattr(self._llm, "close") else None


def vocab_sha256(llm: Any) -> str:
    """SHA-256 of the vocabulary: every token's text and attributes, in id order, and the BOS and
    EOS ids. A requantised GGUF keeps its tokenizer, so it keeps this hash."""
    import llama_cpp

    vocab = llm._model.vocab
    h = hashlib.sha256()
    for i in range(llm.n_vocab()):
        h.update(llama_cpp.llama_vocab_get_text(vocab, i) or b"")
        h.update(b"\0%d\n" % llama_cpp.llama_vocab_get_attr(vocab, i))
    h.update(b"bos %d eos %d" % (llm.token_bos(), llm.token_eos()))
    return h.hexdigest()


def _reused_prefix(cached: list[int], prompt: list[int]) -> int:
    """Prompt tokens llama-cpp-python keeps from the KV cache: the longest common prefix, less
    one when the whole prompt matches (one token is evaluated again to refresh the logits)."""
    n = 0
    for a, b in zip(cached, prompt):
        if a != b:
            break
        n += 1
    return n - 1 if n and n == len(prompt) else n
