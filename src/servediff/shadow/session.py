"""A shadow session from start to stop: the two servers' identities, the proxy on its address,
and on SIGINT/SIGTERM a drained queue, closed records and ``shadow.json`` with the counts.

    servediff shadow --primary http://a:8000 --candidate http://b:8000 --listen 127.0.0.1:9000 --out shadow/
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from servediff.shadow.mirror import Counts, Mirror, MirrorConfig
from servediff.shadow.proxy import Proxy, ProxyConfig
from servediff.shadow.recorder import Recorder, Side

# At the end, how long requests in flight may take to finish (then they are cancelled), and the
# queued copies to replay (then the rest is cancelled and counted unfinished): with the replay
# process's grace, the session is over within ~10 s of SIGTERM whatever the candidate does,
# inside common stop grace periods (Kubernetes: 30 s).
SHUTDOWN_S = 2.0
DRAIN_S = 4.0


@dataclass(frozen=True, slots=True)
class ShadowConfig:
    primary: str
    mirror: MirrorConfig
    host: str
    port: int
    out: Path
    rotate_mb: float | None = None
    # What the records say of each side besides its URL and model (a launched server's label,
    # argv and version).
    launched: dict[str, dict[str, Any]] = field(default_factory=dict)


async def identity(base_url: str, side: Side, api_key: str | None) -> dict[str, Any]:
    """What the header says of one side: its URL and the model it serves (when it says)."""
    engine: dict[str, Any] = {"kind": "http", "base_url": base_url, "shadow": side}
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = aiohttp.ClientTimeout(total=10)
    try:
        async with (
            aiohttp.ClientSession(headers=headers, timeout=timeout) as s,
            s.get(base_url.rstrip("/") + "/v1/models") as r,
        ):
            models = (await r.json()).get("data") or []
        engine["model"] = models[0]["id"] if models else None
    except (
        aiohttp.ClientError,
        asyncio.TimeoutError,
        OSError,
        ValueError,
        LookupError,
        TypeError,
        AttributeError,
    ):
        engine["model"] = None  # a server that lists no model still serves; its records say so
    return engine


def check_out(out: Path) -> None:
    """Raises ValueError when ``out`` already holds a session's records."""
    taken = sorted(out.glob("primary-*.jsonl")) + sorted(out.glob("candidate-*.jsonl"))
    if taken:
        raise ValueError(f"{taken[0]}: --out already holds a shadow session's records; choose another --out")


async def serve(config: ShadowConfig, ready: asyncio.Event | None = None) -> Counts:
    """Run until SIGINT or SIGTERM; returns the counts (also written to ``out/shadow.json``).
    Raises ValueError when ``out`` already holds records (a session is never appended to)."""
    # The client's key is never read here: the primary's identity is asked without one.
    candidate = config.mirror.candidate
    engines: dict[Side, dict[str, Any]] = {
        "primary": await identity(config.primary, "primary", None),
        "candidate": await identity(candidate.base_url, "candidate", candidate.api_key),
    }
    engines["candidate"]["top_logprobs"] = candidate.top_logprobs
    for side, known in engines.items():
        known.update(config.launched.get(side, {}))
    rotate = int(config.rotate_mb * (1 << 20)) if config.rotate_mb else None
    config.out.mkdir(parents=True, exist_ok=True)
    check_out(config.out)  # here, before anything listens: the replay process would only fail alone
    mirror = Mirror(Recorder(config.out, engines, uuid.uuid4().hex, rotate), config.mirror)
    app = Proxy(ProxyConfig(config.primary), mirror).app()
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_S)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        mirror.start()  # inside: whatever fails from here on, the finally stops the child
        await web.TCPSite(runner, config.host, config.port).start()
        print(f"shadow: listening on http://{config.host}:{config.port}", file=sys.stderr, flush=True)
        if ready is not None:
            ready.set()
        await stop.wait()
    finally:
        await runner.cleanup()  # no new requests: what is queued now is all there is
        counts = await loop.run_in_executor(None, mirror.stop, DRAIN_S)
        (config.out / "shadow.json").write_text(
            json.dumps(counts.as_dict(), indent=2) + "\n", encoding="utf-8"
        )
    return counts
