"""GSM8K: grade-school maths word problems with a numeric answer (Cobbe et al. 2021,
"Training Verifiers to Solve Math Word Problems", arXiv:2110.14168).

    servediff run --suite gsm8k --data gsm8k/test.jsonl --limit 100 --out runs/gsm8k-stock.jsonl

Zero-shot chat prompt asking for the reasoning and then the final answer after ``####`` (the
dataset's own answer convention). Extraction rule: the first number after the last ``####``;
when the model wrote no ``####`` (small models often do not), the last number in the text.
Numbers are normalised before comparison: thousands separators and ``$`` dropped, ``18.00`` and
``18.`` read as ``18``. Gold is the number after ``####`` in the dataset's ``answer`` field.

Sources, in order: ``--data PATH`` (the JSONL of the original release, one {"question",
"answer"} per line); ``$SERVEDIFF_DATA/gsm8k/test.jsonl``; Hugging Face ``datasets``
(``openai/gsm8k``, ``main``, test) when installed and online. Item ids are the line index in
the test split (``gsm8k-0000`` …), so every source yields the same ids.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from servediff.hashing import file_sha256
from servediff.suites.base import Score, Suite, jsonl_rows, reads_text
from servediff.types import Sample

VERSION = "1"
MAX_TOKENS = 256  # enough for a short chain of reasoning; SmolLM2-135M rarely needs more

PROMPT = (
    "Solve this math problem. Think step by step, then give the final answer as a number on "
    "the last line in the form '#### <number>'.\n\n{question}"
)

# A number: optional sign, either comma-grouped thousands or plain digits, optional decimals.
_NUMBER = re.compile(r"-?\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def normalise(number: str) -> str | None:
    """``"$1,234.50"`` → ``"1234.5"``; ``"18.00"`` → ``"18"``; None when not a number."""
    s = number.strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        value = Decimal(s)
    except InvalidOperation:
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def extract(text: str) -> str | None:
    """The model's final answer: first number after the last ``####``, else the last number."""
    if "####" in text:
        found = _NUMBER.search(text.rsplit("####", 1)[1])
        if found:
            return normalise(found.group())
    numbers = _NUMBER.findall(text)
    return normalise(numbers[-1]) if numbers else None


def score(sample: Sample, text: str) -> Score:
    gold = sample.target or ""
    answer = extract(text)
    return Score(answer=answer, gold=gold, correct=answer is not None and answer == gold)


def gold_answer(answer_field: str) -> str:
    tail = answer_field.rsplit("####", 1)[-1]
    value = normalise(tail)
    if value is None:
        raise ValueError(f"no numeric answer after '####' in {answer_field[-80:]!r}")
    return value


def _sample(index: int, row: dict[str, Any]) -> Sample:
    return Sample(
        id=f"gsm8k-{index:04d}",
        messages=({"role": "user", "content": PROMPT.format(question=row["question"])},),
        target=gold_answer(row["answer"]),
    )


def _suite(rows: list[dict[str, Any]], sha: str, source: str) -> Suite:
    samples = tuple(_sample(i, row) for i, row in enumerate(rows))
    return Suite("gsm8k", VERSION, samples, sha, source, scorer=reads_text(score), max_tokens=MAX_TOKENS)


def _row(row: Any) -> dict[str, Any]:
    if not isinstance(row.get("question"), str) or not isinstance(row.get("answer"), str):
        raise ValueError("expected {'question', 'answer'} strings")
    return dict(row)


def from_jsonl(path: Path) -> Suite:
    return _suite(jsonl_rows(path, "a GSM8K row", _row), file_sha256(path), str(path))


def from_hub() -> Suite:
    """``openai/gsm8k`` through Hugging Face ``datasets`` (needs the package and the network)."""
    from importlib import import_module

    try:
        datasets: Any = import_module("datasets")
        split = datasets.load_dataset("openai/gsm8k", "main", split="test")
    except Exception as exc:  # ImportError, or whatever the hub client raises offline
        raise ValueError(
            f"GSM8K: no local data and Hugging Face datasets is unavailable ({exc.__class__.__name__}); "
            "pass --data PATH to the test.jsonl of the original release"
        ) from exc
    rows = [{"question": r["question"], "answer": r["answer"]} for r in split]
    h = hashlib.sha256()
    for r in rows:  # the hash of the rows as the JSONL release would write them
        h.update(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n")
    return _suite(rows, h.hexdigest(), "hf:openai/gsm8k main test")


def load(path: Path | None = None) -> Suite:
    if path is not None:
        return from_jsonl(path)
    env = os.environ.get("SERVEDIFF_DATA")
    if env and (Path(env) / "gsm8k" / "test.jsonl").is_file():
        return from_jsonl(Path(env) / "gsm8k" / "test.jsonl")
    return from_hub()
