"""The llama-server claim checks on constructed server states and response timings (the same
shapes llama-server returns; the end-to-end tests in test_llama_server.py use the real server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servediff.cli import main
from servediff.engines.llama_server import ServerState, ToolMissing, find_tool, knobs_from_props
from servediff.engines.llama_server_checks import timing_totals, verify
from servediff.engines.profiles import (
    NOT_CONFIGURED,
    NOT_ENGAGED,
    NOT_VERIFIED,
    PARALLEL,
    PREFIX_CACHE,
    PROFILES,
    SPECULATIVE,
    VERIFIED,
    guess_profile,
)


def state(
    slots: int = 4, spec: int = 0, n_decode: float | None = None, busy: float | None = None
) -> ServerState:
    """A server state as read_state returns it (only /metrics sets n_decode and busy)."""
    return ServerState(slots, spec, n_decode, busy, None, {})


def test_timings_are_summed_over_the_responses_that_carry_them() -> None:
    totals = timing_totals(
        [
            {"cache_n": 0, "prompt_n": 30, "draft_n": 12, "draft_n_accepted": 9},
            {"cache_n": 25, "prompt_n": 5},  # no draft_n: this request drafted nothing
            None,  # an error, or a server without timings
        ]
    )
    assert (totals.responses, totals.draft_n, totals.draft_accepted, totals.drafting) == (2, 12, 9, 1)
    assert (totals.cache_n, totals.prompt_n, totals.cached) == (25, 35, 1)


def test_speculative_decoding_verified_not_engaged_and_not_configured() -> None:
    drafted = [{"draft_n": 10, "draft_n_accepted": 7, "cache_n": 0, "prompt_n": 9}] * 2
    before, after = state(spec=4, n_decode=100, busy=100), state(spec=4, n_decode=130, busy=130)
    check = verify([SPECULATIVE], before, after, drafted, 1)[SPECULATIVE]
    assert check["status"] == VERIFIED and check["acceptance_rate"] == pytest.approx(0.7)
    assert "14/20 draft tokens accepted" in check["detail"]
    # a draft model is loaded but nothing was proposed: the feature did not engage
    quiet = [{"cache_n": 0, "prompt_n": 9}] * 2
    assert verify([SPECULATIVE], before, after, quiet, 1)[SPECULATIVE]["status"] == NOT_ENGAGED
    # no slot can speculate: the server is not set up for it
    none = verify([SPECULATIVE], state(spec=0), state(spec=0), quiet, 1)[SPECULATIVE]
    assert none["status"] == NOT_CONFIGURED and "/slots" in none["detail"]
    # drafting the configuration did not claim is reported, not hidden
    assert verify([], before, after, drafted, 1)[SPECULATIVE]["status"] == "engaged, not claimed"
    assert verify([SPECULATIVE], None, None, [None], 1)[SPECULATIVE]["status"] == NOT_VERIFIED


def test_prompt_cache_reuse_counted_per_request() -> None:
    reused = [{"cache_n": 0, "prompt_n": 40}, {"cache_n": 30, "prompt_n": 12}, {"cache_n": 30, "prompt_n": 8}]
    check = verify([PREFIX_CACHE], state(), state(), reused, 1)[PREFIX_CACHE]
    assert check["status"] == VERIFIED and check["cached_tokens"] == 60 and check["prompt_tokens"] == 120
    assert check["cached_per_request"] == pytest.approx(20.0) and "2 of 3 requests" in check["detail"]
    cold = [{"cache_n": 0, "prompt_n": 40}] * 3
    assert verify([PREFIX_CACHE], state(), state(), cold, 1)[PREFIX_CACHE]["status"] == NOT_ENGAGED
    assert PREFIX_CACHE not in verify([], state(), state(), cold, 1)  # off and not claimed: not listed


def test_parallel_slots_from_busy_slots_per_decode() -> None:
    t = [{"cache_n": 0, "prompt_n": 10}]
    batched = verify([PARALLEL], state(n_decode=10, busy=10), state(n_decode=60, busy=160), t, 4)[PARALLEL]
    assert batched["status"] == VERIFIED and batched["busy_per_decode"] == pytest.approx(3.0)
    start, alone = state(n_decode=10, busy=10), state(n_decode=60, busy=60)  # one busy slot per call
    assert verify([PARALLEL], start, alone, t, 1)[PARALLEL]["status"] == "idle at concurrency 1"
    assert verify([PARALLEL], start, alone, t, 8)[PARALLEL]["status"] == NOT_ENGAGED
    assert verify([PARALLEL], state(slots=1), state(slots=1), t, 8)[PARALLEL]["status"] == NOT_CONFIGURED
    assert verify([PARALLEL], state(), state(), t, 8)[PARALLEL]["status"] == NOT_VERIFIED  # no --metrics


def test_llama_server_profile_reads_claims_from_its_flags() -> None:
    argv = ["{llama_server}", "-m", "{model_path}", "-md", "{model_path}", "-fa", "on", "-np", "4"]
    assert guess_profile(argv) == "llama-server"
    claims = PROFILES["llama-server"].claims_from_argv(argv)
    assert claims == ("flash_attention", PARALLEL, PREFIX_CACHE, SPECULATIVE)
    stock = ["llama-server", "-m", "x.gguf", "-fa", "off", "-np", "1", "--no-cache-prompt"]
    assert PROFILES["llama-server"].claims_from_argv(stock) == ()


def test_props_knobs_and_a_missing_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    props = {
        "build_info": "b1-abc",
        "total_slots": 4,
        "model_path": "/models/m.gguf",
        "default_generation_settings": {"n_ctx": 2048, "params": {"speculative.types": "none"}},
    }
    assert knobs_from_props(props) == {
        "build_info": "b1-abc",
        "total_slots": 4,
        "n_ctx": 2048,
        "model": "m.gguf",
        "speculative.types": "none",
    }
    monkeypatch.setenv("LLAMA_SERVER", "/nonexistent/llama-server")
    with pytest.raises(ToolMissing, match=r"\$LLAMA_SERVER is set to"):
        find_tool()


def test_an_experiment_without_llama_server_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LLAMA_SERVER", str(tmp_path / "missing"))
    path = tmp_path / "exp.toml"
    path.write_text(
        f'model = "m"\noutput = "{tmp_path / "out"}"\ncontrol_repeats = 0\n[suites.prompts]\nlimit = 1\n'
        '[[configurations]]\nlabel = "stock"\nlaunch = ["{llama_server}", "--port", "{port}"]\n'
    )
    assert main(["experiment", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "$LLAMA_SERVER is set to" in err and "Traceback" not in err
