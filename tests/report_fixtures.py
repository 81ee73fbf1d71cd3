"""A small study with known divergences, scores, subjects and planted HTML payloads.

Three configurations (stock twice as the control, tuned, and a third whose label itself carries
markup) over four items. Tuned's completions contain a ``<script>`` payload and an
``<img onerror>`` payload in the text, the tokens and the top-k alternatives.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.records import Line, write_run

SCRIPT = "<script>window.__pwned = 1</script>"
IMG = '<img src="x" onerror="window.__img_pwned = 1">'
LABEL_PAYLOAD = 'third<img src=y onerror="window.__label_pwned = 1">$x$'


def _top(tokens: list[str], alts: list[str]) -> list[list[tuple[str, float]]]:
    return [[(t, -0.12), (a if a != t else "~", -0.31)] for t, a in zip(tokens, alts)]


STOCK = {
    "q1": ["The", " answer", " is", " 4", "."],
    "q2": ["Paris", " is", " the", " capital", "."],
    "q3": ["B"],
    "q4": ["Same", " every", " time", "."],
}
TUNED = {
    "q1": ["The", " answer", " is", " " + SCRIPT, IMG],
    "q2": ["Paris", " is", " a", " city", "."],
    "q3": ["C"],
    "q4": ["Same", " every", " time", "."],
}
THIRD = {
    "q1": ["The", " result", " is", " 4", "."],
    "q2": ["Paris", " is", " the", " capital", "."],
    "q3": ["B"],
    "q4": ["Same", " every", " time", "!"],
}
GOLD = {
    "q1": ("4", "elementary_mathematics"),
    "q2": ("Paris", "geography"),
    "q3": ("B", "geography"),
    "q4": ("Same", "logic"),
}


def _lines(toks: dict[str, list[str]], other: dict[str, list[str]]) -> list[Line]:
    out = []
    for item_id, tokens in toks.items():
        gold, subject = GOLD[item_id]
        answer = "".join(tokens).split()[-1].strip(".!") if item_id == "q1" else tokens[0].strip()
        out.append(
            Line(
                item_id,
                "".join(tokens),
                tokens,
                _top(tokens, other[item_id]),
                answer=answer,
                gold=gold,
                correct=answer == gold,
                metadata={"subject": subject},
            )
        )
    return out


def write_study(folder: Path) -> list[Path]:
    """The record files of the study; stock's top-k lists tuned's token as the runner-up."""
    folder.mkdir(parents=True, exist_ok=True)
    return [
        write_run(folder / "stock-1.jsonl", "stock", _lines(STOCK, TUNED), top_logprobs=2),
        write_run(folder / "stock-2.jsonl", "stock", _lines(STOCK, TUNED), repeat=2, top_logprobs=2),
        write_run(folder / "tuned-1.jsonl", "tuned", _lines(TUNED, STOCK), top_logprobs=2),
        write_run(folder / "third-1.jsonl", LABEL_PAYLOAD, _lines(THIRD, STOCK), top_logprobs=2),
    ]
