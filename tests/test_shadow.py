"""servediff shadow between two real llama.cpp servers, driven by the official openai client.

What ``python -m llama_cpp.server`` varies between two identical direct calls (measured, SmolLM2,
temperature 0): the body's ``id`` and ``created`` (in every streamed chunk too), and the headers
``date``, ``openai-processing-ms`` and ``x-request-id``. Everything else is compared byte for byte.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from servediff.compare.divergence import RETOKENIZED_IDS
from servediff.compare.loader import load
from servediff.compare.mechanism import NEAR_TIE, RANK_CHANGE, measure_pair, unlocated
from servediff.compare.stats.hazard import pair_hazard
from servediff.compare.study import compare_runs
from servediff.records import Run, read_run
from servediff.records.probes import read_probes
from servediff.suites.prompts import PROMPTS
from tests.conftest import LlamaServer, free_port

ONE_THREAD = ["--n_threads", "1", "--n_threads_batch", "1", "--model_alias", "smollm2"]
# Flash attention with n_ubatch 1 changes SmolLM2's answer to the first two within a few tokens.
PROMPT_IDS = ("explain-hash-table", "explain-tcp", "verse-haiku")
CLIENT_KEY = "sk-client-secret-0123456789"
VARYING = re.compile(rb'"(id|created)": ?("[^"]*"|\d+)')
# Every sampling field servediff's own runs send a llama.cpp server (engines/server_sampling.py),
# so that the direct runs the shadow records are compared with sample alike: a client that left
# repeat_penalty out would get llama-cpp-python's default 1.1, and other text, by design.
REQUEST = {
    "model": "smollm2",
    "temperature": 0,
    "seed": 42,
    "max_tokens": 16,
    "top_p": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "extra_body": {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0},
}


def messages(prompt_id: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": PROMPTS[prompt_id]}]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LlamaServer, LlamaServer]]:
    folder = tmp_path_factory.mktemp("shadow")
    primary = LlamaServer(ONE_THREAD, folder / "primary.log")
    try:
        tuned = LlamaServer([*ONE_THREAD, "--flash_attn", "true", "--n_ubatch", "1"], folder / "tuned.log")
    except BaseException:
        primary.stop()
        raise
    yield primary, tuned
    tuned.stop()
    primary.stop()


class Shadow:
    """``servediff shadow`` as a user starts it: a process, stopped with SIGTERM."""

    def __init__(self, primary: str, candidate: str, out: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.out = out
        argv = [sys.executable, "-m", "servediff", "shadow", "--primary", primary, "--candidate", candidate]
        argv += ["--listen", f"127.0.0.1:{self.port}", "--out", str(out), *extra]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.communicate()[1].decode()
            try:
                self.counts()
                return
            except OSError:
                time.sleep(0.2)
        self.proc.kill()
        raise RuntimeError("servediff shadow did not start")

    def counts(self) -> dict[str, int]:
        with urllib.request.urlopen(f"{self.url}/servediff/shadow", timeout=2) as r:
            return dict(json.loads(r.read()))

    def wait_mirrored(self, n: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.counts()["mirrored"] + self.counts()["dropped"] < n and time.monotonic() < deadline:
            time.sleep(0.2)

    def stop(self) -> dict[str, Any]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        assert self.proc.returncode == 0, err.decode()
        return dict(json.loads((self.out / "shadow.json").read_text()))


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=CLIENT_KEY, max_retries=0, timeout=120)


def plain(base: str, prompt_id: str) -> tuple[bytes, str]:
    raw = client(base).chat.completions.with_raw_response.create(messages=messages(prompt_id), **REQUEST)
    return raw.http_response.content, raw.headers["content-type"]


def streamed(base: str, prompt_id: str) -> list[bytes]:
    with client(base).chat.completions.with_streaming_response.create(
        messages=messages(prompt_id), stream=True, **REQUEST
    ) as r:
        return [line.encode() for line in r.iter_lines()]


def settle(server: LlamaServer) -> None:
    """Another prompt first, so that two calls of one prompt meet the same server state: the
    llama.cpp server reuses the previous request's tokens as a cache, and the same prompt twice
    in a row is answered from a longer cached prefix (another computation, other text). Its first
    word differs from every tested prompt's, so only the chat template's tokens are shared."""
    plain(server.base_url, "math-percent")


def records(folder: Path) -> tuple[Run, Run]:
    return read_run(folder / "primary-0001.jsonl"), read_run(folder / "candidate-0001.jsonl")


def same(body: bytes) -> bytes:
    return VARYING.sub(rb'"\1": X', body)


def test_clients_get_the_primarys_answer_and_the_records_compare_like_direct_runs(
    servers: tuple[LlamaServer, LlamaServer], tmp_path: Path
) -> None:
    primary, tuned = servers
    shadow = Shadow(primary.base_url, tuned.base_url, tmp_path / "shadow")
    try:
        for pid in PROMPT_IDS:
            settle(primary)
            via, via_type = plain(shadow.url, pid)
            settle(primary)
            direct, direct_type = plain(primary.base_url, pid)
            assert same(via) == same(direct) and via_type == direct_type
            assert same(via) != via  # the normalisation touched only id and created
        for pid in PROMPT_IDS:
            settle(primary)
            chunks_via = streamed(shadow.url, pid)
            settle(primary)
            chunks_direct = streamed(primary.base_url, pid)
            assert [same(c) for c in chunks_via] == [same(c) for c in chunks_direct]
            assert len(chunks_via) > 5  # streamed token by token, not one block
        shadow.wait_mirrored(2 * len(PROMPT_IDS))
    finally:
        counts = shadow.stop()
    assert counts["mirrored"] == 2 * len(PROMPT_IDS) and counts["dropped"] == 0
    assert counts["candidate_errors"] == counts["primary_errors"] == counts["noncomparable"] == 0
    files = sorted((tmp_path / "shadow").glob("*.jsonl"))
    assert all(CLIENT_KEY not in f.read_text() for f in files)  # the client's key is never recorded

    direct = direct_runs(servers, tmp_path)
    p, c = records(tmp_path / "shadow")
    via_shadow = compare_runs(p, c, "pair")
    # Each request twice (plain, streamed): one item and one "#2" repeat per prompt.
    assert via_shadow.total == 2 * direct.total and via_shadow.errors == 0
    assert via_shadow.identical == 2 * direct.identical and direct.identical < direct.total
    by_content = {PROMPTS[pid]: pid for pid in PROMPT_IDS}
    for item_id, item in p.items.items():
        pid = by_content[item.input[0]["content"]]
        assert item.text == direct.a_run.items[pid].text
        assert c.items[item_id].text == direct.b_run.items[pid].text
    # Answers that differ are tokenized by the candidate's server (the primary is asked nothing
    # of its own): each divergence has the token position a direct run gives it, so the hazard
    # counts every divergence.
    assert via_shadow.divergences and {d.token.alignment for d in via_shadow.divergences} == {RETOKENIZED_IDS}
    assert sorted(d.token.index for d in via_shadow.divergences) == sorted(
        2 * [d.token.index for d in direct.divergences]
    )
    hazard, _ = pair_hazard(via_shadow.times, unlocated(via_shadow.divergences))
    assert hazard is not None and hazard.events == len(via_shadow.divergences)
    # compare's lean read places them from the recorded "first_token", without the token ids
    (lean,) = load([p.path, c.path])[0].pairs
    assert [d.token for d in lean.divergences] == [d.token for d in via_shadow.divergences]
    assert lean.times == via_shadow.times
    assert all(p.items[i].token_ids is None for i in p.items if p.items[i].text == c.items[i].text)
    # ...and `servediff probe` measures its cause afterwards, from the two servers.
    from servediff.cli import main

    probes = tmp_path / "probes.jsonl"
    argv = ["probe", str(p.path), str(c.path), "--out", str(probes), "--template", primary.model, "--replay"]
    assert main([*argv, "--base-url-a", primary.base_url, "--base-url-b", tuned.base_url]) == 0
    m = measure_pair(compare_runs(p, c, "pair"), [read_probes(probes)])
    assert len(m.explanations) == len(via_shadow.divergences)
    assert {e.cls for e in m.explanations} <= {NEAR_TIE, RANK_CHANGE}
    assert all(
        e.a and e.b and e.a.source.startswith("probe") and e.b.source.startswith("probe")
        for e in m.explanations
    )


def direct_runs(servers: tuple[LlamaServer, LlamaServer], tmp_path: Path) -> Any:
    from servediff.cli import main

    suite = tmp_path / "prompts.jsonl"
    suite.write_text("".join(json.dumps({"id": i, "messages": messages(i)}) + "\n" for i in PROMPT_IDS))
    for label, server in zip(("primary", "candidate"), servers):
        argv = ["run", "--engine", "http", "--base-url", server.base_url, "--model", "smollm2"]
        argv += ["--suite", str(suite), "--max-tokens", "16", "--label", label, "--no-progress"]
        assert main([*argv, "--out", str(tmp_path / f"direct-{label}.jsonl")]) == 0
    a, b = read_run(tmp_path / "direct-primary.jsonl"), read_run(tmp_path / "direct-candidate.jsonl")
    return compare_runs(a, b, "pair")


def test_a_dead_candidate_never_reaches_the_clients(
    servers: tuple[LlamaServer, LlamaServer], tmp_path: Path
) -> None:
    primary, _ = servers
    candidate = LlamaServer(ONE_THREAD, tmp_path / "candidate.log")
    shadow = Shadow(primary.base_url, candidate.base_url, tmp_path / "shadow")
    failed = 0
    try:
        for n in range(6):
            if n == 2:
                shadow.wait_mirrored(2)
                candidate.stop()  # killed mid-run
            try:
                if n % 2:
                    streamed(shadow.url, PROMPT_IDS[2])
                else:
                    plain(shadow.url, PROMPT_IDS[2])
            except openai.OpenAIError:
                failed += 1
        shadow.wait_mirrored(6)
    finally:
        candidate.stop()
        counts = shadow.stop()
    assert failed == 0
    assert counts["mirrored"] == 6 and counts["candidate_errors"] == 4 and counts["primary_errors"] == 0
    c = read_run(tmp_path / "shadow" / "candidate-0001.jsonl")
    assert sum(item.error is not None for item in c.items.values()) == 4


def test_unseeded_sampled_requests_are_counted_not_compared(
    servers: tuple[LlamaServer, LlamaServer], tmp_path: Path
) -> None:
    primary, tuned = servers
    redact = ("--redact-field", "messages.*.content")
    shadow = Shadow(primary.base_url, tuned.base_url, tmp_path / "shadow", *redact)
    try:
        sampled = {k: v for k, v in REQUEST.items() if k not in ("temperature", "seed")}
        client(shadow.url).chat.completions.create(messages=messages(PROMPT_IDS[2]), **sampled)
        plain(shadow.url, PROMPT_IDS[2])
        shadow.wait_mirrored(2)
    finally:
        counts = shadow.stop()
    assert counts["mirrored"] == 2 and counts["noncomparable"] == 1
    p, c = records(tmp_path / "shadow")
    result = compare_runs(p, c, "pair")
    assert (result.total, result.noncomparable) == (1, 1)
    # the report says what became of each mirrored request, in its own section
    from servediff.cli import main

    report = tmp_path / "report.md"
    assert main(["compare", str(tmp_path / "shadow" / "primary-0001.jsonl"),
                 str(tmp_path / "shadow" / "candidate-0001.jsonl"), "--md", str(report)]) == 0  # fmt: skip
    row = f"| `primary` | `candidate` | 2 | 1 | {result.identical}/1 | 1 | 0 |"
    assert "## Shadow traffic" in (text := report.read_text()) and row in text
    assert PROMPTS[PROMPT_IDS[2]] not in (tmp_path / "shadow" / "primary-0001.jsonl").read_text()
    assert all(item.input[0]["content"] == "<redacted>" for item in p.items.values())
