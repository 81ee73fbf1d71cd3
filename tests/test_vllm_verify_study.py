"""The verify study on vLLM (docs/studies/vllm-verify.md) from its committed records: each table row
on the page is what bench/verify_table.py prints from the verdict files of its session (the page
names the endpoints in words; every other cell must match), and every verdict file still reads."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from tests.helpers.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
STUDY = ROOT / "docs" / "studies" / "vllm-verify"
# archive → the folders whose verdicts it holds
ARCHIVES = {"verify.tar.xz": ("verify", "xverify"), "verify2.tar.xz": ("verify2",)}


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
