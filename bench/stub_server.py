"""A minimal OpenAI-compatible server that answers instantly with a fixed short completion.

    python bench/stub_server.py --port 8111          # serve until killed
    python bench/stub_server.py --port 8111 --cpu 1  # pinned to one core

It exists to measure HTTP clients, so it must cost as little as possible per request: a raw
asyncio protocol (on uvloop when installed) that parses just enough HTTP/1.1 to find the body,
keeps connections alive, and writes one precomputed response. It does not parse the JSON body.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

CHAT = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "stub",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "The answer is 42."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18},
    }
).encode()
TEXT = json.dumps(
    {
        "id": "cmpl-bench",
        "object": "text_completion",
        "created": 0,
        "model": "stub",
        "choices": [{"index": 0, "text": "The answer is 42.", "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18},
    }
).encode()
MODELS = json.dumps({"object": "list", "data": [{"id": "stub", "object": "model"}]}).encode()


def _response(status: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


ROUTES = {
    b"/v1/chat/completions": _response("200 OK", CHAT),
    b"/v1/completions": _response("200 OK", TEXT),
    b"/v1/models": _response("200 OK", MODELS),
}
NOT_FOUND = _response("404 Not Found", b"{}")


class StubProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data
        out = []
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buf[:end]
            length = 0
            i = head.lower().find(b"content-length:")
            if i >= 0:
                length = int(head[i + 15 : head.find(b"\r\n", i) if head.find(b"\r\n", i) > 0 else None])
            if len(buf) < end + 4 + length:
                break
            path = head.split(b" ", 2)[1].split(b"?", 1)[0]
            out.append(ROUTES.get(path, NOT_FOUND))
            buf = buf[end + 4 + length :]
        self.buf = buf
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(StubProtocol, host, port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--cpu", type=int, help="pin to this CPU core")
    args = ap.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    try:
        import uvloop

        uvloop.run(serve(args.host, args.port))
    except ImportError:
        asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
