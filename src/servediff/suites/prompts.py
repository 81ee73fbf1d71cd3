"""The built-in 20-prompt determinism suite, and user suites from JSONL.

    servediff run --suite prompts ...            # the built-in suite
    servediff run --suite my_prompts.jsonl ...   # one {"id", "prompt" | "messages"} per line

The built-in prompts are short, open-ended chat requests whose answers run for a few hundred
tokens: long completions give a near-tie many chances to flip, which is what the study needs.
They span code, SQL, arithmetic, regex, translation, explanation and verse so that both
low-entropy (code, arithmetic) and high-entropy (verse) text is covered.
"""

from __future__ import annotations

import json
from pathlib import Path

from servediff.suites.base import Suite, content_sha256, file_sha256
from servediff.types import Sample

VERSION = "1"

PROMPTS: dict[str, str] = {
    "code-fizzbuzz": "Write a Python function that prints FizzBuzz for 1 to 30, with a docstring.",
    "code-reverse-list": "Write a Python function that reverses a singly linked list. Explain each step.",
    "code-binary-search": "Implement binary search in JavaScript and state its time complexity.",
    "code-bug": "Find the bug: `def mean(xs): return sum(xs) / len(xs) - 1`. Give the fixed code.",
    "sql-top-customers": "Write a SQL query for the 5 customers with the highest total order value, "
    "given tables customers(id, name) and orders(id, customer_id, amount).",
    "sql-explain-join": "Explain the difference between INNER JOIN and LEFT JOIN with a small example.",
    "math-train": "A train travels 120 km in 1.5 hours and then 80 km in 1 hour. "
    "What is its average speed? Show your working.",
    "math-percent": "A shirt costs $40 after a 20% discount. What was the original price? Explain.",
    "math-primes": "List the prime numbers between 50 and 100 and say how you checked each one.",
    "regex-email": "Write a regular expression that matches simple email addresses and explain each part.",
    "regex-dates": "Give a regex for dates in the form YYYY-MM-DD and show three strings it matches.",
    "translate-fr": "Translate into French: 'The weather is lovely today, so we will walk to the market.'",
    "translate-es": "Translate into Spanish and explain one grammar point: "
    "'I have been reading this book for a week.'",
    "explain-tcp": "Explain how TCP's three-way handshake works to a first-year student.",
    "explain-photosynthesis": "Explain photosynthesis in simple terms, in one paragraph.",
    "explain-hash-table": "How does a hash table handle collisions? Describe two strategies.",
    "explain-inflation": "What causes inflation? Give three causes with one example each.",
    "verse-haiku": "Write three haiku about autumn rain.",
    "verse-limerick": "Write a limerick about a cat who learns to code.",
    "verse-sonnet": "Write the first eight lines of a sonnet about the sea at night.",
}


def builtin() -> Suite:
    samples = tuple(
        Sample(id=item_id, messages=({"role": "user", "content": text},)) for item_id, text in PROMPTS.items()
    )
    return Suite(
        name="prompts",
        version=VERSION,
        samples=samples,
        data_sha256=content_sha256(samples),
        source="built-in",
    )


def from_jsonl(path: Path) -> Suite:
    """A user suite. Every line must have an ``id`` and one of ``prompt`` or ``messages``."""
    samples: list[Sample] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                item_id = str(row["id"])
                messages = row.get("messages")
                sample = Sample(
                    id=item_id,
                    messages=tuple(dict(m) for m in messages) if messages is not None else None,
                    prompt=row.get("prompt"),
                )
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise ValueError(
                    f"{path}:{lineno}: {exc!r}; expected {{'id', 'prompt' | 'messages'}}"
                ) from exc
            if item_id in seen:
                raise ValueError(f"{path}:{lineno}: duplicate id {item_id!r}")
            seen.add(item_id)
            samples.append(sample)
    if not samples:
        raise ValueError(f"{path}: no items")
    return Suite(
        name=path.stem,
        version="file",
        samples=tuple(samples),
        data_sha256=file_sha256(path),
        source=str(path),
    )
