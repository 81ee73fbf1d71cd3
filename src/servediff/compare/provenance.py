"""What two runs must share, besides their items, to be one comparison — checked from the records.

    servediff compare runs/strict.jsonl runs/flexible.jsonl     # refused: different filters

A record imported from another tool says in ``extra.imported_from`` how the model was asked
(prompt template or solver chain, few-shot count, chat template hash) and how its answers were
scored (filter, metric, scorer). ``import`` checks these when several logs come in one command;
``compare`` checks them again, since runs imported one by one meet there first. The same chat
log imported once with strict-match and once with flexible-extract has byte-identical texts and
different correctness: without this check that reads as a quality change.

A temperature that was not recorded (None) is unknown, not greedy: the server's default applied,
and llama.cpp's server samples by default. A comparison involving such a run needs ``--force``.
"""

from __future__ import annotations

from typing import Any

from servediff.records import Header

# How the model was asked (prompt template, solver, few-shot count, chat template) and how it
# was scored (filter, metric, scorer and its options).
SAME_SETUP = (
    "prompt_template",
    "chat_template_sha256",
    "solver",
    "num_fewshot",
    "filter",
    "metric",
    "scorer",
    "scorer_options",
)


def source_of(h: Header) -> dict[str, Any]:
    source = h.extra.get("imported_from")
    return source if isinstance(source, dict) else {}


def setup_problems(a: Header, b: Header, where: str) -> list[str]:
    """Why two imported runs were not set up alike (empty when they were, or when neither is
    an import: a servediff run records its own prompts and sampling)."""
    sa, sb = source_of(a), source_of(b)
    if not sa and not sb:
        return []
    if bool(sa) != bool(sb):
        return []  # an import against a native run: the suite content hash decides
    return [
        f"{where}: different {key.replace('_', ' ')} ({sa.get(key)!r} vs {sb.get(key)!r})"
        for key in SAME_SETUP
        if sa.get(key) != sb.get(key)
    ]


def unknown_temperature(h: Header, where: str) -> list[str]:
    if h.sampling.temperature is not None:
        return []
    return [
        f"{where}: temperature not recorded (the server's default applied, which may sample), so "
        "differences may be draws rather than the configuration"
    ]


def tie_warning(h: Header, where: str) -> list[str]:
    """An import whose log-likelihood items scored every choice alike: their picks are the first
    choice by position, and the accuracy is the share of gold answers in that position."""
    ties = source_of(h).get("tied_items")
    if not isinstance(ties, int) or ties <= 0:
        return []
    return [
        f"{where}: {ties} of {len(h.suite.item_ids)} item(s) give every choice the same "
        "log-likelihood (a server that returns no continuation log-probabilities?): their answers "
        "and scores carry no information"
    ]
