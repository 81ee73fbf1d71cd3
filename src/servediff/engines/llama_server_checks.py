"""Did a llama-server configuration do what it claims? Speculative decoding, prompt-cache reuse and
parallel slots, checked over one run from the server's own numbers.

    servediff experiment examples/llama-server.toml

Three sources, each named in the detail it produced:

* each response's ``timings`` (recorded with every item): ``draft_n`` / ``draft_n_accepted`` are
  the draft tokens proposed and accepted for that request (present only when it drafted),
  ``cache_n`` the prompt tokens served from the slot's cache, ``prompt_n`` those evaluated;
* ``/slots`` before the run: how many slots there are and whether each can speculate (a draft is
  loaded), which tells NOT CONFIGURED apart from NOT ENGAGED, as vLLM's missing counters do;
* ``/metrics`` (only with ``--metrics``) before and after: speculative verification steps and the
  mean number of busy slots per decode call, the evidence that requests were batched together.

The statuses are vLLM's: NOT CONFIGURED when the server cannot do what is claimed, NOT ENGAGED
when it could but the numbers did not move.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servediff.engines.llama_server import ServerState
from servediff.engines.profiles import (
    NOT_CONFIGURED,
    NOT_ENGAGED,
    NOT_VERIFIED,
    PARALLEL,
    PREFIX_CACHE,
    SPECULATIVE,
    VERIFIED,
)

TIMINGS = "response timings"
NO_METRICS = "start llama-server with --metrics to read its counters"


@dataclass(frozen=True, slots=True)
class TimingTotals:
    """Per-response ``timings`` summed over a run."""

    responses: int = 0  # responses that carried timings
    draft_n: int = 0
    draft_accepted: int = 0
    drafting: int = 0  # responses that proposed at least one draft token
    cache_n: int = 0
    prompt_n: int = 0
    cached: int = 0  # responses with cache_n > 0


def timing_totals(timings: Iterable[Mapping[str, Any] | None]) -> TimingTotals:
    n = drafted = accepted = drafting = cache = prompt = cached = 0
    for t in timings:
        if not t:
            continue
        n += 1
        d = int(t.get("draft_n") or 0)
        drafted += d
        accepted += int(t.get("draft_n_accepted") or 0)
        drafting += d > 0
        c = int(t.get("cache_n") or 0)
        cache += c
        cached += c > 0
        prompt += int(t.get("prompt_n") or 0)
    return TimingTotals(n, drafted, accepted, drafting, cache, prompt, cached)


def speculative(
    claimed: bool, before: ServerState | None, after: ServerState | None, t: TimingTotals
) -> dict[str, Any]:
    """Draft tokens proposed and accepted over the run; acceptance rate = accepted / proposed."""
    out: dict[str, Any] = {"draft_tokens": t.draft_n, "accepted_tokens": t.draft_accepted}
    out["source"] = TIMINGS
    if before is not None and before.speculative_slots == 0:
        detail = "/slots: no slot can speculate (no draft model or speculative type loaded)"
        return {**out, "status": NOT_CONFIGURED if claimed else "off", "detail": detail}
    if t.responses == 0:
        return {**out, "status": NOT_VERIFIED, "detail": "the responses carried no timings"}
    if t.draft_n == 0:
        detail = f"no draft tokens proposed in {t.responses} responses (timings.draft_n absent or 0)"
        return {**out, "status": NOT_ENGAGED if claimed else "off", "detail": detail}
    out["acceptance_rate"] = t.draft_accepted / t.draft_n
    detail = (
        f"{t.draft_accepted}/{t.draft_n} draft tokens accepted over {t.drafting} of {t.responses} "
        f"responses (timings.draft_n_accepted / draft_n): acceptance rate {out['acceptance_rate']:.1%}"
    )
    steps = _delta(before, after, "drafts")
    if steps:
        out["drafts"] = int(steps)
        out["acceptance_length"] = 1.0 + t.draft_accepted / steps
        detail += f"; /metrics: {int(steps)} drafts, mean acceptance length {out['acceptance_length']:.2f}"
    return {**out, "status": VERIFIED if claimed else "engaged, not claimed", "detail": detail}


def prompt_cache(claimed: bool, t: TimingTotals) -> dict[str, Any]:
    """Prompt tokens served from a slot's cache instead of evaluated (``timings.cache_n``)."""
    out: dict[str, Any] = {"cached_tokens": t.cache_n, "prompt_tokens": t.cache_n + t.prompt_n}
    out["source"] = TIMINGS
    if t.responses == 0:
        return {**out, "status": NOT_VERIFIED, "detail": "the responses carried no timings"}
    total = t.cache_n + t.prompt_n
    out["hit_rate"] = t.cache_n / total if total else 0.0
    out["cached_per_request"] = t.cache_n / t.responses
    detail = (
        f"{t.cached} of {t.responses} requests reused cached prompt tokens (timings.cache_n): "
        f"{t.cache_n} of {total} prompt tokens ({out['hit_rate']:.1%}), "
        f"{out['cached_per_request']:.1f} per request"
    )
    if t.cache_n > 0:
        return {**out, "status": VERIFIED if claimed else "engaged, not claimed", "detail": detail}
    # One request has nothing before it to reuse; several with no reuse at all did not engage it.
    quiet = t.responses < 2
    status = ("one request: nothing to reuse" if quiet else NOT_ENGAGED) if claimed else "off"
    return {**out, "status": status, "detail": detail}


def parallel(
    claimed: bool, before: ServerState | None, after: ServerState | None, concurrency: int
) -> dict[str, Any]:
    """Whether requests shared decode calls: the mean number of busy slots per decode call."""
    slots = before.slots if before is not None else None
    out: dict[str, Any] = {"slots": slots, "concurrency": concurrency}
    if slots == 1:
        return {**out, "status": NOT_CONFIGURED if claimed else "off", "detail": "/slots: one slot"}
    calls = _delta(before, after, "n_decode")
    busy = _delta(before, after, "busy_total")
    if calls is None or busy is None:
        return {**out, "status": NOT_VERIFIED, "detail": f"{slots or '?'} slots; {NO_METRICS}"}
    if calls <= 0:
        return {**out, "status": NOT_VERIFIED, "detail": f"{slots} slots; no decode calls counted"}
    out["busy_per_decode"] = round(busy / calls, 3)
    detail = (
        f"/metrics: mean {busy / calls:.2f} busy slots per decode call over {int(calls)} calls "
        f"({slots} slots, {concurrency} requests in flight)"
    )
    if busy / calls > 1.0 + 1e-6:
        return {**out, "status": VERIFIED if claimed else "engaged, not claimed", "detail": detail}
    if concurrency <= 1:
        return {**out, "status": "idle at concurrency 1", "detail": detail}
    return {**out, "status": NOT_ENGAGED if claimed else "off", "detail": detail}


def _delta(before: ServerState | None, after: ServerState | None, field: str) -> float | None:
    if before is None or after is None:
        return None
    a, b = getattr(before, field), getattr(after, field)
    return None if a is None or b is None else float(b) - float(a)


def verify(
    claims: Sequence[str],
    before: ServerState | None,
    after: ServerState | None,
    timings: Iterable[Mapping[str, Any] | None],
    concurrency: int,
) -> dict[str, dict[str, Any]]:
    """Claim → its check, plus any feature that engaged without being claimed."""
    totals = timing_totals(timings)
    out = {
        SPECULATIVE: speculative(SPECULATIVE in claims, before, after, totals),
        PREFIX_CACHE: prompt_cache(PREFIX_CACHE in claims, totals),
        PARALLEL: parallel(PARALLEL in claims, before, after, concurrency),
    }
    for claim in claims:
        out.setdefault(claim, {"status": NOT_VERIFIED, "detail": "llama-server exposes no counter for it"})
    return {k: v for k, v in out.items() if k in claims or str(v["status"]).startswith("engaged")}
