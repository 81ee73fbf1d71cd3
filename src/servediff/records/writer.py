"""Writing a run record: its header, one line per finished item, and making a file safe to append to.

    servediff run --config stock --out runs/a1.jsonl --label stock

Items are appended as they finish, so an interrupted run resumes by skipping the ids already
present (``Run.done_ids``); ``seal`` first makes the file safe to append to.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import uuid
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from servediff import __version__
from servediff.records.reader import Run, read_header
from servediff.records.schema import Header, SamplingInfo, SuiteInfo
from servediff.suites.base import Score
from servediff.types import Completion, SamplingParams


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def git_revision() -> str | None:
    """The servediff checkout's revision when running from one (None when installed)."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment() -> dict[str, Any]:
    from importlib import metadata

    versions = {}
    for pkg in ("llama-cpp-python", "aiohttp", "numpy", "torch", "transformers"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "packages": versions,
    }


def make_header(
    *,
    label: str,
    repeat: int,
    engine: dict[str, Any],
    sampling: SamplingParams,
    suite: SuiteInfo,
    concurrency: int,
    extra: dict[str, Any] | None = None,
) -> Header:
    return Header(
        tool_version=__version__,
        git_revision=git_revision(),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        label=label,
        repeat=repeat,
        engine=engine,
        sampling=SamplingInfo(**asdict(sampling)),
        suite=suite,
        concurrency=concurrency,
        environment=environment(),
        extra=extra or {},
        run_id=new_run_id(),
    )


def annotate(path: Path, extra: dict[str, Any]) -> None:
    """Merge ``extra`` into a record's header (line 1), atomically: verification is known only
    after the run, and a report renders from records alone."""
    header = read_header(path)
    updated = header.model_copy(update={"extra": {**header.extra, **extra}})
    with path.open("rb") as f:
        f.readline()
        rest = f.read()
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(updated.model_dump_json().encode() + b"\n" + rest)
    tmp.replace(path)


def new_run_id() -> str:
    return uuid.uuid4().hex


def item_line(c: Completion, input_: Any, score: Score | None, metadata: dict[str, Any]) -> str:
    """One JSON line for a finished item. Plain dicts: this runs once per request."""
    d: dict[str, Any] = {
        "id": c.item_id,
        "input": input_,
        "text": c.text,
        "sha256": sha256_text(c.text),
        "n_tokens": c.n_tokens,
        "finish_reason": c.finish_reason,
        "latency_s": round(c.latency_s, 6),
        "error": c.error,
    }
    for key in ("ttft_s", "itl_s"):
        value = getattr(c, key)
        if value is not None:
            d[key] = round(value, 6)
    if c.finished_at is not None:
        d["finished_at"] = round(c.finished_at, 6)
    if c.token_ids is not None:
        d["token_ids"] = c.token_ids
    if c.tokens is not None:
        d["tokens"] = c.tokens
    if c.token_source is not None:
        d["token_source"] = c.token_source
    if c.logprobs is not None:
        d["logprobs"] = [[t.token, t.logprob, [list(p) for p in t.top]] for t in c.logprobs]
    if score is not None:
        d.update(answer=score.answer, gold=score.gold, correct=score.correct)
    if c.engine_meta:
        metadata = {**metadata, "engine": c.engine_meta}
    if c.engine_timings:
        # The engine's own numbers, kept apart from servediff's measurements.
        metadata = {**metadata, "engine_timings": c.engine_timings}
    if metadata:
        d["metadata"] = metadata
    return json.dumps(d, ensure_ascii=False) + "\n"


def seal(run: Run) -> str | None:
    """Make ``run.path`` safe to append to, as ``run`` was read from it.

    A cut last line is cut off the file (appending after it would glue the next item onto it);
    a complete last line without its newline gets one (cutting it would lose a finished item).
    Returns a warning for stderr when a line was dropped.
    """
    if run.torn is not None:
        with run.path.open("r+b") as f:
            f.truncate(run.end)
        return (
            f"warning: {run.path}:{run.torn}: the last line was cut off mid-write (an interrupted "
            "run); dropped it, and its item runs again"
        )
    if run.unterminated:
        with run.path.open("ab") as f:
            f.write(b"\n")
        run.unterminated = False
        run.end += 1
    return None
