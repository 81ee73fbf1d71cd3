"""Probes answered by llama-server through its own endpoints: the chat template applied by the
server (``/apply-template``), the prompt tokenized by the server (``/tokenize``), and the top-k of
the next token over exact token ids (``/completion`` with ``n_probs``). No template file is needed,
and the prefix is generation's own token ids wherever the run recorded them.

    servediff experiment examples/llama-server.toml

``n_probs`` reports the model's distribution before sampling (softmax of the logits), so the
numbers are comparable with the other engines' logprobs. With ``replay`` the prefix is sent one
token longer per request: the server reuses its slot's cache for the common part, so the last
token is evaluated alone, as in generation.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from servediff.engines import Closing, EngineError, ProbeResult
from servediff.types import Sample

TIMEOUT_S = 120.0


class NativeProber(Closing):
    """A Prober for llama-server; ``engine`` (the run's HTTP engine) gives identity and closing."""

    def __init__(self, engine: Any, replay: bool = True) -> None:
        self.engine = engine
        self.base_url: str = engine.base_url
        self.replay = replay

    def _post(self, path: str, body: Mapping[str, Any]) -> Any:
        req = urllib.request.Request(
            f"{self.base_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
                return json.loads(resp.read().decode("utf-8", errors="replace"))
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", errors="replace")[:200]
            raise EngineError(f"llama-server {path} answered {exc.code}: {detail}") from exc
        except (OSError, ValueError) as exc:
            raise EngineError(f"llama-server {path}: {exc}") from exc

    def prompt_ids(self, sample: Sample, chat_kwargs: Mapping[str, Any] | None) -> list[int]:
        """The prompt's token ids as the server itself renders and tokenizes it."""
        if sample.messages is not None:
            body: dict[str, Any] = {"messages": [dict(m) for m in sample.messages]}
            if chat_kwargs:
                body["chat_template_kwargs"] = dict(chat_kwargs)
            text = self._post("/apply-template", body).get("prompt")
            if not isinstance(text, str):
                raise EngineError("llama-server /apply-template returned no prompt")
        else:
            text = sample.prompt or ""
        return self.tokenize(text, special=True)

    def tokenize(self, text: str, special: bool) -> list[int]:
        # A text prompt is tokenized by the server with special tokens added and parsed; a
        # completion's text is plain text.
        body = {"content": text, "add_special": special, "parse_special": special}
        tokens = self._post("/tokenize", body).get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise EngineError("llama-server /tokenize returned no token ids")
        return tokens

    def detokenize(self, ids: Sequence[int]) -> str:
        return str(self._post("/detokenize", {"tokens": list(ids)}).get("content", ""))

    def top_k(self, ids: Sequence[int], k: int) -> tuple[tuple[tuple[str, float], ...], tuple[int, ...]]:
        body = {"prompt": list(ids), "n_predict": 1, "n_probs": k, "temperature": 0.0, "cache_prompt": True}
        probs = self._post("/completion", body).get("completion_probabilities") or []
        if not probs:
            return (), ()
        top = probs[0].get("top_logprobs") or []
        pairs = [(str(t["token"]), float(t["logprob"]), int(t["id"])) for t in top if _finite(t["logprob"])]
        pairs.sort(key=lambda p: -p[1])
        return tuple((t, lp) for t, lp, _ in pairs[:k]), tuple(i for _, _, i in pairs[:k])

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
        prompt = self.prompt_ids(sample, chat_kwargs)
        source = "generation's token ids" if prefix_ids is not None else "prefix text via /tokenize"
        prefix = list(prefix_ids) if prefix_ids is not None else self.tokenize(prefix_text, special=False)
        how = "one request"
        if self.replay and prefix:
            for n in range(len(prefix)):  # fills the slot's cache one token at a time
                self.top_k(prompt + prefix[:n], 1)
            how = "replayed token by token"
        top, ids = self.top_k(prompt + prefix, k)
        rendered = "/apply-template + /tokenize" if sample.messages is not None else "/tokenize"
        method = (
            f"llama-server: /completion n_probs={k} over token ids ({how}); "
            f"prompt {rendered}; prefix {source}"
        )
        return ProbeResult(top, method, ids or None)

    def diverging_tokens(
        self, a_ids: Sequence[int] | None, b_ids: Sequence[int] | None, index: int
    ) -> tuple[str | None, str | None] | None:
        """The text of token ``index`` of each side, as the server's /detokenize gives it."""

        def token(ids: Sequence[int] | None) -> str | None:
            if ids is None or index >= len(ids):
                return None
            before, through = self.detokenize(ids[:index]), self.detokenize(ids[: index + 1])
            return through[len(before) :] if through.startswith(before) else None

        return token(a_ids), token(b_ids)

    def identity(self) -> dict[str, Any]:
        ident: dict[str, Any] = self.engine.identity()
        return ident

    def close(self) -> None:
        self.engine.close()


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
