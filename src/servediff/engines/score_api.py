"""What three servers return when asked to score a prompt, turned into scored positions.

    servediff run --engine http --base-url URL --score texts.txt --score-api vllm --out b.jsonl

Each server scores the tokens of a prompt in one pass ("prompt logprobs"); each says it
differently, and this module holds one request builder and one response reader per server (pure
functions; ``http_scorer.py`` does the I/O). A position is the distribution *predicting* a token
of the sequence from everything before it, with that token's own logprob.

- **llama-cpp-python** (``llama_cpp/llama.py``, ``Llama._create_completion``; server
  ``llama_cpp/server/types.py``, ``CreateCompletionRequest``): ``/v1/completions`` with
  ``echo: true``, ``logprobs: k``, ``max_tokens: 1`` (``max_tokens: 0`` there means "until the
  context is full"). The prompt is a string (no token ids). The echo drops a leading BOS and pairs
  each remaining prompt token with the row of logits before it, so it is aligned only when the
  prompt starts with the model's BOS token; otherwise every logprob belongs to the wrong token
  (we detect this and refuse, see ``llamacpp_positions``). Entry 0 is null by OpenAI's convention
  although llama.cpp computed it, so the first token after BOS is not scored over this server.
  Top-k entries are keyed by token *text* (decoded with ``errors="ignore"``), never ids: we map
  each text to an id through the server's own tokenizer (``/extras/tokenize``) and keep the texts
  that are exactly one token; the rest join the tail bucket, which keeps the top-k + tail KL a
  lower bound (pooling more outcomes can only lower it).
- **vLLM** (``vllm/entrypoints/openai/protocol.py``, ``CompletionRequest.prompt_logprobs`` and
  ``CompletionResponseChoice.prompt_logprobs``; ``vllm/logprobs.py``, ``Logprob``):
  ``/v1/completions`` with the prompt as token ids and ``prompt_logprobs: k``. The answer's
  ``choices[0].prompt_logprobs`` has one entry per prompt token: ``null`` for the first, then
  ``{"<token id>": {"logprob", "rank", "decoded_token"}}`` holding the top-k and the prompt's own
  token (k or k + 1 entries). Ids come with it. The server refuses k above its
  ``--max-logprobs`` (20 by default).
- **SGLang** (``python/sglang/srt/managers/io_struct.py``, ``GenerateReqInput``;
  ``tokenizer_manager.py`` builds ``meta_info``): ``/generate`` with ``input_ids``,
  ``return_logprob: true``, ``logprob_start_len: 0``, ``top_logprobs_num: k``. ``meta_info``
  carries ``input_token_logprobs`` (``[logprob, token_id, text]`` per prompt token, logprob null
  for the first) and ``input_top_logprobs`` (null, then a list of ``[logprob, token_id, text]``).

No fixture of a real vLLM or SGLang answer is published in either repository, so those two
readers follow the shapes of the source files named above and are not tested against a live
server here; the llama-cpp-python reader is tested against the real server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

APIS = ("llama-cpp-python", "vllm", "sglang")


class ScoreShapeError(ValueError):
    """The server's answer cannot be read as prompt logprobs of the sequence sent."""


@dataclass(frozen=True, slots=True)
class Position:
    """One scored position: the sequence's own token there, its logprob, and the top-k (ids and
    texts, best first) of the distribution that predicted it."""

    token_id: int
    token: str
    logprob: float
    top_ids: tuple[int, ...]
    top: tuple[tuple[str, float], ...]


def llamacpp_request(model: str | None, text: str, k: int) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": text,
        "echo": True,
        "logprobs": k,
        "max_tokens": 1,  # 0 would mean "no limit" to llama-cpp-python
        "temperature": 0.0,
    }


def llamacpp_positions(
    raw: Mapping[str, Any], ids: Sequence[int], text: str, k: int, id_of: Callable[[str], int | None]
) -> list[Position]:
    """Positions 1.. of the text after the BOS token ``ids[0]`` (``ids``: the server's tokens of
    BOS text + ``text``). Position 0 (the text's first token) is null in the echo: not returned.

    The echo is aligned only when the server dropped a leading BOS; then its tokens before the
    generated one spell ``text``. When they do not, the logprobs belong to other tokens than the
    ones they are listed with, and nothing is returned (ScoreShapeError).
    """
    try:
        lp = raw["choices"][0]["logprobs"]
        tokens, values, tops = lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ScoreShapeError(f"no echoed logprobs in the answer ({exc!r})") from exc
    n = len(ids) - 1  # text tokens after BOS
    if len(tokens) < n or "".join(tokens[:n]) != text:
        raise ScoreShapeError(
            "the echoed tokens do not spell the text after the BOS token: llama-cpp-python aligns "
            "prompt logprobs only when the prompt starts with the model's BOS token (give its "
            "text with --bos-text), and its token texts drop split UTF-8 characters"
        )
    out = []
    for i in range(1, n):
        value, top = values[i], tops[i]
        if not isinstance(value, (int, float)) or not isinstance(top, dict):
            raise ScoreShapeError(f"position {i}: no logprobs in the echo")
        pairs = sorted(_in_order(top, k, str(tokens[i])), key=lambda p: -p[1])
        mapped = [(id_of(t), t, v) for t, v in pairs]
        kept = [(i_, t, v) for i_, t, v in mapped if i_ is not None][:k]
        out.append(
            Position(
                token_id=int(ids[i + 1]),
                token=str(tokens[i]),
                logprob=float(value),
                top_ids=tuple(int(i_) for i_, _, _ in kept if i_ is not None),
                top=tuple((t, v) for _, t, v in kept),
            )
        )
    return out


def _in_order(top: Mapping[str, Any], k: int, own: str) -> list[tuple[str, float]]:
    """The entries of an echoed top-k whose values can be trusted.

    llama-cpp-python builds the map best first from the k best tokens, keyed by token text
    decoded with ``errors="ignore"``, then adds the sequence's own token (``own``, its text). A
    token holding part of a UTF-8 character (b" \\xe2") decodes to the same text as another
    (" ") and overwrites that key's value in place. Two signs show it: an entry worth less than
    one listed after it (left out: it holds another token's value), and fewer distinct texts than
    the k asked for. Without the second sign every text is one token's; with it, the texts such
    tokens decode to (``AMBIGUOUS_TEXTS``) may be another token's and go to the tail.
    """
    items = [(str(t), float(v)) for t, v in top.items()]
    body, last = items[:-1], items[-1:]
    kept = [(t, v) for i, (t, v) in enumerate(body) if all(v >= w for _, w in body[i + 1 :])] + last
    whole = len(items) == k + 1 or (len(items) == k and items[-1][0] != own)
    return [(t, v) for t, v in kept if t != "" and (whole or t not in AMBIGUOUS_TEXTS)]


# What a token ending in part of a UTF-8 character decodes to with errors="ignore" in byte-level
# BPE vocabularies: such a token and a real " " share one key. In SmolLM2's 49,152 tokens, 274
# decode to "" and 37 to " " (and one each to two letters of other scripts).
AMBIGUOUS_TEXTS = frozenset({"", " "})


def vllm_request(model: str | None, ids: Sequence[int], k: int) -> dict[str, Any]:
    return {"model": model, "prompt": list(ids), "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": k}


def vllm_positions(raw: Mapping[str, Any], ids: Sequence[int], k: int) -> list[Position]:
    """Positions 1.. of ``ids`` (position 0 has nothing before it)."""
    try:
        entries = raw["choices"][0]["prompt_logprobs"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ScoreShapeError(f"no prompt_logprobs in the answer ({exc!r})") from exc
    if not isinstance(entries, list) or len(entries) != len(ids):
        raise ScoreShapeError(f"prompt_logprobs has {_len(entries)} entries for {len(ids)} prompt tokens")
    out = []
    for i in range(1, len(ids)):
        entry = entries[i]
        if not isinstance(entry, dict) or str(ids[i]) not in entry:
            raise ScoreShapeError(f"position {i}: no logprob for the prompt's token {ids[i]}")
        ranked = sorted(((int(t), d) for t, d in entry.items()), key=lambda p: -float(p[1]["logprob"]))
        top = [(t, d) for t, d in ranked[:k]]
        own = entry[str(ids[i])]
        out.append(
            Position(
                token_id=int(ids[i]),
                token=str(own.get("decoded_token") or ""),
                logprob=float(own["logprob"]),
                top_ids=tuple(t for t, _ in top),
                top=tuple((str(d.get("decoded_token") or ""), float(d["logprob"])) for _, d in top),
            )
        )
    return out


def sglang_request(text: str, k: int) -> dict[str, Any]:
    return {
        "text": text,
        "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": k,
        "return_text_in_logprobs": True,
    }


def sglang_positions(raw: Mapping[str, Any], k: int) -> tuple[list[int], list[Position]]:
    """The prompt's token ids as the server tokenized it (they come with the answer), and
    positions 1.. of them."""
    try:
        meta = raw["meta_info"]
        own, tops = meta["input_token_logprobs"], meta["input_top_logprobs"]
        ids = [int(e[1]) for e in own]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ScoreShapeError(f"no input logprobs in the answer ({exc!r})") from exc
    if len(tops) != len(ids):
        raise ScoreShapeError(f"input_top_logprobs covers {_len(tops)} tokens, not the {len(ids)} scored")
    out = []
    for i in range(1, len(ids)):
        value, _, *text = own[i]
        if value is None or not isinstance(tops[i], list):
            raise ScoreShapeError(f"position {i}: the answer does not score token {ids[i]}")
        top = sorted(tops[i], key=lambda e: -float(e[0]))[:k]
        out.append(
            Position(
                token_id=ids[i],
                token=str(text[0] if text and text[0] is not None else ""),
                logprob=float(value),
                top_ids=tuple(int(e[1]) for e in top),
                top=tuple((str(e[2] if len(e) > 2 and e[2] is not None else ""), float(e[0])) for e in top),
            )
        )
    return ids, out


def _len(x: Any) -> str:
    return str(len(x)) if isinstance(x, list) else "no"
