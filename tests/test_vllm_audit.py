"""The vLLM audit study (docs/studies/vllm-audit.md) from its committed records: ``servediff audit
--from`` re-makes both reports as committed, the page quotes their verdict lines, cost rows and
logprob lines, and the analysis' own totals agree with themselves (the per-level and per-prompt
counts of logprobs that moved add up to the side's total; the headline cost is the table's last
row). The H200 llama-server audit's records are held to the same totals."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from servediff.cli import main
from tests.helpers.reference import ROOT

STUDIES = ROOT / "docs" / "studies"
STUDY = STUDIES / "vllm-audit"
MODELS = ("0.5b", "1.5b")


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vllm-audit")
    with tarfile.open(STUDY / "audit.tar.xz") as tar:
        tar.extractall(out, filter="data")
    with tarfile.open(STUDIES / "gpu-h200-load" / "study.tar.xz") as tar:
        audit = [m for m in tar.getmembers() if m.name.startswith("audit/")]
        tar.extractall(out / "h200", members=audit, filter="data")
    return out


def summary(folder: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["audit", "--from", str(folder), "--json"]) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


@pytest.mark.parametrize("model", MODELS)
def test_the_committed_reports_are_remade_from_the_records(
    model: str, records: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(records)  # the reports name their records relative to the archive's root
    md = tmp_path / f"{model}.md"
    assert main(["audit", "--from", f"audit/{model}", "--md", str(md)]) == 0
    assert md.read_text(encoding="utf-8") == (STUDY / f"{model}.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("model", MODELS)
def test_the_page_quotes_the_reports(model: str, records: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = (STUDIES / "vllm-audit.md").read_text(encoding="utf-8")
    s = summary(records / "audit" / model, capsys)
    assert f"> {s['verdict_line']}\n" in page
    promise, control = s["promise"], s["control"]
    assert isinstance(promise, dict) and isinstance(control, dict)
    assert promise["divergent"] == 0 and control["divergent"] > 0  # the control diverged
    costs = s["costs"]
    assert isinstance(costs, list) and [c["level"] for c in costs] == [8, 32, 128]
    for c in costs:
        r = c["ratio"]
        speeds = f"{c['promise_tokens_per_s']:,.0f}, {c['control_tokens_per_s']:,.0f}"
        ratio = f"{r['ratio']:.2f}× [{r['low']:.2f}, {r['high']:.2f}]"
        row = next(line for line in page.splitlines() if line.startswith(f"| {c['level']} | "))
        assert f"{speeds} | {ratio}" in row, row
    if promise["logprobs_differ_per_prompt"]:  # the 0.5B: the long prompts' logprobs moved
        report = (STUDY / f"{model}.md").read_text(encoding="utf-8")
        lines = [x for x in report.splitlines() if x.startswith("Identical trials whose logprobs")]
        assert f"> {lines[0]}\n" in page  # the promise's section comes first


@pytest.mark.parametrize("folder", ["audit/0.5b", "audit/1.5b", "h200/audit"])
def test_the_totals_add_up(folder: str, records: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = summary(records / folder, capsys)
    for side in (s["promise"], s["control"]):
        assert isinstance(side, dict)
        moved = side["logprob_trials"] - side["logprob_bit_equal"]
        assert sum(lv["logprobs_differ"] for lv in side["levels"]) == moved
        assert sum(d for _, _, d, _ in side["logprobs_differ_per_prompt"]) == moved
        assert all(0 < d <= n for _, _, d, n in side["logprobs_differ_per_prompt"])
    costs = s["costs"]
    assert isinstance(costs, list) and costs
    assert costs[-1]["level"] == s["cost_level"] and costs[-1]["ratio"] == s["cost"]


def test_the_html_report_lays_out_the_same_cost_table(
    records: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = summary(records / "audit" / "1.5b", capsys)
    page = tmp_path / "1.5b.html"
    assert main(["audit", "--from", str(records / "audit" / "1.5b"), "--html", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    assert "<th>promise ÷ control</th>" in html and "<th>logprobs differ</th>" in html
    costs = s["costs"]
    assert isinstance(costs, list)
    for c in costs:
        r = c["ratio"]
        assert f"<td>{c['level']}</td><td>{c['promise_tokens_per_s']:,.0f}</td>" in html
        assert f"<td>{r['ratio']:.2f}× [{r['low']:.2f}, {r['high']:.2f}]</td>" in html
