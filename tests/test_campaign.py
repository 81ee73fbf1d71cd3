"""A fault campaign: a scored suite through ``servediff run --engine http`` against a server that
fails about 20 % of requests in every way it can. Nothing lost (every failure is a recorded
error, and a re-run recovers it), nothing faked (no failed request is scored), no secret written
(the API key the server echoes in its error bodies is on no file servediff wrote)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from servediff.cli import main
from servediff.records import read_run
from tests.helpers.stub_server import FAULTS, STREAM_FAULTS, Campaign, Request, stub_server

DATA = Path(__file__).parent / "data" / "sums.jsonl"  # 50 GSM8K-format sums
KEY = "sk-campaign-canary-0d9c41e7"
NUMBERS = re.compile(r"has (\d+) \w+ and is given (\d+) more")


def expected(question: str) -> tuple[str, bool]:
    """The stub's answer to a question, and whether it is right: wrong when the first number is odd."""
    a, b = map(int, NUMBERS.search(question).groups())  # type: ignore[union-attr]
    right = a % 2 == 0
    return f"{a} + {b} makes {a + b if right else a + b + 1}.\n#### {a + b if right else a + b + 1}", right


def answer(request: Request) -> str:
    return expected(request.body["messages"][-1]["content"])[0]


# A label as hostile as a label can be: a path out of the folder, a folder, terminal escapes and
# control characters. It must reach the record as it is and no path, and every report must hold it.
HOSTILE_LABEL = "../faulty/x\x01\x1b[31m"


@pytest.mark.parametrize(("stream", "seed"), [(False, 14), (True, 0)], ids=["plain", "streamed"])
def test_faults_are_errors_never_scores_and_a_rerun_recovers_them(
    stream: bool,
    seed: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SERVEDIFF_CAMPAIGN_KEY", KEY)
    kinds = STREAM_FAULTS if stream else FAULTS
    # rate 0.3: these seeds fail 20 and 16 of the 50 items, so each of the 14 kinds occurs
    campaign = Campaign(answer, seed=seed, rate=0.3, hang_s=2.0)
    out = tmp_path / "runs" / "sums.jsonl"
    with stub_server(campaign) as (url, sent):
        argv = ["run", "--engine", "http", "--base-url", url, "--suite", "gsm8k", "--data", str(DATA),
                "--retries", "0", "--timeout", "1", "--label", HOSTILE_LABEL, "--out", str(out),
                "--api-key-env", "SERVEDIFF_CAMPAIGN_KEY", "--no-progress",
                *(["--stream"] if stream else [])]  # fmt: skip
        assert main(argv) == 2  # some items failed: exit 2, recorded
        first = read_run(out)
        faults, requests = len(campaign.injected), len(sent)
        campaign.active = False
        assert main(argv) == 0  # the same command resumes and retries only the failed items
        rerun_requests = len(sent) - requests
    assert {kind for _, kind in campaign.injected} == set(kinds)  # every way of failing occurred
    assert 0.1 < faults / requests < 0.45
    errors = [i for i in first.items.values() if i.error]
    assert len(errors) == faults == rerun_requests  # one request per item: each fault is one error
    for item in first.items.values():
        if item.error:  # nothing faked: a failed request is an error, with no text and no score
            assert item.text == "" and item.correct is None and item.answer is None
        else:  # a real 200 answer, scored as what it is
            text, right = expected(item.input[-1]["content"])  # type: ignore[index]
            assert item.text == text and item.correct is right
    final = read_run(out)
    assert len(final.items) == 50 and not any(i.error for i in final.items.values())
    for item in final.items.values():
        text, right = expected(item.input[-1]["content"])  # type: ignore[index]
        assert item.text == text and item.correct is right
    assert final.header.label == HOSTILE_LABEL
    assert main(["report", str(out), "--md", str(tmp_path / "r.md"), "--html", str(tmp_path / "r.html")]) == 0
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["r.html", "r.md", "runs", "sums.jsonl"]
    svgs = re.findall(r"<svg.*?</svg>", (tmp_path / "r.html").read_text(encoding="utf-8"), flags=re.S)
    assert svgs and all(ET.fromstring(s) is not None for s in svgs)  # the label's controls: escaped
    on_disk = [p for p in tmp_path.rglob("*") if p.is_file() and KEY in p.read_text(errors="replace")]
    assert on_disk == []
    with capsys.disabled():
        print(
            f"\ncampaign ({'streamed' if stream else 'plain'}): {requests} requests, {faults} faults "
            f"injected ({len(set(k for _, k in campaign.injected))} kinds), {len(errors)} items recorded as "
            f"errors, 0 scored from a failed request, {len(errors)} recovered on re-run, "
            f"{len(on_disk)} files with the key"
        )
