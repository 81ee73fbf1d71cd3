"""In-process Hugging Face transformers engine (optional extra: ``pip install 'servediff[hf]'``).

    servediff run --engine hf --device cuda --dtype bf16 --batch-size 20 --out runs/batched.jsonl

``model.generate`` over batches of left-padded prompts, greedy or sampled (``hf_sampler``: one
seeded generator per draw). Token ids come from the generation itself, and per-token top-k
logprobs from ``output_logits``: the very logits that chose each token (for assisted generation,
the verification pass's logits). A scoring run (``--score``) instead reads every position of
fixed sequences in one forward pass each (``hf_score``). Models load
from a local folder or a GGUF file (transformers' GGUF loader, which needs ``gguf``); the default
is the embedded SmolLM2-135M-Instruct GGUF.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from servediff.engines import Closing, EngineError, OnDone, ProbeResult
from servediff.engines.hf_identity import software_identity, torch_device, weights_sha256
from servediff.engines.hf_knobs import HFKnobs
from servediff.engines.hf_sampler import SeededSampler
from servediff.engines.hf_score import completion, log_softmax_rows, scored
from servediff.engines.knobs import default_model_path
from servediff.types import Completion, Sample, SamplingParams, TokenLogprob

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# The chat end-of-turn token. transformers' GGUF tokenizer for SmolLM2 reports <|im_start|> as
# end-of-sequence, so the stop set is taken from the vocabulary, not from tokenizer.eos_token.
END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|endoftext|>")


def load_pretrained(path: Path, dtype: torch.dtype, attn: str, device: str) -> tuple[Any, Any]:
    """(model, tokenizer) from a local folder or a .gguf file; never from a hub."""
    import transformers

    # Typed as Any: transformers' annotations vary between releases and are partly untyped.
    auto_model: Any = transformers.AutoModelForCausalLM
    auto_tok: Any = transformers.AutoTokenizer

    if path.is_file():
        where, extra = str(path.parent), {"gguf_file": path.name}
    elif path.is_dir():
        where, extra = str(path), {}
    else:
        raise EngineError(f"model not found: {path}")
    try:
        tok = auto_tok.from_pretrained(where, local_files_only=True, **extra)
        model = auto_model.from_pretrained(
            where, dtype=dtype, attn_implementation=attn, local_files_only=True, **extra
        )
    except (OSError, ValueError, ImportError) as exc:
        raise EngineError(f"transformers could not load {path}: {exc}") from exc
    return model.to(device).eval(), tok


def stop_ids(tok: Any, model: Any) -> list[int]:
    """Token ids that end a completion: the chat end-of-turn token when the vocabulary has one."""
    vocab = tok.get_vocab()
    found = [vocab[t] for t in END_OF_TURN if t in vocab]
    if found:
        return found[:1]
    eos = model.generation_config.eos_token_id
    eos = eos if eos is not None else tok.eos_token_id
    if eos is None:
        raise EngineError("the model names no end-of-sequence token")
    return [eos] if isinstance(eos, int) else list(eos)


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and attention_mask with every row right-aligned (decoder-only generation)."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.tensor(list(r), dtype=torch.long)
            mask[i, width - len(r) :] = 1
    return ids, mask


def synchronize(device: str) -> None:
    """Wait for queued GPU work, so that a host clock around it measures it."""
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def cut_at_stop(ids: list[int], stops: Sequence[int]) -> tuple[list[int], str | None]:
    """Generated ids up to (not including) the first stop token, and the finish reason."""
    for i, t in enumerate(ids):
        if t in stops:
            return ids[:i], "stop"
    return ids, None


class HFEngine(Closing):
    """One transformers configuration (a set of knobs) in this process."""

    kind = "hf"

    def __init__(
        self, knobs: HFKnobs, model_path: Path | None = None, label: str = "", scoring: bool = False
    ) -> None:
        self.knobs = knobs
        self.label = label
        # Scoring reads the logits of every position of a fixed sequence (teacher forcing).
        self.scoring = scoring
        self.model_path = Path(model_path) if model_path else default_model_path()
        self.device = torch_device(knobs.device)
        dtype = TORCH_DTYPES[knobs.dtype]
        self.model, self.tok = load_pretrained(self.model_path, dtype, knobs.attn, self.device)
        self.draft: Any = None
        if knobs.draft_model:
            self.draft, _ = load_pretrained(Path(knobs.draft_model), dtype, knobs.attn, self.device)
        self.stops = stop_ids(self.tok, self.model)
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.stops[0]
        self._sha = weights_sha256(self.model_path)
        self._pieces: dict[int, str] = {}
        self._env = software_identity(self.device)
        self._generate_s = 0.0
        self.warmed_up = False

    def _warm_up(self, batch: Sequence[Sample], params: SamplingParams) -> None:
        # On a GPU the first generate() pays once for kernel loading, library handles and the
        # allocator's growth (seen: ~10 s on an H200); a short dummy call did not cover it. So
        # the first batch is generated once, untimed and discarded, before the timed runs:
        # the output does not depend on an earlier call (greedy, or sampled with per-draw seeds).
        if self.device != "cpu" and not self.warmed_up:
            self._batch(batch, params)
        self.warmed_up = True

    def identity(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "label": self.label,
            "model": self.model_path.name,
            "model_sha256": self._sha,
            "server_version": self._env["versions_line"],
            "knobs": {**self.knobs.as_dict(), "device": self.device},
            "stop_token_ids": self.stops,
            "pad_token_id": self.pad_id,
            "generation": {
                # Temperature 0: greedy. Above: hf_sampler, one generator per draw, re-seeded at
                # every position from the draw's seed and the position.
                "sampler": "per-draw torch.Generator, seeded per position",
                "prompt_lookup_max_ngram": 2,
                # On a GPU the first batch is generated once, untimed, before the timed run.
                "warm_up": "first batch, untimed" if self.device != "cpu" else "none",
            },
            "hardware": self._env,
            # A scoring run is a different run from a generation run of the same knobs.
            **({"mode": "score"} if self.scoring else {}),
        }

    def prompt_ids(self, sample: Sample) -> list[int]:
        """The rendered prompt's token ids (the model's own chat template for chat items)."""
        if sample.messages is not None:
            text = self.tok.apply_chat_template(
                list(sample.messages), add_generation_prompt=True, tokenize=False
            )
            ids: list[int] = self.tok(text, add_special_tokens=False)["input_ids"]
        else:
            ids = self.tok(sample.prompt or "")["input_ids"]
        return ids

    def _gen_kwargs(self, max_tokens: int, logits: bool, sampler: SeededSampler | None) -> dict[str, Any]:
        import transformers

        k = self.knobs
        gen_config: Any = transformers.GenerationConfig
        cfg = gen_config(
            max_new_tokens=max_tokens,
            do_sample=False,
            num_beams=1,
            eos_token_id=self.stops,
            pad_token_id=self.pad_id,
            return_dict_in_generate=True,
            output_logits=logits,
            prompt_lookup_num_tokens=k.prompt_lookup or None,
        )
        extra: dict[str, Any] = {"assistant_model": self.draft} if self.draft is not None else {}
        if sampler is not None:  # greedy over the sampler's one finite score: the drawn token
            extra["logits_processor"] = transformers.LogitsProcessorList([sampler])
        return {"generation_config": cfg, **extra}

    def generate(self, samples: Sequence[Sample], params: SamplingParams, on_done: OnDone) -> None:
        if self.scoring:  # an engine built for scoring scores its items instead of generating
            self.score(samples, params, on_done)
            return
        torch.manual_seed(params.seed)
        n = self.knobs.batch_size
        for b, start in enumerate(range(0, len(samples), n)):
            batch = samples[start : start + n]
            t0 = time.perf_counter()
            try:
                self._warm_up(batch, params)
                t0 = time.perf_counter()
                done = self._batch(batch, params)
            except Exception as exc:  # a failed batch is recorded on each of its items
                done = [Completion(item_id=s.id, error=f"{type(exc).__name__}: {exc}") for s in batch]
            wall = time.perf_counter() - t0
            tokens = sum(c.n_tokens or 0 for c in done)
            for c in done:
                c.latency_s = wall  # every item of a batch waits for the whole batch
                c.engine_meta = {
                    "batch": b,
                    "batch_items": len(batch),
                    "batch_wall_s": wall,
                    "batch_tokens": tokens,
                    "generate_s": self._generate_s,  # model.generate alone, device synchronised
                }
                on_done(c)

    def _batch(self, batch: Sequence[Sample], params: SamplingParams) -> list[Completion]:
        prompts = [self.prompt_ids(s) for s in batch]
        ids, mask = left_pad(prompts, self.pad_id)
        ids_d, mask_d = ids.to(self.device), mask.to(self.device)
        sampler = None
        if params.sampled:
            seeds = [params.seed_for(s) for s in batch]
            sampler = SeededSampler(seeds, ids.shape[1], params, self.device)
        kwargs = self._gen_kwargs(params.max_tokens, params.logprobs, sampler)
        synchronize(self.device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(ids_d, attention_mask=mask_d, **kwargs)
        synchronize(self.device)
        self._generate_s = time.perf_counter() - t0
        new = out.sequences[:, ids.shape[1] :].tolist()
        return [self._completion(s, row, new[row], out.logits, params) for row, s in enumerate(batch)]

    def _completion(
        self, sample: Sample, row: int, generated: list[int], logits: Any, p: SamplingParams
    ) -> Completion:
        ids, finish = cut_at_stop(generated, self.stops)
        lps = None
        if p.logprobs:
            if len(logits) < len(ids):
                raise RuntimeError(f"{len(logits)} logit rows for {len(ids)} generated tokens")
            lps = self._logprobs(torch.stack([logits[t][row] for t in range(len(ids))]), ids, p.top_logprobs)
        return Completion(
            item_id=sample.id,
            text=self.tok.decode(ids, skip_special_tokens=False),
            finish_reason=finish or "length",
            n_tokens=len(ids),
            token_ids=ids,
            tokens=[self._piece(t) for t in ids],
            logprobs=lps,
            token_source="engine",
        )

    def _logprobs(self, logits: torch.Tensor, ids: list[int], k: int) -> list[TokenLogprob]:
        """Top-k log-softmax of the logits that chose each token (computed in float32)."""
        if not ids:
            return []
        lsm = torch.log_softmax(logits.float(), dim=-1)
        vals, idx = torch.topk(lsm, k, dim=-1)
        chosen = lsm.gather(1, torch.tensor(ids, device=lsm.device)[:, None])[:, 0].tolist()
        vals_l, idx_l = vals.tolist(), idx.tolist()
        return [
            TokenLogprob(
                self._piece(t), chosen[i], tuple((self._piece(j), v) for j, v in zip(idx_l[i], vals_l[i])), t
            )
            for i, t in enumerate(ids)
        ]

    def score_tokens(self, sample: Sample) -> tuple[list[int], list[int]]:
        """(context, continuation) of a scoring item, as the embedded engine splits it: an
        on-policy item's rendered prompt and the control's completion ids, or a text after BOS."""
        ids = sample.metadata.get("continuation_ids")
        if ids is not None:
            return self.prompt_ids(sample), [int(t) for t in ids]
        bos = self.tok.bos_token_id
        if bos is None:
            raise EngineError("the tokenizer names no BOS token to score a text after")
        tokens: list[int] = self.tok(sample.prompt or "", add_special_tokens=False)["input_ids"]
        return [int(bos)], tokens

    def _check_length(self, context: Sequence[int], continuation: Sequence[int]) -> None:
        limit = int(getattr(self.model.config, "max_position_embeddings", 0) or 0)
        n = len(context) + len(continuation)
        if not context or not continuation or (limit and n > limit):
            raise ValueError(
                f"{len(context)} context + {len(continuation)} scored tokens: need 1 to {limit} in all"
            )

    def score_matrix(self, context: Sequence[int], continuation: Sequence[int]) -> np.ndarray:
        """Full-vocabulary log-softmax (continuation × vocabulary, float64) predicting each
        continuation token from everything before it, in one teacher-forced pass at batch 1."""
        self._check_length(context, continuation)
        (row,) = log_softmax_rows(self.model, [(context, continuation)], self.pad_id, self.device)
        out: np.ndarray = row.cpu().numpy()
        return out

    def score(self, samples: Sequence[Sample], params: SamplingParams, on_done: OnDone) -> None:
        """Teacher-forced scoring, ``knobs.batch_size`` sequences per forward pass: at every
        continuation position the top-k (k = ``params.top_logprobs``) and the logprob of the
        text's own next token; nothing generated."""
        k, n = max(params.top_logprobs, 1), self.knobs.batch_size
        for b, start in enumerate(range(0, len(samples), n)):
            batch = samples[start : start + n]
            synchronize(self.device)
            t0 = time.perf_counter()
            done = self._scored_batch(batch, k)
            synchronize(self.device)
            wall = time.perf_counter() - t0
            for c in done:
                c.latency_s = wall  # every item of a batch waits for the whole batch
                meta = {"batch": b, "batch_items": len(batch), "batch_wall_s": wall}
                c.engine_meta = {**(c.engine_meta or {}), **meta}
                on_done(c)

    def _scored_batch(self, batch: Sequence[Sample], k: int) -> list[Completion]:
        """One batch's completions; an item that cannot be scored (too long, empty) is recorded
        as an error alone, a failed forward pass on each item of the batch."""
        pairs: dict[str, tuple[list[int], list[int]]] = {}
        out: dict[str, Completion] = {}
        for s in batch:
            try:
                pairs[s.id] = self.score_tokens(s)
                self._check_length(*pairs[s.id])
            except Exception as exc:
                pairs.pop(s.id, None)
                out[s.id] = Completion(item_id=s.id, error=f"{type(exc).__name__}: {exc}")
        if not pairs:
            return [out[s.id] for s in batch]
        try:
            rows = log_softmax_rows(self.model, list(pairs.values()), self.pad_id, self.device)
            for (item_id, (ctx, cont)), logp in zip(pairs.items(), rows):
                c = out[item_id] = completion(item_id, len(ctx), cont, scored(logp, cont, k), self._piece)
                c.text = self.tok.decode(cont, skip_special_tokens=False)
        except Exception as exc:  # a failed pass is recorded on each of its items
            for item_id in pairs:
                out[item_id] = Completion(item_id=item_id, error=f"{type(exc).__name__}: {exc}")
        return [out[s.id] for s in batch]

    def _piece(self, token: int) -> str:
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = str(self.tok.decode([token], skip_special_tokens=False))
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
        """Top-k for the token after prompt + prefix, from one forward pass at batch size 1.

        The run generated step by step (and perhaps batched or verified drafts), so this is
        another computation of the same logits: an estimate, with its own rounding.
        """
        prompt = self.prompt_ids(sample)
        if prefix_ids is None:
            prefix_ids = self.tok(prefix_text, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([[*prompt, *prefix_ids]], device=self.device)
        with torch.inference_mode():
            last = self.model(ids).logits[0, -1].float()
        vals, idx = torch.topk(torch.log_softmax(last, dim=-1), k)
        top = tuple((self._piece(int(i)), float(v)) for i, v in zip(idx.tolist(), vals.tolist()))
        return ProbeResult(top, f"hf: one forward pass over prompt + prefix, batch 1, {self.knobs.dtype}")

    def diverging_tokens(
        self, a_ids: Sequence[int] | None, b_ids: Sequence[int] | None, index: int
    ) -> tuple[str | None, str | None] | None:
        return None  # in-process runs record the engine's own token texts

    def close(self) -> None:
        self.model = self.draft = None
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()
