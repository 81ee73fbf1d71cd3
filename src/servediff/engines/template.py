"""A chat template rendered for a probe, so a server can be asked for the next token after the
assistant turn has started.

    servediff probe RUN_A RUN_B --base-url-a URL --base-url-b URL --out p.jsonl   # the server renders
    servediff probe RUN_A RUN_B --base-url-a URL --base-url-b URL --template DIR --out p.jsonl

A probe asks for the next token after prompt + the common prefix of two completions. A chat
endpoint cannot continue a half-written assistant message, so the prompt goes to
``/v1/completions`` already rendered, in one of two ways:

* **by the server** (``ServerTemplate``): vLLM renders messages with the model's own template
  through ``/tokenize`` (``messages``, ``add_generation_prompt``); the prompt's token ids plus the
  completion's recorded ids are sent as the prompt, so nothing is re-tokenized. This is what the
  server itself did, and it needs no template file and no other engine.
* **here** (``ChatTemplate``), from a GGUF's ``tokenizer.chat_template`` metadata, a model folder
  (``chat_template.jinja``, where transformers 5 writes it, or ``tokenizer_config.json``), a
  ``tokenizer_config.json`` or a Jinja file, rendered with jinja2 in a sandbox as transformers
  renders it. Which one was used is recorded in the probe record.
"""

from __future__ import annotations

import functools
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
        compiled = _environment().from_string(self.template)
        return str(
            compiled.render(
                messages=[dict(m) for m in messages],
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                add_generation_prompt=True,
                **chat_kwargs,
            )
        )


@dataclass(frozen=True, slots=True)
class ServerTemplate:
    """The server renders chat prompts itself (``/tokenize`` with ``messages``): the probe sends
    token ids, so the prompt is exactly what the server built for the run."""

    source: str = "the server's own chat template (/tokenize with messages)"


def _raise(message: str) -> None:
    raise EngineError(f"the chat template raised: {message}")


def _strftime_now(fmt: str) -> str:
    import datetime

    return datetime.datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **kw: Any) -> str:
    # transformers' filter: plain json.dumps (jinja2's own escapes <, >, & and ' for HTML)
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, sort_keys=bool(kw.get("sort_keys")))


@functools.lru_cache(maxsize=1)
def _environment() -> Any:
    """A sandbox as transformers renders chat templates in (``apply_chat_template``): trimmed
    blocks, loop controls, ``raise_exception``, ``strftime_now`` and a JSON ``tojson``. The
    sandbox matters: a template is code from whoever published the model."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = _strftime_now
    return env


def _token_text(value: Any) -> str:
    # tokenizer_config.json spells special tokens as a string or as {"content": ...}.
    if isinstance(value, dict):
        return str(value.get("content") or "")
    return str(value or "")


def load_template(path: Path) -> ChatTemplate:
    """From a .gguf (its metadata), a model folder, a tokenizer_config.json or a Jinja file."""
    path = Path(path)
    if path.is_dir():
        return _from_folder(path)
    if not path.is_file():
        raise EngineError(f"chat template source not found: {path}")
    if path.suffix == ".gguf":
        from servediff.engines.gguf_meta import GGUFError, chat_template_parts

        try:
            template, bos, eos = chat_template_parts(path)
        except (GGUFError, OSError) as exc:
            raise EngineError(str(exc)) from None
        if not template:
            raise EngineError(f"{path.name} has no tokenizer.chat_template in its metadata")
        return ChatTemplate(template, bos, eos, f"GGUF metadata tokenizer.chat_template of {path.name}")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        cfg = _json_object(path, text)
        if cfg.get("chat_template"):
            template, source = str(cfg["chat_template"]), f"chat_template of {path.name}"
        elif (path.parent / JINJA).is_file():  # transformers 5 writes the template beside it
            template = (path.parent / JINJA).read_text(encoding="utf-8")
            source = f"{JINJA} beside {path.name}"
        else:
            raise EngineError(f"{path.name} has no chat_template, and no {JINJA} is beside it")
        return ChatTemplate(
            template, _token_text(cfg.get("bos_token")), _token_text(cfg.get("eos_token")), source
        )
    bos, eos = _special_tokens(path.parent / CONFIG)
    return ChatTemplate(text, bos, eos, f"Jinja template file {path.name}")


JINJA, CONFIG = "chat_template.jinja", "tokenizer_config.json"


def _from_folder(folder: Path) -> ChatTemplate:
    """A Hugging Face model folder: ``chat_template.jinja`` (transformers 5), else the template in
    ``tokenizer_config.json`` (transformers 4); special tokens from the latter."""
    if (folder / JINJA).is_file():
        bos, eos = _special_tokens(folder / CONFIG)
        return ChatTemplate(
            (folder / JINJA).read_text(encoding="utf-8"),
            bos,
            eos,
            f"{JINJA} of the model folder {folder.name}",
        )
    if (folder / CONFIG).is_file():
        return load_template(folder / CONFIG)
    raise EngineError(f"{folder}: a model folder without {JINJA} or {CONFIG}")


def _json_object(path: Path, text: str) -> dict[str, Any]:
    try:
        cfg = json.loads(text)
    except ValueError as exc:
        raise EngineError(f"{path}: not JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise EngineError(f"{path}: not a JSON object")
    return cfg


def _special_tokens(config: Path) -> tuple[str, str]:
    """BOS and EOS texts from a tokenizer_config.json, or empty where there is none."""
    if not config.is_file():
        return "", ""
    cfg = _json_object(config, config.read_text(encoding="utf-8"))
    return _token_text(cfg.get("bos_token")), _token_text(cfg.get("eos_token"))


class TemplateProber(Closing):
    """Probes an OpenAI-compatible server: our rendering of the prompt, then the prefix text.

    ``replay=False`` sends prompt + prefix once: the server scores the prefix in one pass, a
    geometry generation never used. ``replay=True`` first sends the prompt, then prompt + each
    longer prefix token by token: a server that reuses the previous request's KV cache
    (llama-cpp-python does) then evaluates the prefix one token per step, as generation did.
    """

    def __init__(
        self, engine: Any, template: ChatTemplate | ServerTemplate | None, replay: bool = False
    ) -> None:
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
        if sample.messages is not None and isinstance(self.template, ServerTemplate):
            return self._probe_ids(sample, prefix_ids, prefix_text, k, chat_kwargs)
        if sample.messages is not None:
            if not isinstance(self.template, ChatTemplate):
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

    def _probe_ids(
        self,
        sample: Sample,
        prefix_ids: Sequence[int] | None,
        prefix_text: str,
        k: int,
        chat_kwargs: Mapping[str, Any] | None,
    ) -> ProbeResult:
        """The server's rendering of the messages, as token ids, then the completion's own ids:
        the context generation saw, token for token (no text is re-tokenized). Without recorded
        ids the prefix text is tokenized by the server, and the method says so."""
        assert sample.messages is not None and self.template is not None
        prompt_ids = self.engine.chat_ids(sample.messages, dict(chat_kwargs or {}))
        how = ""
        if prefix_ids is None:
            prefix_ids = self.engine.text_ids(prefix_text) if prefix_text else []
            how = "; prefix text tokenized by the server"
        result: ProbeResult = self.engine.probe_ids([*prompt_ids, *prefix_ids], k)
        if not result.top:
            return result
        return ProbeResult(result.top, f"{result.method}; {self.template.source}{how}", result.ids)
