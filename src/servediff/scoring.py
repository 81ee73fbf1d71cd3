"""Corpora for teacher-forced scoring runs: fixed token sequences both configurations score.

    servediff run --score runs/stock.jsonl --config tuned --label tuned --out runs/score-tuned.jsonl
    servediff run --score gsm8k --data test.jsonl --limit 20 --config stock --out runs/score-a.jsonl
    servediff run --score texts.txt --config stock --out runs/score-a.jsonl

A scoring run records, at every position of each sequence, the top-k logprobs and the logprob
of the sequence's own next token, without generating (``compare/kl.py`` turns two such runs into
a divergence). The corpus is one of:

- *on-policy*: a run record (normally the control's): each finished item's prompt, with its
  greedy completion as the scored tokens. Then 1 − same-top-1 predicts how often the candidate's
  greedy decode would leave the control's path.
- ``gsm8k``: the reference solutions of GSM8K (the data file's ``answer`` field), as plain text.
- a user file of texts: ``.txt`` (one text per non-blank line) or ``.jsonl`` (``{"text": ...}``).

Text items are scored after the model's BOS token, every token of the text scored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servediff.hashing import file_sha256
from servediff.records import read_run
from servediff.records.schema import HEADER_START
from servediff.suites.base import Suite, jsonl_rows
from servediff.suites.sampling import first_n, random_n
from servediff.textfile import utf8_lines
from servediff.types import Sample

VERSION = "1"


def scoring_suite(corpus: str, data: Path | None = None, limit: int | None = None, seed: int = 0) -> Suite:
    """The corpus a ``--score`` argument names; ValueError (naming the file) when unusable."""
    if corpus == "gsm8k":
        if data is None:
            raise ValueError("--score gsm8k needs --data PATH (the GSM8K test.jsonl)")
        suite = gsm8k_solutions(data)
        return suite if limit is None else random_n(suite, limit, seed)
    path = Path(corpus)
    if not path.is_file():
        raise ValueError(f"scoring corpus not found: {path} (a run record, gsm8k, .txt or .jsonl)")
    if path.suffix == ".txt":
        suite = texts_txt(path)
    elif _is_record(path):
        suite = on_policy(path)
    elif path.suffix == ".jsonl":
        suite = texts_jsonl(path)
    else:
        raise ValueError(f"{path}: a scoring corpus is a run record, a .txt or a .jsonl file")
    return suite if limit is None else first_n(suite, limit)


def _is_record(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(len(HEADER_START)) == HEADER_START


def on_policy(path: Path) -> Suite:
    """The record's finished items: prompt as sent, completion token ids as the scored tokens."""
    run = read_run(path)
    samples = []
    for item in sorted(run.items.values(), key=lambda i: i.id):
        if item.error is not None or not item.token_ids:
            continue  # nothing was generated: nothing to score
        kind: dict[str, Any] = (
            {"prompt": item.input} if isinstance(item.input, str) else {"messages": tuple(item.input)}
        )
        samples.append(Sample(id=item.id, metadata={"continuation_ids": list(item.token_ids)}, **kind))
    if not samples:
        raise ValueError(f"{path}: no finished item with token ids to score")
    # The control run's id names which completions are scored (the prompts alone do not).
    version = f"{VERSION}:on-policy:{run.header.run_id or run.header.label}"
    return Suite(f"score:{run.header.suite.name}", version, tuple(samples), file_sha256(path), str(path))


def gsm8k_solutions(path: Path) -> Suite:
    def row(value: Any) -> str:
        answer = value["answer"]
        if not isinstance(answer, str):
            raise ValueError("expected an 'answer' string")
        return answer

    texts = jsonl_rows(path, "a GSM8K row", row)
    samples = tuple(Sample(id=f"gsm8k-{i:04d}", prompt=t) for i, t in enumerate(texts))
    return Suite("score:gsm8k-solutions", VERSION, samples, file_sha256(path), str(path))


def texts_txt(path: Path) -> Suite:
    samples = tuple(
        Sample(id=f"line-{n:05d}", prompt=line.rstrip("\r\n")) for n, line in utf8_lines(path) if line.strip()
    )
    if not samples:
        raise ValueError(f"{path}: no texts")
    return Suite("score:texts", VERSION, samples, file_sha256(path), str(path))


def texts_jsonl(path: Path) -> Suite:
    def row(value: Any) -> str:
        text = value["text"]
        if not isinstance(text, str) or not text:
            raise ValueError("expected a non-empty 'text' string")
        return text

    texts = jsonl_rows(path, 'a {"text": ...} row', row)
    samples = tuple(Sample(id=f"text-{i:05d}", prompt=t) for i, t in enumerate(texts))
    return Suite("score:texts", VERSION, samples, file_sha256(path), str(path))
