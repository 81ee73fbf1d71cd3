"""No secret reaches the disk: an API key a server echoes in its error body, credentials on a
launch argv or in its environment, and whatever the launched server prints about them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servediff.cli import main
from servediff.redaction import argv_secrets, redact_argv, redact_text
from tests.helpers.stub_server import ECHO, always, stub_server
from tests.test_faults import gen

KEY = "sk-canary-5f3e9a1c77d2b4e0"


def written(root: Path) -> str:
    """Every file under ``root``, as text."""
    return "\n".join(p.read_text(errors="replace") for p in sorted(root.rglob("*")) if p.is_file())


def test_launch_argv_credentials_are_redacted_and_others_kept() -> None:
    argv = [
        "vllm", "serve", "m", "--api-key", "k-one-1", "--api_key=k-two-2", "--hf-token", "hf-3333",
        "--token", "t-444", "HF_TOKEN=t-555", "--max-num-batched-tokens", "8192", "--tokenizer", "tk",
        "--api-key-file", "/keys/file", "--token-budget", "64",
    ]  # fmt: skip
    shown = redact_argv(argv)
    assert not any(s in " ".join(shown) for s in ("k-one-1", "k-two-2", "hf-3333", "t-444", "t-555"))
    assert shown[3:5] == ["--api-key", "<redacted>"] and "--api_key=<redacted>" in shown
    assert "HF_TOKEN=<redacted>" in shown
    for kept in ("8192", "tk", "/keys/file", "64"):  # not credentials: the configuration stays whole
        assert kept in shown
    assert argv_secrets(argv) == ["k-one-1", "k-two-2", "hf-3333", "t-444", "t-555"]
    assert argv_secrets(["--token", "abc"]) == []  # too short to hunt for in free text


def test_redact_text_blanks_known_values_and_key_shapes() -> None:
    body = f'{{"error": "Incorrect API key provided: Bearer {KEY}", "echo": "abc-secret-value"}}'
    out = redact_text(body, ["abc-secret-value"])
    assert KEY not in out and "abc-secret-value" not in out and "Bearer <redacted>" in out
    assert "sk-" not in redact_text("key sk-0123456789abcdef was revoked")
    assert redact_text("http://user:pw@host/v1") == "http://<redacted>@host/v1"
    assert redact_text("Bearer token required; max_tokens=8") == "Bearer token required; max_tokens=8"


def test_a_key_echoed_in_an_error_body_is_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVEDIFF_CANARY_KEY", KEY)
    for status in (401, 500):
        with stub_server(always(status, ECHO)) as (url, _):
            (c,) = gen(url, n=1, max_retries=1, api_key_env="SERVEDIFF_CANARY_KEY")
        assert c.error and f"HTTP {status}" in c.error and "Authorization: Bearer <redacted>" in c.error
        assert KEY not in c.error
    # A key the error-text cut would fall inside: redacted before the cut, no prefix left behind.
    with stub_server(always(401, "x" * 290 + "Bearer " + KEY)) as (url, _):
        (c,) = gen(url, n=1, api_key_env="SERVEDIFF_CANARY_KEY")
    assert c.error and KEY[:6] not in c.error
    out = tmp_path / "r.jsonl"
    with stub_server(always(401, ECHO)) as (url, _):
        argv = ["run", "--engine", "http", "--base-url", url, "--limit", "1", "--out", str(out)]
        assert main([*argv, "--api-key-env", "SERVEDIFF_CANARY_KEY", "--no-progress"]) == 2
    main(["report", str(out), "--md", str(tmp_path / "r.md"), "--html", str(tmp_path / "r.html")])
    assert (tmp_path / "r.md").is_file() and (tmp_path / "r.html").is_file()
    assert KEY not in written(tmp_path)


def test_launch_credentials_never_reach_header_report_or_server_log(tmp_path: Path) -> None:
    # A fake vLLM (the stub as a process) that prints its arguments and token, as vLLM does.
    stub = Path(__file__).parent / "helpers" / "stub_server.py"
    canaries = ("argv-canary-7e1f0b", "flag-canary-42c9d1", "env-canary-93ab5e")
    argv = ["{python}", str(stub), "{port}", "engaged", "--api-key", canaries[0], f"--hf-token={canaries[1]}"]
    out = tmp_path / "out"
    path = tmp_path / "exp.toml"
    path.write_text(
        f'model = "stub"\noutput = "{out}"\ncontrol_repeats = 1\n[sampling]\nmax_tokens = 8\n'
        f'[suites.prompts]\nlimit = 2\n[[configurations]]\nlabel = "keyed"\nprofile = "vllm"\n'
        f'launch = {json.dumps(argv)}\nenv = {{ HF_TOKEN = "{canaries[2]}" }}\n'
    )
    assert main(["experiment", str(path), "--no-progress"]) == 0
    (log,) = (out / "logs").glob("keyed.*.log")
    assert "non-default args:" in log.read_text()  # the server's own output is kept, redacted
    run = next((out / "runs").rglob("*.jsonl"))
    header = json.loads(run.read_text().splitlines()[0])
    assert header["engine"]["launch"][4:] == ["--api-key", "<redacted>", "--hf-token=<redacted>"]
    assert header["engine"]["env"] == {"HF_TOKEN": "<redacted>"}
    assert "--api-key" in (out / "report.md").read_text() and (out / "report.html").is_file()
    everything = written(out)
    assert not [c for c in canaries if c in everything]
