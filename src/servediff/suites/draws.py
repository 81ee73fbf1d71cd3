"""Sampled runs: k draws per item, each with a seed that every configuration shares.

servediff run --engine llamacpp --config stock --suite mmlu --temperature 0.7 --samples 8 --out a.jsonl

A sampled run is an ordinary run over a larger suite: item ``q7`` drawn k times becomes the items
``q7#0`` … ``q7#(k-1)``, each with metadata ``{"item": "q7", "sample": s, "seed": …}``. Every reader
of records (resume, error retry, scoring, the control comparison) therefore works per draw with no
change. The seed of a draw depends only on the run's base seed, the item id and the draw's index,
never on the configuration or the order of requests: two configurations run with the same base
seed send the same seed for the same draw, which couples their samples (a paired design).
"""

from __future__ import annotations

import dataclasses
import hashlib

from servediff.suites.base import Suite
from servediff.types import MAX_SAMPLES, Sample, SamplingParams

SEP = "#"
SEED_BITS = 31  # a positive int32: the widest seed every engine's API accepts


def draw_seed(base_seed: int, item_id: str, index: int) -> int:
    """A seed fixed by (base seed, item, draw index): SHA-256 of the three, cut to 31 bits."""
    key = f"{base_seed}\x00{item_id}\x00{index}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % (1 << SEED_BITS)


def draw_id(item_id: str, index: int) -> str:
    return f"{item_id}{SEP}{index}"


def draws(sample: Sample, params: SamplingParams) -> list[Sample]:
    """The item's k draws, each with its own id, seed and a note of where it came from."""
    out = []
    for s in range(params.samples):
        seed = draw_seed(params.seed, sample.id, s)
        meta = {**sample.metadata, "item": sample.id, "sample": s, "seed": seed}
        out.append(dataclasses.replace(sample, id=draw_id(sample.id, s), metadata=meta, seed=seed))
    return out


def expand(suite: Suite, params: SamplingParams) -> Suite:
    """The suite a run sends: each item drawn ``params.samples`` times when the run samples
    (temperature > 0), the suite itself when it is greedy."""
    if not params.sampled:
        return suite
    if not 1 <= params.samples <= MAX_SAMPLES:  # the CLI and experiment files refuse it earlier
        raise ValueError(f"samples must be from 1 to {MAX_SAMPLES}, got {params.samples}")
    samples = tuple(d for s in suite.samples for d in draws(s, params))
    return dataclasses.replace(suite, samples=samples)
