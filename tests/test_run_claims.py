"""A plain `servediff run` against a server records what its counters say of each claimed feature
in the record's header, as an experiment does, and the report shows it in the verdicts.

Against vLLM the counters come from /metrics (tests/test_vllm_shapes.py reads recorded scrapes);
here a real llama_cpp.server, whose counters servediff does not read, must say so rather than
pass the claim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servediff.cli import main
from servediff.records import read_header
from tests.conftest import LlamaServer


def test_a_claim_the_server_cannot_confirm_is_recorded_as_not_verified(
    llama_server: LlamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(label: str, *claims: str) -> Path:
        out = tmp_path / f"{label}.jsonl"
        argv = ["run", "--engine", "http", "--base-url", llama_server.base_url, "--suite", "prompts"]
        argv += ["--limit", "2", "--max-tokens", "8", "--label", label, "--no-progress", "--out", str(out)]
        assert main(argv + [a for c in claims for a in ("--claim", c)]) == 0
        return out

    out = run("tuned", "speculative_decoding", "prefix_caching")
    verification = read_header(out).extra["verification"]
    assert verification["profile"] == "llamacpp" and verification["metrics"] == "not available"
    assert set(verification["claims"]) == {"speculative_decoding", "prefix_caching"}
    assert {c["status"] for c in verification["claims"].values()} == {"not verified"}
    assert verification["flagged"] == []  # nothing contradicts the claim: it is unconfirmed
    plain = run("stock")
    assert "verification" not in read_header(plain).extra  # nothing claimed, nothing read
    capsys.readouterr()
    assert main(["compare", str(plain), str(out), "--json"]) == 0
    verdicts = json.loads(capsys.readouterr().out)
    text = json.dumps(verdicts)
    assert "speculative_decoding not verified" in text and "prefix_caching not verified" in text
