"""Write run records the way the runner does (``make_header`` + ``item_line``), from given texts.

For report, import and export tests that need exact, known completions (planted payloads,
chosen correctness) rather than whatever a model happens to generate.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servediff.records import SuiteInfo, item_line, make_header, make_item
from servediff.suites.base import Score
from servediff.types import Completion, SamplingParams, TokenLogprob


@dataclass
class Line:
    id: str
    text: str
    tokens: list[str] | None = None
    top: list[list[tuple[str, float]]] | None = None  # per token: the top-k, chosen token first
    answer: str | None = None
    gold: str | None = None
    correct: bool | None = None
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def suite_info(name: str, ids: list[str], content: str = "same prompts") -> SuiteInfo:
    digest = hashlib.sha256(content.encode()).hexdigest()
    return SuiteInfo(
        name=name, version="1", source="test", data_sha256=digest, content_sha256=digest, item_ids=ids
    )


def completion(line: Line) -> Completion:
    logprobs = None
    if line.top is not None and line.tokens is not None:
        logprobs = [TokenLogprob(tok, dict(top)[tok], tuple(top)) for tok, top in zip(line.tokens, line.top)]
    return Completion(
        item_id=line.id,
        text=line.text if line.error is None else "",
        n_tokens=len(line.tokens) if line.tokens is not None else None,
        tokens=line.tokens,
        logprobs=logprobs,
        token_source="engine" if line.tokens is not None else None,
        finish_reason="stop",
        error=line.error,
    )


def write_run(
    path: Path,
    label: str,
    lines: list[Line],
    *,
    repeat: int = 1,
    suite: str = "prompts",
    top_logprobs: int = 0,
) -> Path:
    header = make_header(
        label=label,
        repeat=repeat,
        engine={"kind": "llamacpp", "model": "test-model.gguf"},
        sampling=SamplingParams(max_tokens=64, top_logprobs=top_logprobs),
        suite=suite_info(suite, [x.id for x in lines]),
        concurrency=1,
    )
    with path.open("w", encoding="utf-8") as f:
        f.write(header.model_dump_json() + "\n")
        for x in lines:
            score = None if x.correct is None or x.error else Score(x.answer, x.gold or "", x.correct)
            item = make_item(completion(x), [{"role": "user", "content": x.id}], score, x.metadata)
            f.write(item_line(item))
    return path


def write_shadow(
    out: Path, requests: Iterable[tuple[dict[str, Any], Completion, Completion]]
) -> tuple[Path, Path]:
    """One segment of shadow records, written by the shadow proxy's own recorder: each request
    body (a chat completion), parsed as the proxy parses it, with the primary's and the
    candidate's answers. Returns (primary record, candidate record)."""
    from servediff.shadow.recorder import Recorder, first_token
    from servediff.shadow.request import parse

    engine = {"kind": "http", "model": "m"}
    rec = Recorder(out, {"primary": engine, "candidate": dict(engine)}, "s")
    rec.open()
    for body, primary, candidate in requests:
        req = parse("/v1/chat/completions", json.dumps(body).encode(), [], 0)
        # Answers retokenized by the replay (both with token ids from the candidate's tokenizer)
        # are recorded with where they part, as the replay records them.
        both = primary.token_source == candidate.token_source == "retokenized"
        placed = first_token(primary.token_ids, candidate.token_ids) if both else None  # type: ignore[arg-type]
        rec.write(req, rec.item_id(req), primary, candidate, placed)
    rec.close()
    return out / "primary-0001.jsonl", out / "candidate-0001.jsonl"
