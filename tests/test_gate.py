"""``servediff gate`` on a real llama.cpp server: exit codes, early stopping, errors, JUnit."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import pytest

from servediff.cli import main
from servediff.compare import gate_budget
from servediff.report.xmltext import xml_text
from tests.conftest import DATA_DIR, LlamaServer
from tests.helpers.stub_server import Reply, Request, always, chat_body, stub_server
from tests.test_checkpoints import requantise

SUMS = DATA_DIR / "sums.jsonl"
# All 81 "What is A + B? Reply with the number only." (one digit each), target A + B. Measured
# through llama_cpp.server, 16 tokens: on the gate's first 20 items stock SmolLM2 (Q4_1) answered 15
# right ("4 + 9 = 13"), requantised to Q2_K 6 (it mostly recites its own system prompt instead).
SUMS1 = DATA_DIR / "one_digit_sums.jsonl"


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


def test_a_re_run_with_another_budget_resumes_the_records(
    llama_server: LlamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = llama_server.base_url
    assert main(gate(tmp_path, url, url, "--max-items", "10")) == 1  # too few items to pass
    first = json.loads(capsys.readouterr().out)
    assert first["verdict"] == "inconclusive" and first["looked_at"] == 10
    records = sorted((tmp_path / "runs").glob("*.jsonl"))
    before = [p.read_bytes() for p in records]
    # A smaller budget is answered from the records alone: nothing runs, nothing is written.
    assert main(gate(tmp_path, url, url, "--max-items", "5")) == 1
    assert json.loads(capsys.readouterr().out)["looked_at"] == 5
    assert [p.read_bytes() for p in records] == before
    # A larger one carries on where the first stopped: the records only grow.
    assert main(gate(tmp_path, url, url, "--max-items", "50")) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "pass" and out["looked_at"] > 10
    # (the header line gains this stretch's machine load; the item lines before stay as they were)
    for path, was in zip(records, before, strict=True):
        now, then = path.read_bytes().splitlines()[1:], was.splitlines()[1:]
        assert now[: len(then)] == then
        if "repeat2" not in path.name:  # the control repeat stays at its 5 items
            assert len(now) > len(then) == 10


def test_the_budget_is_planned_from_the_power_and_said_before_it_starts(
    llama_server: LlamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = llama_server.base_url
    assert main(gate(tmp_path, url, url, "--power", "0.9", "--discordance", "0.05")) == 0
    captured = capsys.readouterr()
    out, planned = json.loads(captured.out), gate_budget.plan(0.3, 0.05, 0.05, 0.9, batch=5, limit=50)
    assert out["max_items"] == planned.budget < 50 and out["looked_at"] <= planned.budget
    assert gate_budget.describe(planned) in captured.err
    assert captured.err.index("gate plan") < captured.err.index("gate: PASS")


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


def next_gate(tmp_path: Path, url_a: str, url_b: str, label_b: str) -> list[str]:
    return [
        "gate", "--base-url-a", url_a, "--base-url-b", url_b, "--label-a", "stock",
        "--label-b", label_b, "--suite", str(SUMS1), "--max-tokens", "16", "--margin", "0.1",
        "--alpha", "0.05", "--batch", "5", "--out", str(tmp_path / "runs"), "--no-progress",
        "--junit", str(tmp_path / "gate.xml"), "--md", str(tmp_path / "gate.md"), "--json",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def q2k_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """The same model requantised from Q4_1 to Q2_K: a checkpoint the quantisation broke."""
    folder = tmp_path_factory.mktemp("q2k")
    model = requantise(folder / "SmolLM2-135M-Instruct.Q2_K.gguf", llama_cpp.LLAMA_FTYPE_MOSTLY_Q2_K)
    server = LlamaServer([], folder / "server.log", model=model, threads=1)
    yield server
    server.stop()


def test_broken_quantisation_fails_the_gate(
    llama_server: LlamaServer, q2k_server: LlamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(next_gate(tmp_path, llama_server.base_url, q2k_server.base_url, "q2k")) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "fail" and out["determinism"]["status"] == "deterministic"
    assert out["errors"] == 0 and out["looked_at"] < out["max_items"] == 81  # stopped early
    last = out["checkpoints"][-1]
    assert last["high"] < -0.1 and out["tally"]["b"] > out["tally"]["c"]
    # The candidate really answered worse: every item counted against it is a completion whose
    # number is not the target, while the control's is.
    rows = {}
    for label in ("stock", "q2k"):
        lines = (tmp_path / "runs" / f"{label}.one_digit_sums.jsonl").read_text().splitlines()[1:]
        rows[label] = {r["id"]: r for r in map(json.loads, lines)}
    lost = [i for i in rows["q2k"] if rows["stock"][i]["correct"] and not rows["q2k"][i]["correct"]]
    assert len(lost) == out["tally"]["b"]
    assert all(rows["q2k"][i]["error"] is None and rows["q2k"][i]["text"] for i in lost)
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "gate.xml").getroot().iter("testcase")}
    assert cases["determinism"].find("failure") is None
    failure = cases["non-inferiority[one_digit_sums]"].find("failure")
    assert failure is not None and failure.get("type") == "fail"
    assert "confidence sequence [" in (failure.get("message") or "")
    assert "fail" in (tmp_path / "gate.md").read_text().lower()


def test_top_logprobs_let_compare_explain_the_gate_records(
    llama_server: LlamaServer, q2k_server: LlamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --top-logprobs both sides' records carry each token's top-k, so compare of them
    classifies every divergence from the logits that chose it, with no second pass."""
    argv = next_gate(tmp_path, llama_server.base_url, q2k_server.base_url, "q2k")
    assert main([*argv, "--max-items", "10", "--top-logprobs", "3"]) == 1
    capsys.readouterr()
    records = [tmp_path / "runs" / f"{label}.one_digit_sums.jsonl" for label in ("stock", "q2k")]
    for path in records:
        items = [json.loads(line) for line in path.read_text().splitlines()[1:]]
        assert len(items) == 10 and all(it["logprobs"] for it in items)
        assert all(len(top) == 3 for it in items for top in it["logprobs"])
    # The control's repeat names the same suite, so compare takes it as the control of stock.
    repeat = tmp_path / "runs" / "stock.one_digit_sums.repeat2.jsonl"
    # Q4_1 against Q2_K: two weight files of one model, with one tokenizer (the servers' files are
    # here, so both records carry their vocabulary hash).
    assert main(["compare", *map(str, records), str(repeat), "--checkpoints", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (control,) = report["controls"]
    assert control["identical"] == control["total"] == 5  # the gate's determinism items, byte for byte
    (pair,) = report["pairs"]
    # ...and needs no --force for it (a repeat of a cut suite was refused: "the prompts differ").
    assert main(["compare", str(records[0]), str(repeat), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["controls"][0]["identical"] == 5
    assert pair["divergences"], "stock and Q2_K should part on some of the ten sums"
    # Measured, every one (Q2_K often picks a token outside stock's top 3: unexplained).
    assert {d["cls"] for d in pair["divergences"]} <= {"near-tie flip", "rank change", "unexplained"}
    assert all(d["a"] is not None and d["b"] is not None for d in pair["divergences"])
    # 21 is beyond what an OpenAI-compatible server returns: a usage error before anything runs.
    with pytest.raises(SystemExit) as usage:
        main([*argv, "--top-logprobs", "21"])
    assert usage.value.code == 2
    assert "--top-logprobs: must be an integer from 0 to 20, got '21'" in capsys.readouterr().err


def _right_or_400(request: Request) -> Reply:
    """Every third request refused; the rest answered right."""
    if request.index % 3 == 0:
        return 400, '{"error": "refused"}', 0.0
    a, b = re.findall(r"\d+", request.body["messages"][-1]["content"])
    return 200, chat_body(str(int(a) + int(b))), 0.0


def test_errored_items_do_not_count_against_a_candidate_that_answers_right(
    llama_server: LlamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Counted as wrong, a third of the candidate's items would fail it; left out, it passes."""
    with stub_server(_right_or_400) as (url, sent):
        code = main(next_gate(tmp_path, llama_server.base_url, url, "flaky"))
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["verdict"] == "pass"
    assert out["errors"] == sent.count(400) > 0
    assert out["tally"]["b"] == 0 and out["tally"]["n"] + out["errors"] == out["looked_at"]


def test_hostile_labels_stay_file_names_inside_out_and_the_junit_file_parses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--label-a ../escaped` once wrote its record beside --out, and a label with '/' made a
    folder; control characters in a label made the JUnit file unparseable. Embedded SmolLM2 on
    one thread on both sides, 5 items."""
    knobs = tmp_path / "knobs.toml"
    knobs.write_text("[configs.one]\nthreads = 1\n", encoding="utf-8")
    out, junit = tmp_path / "deep" / "runs", tmp_path / "gate.xml"
    labels = ("../escaped", "a/b\x01\x1b[31m\x7f")
    argv = ["gate", "--config-file", str(knobs), "--config-a", "one", "--config-b", "one",
            "--label-a", labels[0], "--label-b", labels[1], "--suite", str(SUMS1), "--max-tokens", "4",
            "--max-items", "5", "--batch", "5", "--determinism-items", "1", "--margin", "0.3",
            "--out", str(out), "--junit", str(junit), "--md", str(tmp_path / "gate.md"),
            "--no-progress"]  # fmt: skip
    assert main(argv) in (0, 1)  # a verdict (pass or inconclusive), not an error
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    records = [p for p in written if p.suffix == ".jsonl"]
    assert len(records) == 3 and all(tmp_path / p.parent == out for p in records)  # A, B, A's repeat
    assert set(written) == {*records, Path("knobs.toml"), Path("gate.xml"), Path("gate.md")}
    assert sorted(json.loads((tmp_path / p).open().readline())["label"] for p in records) == sorted(
        [labels[0], labels[0], labels[1]]
    )  # the labels themselves are kept, as given
    root = ET.parse(junit).getroot()  # a real XML parser: the file is well-formed
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "servediff gate a/b\\x01\\x1b[31m\x7f vs ../escaped"


def test_xml_text_leaves_nothing_xml_forbids_and_keeps_everything_it_allows() -> None:
    forbidden = "".join(map(chr, [*range(0x20), 0x7F, 0xD800, 0xDFFF, 0xFFFE, 0xFFFF]))
    el = ET.Element("case", name=xml_text(forbidden))
    el.text = xml_text(forbidden)
    parsed = ET.fromstring(ET.tostring(el, encoding="unicode"))  # would raise on a forbidden character
    for text in (parsed.text or "", parsed.get("name") or ""):
        assert all(escape in text for escape in ("\\x01", "\\x1b", "\\ud800", "\\ufffe"))
    allowed = "tab\there\nLF\rCR é € 😀 \x7f \ue000"
    assert xml_text(allowed) == allowed
