"""A chat template rendered on our side, so a server can be probed after the assistant turn start.

    servediff probe RUN_A RUN_B --base-url-a URL --base-url-b URL --template model.gguf --out p.jsonl

A probe asks for the next token after prompt + the common prefix of two completions. A chat
endpoint cannot continue a half-written assistant message, so the chat template is applied here
and the text goes to ``/v1/completions``. The template comes from a GGUF's
``tokenizer.chat_template`` metadata (read with llama.cpp, vocabulary only), a
``tokenizer_config.json``, or a Jinja file; which one is recorded in the probe record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servediff.engines import Closing, EngineError, ProbeResult
from servediff.types import Message, Sample


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    template: str
    bos_token: str
    eos_token: str
    source: str  # what the template was read from, for the record

    def render(self, messages: Sequence[Message], **chat_kwargs: Any) -> str:
        """``chat_kwargs`` are what the run sent as chat_template_kwargs (enable_thinking): the
        probe must see the prompt the server rendered, or it measures another context."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        fmt = Jinja2ChatFormatter(self.template, eos_token=self.eos_token, bos_token=self.bos_token)
        return str(fmt(messages=list(messages), **chat_kwargs).prompt)  # type: ignore[arg-type]


def _token_text(value: Any) -> str:
    # tokenizer_config.json spells special tokens as a string or as {"content": ...}.
    if isinstance(value, dict):
        return str(value.get("content") or "")
    return str(value or "")


def load_template(path: Path) -> ChatTemplate:
    """From a .gguf (its metadata), a tokenizer_config.json, or a Jinja text file."""
    path = Path(path)
    if not path.is_file():
        raise EngineError(f"chat template source not found: {path}")
    if path.suffix == ".gguf":
        import llama_cpp

        llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise EngineError(f"{path.name} has no tokenizer.chat_template in its metadata")
        vocab = llm._model
        bos, eos = vocab.token_get_text(vocab.token_bos()), vocab.token_get_text(vocab.token_eos())
        return ChatTemplate(template, bos, eos, f"GGUF metadata tokenizer.chat_template of {path.name}")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        cfg = json.loads(text)
        if not cfg.get("chat_template"):
            raise EngineError(f"{path.name} has no chat_template")
        return ChatTemplate(
            str(cfg["chat_template"]),
            _token_text(cfg.get("bos_token")),
            _token_text(cfg.get("eos_token")),
            f"chat_template of {path.name}",
        )
    return ChatTemplate(text, "", "", f"Jinja template file {path.name}")


class TemplateProber(Closing):
    """Probes an OpenAI-compatible server: our rendering of the prompt, then the prefix text.

    ``replay=False`` sends prompt + prefix once: the server scores the prefix in one pass, a
    geometry generation never used. ``replay=True`` first sends the prompt, then prompt + each
    longer prefix token by token: a server that reuses the previous request's KV cache
    (llama-cpp-python does) then evaluates the prefix one token per step, as generation did.
    """

    def __init__(self, engine: Any, template: ChatTemplate | None, replay: bool = False) -> None:
        self.engine = engine  # an HTTPEngine (anything with probe_text and identity)
        self.template = template
        self.replay = replay

    def _rebuild(self, ids: list[int]) -> tuple[str, list[str] | None] | None:
        """The prefix text of ``ids`` and, for replay, its text token by token (each piece is the
        growth of the decoded prefix, so a character split across tokens is never cut); None
        when the server cannot detokenize."""
        whole = self.engine.detokenize(ids)
        if whole is None:
            return None
        if not self.replay:
            return whole, None
        pieces, done = [], ""
        for n in range(1, len(ids) + 1):
            text = self.engine.detokenize(ids[:n]) if n < len(ids) else whole
            if text is None or not text.startswith(done):
                return whole, None  # no clean token-by-token split: one pass
            pieces.append(text[len(done) :])
            done = text
        return whole, pieces

    def diverging_tokens(
        self, a_ids: Sequence[int] | None, b_ids: Sequence[int] | None, index: int
    ) -> tuple[str | None, str | None] | None:
        """The text of token ``index`` of each side, as the server detokenizes it (None: that
        sequence ended there); None when the server cannot detokenize."""
        detokenize = getattr(self.engine, "detokenize", None)
        if detokenize is None:
            return None

        def token(ids: Sequence[int] | None) -> str | None:
            if ids is None or index >= len(ids):
                return None  # the sequence ended here
            before, through = detokenize(list(ids[:index])), detokenize(list(ids[: index + 1]))
            if before is None or through is None or not through.startswith(before):
                return None
            return str(through[len(before) :])

        return token(a_ids), token(b_ids)

    def identity(self) -> dict[str, Any]:
        ident: dict[str, Any] = self.engine.identity()
        return ident

    def close(self) -> None:
        self.engine.close()

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
        if sample.messages is not None:
            if self.template is None:
                raise EngineError("a chat item needs a chat template to be probed over /v1/completions")
            prompt = self.template.render(sample.messages, **(chat_kwargs or {}))
        else:
            prompt = sample.prompt or ""
        how = ""
        rebuilt = None
        if prefix_pieces is None and prefix_ids is not None and hasattr(self.engine, "detokenize"):
            # Token ids without their texts (ids the server retokenized after the run): the
            # shared characters can end inside the diverging token, so the prefix is rebuilt
            # from the ids, on a token boundary.
            rebuilt = self._rebuild(list(prefix_ids))
            if rebuilt is not None:
                prefix_text, prefix_pieces = rebuilt
        if self.replay and prefix_pieces is not None:
            text = prompt
            for piece in prefix_pieces:  # the answers are not needed: these requests fill the cache
                self.engine.probe_text(text, 1)
                text += piece
            how = "http: /v1/completions replayed token by token (one request per prefix token)"
        result: ProbeResult = self.engine.probe_text(prompt + prefix_text, k)
        source = "" if sample.messages is None or self.template is None else f"; {self.template.source}"
        if rebuilt is not None:
            source += "; prefix rebuilt from the server's token ids"
        if not result.top:  # nothing measured here: its reason, not how the prefix was sent
            return result
        return ProbeResult(result.top, (how or result.method) + source, result.ids)
