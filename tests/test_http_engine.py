"""The HTTP engine against a real llama.cpp server: records, determinism, compare, refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servediff.cli import main
from servediff.records import read_run
from tests.conftest import LlamaServer

ARGS = ["--engine", "http", "--suite", "prompts", "--limit", "3", "--max-tokens", "48", "--no-progress"]


def run_http(server: LlamaServer, out: Path, label: str, repeat: int = 1, *extra: str) -> int:
    return main(
        [
            "run",
            *ARGS,
            "--base-url",
            server.base_url,
            "--label",
            label,
            "--repeat",
            str(repeat),
            "--out",
            str(out),
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def two_runs(llama_server: LlamaServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("http")
    a1, a2 = d / "a1.jsonl", d / "a2.jsonl"
    assert run_http(llama_server, a1, "stock", 1) == 0
    assert run_http(llama_server, a2, "stock", 2) == 0
    return a1, a2


def test_http_run_records_everything(two_runs: tuple[Path, Path], llama_server: LlamaServer) -> None:
    run = read_run(two_runs[0])
    h = run.header
    assert h.engine["kind"] == "http" and h.engine["base_url"] == llama_server.base_url
    assert h.engine["model"] == llama_server.model
    assert h.sampling.temperature == 0 and h.sampling.seed == 42 and h.sampling.max_tokens == 48
    assert h.suite.item_ids == ["code-fizzbuzz", "code-reverse-list", "code-binary-search"]
    assert len(run.items) == 3
    for item in run.items.values():
        assert item.error is None and item.text
        assert item.n_tokens and 0 < item.n_tokens <= 48
        assert item.finish_reason in ("stop", "length")
        assert item.token_source == "retokenized" and item.token_ids


def test_same_configuration_twice_is_byte_identical(two_runs: tuple[Path, Path]) -> None:
    a, b = (read_run(p) for p in two_runs)
    assert {i: x.sha256 for i, x in a.items.items()} == {i: x.sha256 for i, x in b.items.items()}


def test_compare_json_fields(two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", *map(str, two_runs), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    control = summary["controls"][0]
    assert (control["a"], control["b"], control["identical"], control["total"]) == ("stock", "stock", 3, 3)
    assert control["divergences"] == []


def test_compare_lists_divergences_between_configurations(
    two_runs: tuple[Path, Path],
    llama_server: LlamaServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The server is deterministic, so make B differ on purpose: an edited copy of A's record.
    b = tmp_path / "b.jsonl"
    lines = two_runs[0].read_text().splitlines()
    header = json.loads(lines[0])
    header["label"] = "other"
    items = [json.loads(x) for x in lines[1:]]
    items[1]["text"] = items[1]["text"][:10] + "DIFFERENT"
    items[1]["token_ids"] = None
    b.write_text("\n".join(json.dumps(x) for x in [header, *items]) + "\n")
    assert main(["compare", str(two_runs[0]), str(b), "--json"]) == 0
    pair = json.loads(capsys.readouterr().out)["pairs"][0]
    assert (pair["a"], pair["b"], pair["identical"], pair["total"]) == ("stock", "other", 2, 3)
    (d,) = pair["divergences"]
    assert d["item_id"] == items[1]["id"] and d["char_index"] == 10
    assert set(d) >= {"item_id", "char_index", "token_index"}


def test_mismatched_runs_are_refused(
    two_runs: tuple[Path, Path],
    llama_server: LlamaServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    other = tmp_path / "short.jsonl"
    assert (
        main(
            [
                "run",
                "--engine",
                "http",
                "--limit",
                "1",
                "--max-tokens",
                "48",
                "--no-progress",
                "--base-url",
                llama_server.base_url,
                "--label",
                "short",
                "--out",
                str(other),
            ]
        )
        == 0
    )
    # --limit 1 gives different prompts (content hash) → refused with exit 2 ...
    assert main(["compare", str(two_runs[0]), str(other)]) == 2
    assert "prompts differ" in capsys.readouterr().err
    # ... unless forced.
    assert main(["compare", str(two_runs[0]), str(other), "--force", "--json"]) == 0


def test_resume_skips_finished_items(llama_server: LlamaServer, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    assert run_http(llama_server, out, "stock") == 0
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:2]) + lines[2][:25])  # one item done, one torn mid-write
    assert run_http(llama_server, out, "stock") == 0
    run = read_run(out)
    assert len(run.items) == 3
    assert len(out.read_text().splitlines()) == 4  # header + 3 items: the finished one not redone


def test_resume_refuses_a_different_run(llama_server: LlamaServer, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    assert run_http(llama_server, out, "stock") == 0
    assert (
        main(
            [
                "run",
                *ARGS,
                "--base-url",
                llama_server.base_url,
                "--label",
                "stock",
                "--out",
                str(out),
                "--seed",
                "7",
            ]
        )
        == 2
    )


def test_sampled_draws_send_their_own_seeds(llama_server: LlamaServer, tmp_path: Path) -> None:
    """A sampled HTTP run sends each draw's seed (and top_p); llama-cpp-python's server honours
    a per-request seed: the same seeds reproduce every draw, other seeds change them."""
    sampled = ("--temperature", "0.7", "--samples", "2", "--top-p", "0.95", "--top-k", "20")
    paths = [tmp_path / f"{n}.jsonl" for n in ("a", "a2", "b")]
    for path, repeat, seed in ((paths[0], 1, "7"), (paths[1], 2, "7"), (paths[2], 1, "8")):
        assert run_http(llama_server, path, "t", repeat, *sampled, "--seed", seed) == 0
    a, a2, b = (read_run(p) for p in paths)
    assert a.header.sampling.top_k == 20 and len(a.items) == 6
    assert {i: x.text for i, x in a.items.items()} == {i: x.text for i, x in a2.items.items()}
    assert sum(a.items[i].text != b.items[i].text for i in a.items) >= 4
    assert {x.metadata["seed"] for x in a.items.values()} != {x.metadata["seed"] for x in b.items.values()}
