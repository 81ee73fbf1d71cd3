"""The verify study on vLLM (docs/studies/vllm-verify.md) from its committed records: each table row
on the page is what bench/verify_table.py prints from the verdict files of its session (the page
names the endpoints in words; every other cell must match), and every verdict file still reads."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from servediff.cli import main
from tests.helpers.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
STUDY = ROOT / "docs" / "studies" / "vllm-verify"
# archive → the folders whose verdicts it holds
ARCHIVES = {
    "verify.tar.xz": ("verify", "xverify"),
    "verify2.tar.xz": ("verify2",),
    "verify3.tar.xz": ("cross",),  # and verify3/: the third session's reference runs
}
# the folder of each session's reference runs, by the session's number in the cross-machine names
SESSIONS = {1: "verify", 2: "verify2", 3: "verify3"}


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vllm-verify")
    for name in ARCHIVES:
        with tarfile.open(STUDY / name) as tar:
            tar.extractall(out, filter="data")
    return out


def rows(folder: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    table = load_script(ROOT / "bench" / "verify_table.py")
    found = table.endpoints(folder)
    assert found, folder
    table.table(found, None)
    printed = capsys.readouterr().out.splitlines()
    return [line for line in printed[2:] if line.startswith("| ")]  # past the head and its rule


@pytest.mark.parametrize("folder", [f for folders in ARCHIVES.values() for f in folders])
def test_every_row_on_the_page_is_the_tables(
    folder: str, records: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = (ROOT / "docs" / "studies" / "vllm-verify.md").read_text(encoding="utf-8")
    printed = rows(records / folder, capsys)
    assert printed
    for row in printed:
        cells = row.split(" | ", 1)[1]  # everything after the endpoint's name
        assert any(line.startswith("| ") and line.endswith(cells) for line in page.splitlines()), row


def test_a_cross_machine_verdict_is_made_again_byte_for_byte_from_the_committed_runs(
    records: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ref3-ans1-r2: session 3's reference, session 1's run at 64 in flight as the recorded answers
    monkeypatch.chdir(records)
    ref = [f"{SESSIONS[3]}/ref.{n}.jsonl" for n in ("r1", "r2", "r3", "score")]
    out = tmp_path / "again.json"
    argv = ["verify", "--reference", *ref, "--answers", f"{SESSIONS[1]}/ref.r2.jsonl"]
    assert main([*argv, "--concurrency", "64", "--seed", "0", "--out", str(out)]) == 0
    assert out.read_bytes() == (records / "cross" / "ref3-ans1-r2.s0.json").read_bytes()


def test_one_request_at_a_time_the_three_machines_answered_bit_for_bit_alike(records: Path) -> None:
    """The page's claim: the reference's first run (one request in flight) is the same texts and
    logprobs on all three H100s, and its runs under load are not."""

    def items(folder: str, run: str) -> dict[str, tuple[str, object]]:
        lines = (records / folder / f"ref.{run}.jsonl").read_text(encoding="utf-8").splitlines()[1:]
        return {d["id"]: (d["text"], d["logprobs"]) for d in map(json.loads, lines) if "id" in d}

    first = [items(f, "r1") for f in SESSIONS.values()]
    assert len(first[0]) == 150 and first[0] == first[1] == first[2]
    loaded = [items(f, "r2") for f in SESSIONS.values()]
    assert loaded[0] != loaded[1] and loaded[0] != loaded[2]
