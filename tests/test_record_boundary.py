"""The run-record file boundary: torn writes, resume, bad headers and the control check.

A writer killed between a line and its newline, or in the middle of a line (even inside a UTF-8
character), must neither lose a finished item nor break ``servediff run`` / ``compare`` with a
bare codec error; bad input is one line naming the file (and line), exit 2. Resume runs the real
CLI against the real llama.cpp server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servediff.cli import main
from servediff.records import read_run
from tests.conftest import LlamaServer
from tests.helpers.records import Line, write_run

# Multi-byte characters in every prompt: they are echoed into each item line's "input".
PROMPTS = [
    {"id": "cafe", "messages": [{"role": "user", "content": "Say « café » and « été » — in French."}]},
    {"id": "euro", "messages": [{"role": "user", "content": "What is 5 € in ¥? Answer in one line."}]},
    {"id": "kana", "messages": [{"role": "user", "content": "Translate ありがとう into English."}]},
]


@pytest.fixture()
def suite_file(tmp_path: Path) -> Path:
    path = tmp_path / "unicode.jsonl"
    path.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in PROMPTS), encoding="utf-8")
    return path


def run_cli(server: LlamaServer, suite: Path, out: Path) -> int:
    return main(
        [
            "run",
            "--engine",
            "http",
            "--base-url",
            server.base_url,
            "--suite",
            "prompts",
            "--data",
            str(suite),
            "--max-tokens",
            "8",
            "--label",
            "stock",
            "--out",
            str(out),
            "--no-progress",
        ]
    )


def ids_per_line(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_bytes().splitlines()[1:] if line.strip()]


def cut_inside_last_multibyte(data: bytes) -> bytes:
    """The file cut one byte into the last multi-byte character of its last line."""
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    lead = max(i for i in range(last, len(data)) if data[i] >= 0xC0)  # a UTF-8 lead byte
    return data[: lead + 1]


@pytest.fixture()
def finished(llama_server: LlamaServer, suite_file: Path, tmp_path: Path) -> tuple[Path, bytes]:
    out = tmp_path / "run.jsonl"
    assert run_cli(llama_server, suite_file, out) == 0
    return out, out.read_bytes()


def test_resume_keeps_a_complete_line_without_its_newline(
    llama_server: LlamaServer,
    suite_file: Path,
    finished: tuple[Path, bytes],
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, data = finished
    capsys.readouterr()
    out.write_bytes(data[:-1])  # killed between the last line and its "\n"
    assert run_cli(llama_server, suite_file, out) == 0
    captured = capsys.readouterr()
    assert "0 done, 3 already finished" in captured.out
    assert "warning" not in captured.err
    assert out.read_bytes() == data  # the newline is back and nothing was cut
    assert sorted(ids_per_line(out)) == ["cafe", "euro", "kana"]


@pytest.mark.parametrize("cut", ["inside a multi-byte character", "mid-JSON"])
def test_resume_drops_a_torn_line_with_a_warning_and_reruns_its_item(
    cut: str,
    llama_server: LlamaServer,
    suite_file: Path,
    finished: tuple[Path, bytes],
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, data = finished
    capsys.readouterr()
    torn = cut_inside_last_multibyte(data) if cut.startswith("inside") else data[: len(data) - 20]
    out.write_bytes(torn)
    assert run_cli(llama_server, suite_file, out) == 0
    captured = capsys.readouterr()
    assert "1 done, 2 already finished" in captured.out
    assert f"{out}:4: the last line was cut off" in captured.err  # line 4: header + 2 whole items
    assert sorted(ids_per_line(out)) == ["cafe", "euro", "kana"]  # each once: none lost, none doubled
    assert len(read_run(out).done_ids()) == 3


def test_resume_after_a_cut_header_starts_afresh(
    llama_server: LlamaServer,
    suite_file: Path,
    finished: tuple[Path, bytes],
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, data = finished
    out.write_bytes(data[:30])  # killed while the header was being written
    assert run_cli(llama_server, suite_file, out) == 0
    assert "header line is cut off" in capsys.readouterr().err
    assert sorted(ids_per_line(out)) == ["cafe", "euro", "kana"]


def test_resume_refuses_to_cut_a_file_that_is_not_a_record(
    llama_server: LlamaServer, suite_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "notes.jsonl"
    out.write_text("my own notes, no newline")
    assert run_cli(llama_server, suite_file, out) == 2
    assert out.read_text() == "my own notes, no newline"
    assert str(out) in capsys.readouterr().err


# --- compare on damaged records (written with the runner's own writer) ---


def two_repeats(tmp_path: Path) -> tuple[Path, Path]:
    lines = [Line("a", "un café"), Line("b", "deux étés"), Line("c", "trois ¥ — fin")]
    return (
        write_run(tmp_path / "a1.jsonl", "stock", lines, repeat=1),
        write_run(tmp_path / "a2.jsonl", "stock", lines, repeat=2),
    )


def compare(capsys: pytest.CaptureFixture[str], *paths: Path | str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["compare", *map(str, paths), "--json"])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.mark.parametrize("cut", ["inside a multi-byte character", "mid-JSON"])
def test_compare_leaves_out_a_torn_last_line_and_says_so(
    cut: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a1, a2 = two_repeats(tmp_path)
    data = a2.read_bytes()
    a2.write_bytes(cut_inside_last_multibyte(data) if cut.startswith("inside") else data[:-20])
    rc, out, err = compare(capsys, a1, a2)
    assert rc == 0, err
    summary = json.loads(out)
    assert f"{a2}:4: the last line is cut off" in " ".join(summary["warnings"])
    assert summary["controls"][0]["errors"] == 1  # left out, counted, never called a difference


def test_compare_names_file_and_line_of_invalid_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a1, a2 = two_repeats(tmp_path)
    lines = a2.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b"deux", b"d\xffux")  # line 3: a byte no UTF-8 text has
    a2.write_bytes(b"\n".join(lines))
    rc, _, err = compare(capsys, a1, a2)
    assert rc == 2
    assert err.strip().count("\n") == 0 and f"{a2}:3: not valid UTF-8" in err


def test_compare_keeps_a_last_line_without_newline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a1, a2 = two_repeats(tmp_path)
    a2.write_bytes(a2.read_bytes()[:-1])
    assert len(read_run(a2).items) == 3
    rc, out, _ = compare(capsys, a1, a2)
    assert rc == 0 and not json.loads(out)["warnings"]


# --- bad headers: one line naming the file, line and field ---


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("schema_version", "1", "schema_version must be an integer"),
        ("schema_version", None, "schema_version must be an integer"),
        ("schema_version", [1], "schema_version must be an integer"),
        ("schema_version", 0, "schema_version must be from 1 to 3, not 0"),
        ("schema_version", -1, "schema_version must be from 1 to 3, not -1"),
        ("sampling", {"temperature": "hot"}, "field sampling."),
        ("repeat", "first", "field repeat"),
        ("label", None, "field label"),
    ],
)
def test_bad_header_is_one_line_naming_file_and_field(
    field: str, value: object, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a1, a2 = two_repeats(tmp_path)
    lines = a2.read_text(encoding="utf-8").split("\n")
    header = json.loads(lines[0])
    header[field] = value
    lines[0] = json.dumps(header)
    a2.write_text("\n".join(lines), encoding="utf-8")
    rc, _, err = compare(capsys, a1, a2)
    assert rc == 2
    assert err.strip().count("\n") == 0, err
    assert f"{a2}:1: bad header" in err and expected in err


# --- the control: two separate runs, never one run twice ---


def test_compare_refuses_the_same_file_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a1, _ = two_repeats(tmp_path)
    rc, out, err = compare(capsys, a1, a1)
    assert rc == 2 and "deterministic" not in out
    assert f"{a1} is given twice" in err
    # --force does not make a run its own control.
    assert main(["compare", str(a1), str(tmp_path / "." / "a1.jsonl"), "--force"]) == 2


def test_compare_refuses_a_copy_of_a_run_as_its_repeat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a1, a2 = two_repeats(tmp_path)
    # A copy relabelled as repeat 2 is still one run: its run id gives it away.
    a2.write_text(a1.read_text(encoding="utf-8").replace('"repeat":1', '"repeat":2', 1), encoding="utf-8")
    rc, _, err = compare(capsys, a1, a2)
    assert rc == 2 and "same run id" in err


def test_compare_refuses_two_files_with_the_same_repeat_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [Line("a", "one"), Line("b", "two")]
    a = write_run(tmp_path / "a.jsonl", "stock", lines, repeat=1)
    b = write_run(tmp_path / "b.jsonl", "stock", lines, repeat=1)
    rc, out, err = compare(capsys, a, b)
    assert rc == 2 and "deterministic" not in out
    assert "are both `stock` repeat #1" in err
    # Forced, the two separate runs are compared, and the report says what was forced.
    rc, out, err = compare(capsys, a, b, "--force")
    assert rc == 0
    assert any("repeat #1" in w for w in json.loads(out)["warnings"])


def test_two_real_repeats_still_make_a_control(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a1, a2 = two_repeats(tmp_path)
    rc, out, err = compare(capsys, a1, a2)
    assert rc == 0, err
    assert not json.loads(out)["warnings"]
