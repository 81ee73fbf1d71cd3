"""The built-in 20-prompt determinism suite, and user suites from JSONL.

    servediff run --suite prompts ...            # the built-in suite
    servediff run --suite my_prompts.jsonl ...   # one {"id", "prompt" | "messages"} per line
    servediff gate --suite my_sums.jsonl ...     # ... and a numeric "target" on every line: scored

The built-in prompts are short, open-ended chat requests whose answers run for a few hundred
tokens: long completions give a near-tie many chances to flip, which is what the study needs.
They span code, SQL, arithmetic, regex, translation, explanation and verse so that both
low-entropy (code, arithmetic) and high-entropy (verse) text is covered.

A user suite whose every line also has a numeric ``target`` is scored, by GSM8K's rule (the number
after the last ``####``, else the last number in the reply, normalised): a quality gate can then
run on a handful of the user's own short-answer items, not only on GSM8K or MMLU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servediff.hashing import file_sha256
from servediff.suites import gsm8k
from servediff.suites.base import Suite, content_sha256, json_lines, reads_text
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


ROLES = ("system", "developer", "user", "assistant", "tool")


def from_jsonl(path: Path) -> Suite:
    """A user suite. Every line must have an ``id`` and one of ``prompt`` or ``messages``."""
    samples: list[Sample] = []
    seen: set[str] = set()
    for lineno, row in json_lines(path):
        try:
            sample = suite_item(row)
        except ValueError as exc:
            raise ValueError(f"{path}:{lineno}: {exc}") from None
        if sample.id in seen:
            raise ValueError(f"{path}:{lineno}: duplicate id {sample.id!r}")
        if samples and (sample.target is None) != (samples[0].target is None):
            # half a scored suite would score the rest as wrong, or silently not at all
            raise ValueError(f"{path}:{lineno}: give a 'target' on every line or on none")
        seen.add(sample.id)
        samples.append(sample)
    if not samples:
        raise ValueError(f"{path}: no items")
    scored = samples[0].target is not None
    return Suite(
        name=path.stem,
        version="file",
        samples=tuple(samples),
        data_sha256=file_sha256(path),
        source=str(path),
        scorer=reads_text(gsm8k.score) if scored else None,  # a numeric target, read as GSM8K's answers are
    )


def suite_item(row: Any) -> Sample:
    """One line of a user suite, checked for what an engine will be sent.

    Each check stops a value that would otherwise be sent as something else: a list ``prompt``
    is a *batch* of prompts to /v1/completions, an int is a token id, and an empty or role-less
    ``messages`` fails (or is answered) differently on every server.
    """
    if not isinstance(row, dict):
        raise ValueError(f"expected an object {{'id', 'prompt' | 'messages'}}, got {_kind(row)}")
    item_id = row.get("id")
    if isinstance(item_id, bool) or not isinstance(item_id, (str, int)) or item_id == "":
        raise ValueError(f"'id' must be a non-empty string or an integer, got {_kind(item_id)}")
    if ("prompt" in row) == ("messages" in row):
        raise ValueError(f"item {item_id!r}: give exactly one of 'prompt' (a string) or 'messages' (a list)")
    if "prompt" in row:
        if not isinstance(row["prompt"], str) or not row["prompt"]:
            raise ValueError(
                f"item {item_id!r}: 'prompt' must be a non-empty string, got {_kind(row['prompt'])}"
            )
        return Sample(id=str(item_id), prompt=row["prompt"], target=_target(item_id, row))
    return Sample(id=str(item_id), messages=_messages(item_id, row["messages"]), target=_target(item_id, row))


def _target(item_id: object, row: dict[str, Any]) -> str | None:
    """The line's numeric answer, normalised as replies are (None: the line has none)."""
    if "target" not in row:
        return None
    value = row["target"]
    number = None if isinstance(value, bool) else gsm8k.normalise(str(value))
    if not isinstance(value, (str, int, float)) or number is None:
        raise ValueError(f"item {item_id!r}: 'target' must be a number, got {_kind(value)}")
    return number


def _messages(item_id: object, messages: Any) -> tuple[dict[str, str], ...]:
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"item {item_id!r}: 'messages' must be a non-empty list, got {_kind(messages)}")
    for n, m in enumerate(messages, 1):
        where = f"item {item_id!r} message {n}"
        if not isinstance(m, dict):
            raise ValueError(f"{where}: expected {{'role', 'content'}}, got {_kind(m)}")
        if m.get("role") not in ROLES:
            raise ValueError(f"{where}: 'role' must be one of {', '.join(ROLES)}, got {_kind(m.get('role'))}")
        if not isinstance(m.get("content"), str):
            raise ValueError(f"{where}: 'content' must be a string, got {_kind(m.get('content'))}")
        odd = [k for k, v in m.items() if not isinstance(v, str)]
        if odd:
            raise ValueError(f"{where}: {odd[0]!r} must be a string, got {_kind(m[odd[0]])}")
    return tuple(dict(m) for m in messages)


def _kind(value: Any) -> str:
    """How a wrong value is named in a message: its JSON type, and a short scalar's value."""
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "an object"
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", type(None): "null"}
    kind, text = names.get(type(value), type(value).__name__), json.dumps(value, ensure_ascii=False)
    return f"{kind} {text}" if len(text) <= 40 else kind
