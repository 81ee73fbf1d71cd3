"""``servediff gate`` on a real llama.cpp server: exit codes, early stopping, errors, JUnit."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from servediff.cli import main
from tests.conftest import DATA_DIR, LlamaServer
from tests.helpers.stub_server import always, stub_server

SUMS = DATA_DIR / "sums.jsonl"


def gate(tmp_path: Path, url_a: str, url_b: str, *extra: str) -> list[str]:
    return [
        "gate", "--base-url-a", url_a, "--base-url-b", url_b, "--label-a", "stock",
        "--label-b", "candidate", "--suite", "gsm8k", "--data", str(SUMS), "--max-tokens", "16",
        "--margin", "0.3", "--alpha", "0.05", "--batch", "5", "--out", str(tmp_path / "runs"),
        "--no-progress", "--junit", str(tmp_path / "gate.xml"), "--json", *extra,
    ]  # fmt: skip


def test_identical_pair_passes_early(
    llama_server: LlamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = llama_server.base_url
    assert main(gate(tmp_path, url, url)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "pass" and out["determinism"]["status"] == "deterministic"
    assert out["looked_at"] < out["max_items"] == 50  # stopped early
    assert out["tally"]["b"] == out["tally"]["c"] == 0
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "gate.xml").getroot().iter("testcase")}
    assert set(cases) == {"determinism", "non-inferiority[gsm8k]"}
    assert all(c.find("failure") is None and c.find("error") is None for c in cases.values())
    # A re-run resumes from the records: the same verdict, nothing run again.
    records = sorted((tmp_path / "runs").glob("*.jsonl"))
    before = [p.read_bytes() for p in records]
    assert main(gate(tmp_path, url, url)) == 0
    assert [p.read_bytes() for p in records] == before


def test_errored_items_are_left_out_not_counted_wrong(
    llama_server: LlamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with stub_server(always(400, '{"error": "bad"}')) as (bad, _):
        code = main(gate(tmp_path, llama_server.base_url, bad, "--max-items", "10"))
    out = json.loads(capsys.readouterr().out)
    assert code == 2  # engine errors left nothing to decide on
    assert out["verdict"] == "inconclusive"
    assert out["errors"] == 10 and out["tally"] == {"c": 0, "b": 0, "z": 0, "n": 0, "delta": 0.0}
    rows = [json.loads(line) for line in (tmp_path / "runs" / "candidate.gsm8k.jsonl").open()][1:]
    assert len(rows) == 10 and all(r["error"] and r.get("correct") is None for r in rows)
    case = next(
        c
        for c in ET.parse(tmp_path / "gate.xml").getroot().iter("testcase")
        if "inferiority" in c.get("name", "")
    )
    assert case.find("error") is not None


def test_same_labels_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["gate", "--base-url-a", "http://127.0.0.1:9", "--base-url-b", "http://127.0.0.1:9"]
    assert main([*argv, "--label-a", "x", "--label-b", "x"]) == 2
    assert "labelled" in capsys.readouterr().err
