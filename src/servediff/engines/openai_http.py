"""Any OpenAI-compatible server: vLLM, SGLang, llama.cpp, TGI, Ollama.

    servediff run --engine http --base-url http://127.0.0.1:8000 --suite prompts --out a.jsonl

Chat items go to ``/v1/chat/completions``, raw prompts to ``/v1/completions``. The client is
aiohttp with one pooled session and a semaphore: measured, httpx's pool got slower as
concurrency rose while aiohttp kept up (see BENCHMARKS.md). Retries (with backoff) happen only
where a retry can help: connection errors, 429 and 5xx. Whatever still fails becomes an
error on its item.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from servediff.engines import EngineError, OnDone, ProbeResult
from servediff.types import Completion, Sample, SamplingParams, TokenLogprob

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


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


class _RetryableError(Exception):
    pass


class HTTPEngine:
    kind = "http"

    def __init__(self, options: HTTPOptions, label: str = "") -> None:
        self.options = options
        self.label = label
        self.base_url = options.base_url.rstrip("/")
        if self.base_url.endswith("/v1"):
            self.base_url = self.base_url[: -len("/v1")]
        self.server_version: str | None = None
        self.model: str | None = options.model
        self._discover()

    # --- discovery: which model, which version -------------------------------------------
    def _discover(self) -> None:
        async def go() -> tuple[Any, Any]:
            async with self._session() as s:
                models = await _get_json(s, f"{self.base_url}/v1/models")
                version = None
                for path in ("/version", "/v1/version"):
                    try:
                        version = await _get_json(s, f"{self.base_url}{path}")
                        break
                    except (aiohttp.ClientError, ValueError, asyncio.TimeoutError):
                        continue
                return models, version

        try:
            models, version = asyncio.run(go())
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, OSError) as exc:
            raise EngineError(f"cannot reach {self.base_url}/v1/models: {exc}") from exc
        served = [m.get("id") for m in models.get("data", []) if isinstance(m, dict)]
        if self.model is None:
            if not served:
                raise EngineError(f"{self.base_url} lists no models; pass --model")
            self.model = served[0]
        elif served and self.model not in served:
            raise EngineError(f"{self.base_url} serves {served}, not {self.model!r}")
        if isinstance(version, dict):
            self.server_version = str(version.get("version") or version)

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
            "server_version": self.server_version,
            "options": {"timeout_s": o.timeout_s, "max_retries": o.max_retries},
        }

    # --- generation ----------------------------------------------------------------------
    def generate(self, samples: Sequence[Sample], params: SamplingParams, on_done: OnDone) -> None:
        asyncio.run(self._generate(samples, params, on_done))

    async def _generate(self, samples: Sequence[Sample], params: SamplingParams, on_done: OnDone) -> None:
        sem = asyncio.Semaphore(max(self.options.concurrency, 1))
        async with self._session() as session:

            async def one(sample: Sample) -> None:
                async with sem:
                    completion = await self._request(session, sample, params)
                if self.options.retokenize and completion.error is None and completion.token_ids is None:
                    await self._retokenize(session, completion)
                on_done(completion)

            await asyncio.gather(*(one(s) for s in samples))

    def payload(self, sample: Sample, params: SamplingParams) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "model": self.model,
            "temperature": params.temperature,
            "seed": params.seed,
            "max_tokens": params.max_tokens,
        }
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

    async def _request(
        self, session: aiohttp.ClientSession, sample: Sample, params: SamplingParams
    ) -> Completion:
        url, body = self.payload(sample, params)
        data = json.dumps(body)
        t0 = time.perf_counter()
        last = "no attempt made"
        for attempt in range(self.options.max_retries + 1):
            try:
                raw = await self._post(session, url, data)
                return parse_response(sample.id, raw, time.perf_counter() - t0)
            except _RetryableError as exc:
                last = str(exc)
            except aiohttp.ClientConnectionError as exc:
                last = f"connection error: {exc}"
            except asyncio.TimeoutError:
                return _failed(sample.id, f"timeout after {self.options.timeout_s:g} s", t0)
            except (aiohttp.ClientError, ValueError) as exc:  # 4xx, broken JSON: retrying won't help
                return _failed(sample.id, str(exc), t0)
            if attempt < self.options.max_retries:
                delay = self.options.backoff_s * 2**attempt
                await asyncio.sleep(delay * (0.5 + random.random() / 2))
        return _failed(sample.id, f"{last} (after {self.options.max_retries + 1} attempts)", t0)

    async def _post(self, session: aiohttp.ClientSession, url: str, data: str) -> dict[str, Any]:
        async with session.post(url, data=data) as resp:
            text = await resp.text()
            if resp.status in RETRY_STATUS:
                raise _RetryableError(f"HTTP {resp.status}: {text[:200]}")
            if resp.status >= 400:
                raise ValueError(f"HTTP {resp.status}: {text[:300]}")
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"response is not JSON ({exc}): {text[:200]!r}") from exc
        if not isinstance(parsed, dict):
            raise ValueError(f"response is not a JSON object: {text[:200]!r}")
        return parsed

    async def _retokenize(self, session: aiohttp.ClientSession, c: Completion) -> None:
        """Token ids of the text from the server's tokenizer, when it exposes one.

        Without token data a divergence has only a character index; retokenizing the text gives
        a token index too. It can split differently from generation, so it is marked as such.
        """
        for path, body in (
            ("/extras/tokenize", {"input": c.text}),  # llama-cpp-python
            ("/tokenize", {"model": self.model, "prompt": c.text, "add_special_tokens": False}),
        ):
            try:
                async with session.post(f"{self.base_url}{path}", json=body) as resp:
                    if resp.status != 200:
                        continue
                    out = await resp.json()
            except (aiohttp.ClientError, ValueError, asyncio.TimeoutError):
                continue
            tokens = out.get("tokens") if isinstance(out, dict) else None
            if isinstance(tokens, list) and all(isinstance(t, int) for t in tokens):
                c.token_ids = tokens
                c.token_source = "retokenized"
                return

    # --- probe ----------------------------------------------------------------------------
    def probe_text(self, prompt_text: str, k: int) -> ProbeResult:
        """Top-k of the next token after a fully rendered prompt, via /v1/completions."""

        async def go() -> dict[str, Any]:
            body = {
                "model": self.model,
                "prompt": prompt_text,
                "max_tokens": 1,
                "temperature": 0.0,
                "logprobs": k,
            }
            async with self._session() as s:
                return await self._post(s, f"{self.base_url}/v1/completions", json.dumps(body))

        raw = asyncio.run(go())
        top = raw["choices"][0]["logprobs"]["top_logprobs"][0]
        pairs = sorted(((str(t), float(v)) for t, v in top.items()), key=lambda x: -x[1])
        return ProbeResult(tuple(pairs[:k]), "http: /v1/completions, one pass over prompt + prefix")

    def close(self) -> None:
        pass


async def _get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=30)) as resp:
        if resp.status != 200:
            raise ValueError(f"GET {url}: HTTP {resp.status}")
        return await resp.json(content_type=None)


def _failed(item_id: str, error: str, t0: float) -> Completion:
    return Completion(item_id=item_id, error=error, latency_s=time.perf_counter() - t0)


def parse_response(item_id: str, raw: dict[str, Any], latency: float) -> Completion:
    """A chat or text completion response → Completion. Malformed shapes raise ValueError."""
    try:
        choice = raw["choices"][0]
        if "message" in choice:
            text = choice["message"].get("content") or ""
            lps = _chat_logprobs(choice.get("logprobs"))
        else:
            text = choice["text"]
            lps = _text_logprobs(choice.get("logprobs"))
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ValueError(f"unexpected response shape ({exc!r}): {str(raw)[:200]}") from exc
    usage = raw.get("usage") or {}
    n_tokens = usage.get("completion_tokens")
    return Completion(
        item_id=item_id,
        text=text,
        finish_reason=choice.get("finish_reason"),
        latency_s=latency,
        n_tokens=n_tokens if isinstance(n_tokens, int) else (len(lps) if lps else None),
        tokens=[t.token for t in lps] if lps else None,
        logprobs=lps,
        token_source="engine" if lps else None,
    )


def _chat_logprobs(block: Any) -> list[TokenLogprob] | None:
    if not block or not block.get("content"):
        return None
    return [
        TokenLogprob(
            e["token"],
            float(e["logprob"]),
            tuple((t["token"], float(t["logprob"])) for t in e.get("top_logprobs") or ()),
        )
        for e in block["content"]
    ]


def _text_logprobs(block: Any) -> list[TokenLogprob] | None:
    if not block or not block.get("tokens"):
        return None
    tops = block.get("top_logprobs") or [None] * len(block["tokens"])
    out = []
    for tok, lp, top in zip(block["tokens"], block["token_logprobs"], tops):
        pairs = sorted(((str(t), float(v)) for t, v in (top or {}).items()), key=lambda x: -x[1])
        out.append(TokenLogprob(tok, float(lp), tuple(pairs)))
    return out
