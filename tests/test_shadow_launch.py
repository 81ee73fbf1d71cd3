"""``servediff shadow --experiment FILE``: both servers launched from an experiment file (two
real ``python -m llama_cpp.server``, one thread each), the proxy driven by the openai client,
and both servers gone when the session ends by SIGTERM, or by SIGKILL of servediff itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from servediff.records import read_run
from tests.conftest import free_port

EXPERIMENT = """
title = "shadow: stock vs n_ubatch 1"
model = "smollm2"

[[configurations]]
label = "stock"
launch = ["{python}", "-m", "llama_cpp.server", "--model", "{model_path}", "--model_alias", "{model}",
          "--host", "{host}", "--port", "{port}", "--n_threads", "1", "--n_threads_batch", "1"]
start_timeout = 180

[[configurations]]
label = "ubatch1"
launch = ["{python}", "-m", "llama_cpp.server", "--model", "{model_path}", "--model_alias", "{model}",
          "--host", "{host}", "--port", "{port}", "--n_threads", "1", "--n_threads_batch", "1",
          "--n_ubatch", "1"]
start_timeout = 180
"""
REQUEST = {"model": "smollm2", "temperature": 0, "seed": 42, "max_tokens": 12}
MESSAGES = [{"role": "user", "content": "Name one prime number."}]


class Session:
    """``servediff shadow --experiment`` as a user starts it: a process of its own."""

    def __init__(self, experiment: Path, out: Path) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self.out = out
        argv = [sys.executable, "-m", "servediff", "shadow", "--experiment", str(experiment)]
        argv += ["--listen", self.url.removeprefix("http://"), "--out", str(out)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 400  # two servers start one after the other
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(self.proc.communicate()[1].decode())
            try:
                urllib.request.urlopen(f"{self.url}/servediff/shadow", timeout=2).close()
                return
            except OSError:
                time.sleep(0.5)
        self.proc.kill()
        raise RuntimeError("servediff shadow did not start")

    def servers(self) -> dict[str, dict[str, int]]:
        """label → its ledger entry (pid, port): what the session lists while it runs."""
        entries = [json.loads(p.read_text()) for p in (self.out / "servers").glob("*.json")]
        return {e["label"]: e for e in entries}


def gone(pid: int, timeout: float = 30) -> bool:
    """True once no process has this pid (a zombie child of ours counts as gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.2)
    return False


@pytest.fixture()
def experiment(tmp_path: Path) -> Path:
    path = tmp_path / "shadow.toml"
    path.write_text(EXPERIMENT, encoding="utf-8")
    return path


@pytest.fixture()
def session(experiment: Path, tmp_path: Path) -> Iterator[Session]:
    s = Session(experiment, tmp_path / "out")
    yield s
    if s.proc.poll() is None:
        s.proc.kill()
        s.proc.wait()
    for entry in s.servers().values():  # a failed test must not leave servers behind either
        if not gone(entry["pid"], timeout=0):
            os.killpg(entry["pid"], signal.SIGKILL)


def test_both_servers_are_launched_shadowed_and_stopped_on_sigterm(session: Session) -> None:
    up = session.servers()
    assert sorted(up) == ["stock", "ubatch1"]
    client = openai.OpenAI(base_url=f"{session.url}/v1", api_key="sk-client", max_retries=0, timeout=120)
    answer = client.chat.completions.create(messages=MESSAGES, **REQUEST)  # type: ignore[call-overload]
    with client.chat.completions.with_streaming_response.create(  # type: ignore[call-overload]
        messages=MESSAGES, stream=True, **REQUEST
    ) as r:
        chunks = [line for line in r.iter_lines() if line.startswith("data: {")]
    assert answer.choices[0].message.content and chunks
    # The client got the launched primary's answer: the same request sent to it directly.
    direct = openai.OpenAI(base_url=f"http://127.0.0.1:{up['stock']['port']}/v1", api_key="x", max_retries=0)
    assert direct.chat.completions.create(messages=MESSAGES, **REQUEST).choices[0].message.content == (  # type: ignore[call-overload]
        answer.choices[0].message.content
    )
    deadline = time.monotonic() + 120
    while json.loads(urllib.request.urlopen(f"{session.url}/servediff/shadow").read())["mirrored"] < 2:
        assert time.monotonic() < deadline, "the shadow copies were not replayed"
        time.sleep(0.2)

    session.proc.send_signal(signal.SIGTERM)
    _, err = session.proc.communicate(timeout=120)
    assert session.proc.returncode == 0, err.decode()
    assert all(gone(e["pid"]) for e in up.values())
    assert not list((session.out / "servers").glob("*.json"))  # the ledger is emptied
    primary, candidate = (read_run(session.out / f"{side}-0001.jsonl") for side in ("primary", "candidate"))
    assert (primary.header.engine["label"], candidate.header.engine["label"]) == ("stock", "ubatch1")
    assert "--n_ubatch" in candidate.header.engine["launch"]
    assert primary.header.engine["base_url"].endswith(f":{up['stock']['port']}")
    assert len(primary.items) == len(candidate.items) == 2
    texts = {item.text for item in primary.items.values()}
    assert answer.choices[0].message.content in texts
    assert json.loads((session.out / "shadow.json").read_text())["mirrored"] == 2


def test_servers_die_with_a_killed_session(session: Session) -> None:
    up = session.servers()
    assert len(up) == 2
    session.proc.kill()  # SIGKILL: nothing of servediff runs to stop them
    session.proc.wait()
    assert all(gone(e["pid"]) for e in up.values())  # the kernel's parent-death signal did


def test_an_unlaunched_candidate_or_urls_with_the_experiment_are_refused(
    experiment: Path, tmp_path: Path
) -> None:
    # The candidate is a server already running elsewhere: nothing for this form to launch.
    head = experiment.read_text().split('label = "ubatch1"')[0]
    experiment.write_text(head + 'label = "ubatch1"\nbase_url = "http://127.0.0.1:1"\n', encoding="utf-8")
    out = tmp_path / "never"
    cases = (
        (["--experiment", str(experiment)], "has no launch command"),
        (["--experiment", str(experiment), "--primary", "http://a"], "not both"),
        (["--primary", "http://a"], "--experiment FILE"),
    )
    for extra, said in cases:
        argv = [
            sys.executable,
            "-m",
            "servediff",
            "shadow",
            *extra,
            "--listen",
            "127.0.0.1:1",
            "--out",
            str(out),
        ]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, r.stderr
        assert said in r.stderr and len(r.stderr.strip().splitlines()) == 1
        assert not out.exists()
