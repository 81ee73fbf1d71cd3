"""Engine profiles: Prometheus parsing, vLLM's speculative-decoding and prefix-cache counters,
and the flag for a configuration that claims speculative decoding whose counters did not move.

The scrapes in tests/data are written from vLLM's documented metric names and prometheus_client's
exposition format (``_total`` counters with ``_created`` gauges, histograms, info gauges).
"""

from __future__ import annotations

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

DATA = Path(__file__).parent / "data"
BEFORE = vllm_snapshot((DATA / "vllm_metrics_spec_before.txt").read_text())
AFTER = vllm_snapshot((DATA / "vllm_metrics_spec_after.txt").read_text())
STOCK = vllm_snapshot((DATA / "vllm_metrics_stock.txt").read_text())


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
    # 800 drafts of 3 tokens, 1500 accepted: rate 1500/2400, length 1 + 1500/800
    assert (spec["drafts"], spec["draft_tokens"], spec["accepted_tokens"]) == (800, 2400, 1500)
    assert spec["acceptance_rate"] == pytest.approx(0.625)
    assert spec["acceptance_length"] == pytest.approx(2.875)
    assert spec["per_position_rate"] == pytest.approx([0.85, 0.6, 0.425])
    prefix = checks[PREFIX_CACHE]
    assert prefix["status"] == VERIFIED and prefix["hit_rate"] == pytest.approx(0.75)
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
