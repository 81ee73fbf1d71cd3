"""The audit's workloads as pure plans: which prompt goes out in which slot of which block.

    servediff audit --base-url URL --control-url URL --workload needle --levels 8 --trials 100

Every prompt of a workload is first sent alone, one request at a time, ``repeats`` times: the
first answer is that prompt's reference, the later ones test it alone again with its prefix
now in the server's cache (warm against cold). Then, at each concurrency level L, ``blocks`` blocks
of L requests go out with L requests in flight: the needle at a random slot of every block, the
other slots drawn from the workload's other prompts. Every request under load is a trial of its
prompt against that prompt's reference.

- ``needle``: vLLM's test (tests/v1/determinism/test_batch_invariance.py,
  ``test_v1_generation_is_deterministic_across_batch_sizes_with_needle``): one fixed prompt at
  a random position among fillers, many trials.
- ``mixed``: the fillers mix short and long prompts, as SGLang's ``--test-mode mixed``
  (python/sglang/test/test_deterministic.py) mixes two short prompts with a long one, so the
  needle shares batches with prefills of very different lengths.
- ``prefix``: prompts that are prefixes of one long text, cut at 1, 511, 2,048 and 4,097
  characters as SGLang's ``--test-mode prefix`` cuts its long prompt (characters there too, not
  tokens), capped at ``max_prefix`` for servers with a small context; a shared prefix puts the
  radix/prefix cache in play.

Randomness is one seeded ``numpy.random.Generator``: a plan is a function of its arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servediff.audit.names import WORKLOADS
from servediff.suites.prompts import PROMPTS
from servediff.types import Sample

PREFIX_LENGTHS = (1, 511, 2048, 4097)  # SGLang's test_deterministic.py, prefix mode
NEEDLE = "code-fizzbuzz"  # a low-entropy prompt: a flip there is the engine's, not the model's whim
SHORT = 6  # short fillers: the built-in prompts after the needle


@dataclass(frozen=True, slots=True)
class Prompt:
    key: str
    text: str


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a plan; ``id`` is its item id in the record."""

    id: str
    prompt: str  # Prompt.key
    block: int  # -1: sent alone
    slot: int
    round: int  # the timing round (throughput is measured per round)
    needle: bool


@dataclass(frozen=True, slots=True)
class PlanOptions:
    blocks: int = 25  # blocks per level: needle trials per level
    repeats: int = 2  # alone sends per prompt; the first is the reference
    rounds: int = 5  # timing rounds per level (>= 2 for an interval on throughput)
    seed: int = 0
    max_prefix: int = 4097  # characters; cap for servers with a small context


@dataclass(frozen=True, slots=True)
class Plan:
    workload: str
    prompts: tuple[Prompt, ...]
    needle: str
    alone: tuple[Request, ...]
    loaded: dict[int, tuple[Request, ...]]  # level -> requests in the order they are sent

    def samples(self, requests: tuple[Request, ...]) -> tuple[Sample, ...]:
        text = {p.key: p.text for p in self.prompts}
        return tuple(
            Sample(
                id=r.id,
                messages=({"role": "user", "content": text[r.prompt]},),
                metadata={
                    "prompt": r.prompt,
                    "block": r.block,
                    "slot": r.slot,
                    "round": r.round,
                    "needle": r.needle,
                },
            )
            for r in requests
        )


def long_text() -> str:
    """One long text that every prefix prompt is cut from: the built-in prompts, over and over."""
    parts = list(PROMPTS.values())
    out = ""
    while len(out) < max(PREFIX_LENGTHS):
        out += " ".join(parts) + " "
    return out


def prompts_for(workload: str, max_prefix: int) -> tuple[Prompt, ...]:
    """The workload's prompts, the needle first."""
    texts = list(PROMPTS.items())
    needle = Prompt(NEEDLE, PROMPTS[NEEDLE])
    short = [Prompt(k, v) for k, v in texts if k != NEEDLE][:SHORT]
    if workload == "needle":
        return (needle, *short)
    if workload == "mixed":
        body = long_text()
        longs = [
            Prompt(f"long-{n}", f"Summarise these requests in one line each: {body[:n]}")
            for n in (1500, 3000)
        ]
        return (needle, *short[:3], *longs)
    if workload == "prefix":
        body = long_text()
        cuts = sorted({min(n, max_prefix) for n in PREFIX_LENGTHS})
        return (needle, *(Prompt(f"prefix-{n}", body[:n]) for n in cuts))
    raise ValueError(f"unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}")


def plan(workload: str, levels: tuple[int, ...], opts: PlanOptions) -> Plan:
    """The requests of one workload: the alone sends, then ``opts.blocks`` blocks per level."""
    if opts.blocks < 1 or opts.repeats < 1 or opts.rounds < 1:
        raise ValueError("blocks, repeats and rounds must be at least 1")
    if any(level < 2 for level in levels):
        raise ValueError(f"levels under load must be at least 2 (got {list(levels)}); alone is always run")
    prompts = prompts_for(workload, opts.max_prefix)
    keys = [p.key for p in prompts]
    alone = tuple(
        Request(f"alone.{k}.r{r}", k, -1, 0, 0, k == keys[0])
        for r in range(1, opts.repeats + 1)
        for k in keys
    )
    rng = np.random.default_rng(opts.seed)
    loaded: dict[int, tuple[Request, ...]] = {}
    for level in levels:
        out: list[Request] = []
        for b in range(opts.blocks):
            at = int(rng.integers(level))
            fill = rng.integers(1, len(keys), size=level)  # fillers: any prompt but the needle
            rnd = b * min(opts.rounds, opts.blocks) // opts.blocks
            for s in range(level):
                key = keys[0] if s == at else keys[int(fill[s])]
                out.append(Request(f"b{b:05d}.s{s:03d}", key, b, s, rnd, s == at))
        loaded[level] = tuple(out)
    return Plan(workload, prompts, keys[0], alone, loaded)
