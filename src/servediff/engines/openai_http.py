"""Any OpenAI-compatible server: vLLM, SGLang, llama.cpp, TGI, Ollama.

    servediff run --engine http --base-url http://127.0.0.1:8000 --suite prompts --out a.jsonl

Chat items go to ``/v1/chat/completions``, raw prompts to ``/v1/completions``. ``concurrency``
workers each take the next item and send it; for ``http://`` each worker owns a keep-alive
connection of the lean client in ``http1.py``, for ``https://`` the workers share one aiohttp
session. Chosen by measurement (BENCHMARKS.md, ``bash bench/run.sh``): httpx's pool got slower
as concurrency rose, aiohttp kept up but its per-request bookkeeping, not the server, set the
pace. Retries (with backoff) happen only where a retry can help: connection errors, 429 and
5xx. Whatever still fails becomes an error on its item.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import os
import random
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timezone
from typing import Any, TypeVar

import aiohttp

from servediff.engines import EngineError, OnDone, ProbeResult, tokenize
from servediff.engines.body import body_bytes
from servediff.engines.channel import AiohttpChannel, Channel, run_async
from servediff.engines.gguf_vocab import local_vocab
from servediff.engines.http1 import Connection, Endpoint, TransportError
from servediff.engines.response import json_object, next_token, parse_response, text_of
from servediff.engines.server_sampling import (
    ALWAYS_SENT,
    Send,
    sampling_body,
    sampling_defaults,
    sent_fields,
    server_profile,
)
from servediff.engines.sse import parse_stream
from servediff.engines.wire import ModelList, parse
from servediff.redaction import redact_text
from servediff.types import Completion, Sample, SamplingParams

T = TypeVar("T")
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 120.0  # the longest Retry-After honoured (see HTTPEngine._max_wait_s)


@dataclass(frozen=True, slots=True)
class HTTPOptions:
    base_url: str
    model: str | None = None  # None: the first model the server lists
    concurrency: int = 1  # 1 keeps batch composition fixed, so the control stays clean
    timeout_s: float = 600.0
    max_retries: int = 4
    backoff_s: float = 0.5
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from here and never recorded
    retokenize: bool = True  # ask the server's tokenizer for token ids after the run
    # Ask for server-sent events, to time the first token and the gaps between tokens.
    stream: bool = False
    # Which sampling fields each request names (``server_sampling.Send``): all, or a client's few.
    send: Send = "all"


class _RetryableError(Exception):
    pass


class HTTPEngine:
    kind = "http"

    def __init__(
        self,
        options: HTTPOptions,
        label: str = "",
        annotations: Mapping[str, Any] | None = None,
        server_version: str | None = None,
    ) -> None:
        """``annotations`` are added to the identity (an experiment's launch command, profile,
        claims); ``server_version`` is recorded when the server exposes none itself."""
        self.options = options
        self.label = label
        self._annotations = dict(annotations or {})
        self._known_version = server_version
        self.base_url = options.base_url.rstrip("/")
        if self.base_url.endswith("/v1"):
            self.base_url = self.base_url[: -len("/v1")]
        self.server_version: str | None = None
        self.server_defaults: dict[str, Any] | None = None  # the sampling it applies unless told
        self.profile = "generic"  # which sampling fields it is sent (engines.server_sampling)
        self.model: str | None = options.model
        self.vocab_sha256: str | None = None  # the served file's, when it is on this machine
        # Tokenize endpoints still worth asking; one a server answers 404/405 is dropped.
        self._tokenize_paths = ["/extras/tokenize", "/tokenize"]
        self._api_key = os.environ.get(options.api_key_env) or None
        self._discover()

    # --- discovery: which model, which version -------------------------------------------
    def _discover(self) -> None:
        async def go() -> tuple[Any, Any, Any]:
            async with self._session() as s:
                models = await _get_json(s, f"{self.base_url}/v1/models")
                version = props = None
                for path in ("/version", "/v1/version"):
                    try:
                        version = await _get_json(s, f"{self.base_url}{path}")
                        break
                    except (aiohttp.ClientError, ValueError, asyncio.TimeoutError):
                        continue
                with contextlib.suppress(aiohttp.ClientError, ValueError, asyncio.TimeoutError):
                    props = await _get_json(s, f"{self.base_url}/props")  # llama-server's
                return models, version, props

        try:
            models, version, props = asyncio.run(go())
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, OSError) as exc:
            raise EngineError(f"cannot reach {self.base_url}/v1/models: {exc}") from exc
        try:
            listed = parse(ModelList, models, "model list")
        except ValueError as exc:
            raise EngineError(f"{self.base_url}/v1/models: {exc}") from None
        served = [m.id for m in listed.data if m.id]
        if self.model is None:
            if not served:
                raise EngineError(f"{self.base_url} lists no models; pass --model")
            self.model = served[0]
        elif served and self.model not in served:
            raise EngineError(f"{self.base_url} serves {served}, not {self.model!r}")
        if isinstance(version, dict):
            self.server_version = str(version.get("version") or version)
        self.server_defaults = sampling_defaults(props)
        self.profile = str(self._annotations.get("profile") or server_profile(models, props))
        self.vocab_sha256 = local_vocab(models, props, self.model)

    def _session(self) -> aiohttp.ClientSession:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.options.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        timeout = aiohttp.ClientTimeout(total=self.options.timeout_s)
        connector = aiohttp.TCPConnector(limit=max(self.options.concurrency, 1), ttl_dns_cache=300)
        return aiohttp.ClientSession(headers=headers, timeout=timeout, connector=connector)

    def identity(self) -> dict[str, Any]:
        o = self.options
        return {
            "kind": self.kind,
            "label": self.label,
            "base_url": self.base_url,
            "model": self.model,
            "server_version": self.server_version or self._known_version,
            # "stream" only when on: records made without it keep their identity (and resume).
            "options": {"timeout_s": o.timeout_s, "max_retries": o.max_retries}
            | ({"stream": True} if o.stream else {}),
            "profile": self.profile,
            "sampling_fields": sent_fields(self.profile, o.send),
            "server_defaults": self.server_defaults,
            # "send" only when not all: records made before it keep their identity (and resume).
            **(self._minimal() if o.send != "all" else {}),
            # only when the served file is on this machine (compare --checkpoints checks it)
            **({"vocab_sha256": self.vocab_sha256} if self.vocab_sha256 else {}),
            **self._annotations,
        }

    def _minimal(self) -> dict[str, Any]:
        """What the header says of a run that sent a client's few fields: which, and where the
        rest came from (the server's reported defaults, or a server that reports none)."""
        said: dict[str, Any] = {"send": self.options.send, "sent": list(ALWAYS_SENT)}
        if self.server_defaults is None:
            said["server_defaults_note"] = (
                "not exposed by this server: the sampling fields not sent took defaults this "
                "record cannot name"
            )
        return said

    # --- generation ----------------------------------------------------------------------
    def generate(self, samples: Sequence[Sample], params: SamplingParams, on_done: OnDone) -> None:
        run_async(self._generate(samples, params, on_done))

    async def _generate(self, samples: Sequence[Sample], params: SamplingParams, on_done: OnDone) -> None:
        pending = iter(samples)  # shared by the workers: each takes the next item when free
        workers = max(1, min(self.options.concurrency, len(samples)))

        async def work(channel: Channel) -> None:
            for sample in pending:
                completion = await self._request(channel, sample, params)
                if self.options.retokenize and completion.error is None and completion.token_ids is None:
                    await self._retokenize(channel, completion)
                on_done(completion)

        async with self._channels(workers) as channels:
            await asyncio.gather(*(work(ch) for ch in channels))

    @contextlib.asynccontextmanager
    async def _channels(self, n: int) -> AsyncIterator[list[Channel]]:
        """One channel per worker: own lean connections for http://, a shared aiohttp session else."""
        if self.base_url.startswith("http://"):
            endpoint = Endpoint.from_url(self.base_url, os.environ.get(self.options.api_key_env))
            lean = [Connection(endpoint, self.options.timeout_s) for _ in range(n)]
            try:
                yield list(lean)
            finally:
                for conn in lean:
                    conn.close()
            return
        async with self._session() as session:
            shared = AiohttpChannel(session)
            yield [shared] * n

    def payload(self, sample: Sample, params: SamplingParams) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "model": self.model,
            "temperature": params.temperature,
            "seed": params.seed_for(sample),
            "max_tokens": params.max_tokens,
        }
        # Servers apply their own defaults otherwise, greedy or not (see sampling_body); a run
        # that measures what a client gets leaves them to the server, as the client does.
        if self.options.send == "all":
            body.update(sampling_body(self.profile, params))
        if self.options.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}  # token counts where supported
        if sample.messages is not None:
            body["messages"] = list(sample.messages)
            if params.logprobs:
                body["logprobs"] = True
                body["top_logprobs"] = params.top_logprobs
            if params.enable_thinking is not None:
                body["chat_template_kwargs"] = {"enable_thinking": params.enable_thinking}
            return f"{self.base_url}/v1/chat/completions", body
        body["prompt"] = sample.prompt
        if params.logprobs:
            body["logprobs"] = params.top_logprobs
        return f"{self.base_url}/v1/completions", body

    async def _request(self, channel: Channel, sample: Sample, params: SamplingParams) -> Completion:
        url, body = self.payload(sample, params)
        data = body_bytes(body)
        t0 = time.perf_counter()
        last = "no attempt made"
        for attempt in range(self.options.max_retries + 1):
            wait: float | None = None  # what the server asked for (Retry-After), if anything
            try:
                sent = time.perf_counter()
                if self.options.stream:
                    (status, raw, retry_after), arrivals = await channel.post_stream(url, data)
                else:
                    status, raw, retry_after = await channel.post(url, data)
            except TransportError as exc:
                last = f"connection error: {exc}"
            except asyncio.TimeoutError:
                return self._failed(sample.id, f"timeout after {self.options.timeout_s:g} s", t0)
            except ValueError as exc:  # a protocol error retrying won't fix
                return self._failed(sample.id, str(exc), t0)
            else:
                if status in RETRY_STATUS:
                    last = f"HTTP {status}: {self._snippet(raw, 200)}"
                    wait = retry_after_s(retry_after)
                    if wait is not None and wait > self._max_wait_s():
                        return self._failed(sample.id, f"{last} (the server asked to retry after "
                                            f"{wait:g} s, more than this run waits)", t0)  # fmt: skip
                elif status >= 400:  # 4xx: retrying won't help
                    return self._failed(sample.id, f"HTTP {status}: {self._snippet(raw, 300)}", t0)
                else:
                    try:
                        if self.options.stream:
                            return parse_stream(sample.id, raw, arrivals, sent, time.perf_counter() - t0)
                        return parse_response(sample.id, raw, time.perf_counter() - t0)
                    except ValueError as exc:
                        # A 200 without an answer (null content, no choices, a truncated body)
                        # is a server fault like a 5xx, never an empty answer: retry it.
                        last = f"{exc}: {self._snippet(raw, 200)!r}"
            if attempt < self.options.max_retries:
                delay = self.options.backoff_s * 2**attempt * (0.5 + random.random() / 2)
                await asyncio.sleep(max(delay, wait or 0.0))
        return self._failed(sample.id, f"{last} (after {self.options.max_retries + 1} attempts)", t0)

    def _max_wait_s(self) -> float:
        # A server may ask for minutes or hours (a spent quota). Waiting that long would stall
        # the whole run behind one item with no sign of life; more than one request's timeout
        # (capped at MAX_RETRY_AFTER_S) is recorded as an error at once, for a resume to retry.
        return min(self.options.timeout_s, MAX_RETRY_AFTER_S)

    def _redact(self, text: str) -> str:
        # Servers echo the Authorization header (and so the key) in error bodies.
        return redact_text(text, [self._api_key] if self._api_key else [])

    def _snippet(self, raw: bytes, n: int) -> str:
        """The start of a response body for an error message: redacted *before* it is cut, so
        a key the cut falls inside cannot leave its first characters behind."""
        return self._redact(text_of(raw))[:n]

    def _failed(self, item_id: str, error: str, t0: float) -> Completion:
        return Completion(item_id=item_id, error=self._redact(error), latency_s=time.perf_counter() - t0)

    async def _post(self, session: aiohttp.ClientSession, url: str, data: str) -> dict[str, Any]:
        async with session.post(url, data=data) as resp:
            raw = await resp.read()
            if resp.status in RETRY_STATUS:
                raise _RetryableError(f"HTTP {resp.status}: {self._snippet(raw, 200)}")
            if resp.status >= 400:
                raise ValueError(f"HTTP {resp.status}: {self._snippet(raw, 300)}")
        try:
            return json_object(raw)
        except ValueError as exc:
            raise ValueError(f"{exc}: {self._snippet(raw, 200)!r}") from exc

    async def _retokenize(self, channel: Channel, c: Completion) -> None:
        """Token ids of the text from the server's tokenizer, when it exposes one
        (``engines.tokenize``): a divergence then has a token index too."""
        for path in list(self._tokenize_paths):
            if path == "/extras/tokenize":
                reader: tokenize.Reader = "llama-cpp-python"
            else:
                reader = "llama-server" if self._annotations.get("profile") == "llama-server" else "openai"
            try:
                status, raw, _ = await channel.post(
                    f"{self.base_url}{path}", tokenize.body(reader, c.text, self.model)
                )
            except (TransportError, ValueError, asyncio.TimeoutError):
                continue
            if status in (404, 405) and path in self._tokenize_paths:
                # The server has no such endpoint: stop asking for it on every item. Items in
                # flight together may all learn it; the first to hear removes it.
                self._tokenize_paths.remove(path)
            ids = tokenize.token_ids(raw, c.text) if status == 200 else None
            if ids is not None:
                c.token_ids = ids
                c.token_source = "retokenized"
                return

    # --- probe ----------------------------------------------------------------------------
    def detokenize(self, ids: list[int]) -> str | None:
        """The server's text for token ids (llama-cpp-python, vLLM, SGLang), or None where it has
        no endpoint for it. A probe needs the common prefix to end on a token boundary: the
        shared characters of two texts can end inside the token where they diverge."""

        async def go() -> str | None:
            async with self._session() as s:
                for path, body in (
                    ("/extras/detokenize", {"model": self.model, "tokens": ids}),  # llama-cpp-python
                    ("/detokenize", {"model": self.model, "tokens": ids}),  # vLLM, SGLang
                ):
                    try:
                        out = await self._post(s, f"{self.base_url}{path}", json.dumps(body))
                    except (_RetryableError, ValueError, aiohttp.ClientError):
                        continue
                    text = out.get("text", out.get("prompt", out.get("content")))  # llama-server
                    if isinstance(text, str):
                        return text
            return None

        return asyncio.run(go())

    def probe_text(self, prompt_text: str, k: int) -> ProbeResult:
        """Top-k of the next token after a fully rendered prompt, via /v1/completions."""
        return self._next_token(prompt_text, k, "http: /v1/completions, one pass over prompt + prefix")

    def probe_ids(self, ids: list[int], k: int) -> ProbeResult:
        """Top-k of the next token after a prompt given as token ids (vLLM and SGLang take a
        list of ids as the prompt): the context is exactly these tokens."""
        return self._next_token(ids, k, "http: /v1/completions over token ids, one pass over prompt + prefix")

    def _next_token(self, prompt: str | list[int], k: int, method: str) -> ProbeResult:
        async def go() -> dict[str, Any]:
            body = {"model": self.model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0, "logprobs": k}
            async with self._session() as s:
                return await self._post(s, f"{self.base_url}/v1/completions", json.dumps(body))

        return next_token(asyncio.run(go()), k, method)

    def chat_ids(self, messages: Sequence[Mapping[str, Any]], chat_kwargs: Mapping[str, Any]) -> list[int]:
        """The token ids of ``messages`` as the server renders them for generation (its own chat
        template, the assistant turn opened): vLLM's ``/tokenize`` with ``messages``."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "add_generation_prompt": True,
            "add_special_tokens": False,  # vLLM's default for chat: the template adds its own
        }
        if chat_kwargs:
            body["chat_template_kwargs"] = dict(chat_kwargs)
        return self._tokens("/tokenize", body, "render chat messages (POST /tokenize with messages)")

    def text_ids(self, text: str) -> list[int]:
        """The server's token ids of a text, without special tokens."""
        return self._tokens("/tokenize", json.loads(tokenize.body("openai", text, self.model)), "tokenize")

    def _tokens(self, path: str, body: Mapping[str, Any], what: str) -> list[int]:
        async def go() -> dict[str, Any]:
            async with self._session() as s:
                return await self._post(s, f"{self.base_url}{path}", json.dumps(body))

        try:
            out = asyncio.run(go())
        except (_RetryableError, ValueError, aiohttp.ClientError) as exc:
            raise EngineError(
                f"{self.base_url} cannot {what}: {exc}; give the model's chat template instead "
                "(--template / [probes] template: a model folder, tokenizer_config.json, .gguf or Jinja file)"
            ) from None
        tokens = out.get("tokens")
        if not isinstance(tokens, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in tokens
        ):
            raise EngineError(
                f"{self.base_url}{path} answered without a list of token ids: {json.dumps(out)[:200]}"
            )
        return tokens

    def close(self) -> None:
        pass


async def _get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=30)) as resp:
        if resp.status != 200:
            raise ValueError(f"GET {url}: HTTP {resp.status}")
        return await resp.json(content_type=None)


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """A Retry-After header in seconds: delay-seconds or an HTTP-date (RFC 9110 §10.2.3);
    None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP-date is always GMT
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))
