"""Engine profiles: Prometheus parsing, vLLM's speculative-decoding and prefix-cache counters,
and the flag for a configuration that claims speculative decoding whose counters did not move.

The scrapes are vLLM 0.24.0's own ``/metrics`` answers, recorded live by
``scripts/record_server_fixtures.py`` (tests/data/vllm/): a stock server, and a server with prefix
caching and n-gram speculation before and after a request that it drafts for.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servediff.engines.profiles import (
    NOT_CONFIGURED,
    NOT_ENGAGED,
    NOT_VERIFIED,
    PREFIX_CACHE,
    PROFILES,
    SPECULATIVE,
    VERIFIED,
    flagged,
    guess_profile,
    metric_total,
    parse_prometheus,
    verify_claims,
    vllm_snapshot,
)

VLLM = Path(__file__).parent / "data" / "vllm"


def scrape(name: str) -> str:
    """The body of one recorded /metrics answer."""
    body: str = json.loads((VLLM / f"{name}.json").read_text())["body"]
    return body


BEFORE = vllm_snapshot(scrape("ngram-metrics_before"))
AFTER = vllm_snapshot(scrape("ngram-metrics_after"))
STOCK = vllm_snapshot(scrape("stock-metrics_after"))


def test_prometheus_parser_reads_labels_suffixes_and_special_values() -> None:
    text = (
        '# HELP x_total a counter\nx_total{a="1",b="q\\"uote"} 3.0\nx_total{a="2"} 4e+00\n'
        'h_bucket{le="+Inf"} NaN\nnot a metric line\ny 7 1700000000000\n'
    )
    samples = parse_prometheus(text)
    assert [(s.name, s.value) for s in samples if s.name != "h_bucket"] == [
        ("x_total", 3.0),
        ("x_total", 4.0),
        ("y", 7.0),
    ]
    assert samples[0].label("b") == 'q"uote'
    assert metric_total(samples, "x") == 7.0  # summed over label sets, `_total` spelling accepted
    assert metric_total(samples, "absent") is None


def test_acceptance_figures_from_a_vllm_scrape_before_and_after() -> None:
    checks = verify_claims("vllm", [SPECULATIVE, PREFIX_CACHE], BEFORE, AFTER)
    spec = checks[SPECULATIVE]
    assert spec["status"] == VERIFIED
    # what the server counted between the two scrapes, read here without the snapshot code
    moved = {
        name: metric_total(parse_prometheus(scrape("ngram-metrics_after")), name)
        - (metric_total(parse_prometheus(scrape("ngram-metrics_before")), name) or 0.0)
        for name in (
            "vllm:spec_decode_num_drafts",
            "vllm:spec_decode_num_draft_tokens",
            "vllm:spec_decode_num_accepted_tokens",
            "vllm:prefix_cache_queries",
            "vllm:prefix_cache_hits",
        )
        if metric_total(parse_prometheus(scrape("ngram-metrics_after")), name) is not None
    }
    drafts, drafted, accepted = (
        moved["vllm:spec_decode_num_drafts"],
        moved["vllm:spec_decode_num_draft_tokens"],
        moved["vllm:spec_decode_num_accepted_tokens"],
    )
    assert drafts > 0 and accepted > 0  # the recorded request was drafted for
    assert (spec["drafts"], spec["draft_tokens"], spec["accepted_tokens"]) == (drafts, drafted, accepted)
    assert spec["acceptance_rate"] == pytest.approx(accepted / drafted)
    assert spec["acceptance_length"] == pytest.approx(1 + accepted / drafts)
    # eight positions (num_speculative_tokens 8); the first is accepted at least as often as any later
    rates = spec["per_position_rate"]
    assert len(rates) == 8 and rates[0] == max(rates)
    assert sum(rates) * drafts == pytest.approx(accepted, abs=0.05)  # rates are rounded to 4 digits
    prefix = checks[PREFIX_CACHE]
    assert prefix["status"] == VERIFIED
    hits, queries = moved["vllm:prefix_cache_hits"], moved["vllm:prefix_cache_queries"]
    assert prefix["hit_rate"] == pytest.approx(hits / queries)
    assert flagged(checks) == []


def test_claimed_speculative_decoding_whose_counters_did_not_move_is_flagged() -> None:
    checks = verify_claims("vllm", [SPECULATIVE], AFTER, AFTER)
    assert checks[SPECULATIVE]["status"] == NOT_ENGAGED
    assert "did not move" in checks[SPECULATIVE]["detail"]
    assert flagged(checks) == [SPECULATIVE]


def test_claimed_speculative_decoding_on_a_server_without_counters_is_flagged() -> None:
    checks = verify_claims("vllm", [SPECULATIVE], STOCK, STOCK)
    assert checks[SPECULATIVE]["status"] == NOT_CONFIGURED
    assert flagged(checks) == [SPECULATIVE]
    # not claimed and not there: nothing to say about it
    assert SPECULATIVE not in verify_claims("vllm", [], STOCK, STOCK)


def test_engines_without_counters_say_not_verified() -> None:
    for profile in ("llamacpp", "sglang", "embedded"):
        checks = verify_claims(profile, [SPECULATIVE], None, None)
        assert checks[SPECULATIVE]["status"] == NOT_VERIFIED
        assert flagged(checks) == []
    assert verify_claims("vllm", [SPECULATIVE], None, None)[SPECULATIVE]["status"] == NOT_VERIFIED


def test_profiles_infer_claims_from_launch_flags() -> None:
    spec = ["vllm", "serve", "m", "--speculative-config", '{"method": "ngram"}', "--port", "{port}"]
    assert guess_profile(spec) == "vllm"
    # prefix caching is on by default in vLLM
    assert PROFILES["vllm"].claims_from_argv(spec) == (PREFIX_CACHE, SPECULATIVE)
    off = ["vllm", "serve", "m", "--no-enable-prefix-caching"]
    assert PROFILES["vllm"].claims_from_argv(off) == ()
    llama = ["python", "-m", "llama_cpp.server", "--flash_attn", "true", "--draft_model", "prompt-lookup"]
    assert guess_profile(llama) == "llamacpp"
    assert PROFILES["llamacpp"].claims_from_argv(llama) == ("flash_attention", SPECULATIVE)
    assert PROFILES["llamacpp"].claims_from_argv(["llama_cpp.server", "--flash_attn", "false"]) == ()
    assert guess_profile(["python", "-m", "sglang.launch_server"]) == "sglang"
