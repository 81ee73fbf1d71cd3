"""What servediff knows about serving engines: how they are launched, where they report health,
version and Prometheus metrics, and how to tell from those metrics whether a feature engaged.

    servediff experiment examples/llamacpp-flash.toml

A configuration that *claims* a feature (speculative decoding, prefix caching) is checked against
the engine's own counters, read before and after each run. vLLM exports the counters; a claim
whose counters are missing or did not move is flagged, because a feature that silently did not
engage makes "tuned" identical to "stock" and the study meaningless. Where an engine exposes no
such counter, the claim is reported as "not verified" rather than silently passed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Claim names a configuration may list (or have inferred from its launch argv).
SPECULATIVE = "speculative_decoding"
PREFIX_CACHE = "prefix_caching"
FLASH_ATTENTION = "flash_attention"
PARALLEL = "parallel_slots"  # requests batched together in one server's slots (llama-server -np)
CLAIMS = (SPECULATIVE, PREFIX_CACHE, FLASH_ATTENTION, PARALLEL)

# Verification outcomes, as the report prints them.
VERIFIED = "verified"
NOT_ENGAGED = "NOT ENGAGED"  # counters exist but did not move during the run
NOT_CONFIGURED = "NOT CONFIGURED"  # the engine does not export the feature's counters at all
NOT_VERIFIED = "not verified"  # the engine cannot confirm either way
FLAGGED = frozenset({NOT_ENGAGED, NOT_CONFIGURED})


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """Per-engine knowledge. ``flags`` maps a launch flag to the claim it implies."""

    name: str
    health_path: str
    version_paths: tuple[str, ...]
    metrics_path: str | None
    flags: tuple[tuple[str, str], ...] = ()
    # Flags that switch a default-on feature off (vLLM enables prefix caching by default).
    default_on: tuple[tuple[str, str], ...] = ()
    # Flags whose numeric value above 1 implies the claim (llama-server's -np N slots).
    counts: tuple[tuple[str, str], ...] = ()

    def claims_from_argv(self, argv: Sequence[str]) -> tuple[str, ...]:
        """Features the launch command turns on, as far as its flags say."""
        names = [a.split("=", 1)[0] for a in argv]
        found = []
        for flag, claim in self.flags:
            if flag in names and _flag_value(argv, names.index(flag)) not in FALSE_WORDS:
                found.append(claim)
        for off_flag, claim in self.default_on:
            if off_flag not in names:
                found.append(claim)
        for flag, claim in self.counts:
            value = _flag_value(argv, names.index(flag)) if flag in names else ""
            if value.isdigit() and int(value) > 1:
                found.append(claim)
        return tuple(sorted(set(found)))


FALSE_WORDS = frozenset({"false", "0", "off", "no", "none"})


def _flag_value(argv: Sequence[str], i: int) -> str:
    """The value given to the flag at ``i`` (``--f=v`` or ``--f v``), lower-cased; "" if none."""
    if "=" in argv[i]:
        return argv[i].split("=", 1)[1].lower()
    nxt = argv[i + 1] if i + 1 < len(argv) else ""
    return "" if nxt.startswith("-") else nxt.lower()


PROFILES: dict[str, EngineProfile] = {
    "vllm": EngineProfile(
        name="vllm",
        health_path="/health",
        version_paths=("/version",),
        metrics_path="/metrics",
        flags=(("--speculative-config", SPECULATIVE), ("--speculative_config", SPECULATIVE)),
        default_on=(("--no-enable-prefix-caching", PREFIX_CACHE),),
    ),
    "sglang": EngineProfile(
        name="sglang",
        health_path="/health",
        version_paths=("/version", "/get_server_info", "/server_info"),
        metrics_path="/metrics",  # only with --enable-metrics
        flags=(("--speculative-algorithm", SPECULATIVE),),
        default_on=(("--disable-radix-cache", PREFIX_CACHE),),
    ),
    "llamacpp": EngineProfile(
        name="llamacpp",
        # llama-cpp-python's server has no /health (the C++ llama-server: profile "llama-server").
        health_path="/v1/models",
        version_paths=("/props",),
        metrics_path="/metrics",  # llama-server with --metrics; llama-cpp-python has none
        flags=(
            ("--draft_model", SPECULATIVE),
            ("--model-draft", SPECULATIVE),
            ("-md", SPECULATIVE),
            ("--flash_attn", FLASH_ATTENTION),
            ("--flash-attn", FLASH_ATTENTION),
            ("-fa", FLASH_ATTENTION),
        ),
    ),
    # llama.cpp's C++ server. Prompt caching is on unless --no-cache-prompt; -np absent means
    # "auto" (4 slots), so only an explicit -np N > 1 claims parallel slots.
    "llama-server": EngineProfile(
        name="llama-server",
        health_path="/health",
        version_paths=("/props",),
        metrics_path="/metrics",  # only with --metrics; /slots and response timings need nothing
        flags=(
            ("-md", SPECULATIVE),
            ("--model-draft", SPECULATIVE),
            ("--spec-draft-model", SPECULATIVE),
            ("--spec-type", SPECULATIVE),
            ("-fa", FLASH_ATTENTION),
            ("--flash-attn", FLASH_ATTENTION),
            ("--cache-reuse", PREFIX_CACHE),
        ),
        default_on=(("--no-cache-prompt", PREFIX_CACHE),),
        counts=(("-np", PARALLEL), ("--parallel", PARALLEL)),
    ),
    "generic": EngineProfile(
        name="generic",
        health_path="/v1/models",
        version_paths=("/version",),
        metrics_path=None,
    ),
}


def guess_profile(argv: Sequence[str]) -> str:
    """The profile a launch command most likely belongs to (first few words only)."""
    head = " ".join(argv[:4]).lower()
    if "vllm" in head:
        return "vllm"
    if "sglang" in head:
        return "sglang"
    if any(name in head for name in ("llama-server", "{llama_server}", "llama-cpp-server")):
        return "llama-server"
    if "llama_cpp" in head or "llama-cpp" in head:
        return "llamacpp"
    return "generic"


# --- Prometheus text exposition ----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MetricSample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def parse_prometheus(text: str) -> list[MetricSample]:
    """Samples of a Prometheus text exposition (format 0.0.4). Comments and junk lines are skipped."""
    out: list[MetricSample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        labels = tuple((k, _unescape(v)) for k, v in _LABEL.findall(m.group(3) or ""))
        out.append(MetricSample(m.group(1), labels, value))
    return out


def _unescape(value: str) -> str:
    return value.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


def metric_total(samples: Sequence[MetricSample], name: str) -> float | None:
    """Sum over every label set (engines, ranks) of a counter; None when it is not exported.

    prometheus_client exposes a counter named ``x`` as ``x_total``; older exporters did not
    add the suffix, so both spellings are accepted.
    """
    names = {name, f"{name}_total"} if not name.endswith("_total") else {name, name[: -len("_total")]}
    found = [s.value for s in samples if s.name in names]
    return sum(found) if found else None


def per_label_totals(samples: Sequence[MetricSample], name: str, label: str) -> dict[str, float]:
    names = {name, f"{name}_total"}
    out: dict[str, float] = {}
    for s in samples:
        key = s.label(label)
        if s.name in names and key is not None:
            out[key] = out.get(key, 0.0) + s.value
    return out


# --- vLLM: speculative decoding and prefix caching --------------------------------------------
# Names as vLLM's v1 engine registers them (vllm/v1/spec_decode/metrics.py, vllm/v1/metrics/loggers.py);
# they are only registered when a speculative config is given, so their absence is informative.
VLLM_SPEC_DRAFTS = "vllm:spec_decode_num_drafts"
VLLM_SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
VLLM_SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
VLLM_SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
VLLM_PREFIX_QUERIES = "vllm:prefix_cache_queries"
VLLM_PREFIX_HITS = "vllm:prefix_cache_hits"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The counters servediff reads from one /metrics scrape (None: not exported)."""

    spec: dict[str, float] | None
    per_position: dict[str, float]
    prefix: dict[str, float] | None


def vllm_snapshot(text: str) -> Snapshot:
    samples = parse_prometheus(text)
    spec_values = {
        "drafts": metric_total(samples, VLLM_SPEC_DRAFTS),
        "draft_tokens": metric_total(samples, VLLM_SPEC_DRAFT_TOKENS),
        "accepted": metric_total(samples, VLLM_SPEC_ACCEPTED),
    }
    prefix_values = {
        "queries": metric_total(samples, VLLM_PREFIX_QUERIES),
        "hits": metric_total(samples, VLLM_PREFIX_HITS),
    }
    return Snapshot(
        spec=None if None in spec_values.values() else {k: float(v or 0) for k, v in spec_values.items()},
        per_position=per_label_totals(samples, VLLM_SPEC_PER_POS, "position"),
        prefix=None
        if None in prefix_values.values()
        else {k: float(v or 0) for k, v in prefix_values.items()},
    )


def speculative_check(before: Snapshot | None, after: Snapshot | None, claimed: bool) -> dict[str, Any]:
    """Acceptance figures over one run, and whether a claimed speculative decoder engaged.

    Acceptance rate = accepted / drafted tokens; mean acceptance length = 1 + accepted / drafts
    (vLLM's convention: the target model's bonus token counts); per-position rate = accepted at
    draft position i / drafts.
    """
    if before is None or after is None:
        return {"status": NOT_VERIFIED, "detail": "no metrics endpoint to read"}
    if before.spec is None or after.spec is None:
        status = NOT_CONFIGURED if claimed else "off"
        return {"status": status, "detail": "the server exports no speculative-decoding counters"}
    d = {k: after.spec[k] - before.spec[k] for k in after.spec}
    positions = sorted(after.per_position, key=int)
    per_pos = [after.per_position[p] - before.per_position.get(p, 0.0) for p in positions]
    out: dict[str, Any] = {
        "drafts": int(d["drafts"]),
        "draft_tokens": int(d["draft_tokens"]),
        "accepted_tokens": int(d["accepted"]),
    }
    if d["drafts"] <= 0:
        status = NOT_ENGAGED if claimed else "off"
        return {**out, "status": status, "detail": "the counters did not move during the run"}
    out["acceptance_rate"] = d["accepted"] / d["draft_tokens"] if d["draft_tokens"] else None
    out["acceptance_length"] = 1.0 + d["accepted"] / d["drafts"]
    out["per_position_rate"] = [round(v / d["drafts"], 4) for v in per_pos]
    rate = "n/a" if out["acceptance_rate"] is None else f"{out['acceptance_rate']:.1%}"
    positions_text = ", ".join(f"{r:.2f}" for r in out["per_position_rate"])
    detail = (
        f"{out['drafts']} drafts, {out['accepted_tokens']}/{out['draft_tokens']} draft tokens accepted: "
        f"acceptance rate {rate}, mean acceptance length {out['acceptance_length']:.2f}"
        + (f", per position {positions_text}" if positions_text else "")
    )
    return {**out, "status": VERIFIED if claimed else "engaged, not claimed", "detail": detail}


def prefix_check(before: Snapshot | None, after: Snapshot | None, claimed: bool) -> dict[str, Any]:
    """Prefix-cache hits over one run (in tokens), and whether a claimed cache was consulted."""
    if before is None or after is None:
        return {"status": NOT_VERIFIED, "detail": "no metrics endpoint to read"}
    if before.prefix is None or after.prefix is None:
        return {"status": NOT_VERIFIED, "detail": "the server exports no prefix-cache counters"}
    queries = after.prefix["queries"] - before.prefix["queries"]
    hits = after.prefix["hits"] - before.prefix["hits"]
    out: dict[str, Any] = {"queried_tokens": int(queries), "hit_tokens": int(hits)}
    if queries <= 0:
        return {**out, "status": NOT_ENGAGED if claimed else "off", "detail": "no prefix-cache queries"}
    out["hit_rate"] = hits / queries
    detail = f"hit rate {out['hit_rate']:.1%} of {int(queries)} queried tokens"
    if not claimed:
        return {**out, "status": "engaged, not claimed" if hits > 0 else "off", "detail": detail}
    # Consulted without a hit is not a failure: prompts may share less than one cache block.
    return {**out, "status": VERIFIED if hits > 0 else "consulted, no hits", "detail": detail}


def verify_claims(
    profile: str, claims: Sequence[str], before: Snapshot | None, after: Snapshot | None
) -> dict[str, dict[str, Any]]:
    """Claim → its check. Only vLLM's counters are understood; other engines say "not verified"."""
    out: dict[str, dict[str, Any]] = {}
    if profile == "vllm":
        out[SPECULATIVE] = speculative_check(before, after, SPECULATIVE in claims)
        out[PREFIX_CACHE] = prefix_check(before, after, PREFIX_CACHE in claims)
        for claim in claims:
            out.setdefault(claim, {"status": NOT_VERIFIED, "detail": "vLLM exports no counter for it"})
        return {k: v for k, v in out.items() if k in claims or v["status"].startswith("engaged")}
    why = {
        "llamacpp": "llama.cpp exports no counter for it",
        "llama-server": "llama-server's are read by experiments (its launch flags and /slots); "
        "a plain run reads vLLM's counters only",
        "sglang": "servediff does not read SGLang's counters yet",
        "embedded": "set in-process; llama-cpp-python exposes no counter for it",
    }.get(profile, "this engine exposes no counter servediff understands")
    return {claim: {"status": NOT_VERIFIED, "detail": why} for claim in claims}


def flagged(checks: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return [claim for claim, c in checks.items() if c.get("status") in FLAGGED]
