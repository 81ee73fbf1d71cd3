"""Shadow traffic at scale: what the proxy adds to the primary's latency, and compare at 1M items.

    python bench/shadow.py --part proxy      # latency added on the primary path, shadow on and off
    python bench/shadow.py --part compare    # servediff compare, 2 × 100,000 and 2 × 1,000,000 items

Proxy: the primary and the candidate are bench/stub_server.py (answers at once), so what is
measured is the proxy itself. Each round sends the same requests directly to the primary and
through ``servediff shadow`` (mirroring every request, then relaying only with ``--sample 0``),
at concurrency 1 and 64, from one aiohttp client; latency is per request, sent to last byte.
Rounds alternate ABBA so that load from other processes falls on both sides alike.

Compare: two shadow records written with servediff's writer (``records.item_line``), as the proxy
writes them: chat messages, texts of a few hundred characters, usage, latency, the parameters as
sent; 30 % of the texts differ. The compare process is timed from outside (wall, CPU, max RSS).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import aiohttp
import numpy as np
from common import PYTHON, ROOT, Server, free_port, log, run_timed

BODY = json.dumps(
    {"model": "stub", "temperature": 0, "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}]}
).encode()


async def _load(url: str, n: int, concurrency: int) -> list[float]:
    latencies: list[float] = []
    todo = iter(range(n))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as s:

        async def worker() -> None:
            for _ in todo:
                t0 = time.perf_counter()
                async with s.post(url, data=BODY, headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                    assert r.status == 200
                latencies.append(time.perf_counter() - t0)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


def _shadow(primary: str, candidate: str, out: Path, sample: str) -> Server:
    port = free_port()
    argv = [PYTHON, "-m", "servediff", "shadow", "--primary", primary, "--candidate", candidate]
    argv += ["--listen", f"127.0.0.1:{port}", "--out", str(out), "--sample", sample]
    return Server(argv, "/servediff/shadow", out.parent / f"{out.name}.log", port)


def proxy(n: int, rounds: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="shadow-bench-"))
    stub = [PYTHON, str(ROOT / "bench" / "stub_server.py"), "--port"]
    pa, pb = free_port(), free_port()
    with (
        Server([*stub, str(pa)], "/v1/models", work / "primary.log", pa) as primary,
        Server([*stub, str(pb)], "/v1/models", work / "candidate.log", pb) as candidate,
    ):
        for mode, sample in (("shadow on", "1"), ("shadow off", "0")):
            with _shadow(primary.base_url, candidate.base_url, work / mode.replace(" ", "-"), sample) as sh:
                for c in (1, 64):
                    _measure(mode, c, n, rounds, primary.base_url, sh.base_url)
                log(f"{mode}: counts {json.dumps(_settled(sh.base_url))}")


def _settled(base_url: str, wait: float = 60.0) -> dict[str, int]:
    """The proxy's counts once every sampled request is mirrored, dropped or failed: the replay
    runs behind the primary path, so a count read at once can still be catching up."""
    deadline = time.monotonic() + wait
    while True:
        with urllib.request.urlopen(base_url + "/servediff/shadow") as r:
            counts: dict[str, int] = json.loads(r.read())
        ended = ("sampled_out", "mirrored", "dropped", "unparsed", "failed")
        pending = counts["requests"] - sum(counts[k] for k in ended)
        if pending - counts["candidate_errors"] <= 0 or time.monotonic() > deadline:
            return counts
        time.sleep(0.2)


def _measure(mode: str, c: int, n: int, rounds: int, direct: str, proxied: str) -> None:
    path = "/v1/chat/completions"
    got: dict[str, list[float]] = {"direct": [], "proxy": []}
    for r in range(rounds):
        order = ("direct", "proxy") if r % 2 == 0 else ("proxy", "direct")  # ABBA
        for side in order:
            url = (direct if side == "direct" else proxied) + path
            got[side] += asyncio.run(_load(url, n, c))
    d, p = np.array(got["direct"]) * 1000, np.array(got["proxy"]) * 1000
    d50, d99, p50, p99 = (
        np.percentile(d, 50),
        np.percentile(d, 99),
        np.percentile(p, 50),
        np.percentile(p, 99),
    )
    print(
        f"| {mode} | {c} | {len(d):,} | {d50:.2f} / {d99:.2f} ms | {p50:.2f} / {p99:.2f} ms "
        f"| +{p50 - d50:.2f} / +{p99 - d99:.2f} ms |",
        flush=True,
    )


def write_shadow_pair(items: int, work: Path, seed: int = 0) -> tuple[Path, Path]:
    """Two shadow records as the proxy writes them (its header shape, its item lines; answers
    that differ with their token ids and where they part, as the replay records them)."""
    from servediff.records import SuiteInfo, item_line, make_header, make_item
    from servediff.shadow.recorder import first_token
    from servediff.types import Completion, SamplingParams

    rng = random.Random(seed)
    words = [
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "that",
        "for",
        "it",
        "as",
        "was",
        "with",
        "be",
        "by",
        "on",
        "not",
        "answer",
        "step",
        "total",
        "model",
    ]
    session = hashlib.sha256(b"bench").hexdigest()
    suite = SuiteInfo(
        name="shadow-0001",
        version="1",
        source="shadow traffic",
        data_sha256="",
        content_sha256=session,
        item_ids=[],
    )
    paths = (work / "primary-0001.jsonl", work / "candidate-0001.jsonl")
    files = [p.open("w", encoding="utf-8") for p in paths]
    for f, side in zip(files, ("primary", "candidate")):
        engine = {"kind": "http", "base_url": "http://x", "shadow": side, "model": "m"}
        header = make_header(
            label=side,
            repeat=1,
            engine=engine,
            sampling=SamplingParams(max_tokens=0),
            suite=suite,
            concurrency=0,
            extra={"shadow": {"session": session, "segment": 1}},
        )
        f.write(header.model_dump_json() + "\n")
    # A word's token id: what the replay's tokenizer request gives for answers that differ.
    vocab = {w: 1000 + 37 * k for k, w in enumerate(words)}
    now = time.time()
    for i in range(items):
        prompt = " ".join(rng.choices(words, k=rng.randint(10, 40)))
        text = " ".join(rng.choices(words, k=rng.randint(40, 90)))
        other = text if rng.random() >= 0.3 else text[: rng.randrange(len(text))] + " and so on"
        item_id = hashlib.sha256(f"{i}".encode()).hexdigest()[:24]
        meta = {"path": "/v1/chat/completions", "sent": {"temperature": 0, "max_tokens": 128}}
        ids: tuple[list[int] | None, ...] = (None, None)
        metas = (meta, meta)
        if other != text:  # the replay retokenizes both answers and notes where they part
            ids = tuple([vocab.get(w, 7) for w in t.split(" ")] for t in (text, other))
            index, own, theirs = first_token(ids[0], ids[1])  # type: ignore[arg-type]
            metas = (
                {**meta, "first_token": [index, own, theirs]},
                {**meta, "first_token": [index, theirs, own]},
            )
        for f, t, token_ids, m in zip(files, (text, other), ids, metas):
            c = Completion(
                item_id,
                text=t,
                finish_reason="stop",
                latency_s=0.2 + rng.random(),
                n_tokens=len(t) // 4,
                finished_at=now + i * 0.01,
                token_ids=token_ids,
                token_source="retokenized" if token_ids else None,
            )
            f.write(item_line(make_item(c, [{"role": "user", "content": prompt}], None, m)))
    for f in files:
        f.close()
    return paths


class MemoryTaken:
    """The most memory the machine lost while the block ran: MemAvailable before, less its
    lowest value, sampled every 10 ms. Unlike the compare's own peak RSS (wait4) it counts
    every process it started and their shared memory (the read-ahead child's in-memory file),
    not the page cache the records are read through."""

    def __init__(self) -> None:
        self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def _available() -> int:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no MemAvailable in /proc/meminfo")

    def _sample(self) -> None:
        start = lowest = self._available()
        while not self._stop.wait(0.01):
            lowest = min(lowest, self._available())
        self.peak_mib = (start - lowest) / 2**20

    def __enter__(self) -> MemoryTaken:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def compare(items: int, sync: bool = True) -> None:
    """The records are written first (and synced to disk unless --no-sync); the machine's
    1-minute load average is read just before and just after the compare (a shared machine
    stretches wall time, and CPU time less)."""
    work = Path(tempfile.mkdtemp(prefix="shadow-compare-"))
    log(f"writing two shadow records of {items:,} items")
    a, b = write_shadow_pair(items, work)
    size = a.stat().st_size / 2**20
    if sync:
        # On disk, as a shadow session's records are by the time anyone compares them, so that
        # the write-back of 1.4 GB does not overlap the compare. It is not what makes the compare's
        # time vary from run to run: that is the first touch of cold memory (BENCHMARKS.md).
        os.sync()
    before = os.getloadavg()[0]
    with MemoryTaken() as taken:
        timed = run_timed([PYTHON, "-m", "servediff", "compare", str(a), str(b), "--md", str(work / "r.md")])
    after = os.getloadavg()[0]
    print(
        f"| {items:,} ({size:,.0f} MiB each) | {timed.seconds:.1f} s | {timed.cpu_s:.1f} s "
        f"| {timed.max_rss_mib:,.0f} MiB | {taken.peak_mib:,.0f} MiB | {before:.1f} → {after:.1f} |",
        flush=True,
    )
    subprocess.run(["rm", "-rf", str(work)], check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["proxy", "compare"], required=True)
    ap.add_argument("--requests", type=int, default=2000, help="per side, round and concurrency")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--items", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument(
        "--no-sync",
        action="store_true",
        help="compare the records while the system may still be writing them back (not synced first)",
    )
    args = ap.parse_args()
    if args.part == "proxy":
        print(
            "| mirroring | concurrency | requests per side | direct p50 / p99 | through the proxy p50 / p99 "
            "| added p50 / p99 |\n|---|---|---|---|---|---|"
        )
        proxy(args.requests, args.rounds)
    else:
        print(
            "| items per record | wall | CPU | max RSS | memory taken | load average (1 min) |\n"
            "|---|---|---|---|---|---|"
        )
        for n in args.items:
            compare(n, sync=not args.no_sync)


if __name__ == "__main__":
    sys.exit(main())
