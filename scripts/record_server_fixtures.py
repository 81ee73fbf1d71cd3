"""Record what a live OpenAI-compatible server answers, byte for byte, as test fixtures.

    python3 scripts/record_server_fixtures.py --base-url http://127.0.0.1:8000 \
        --out tests/data/vllm --engine vllm

servediff's tests read these files to check its parsers against the shapes a real server sends
(chat and text completions with logprobs, streams, prompt logprobs, /tokenize with a prompt and
with messages, /detokenize, /metrics, /v1/models, /version, and its error answers) without that
server, which may need a GPU. Nothing here is written by hand: each file holds the request as
sent and the status, content type and body as received. Run it again against a newer release to
see what changed (``git diff``).

Only the standard library is used, so it runs wherever the server runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

MESSAGES = [{"role": "user", "content": "Write one sentence about the sea."}]
PROMPT = "The capital of France is"
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma"
REPEAT = [{"role": "user", "content": f"Repeat this list exactly, three times, one per line: {WORDS}"}]


def call(base: str, method: str, path: str, body: Any = None, raw: bytes | None = None) -> dict[str, Any]:
    """One request; the answer as received (a body that is not UTF-8 is kept as latin-1 text)."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"{base}{path}", data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            status, ctype, payload = resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as exc:
        status, ctype, payload = exc.code, exc.headers.get("Content-Type", ""), exc.read()
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        text = payload.decode("latin-1")
    return {
        "request": {"method": method, "path": path, "body": body if raw is None else raw.decode()},
        "status": status,
        "content_type": ctype,
        "seconds": round(time.perf_counter() - t0, 3),
        "body": text,
    }


def exchanges(base: str, model: str) -> dict[str, dict[str, Any]]:
    """Name → one recorded exchange, in the order they are made."""
    chat = {"model": model, "messages": MESSAGES, "temperature": 0.0, "seed": 42, "max_tokens": 16}
    out: dict[str, dict[str, Any]] = {}
    out["models"] = call(base, "GET", "/v1/models")
    out["version"] = call(base, "GET", "/version")
    out["health"] = call(base, "GET", "/health")
    out["metrics_before"] = call(base, "GET", "/metrics")
    out["chat_logprobs"] = call(
        base, "POST", "/v1/chat/completions", {**chat, "logprobs": True, "top_logprobs": 5}
    )
    out["chat_stream"] = call(
        base,
        "POST",
        "/v1/chat/completions",
        {
            **chat,
            "logprobs": True,
            "top_logprobs": 5,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    text = {"model": model, "prompt": PROMPT, "temperature": 0.0, "seed": 42, "max_tokens": 8, "logprobs": 5}
    out["completion_logprobs"] = call(base, "POST", "/v1/completions", text)
    out["completion_stream"] = call(base, "POST", "/v1/completions", {**text, "stream": True})
    tokenized = call(
        base, "POST", "/tokenize", {"model": model, "prompt": PROMPT, "add_special_tokens": False}
    )
    out["tokenize_prompt"] = tokenized
    out["tokenize_messages"] = call(
        base,
        "POST",
        "/tokenize",
        {"model": model, "messages": MESSAGES, "add_generation_prompt": True, "add_special_tokens": False},
    )
    ids = json.loads(tokenized["body"]).get("tokens", []) if tokenized["status"] == 200 else []
    out["detokenize"] = call(base, "POST", "/detokenize", {"model": model, "tokens": ids})
    out["completion_ids_logprobs"] = call(
        base,
        "POST",
        "/v1/completions",
        {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0.0, "logprobs": 5},
    )
    out["prompt_logprobs"] = call(
        base,
        "POST",
        "/v1/completions",
        {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 5},
    )
    # A prompt whose answer repeats it: n-gram speculation finds drafts in it, so a tuned server's
    # counters move between metrics_before and metrics_after.
    out["chat_repeat"] = call(
        base, "POST", "/v1/chat/completions", {**chat, "messages": REPEAT, "max_tokens": 96}
    )
    out["metrics_after"] = call(base, "GET", "/metrics")
    # Errors, as a client meets them.
    out["error_unknown_model"] = call(
        base, "POST", "/v1/chat/completions", {**chat, "model": "no-such-model"}
    )
    out["error_too_long"] = call(base, "POST", "/v1/completions", {**text, "max_tokens": 10_000_000})
    out["error_bad_logprobs"] = call(base, "POST", "/v1/completions", {**text, "logprobs": 100_000})
    out["error_not_json"] = call(base, "POST", "/v1/chat/completions", raw=b"{not json")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True, help="the server's root, e.g. http://127.0.0.1:8000")
    ap.add_argument("--out", type=Path, required=True, help="folder to write NAME.json files into")
    ap.add_argument("--engine", required=True, help="what the server is, for the index (e.g. vllm)")
    ap.add_argument("--model", help="model id to ask for (default: the first /v1/models lists)")
    ap.add_argument("--prefix", default="", help="prefix of every file name (e.g. tuned-)")
    args = ap.parse_args(argv)
    base = args.base_url.rstrip("/")
    model = args.model
    if model is None:
        listed = call(base, "GET", "/v1/models")
        if listed["status"] != 200:
            print(f"error: {base}/v1/models answered HTTP {listed['status']}", file=sys.stderr)
            return 2
        model = json.loads(listed["body"])["data"][0]["id"]
    args.out.mkdir(parents=True, exist_ok=True)
    recorded = exchanges(base, model)
    for name, exchange in recorded.items():
        path = args.out / f"{args.prefix}{name}.json"
        text = json.dumps(exchange, indent=1, ensure_ascii=False)
        # the server names its model folder and its own source files by absolute path (the
        # recording machine's home): kept as "~" so that no machine's layout enters the fixtures
        home = json.dumps(str(Path.home()))[1:-1]
        path.write_text(text.replace(home + "/", "~/") + "\n", encoding="utf-8")
    version = recorded["version"]["body"] if recorded["version"]["status"] == 200 else "not exposed"
    index = {"engine": args.engine, "model": model, "version": version, "files": sorted(recorded)}
    (args.out / f"{args.prefix}index.json").write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    print(f"{len(recorded)} exchanges with {base} ({args.engine} {version}) written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
