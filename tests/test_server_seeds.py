"""Per-request seeds on a llama.cpp server started with one thread (``--n_threads 1``): a sampled
run repeated with the same base seed reproduces every draw, and the control says so. (The shared
``llama_server`` fixture uses every core; ``test_http_engine`` covers that server.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from servediff.cli import main
from servediff.records import read_run
from tests.conftest import LlamaServer


@pytest.fixture(scope="module")
def one_thread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    log = tmp_path_factory.mktemp("llama-1t") / "server.log"
    server = LlamaServer(["--n_threads", "1", "--n_threads_batch", "1"], log)
    yield server
    server.stop()


def run(server: LlamaServer, out: Path, repeat: int, seed: str) -> None:
    args = ["run", "--engine", "http", "--base-url", server.base_url, "--suite", "prompts", "--limit", "3"]
    args += ["--max-tokens", "48", "--temperature", "0.7", "--samples", "3", "--seed", seed]
    assert main([*args, "--label", "t1", "--repeat", str(repeat), "--out", str(out), "--no-progress"]) == 0


def test_one_thread_server_honours_per_request_seeds(one_thread: LlamaServer, tmp_path: Path) -> None:
    paths = [tmp_path / f"{n}.jsonl" for n in ("a", "a2", "b")]
    run(one_thread, paths[0], 1, "42")
    run(one_thread, paths[1], 2, "42")
    run(one_thread, paths[2], 1, "43")
    a, a2, b = (read_run(p) for p in paths)
    assert len(a.items) == 9 and all(x.error is None and x.text for x in a.items.values())
    assert {i: x.text for i, x in a.items.items()} == {i: x.text for i, x in a2.items.items()}
    assert sum(a.items[i].text != b.items[i].text for i in a.items) >= 6  # other seeds, other draws
    md = tmp_path / "r.md"
    assert main(["compare", str(paths[0]), str(paths[1]), "--md", str(md)]) == 0
    assert "per-request seeds reproduce: **9/9** samples identical" in md.read_text()
