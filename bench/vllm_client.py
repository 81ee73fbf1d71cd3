"""servediff against vLLM's own load generator, on one vLLM server: is servediff ever the bottleneck?

    python bench/vllm_client.py BENCH_DIR            # the folder the bench phase wrote

The bench phase of ``scripts/gpu/vllm-study.sh`` starts one vLLM server and drives it, alternately
(round 1: vLLM first, round 2: servediff first), with ``vllm bench serve`` (``--backend openai-chat
--dataset-name custom --skip-chat-template --temperature 0``) and ``servediff run --engine http
--stream --top-logprobs 0 --temperature 0``: the same 1,000 GSM8K questions as one user message
each, at most 256 tokens, streamed, at 64 and 256 requests in flight. Each side's throughput is
its own measure over the same span, first request sent to last answer received: vLLM's
``duration`` (its result JSON) and, for servediff, the record's items (``finished_at`` minus
``latency_s`` for the first start). Output tokens are what each side counted (vLLM: the server's
``usage``; servediff: the completion's tokens), so a different number of tokens shows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

TARGET = 0.97  # servediff's output tokens/s ÷ vLLM bench's, at every level


@dataclass(frozen=True, slots=True)
class Side:
    client: str  # "vllm" | "servediff"
    concurrency: int
    round: int
    requests: int
    failed: int
    output_tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds


def read_vllm(path: Path, concurrency: int, rnd: int) -> Side:
    result = json.loads(path.read_text())
    return Side(
        "vllm",
        concurrency,
        rnd,
        int(result["completed"]),
        int(result.get("failed", 0)),
        int(result["total_output_tokens"]),
        float(result["duration"]),
    )


def read_servediff(path: Path, concurrency: int, rnd: int) -> Side:
    lines = path.read_text().splitlines()
    items = [json.loads(line) for line in lines[1:] if line.strip()]
    done = [i for i in items if not i.get("error")]
    start = min(i["finished_at"] - i["latency_s"] for i in done)
    end = max(i["finished_at"] for i in done)
    tokens = sum(int(i.get("n_tokens") or 0) for i in done)
    return Side("servediff", concurrency, rnd, len(done), len(items) - len(done), tokens, end - start)


def sides(folder: Path, notes: list[str]) -> list[Side]:
    """Every run of the folder that finished, in the order they ran (order.txt: client, level, round,
    t0, t1, rc); a run that did not (its exit status, 124 where the phase's time limit stopped it)
    is named in ``notes`` and its round left out of the ratios."""
    out = []
    for line in (folder / "order.txt").read_text().splitlines():
        client, level, rnd, _t0, _t1, rc = line.split()
        if rc != "0":
            notes.append(f"- {client} at {level} in flight, round {rnd}: exited {rc}, its round left out")
            continue
        c, r = int(level), int(rnd)
        if client == "vllm":
            out.append(read_vllm(folder / f"vllm.c{c}.r{r}.json", c, r))
        else:
            out.append(read_servediff(folder / f"servediff.c{c}.r{r}.jsonl", c, r))
    return out


def table(runs: list[Side]) -> list[str]:
    rows = [
        "| in flight | round | order | vLLM bench: tok/s (tokens, s) | servediff: tok/s (tokens, s) "
        "| servediff ÷ vLLM |",
        "|---|---|---|---|---|---|",
    ]
    ratios: dict[int, list[float]] = {}
    for c in sorted({s.concurrency for s in runs}):
        for r in sorted({s.round for s in runs if s.concurrency == c}):
            pair = [s for s in runs if s.concurrency == c and s.round == r]
            v = next((s for s in pair if s.client == "vllm"), None)
            d = next((s for s in pair if s.client == "servediff"), None)
            if v is None or d is None:  # the other side did not finish (a note says so)
                continue
            first = pair[0].client
            ratio = d.tokens_per_s / v.tokens_per_s
            ratios.setdefault(c, []).append(ratio)
            rows.append(
                f"| {c} | {r} | {first} first | {v.tokens_per_s:,.0f} ({v.output_tokens:,}, {v.seconds:.1f}) "
                f"| {d.tokens_per_s:,.0f} ({d.output_tokens:,}, {d.seconds:.1f}) | {ratio:.3f} |"
            )
    rows.append("")
    for c, rs in ratios.items():
        verdict = "met" if min(rs) >= TARGET else "not met"
        rows.append(
            f"- {c} in flight: servediff ÷ vLLM bench {statistics.median(rs):.3f} (median of {len(rs)} "
            f"rounds, lowest {min(rs):.3f}); target ≥ {TARGET}: {verdict}"
        )
    failed = [s for s in runs if s.failed]
    for s in failed:
        rows.append(f"- {s.client} at {s.concurrency} in flight, round {s.round}: {s.failed} requests failed")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    args = ap.parse_args(argv)
    notes: list[str] = []
    rows = table(sides(args.folder, notes))
    print("\n".join(rows + notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
