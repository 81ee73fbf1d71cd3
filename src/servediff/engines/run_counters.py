"""A server's feature counters read before and after a plain run, so that a run against a vLLM
server says whether speculative decoding and the prefix cache engaged, as an experiment's do.

    servediff run --engine http --base-url http://127.0.0.1:8000 --claim speculative_decoding \
        --claim prefix_caching --label tuned --out runs/tuned.jsonl

vLLM's ``/metrics`` counts drafted and accepted tokens and prefix-cache queries and hits
(``profiles.vllm_snapshot``). The difference over the run goes into the record's header as its
``verification``, the same shape an experiment writes, so ``compare`` shows it in the verdict
table: a claimed feature whose counters did not move is flagged, and one that engaged without
being claimed is shown too. Other servers' counters are not read here (llama-server's need its
``/slots`` and launch flags: experiments read them).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from servediff.engines.profiles import PROFILES, Snapshot, flagged, verify_claims, vllm_snapshot

READ_BY_PROFILE = ("vllm",)  # profiles whose /metrics counters servediff reads


def read_counters(base_url: str, profile: str, timeout_s: float = 5.0) -> Snapshot | None:
    """The counters now; None where the profile's are not read or nothing answered."""
    found = PROFILES.get(profile)
    if profile not in READ_BY_PROFILE or found is None or found.metrics_path is None:
        return None
    try:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}{found.metrics_path}", timeout=timeout_s) as resp:
            if resp.status != 200:
                return None
            text = resp.read().decode("utf-8", errors="replace")
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return vllm_snapshot(text)


def run_verification(
    profile: str,
    claims: Sequence[str],
    before: Snapshot | None,
    after: Snapshot | None,
    covers: str,
) -> dict[str, Any]:
    """The header's ``verification`` of one run: each claim's check (and any feature that
    engaged unclaimed), which are flagged, and whether the counters could be read."""
    checks = verify_claims(profile, claims, before, after)
    return {
        "profile": profile,
        "kind": "http",
        "claims": checks,
        "flagged": flagged(checks),
        "metrics": "read" if before is not None and after is not None else "not available",
        "covers": covers,
    }
