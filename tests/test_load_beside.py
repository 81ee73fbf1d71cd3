"""The two engines' load sweeps side by side (docs/studies/vllm-h100-load.md, "Beside llama-server"):
the table in the study is the one scripts/load_beside.py makes from both studies' committed records,
and each cell is the same number as that study's own report."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "load_beside.py"
DOC = ROOT / "docs" / "studies" / "vllm-h100-load.md"
LLAMA = "llama-server, Q4_K_M (H200)=" + str(ROOT / "docs/studies/gpu-h200-load/study.tar.xz") + ":load"
VLLM = "vLLM 0.24.0, bf16 (H100)=" + str(ROOT / "docs/studies/vllm-h100-load/load.tar.xz") + ":load"


def _script() -> ModuleType:
    return load_script(SCRIPT)


def _doc_table() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("| requests in flight | llama-server")
    return text[start : text.index("\n\n", start)]


def test_the_study_table_is_the_script_output(tmp_path: Path) -> None:
    md, svg = tmp_path / "table.md", tmp_path / "beside.svg"
    assert (
        _script().main(
            ["--suite", "prompts", "--study", LLAMA, "--study", VLLM, "--md", str(md), "--svg", str(svg)]
        )
        == 0
    )
    made = md.read_text(encoding="utf-8")
    assert made.startswith(_doc_table() + "\n")
    assert svg.read_text(encoding="utf-8").startswith("<svg")
    # each engine's cell at 8 in flight is its own report's "Under load" row at 8
    row = next(line for line in made.splitlines() if line.startswith("| 8 |"))
    assert re.search(r"\| 9/40 · 9\.07 · 342 \| 21/40 · 4\.52 · 2,135 \|", row)


def test_a_study_without_that_suite_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="0 sweeps of suite 'nope'"):
        _script().main(["--suite", "nope", "--study", VLLM])


def test_a_malformed_study_argument_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        _script().main(["--suite", "prompts", "--study", "no-equals-sign"])
    assert exit_.value.code == 2
    assert "expected NAME=TARBALL_OR_FOLDER:INNER_FOLDER" in capsys.readouterr().err
