"""What every suite is: named, versioned, hashed items, and an optional scorer."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from servediff.textfile import utf8_lines
from servediff.types import Completion, Sample


@dataclass(frozen=True, slots=True)
class Score:
    """The answer extracted from a completion, the gold answer, and whether they match."""

    answer: str | None
    gold: str
    correct: bool


# A scorer reads the whole completion: most read its text, a log-likelihood scorer its logprobs.
Scorer = Callable[[Sample, Completion], Score]
T = TypeVar("T")


def reads_text(extract: Callable[[Sample, str], Score]) -> Scorer:
    """A scorer of the completion's text (an extraction rule applied to what the model wrote)."""

    def scorer(sample: Sample, completion: Completion) -> Score:
        return extract(sample, completion.text)

    return scorer


@dataclass(frozen=True, slots=True)
class Suite:
    name: str
    version: str
    samples: tuple[Sample, ...]
    data_sha256: str  # the source data file, or the built-in content
    source: str  # "built-in", a path, or a dataset name
    scorer: Scorer | None = None
    max_tokens: int | None = None  # the suite's own default, e.g. short for multiple choice
    top_logprobs: int = 0  # the top-k its scorer reads: every run of the suite records at least this
    # How answers are scored, where a suite's name alone does not say (recorded, and in the report).
    scoring: str | None = None

    @property
    def content_sha256(self) -> str:
        return content_sha256(self.samples)


def content_sha256(samples: Sequence[Sample]) -> str:
    """Hash of exactly what is sent: ids and prompts, in id order (order is not significant)."""
    h = hashlib.sha256()
    for s in sorted(samples, key=lambda s: s.id):
        h.update(json.dumps([s.id, s.messages, s.prompt], sort_keys=True).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


# A JSON \uD800-\uDFFF escape: only these can make a lone surrogate, which UTF-8 cannot encode.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line of a JSON Lines file.

    Every way a line can be unusable is a ValueError naming ``path:line``: bytes that are not
    UTF-8, text that is not JSON, nesting too deep for the parser, and a lone surrogate escape
    (valid JSON, but it cannot be sent to an engine or written to a record: a run once stopped
    at such an item with nothing but its header written).
    """
    for lineno, line in utf8_lines(path):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
            if _SURROGATE_ESCAPE.search(line):
                json.dumps(value, ensure_ascii=False).encode("utf-8")
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{lineno}: not JSON: {exc}") from None
        except RecursionError:
            raise ValueError(f"{path}:{lineno}: nested too deeply to read") from None
        except UnicodeEncodeError:
            raise ValueError(
                f"{path}:{lineno}: a lone surrogate escape (\\uD800-\\uDFFF without its pair) is not text"
            ) from None
        yield lineno, value


def jsonl_rows(path: Path, what: str, parse: Callable[[Any], T | None]) -> list[T]:
    """``parse`` applied to every non-blank line (None skips a row); a bad row names its line."""
    rows: list[T] = []
    for lineno, value in json_lines(path):
        try:
            row = parse(value)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{path}:{lineno}: not {what}: {exc!r}") from exc
        if row is not None:
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no items")
    return rows
