"""Writing a run record: its header, one line per finished item, and making a file safe to append to.

    servediff run --config stock --out runs/a1.jsonl --label stock

Items are appended as they finish, so an interrupted run resumes by skipping the ids already
present (``Run.done_ids``); ``seal`` first makes the file safe to append to.
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
import uuid
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from servediff import __version__
from servediff.records.reader import Run, read_header
from servediff.records.schema import SCHEMA, Header, Item, SamplingInfo, Schema, SuiteInfo
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


def make_item(c: Completion, input_: Any, score: Score | None, metadata: dict[str, Any]) -> Item:
    """A finished request as the item its record holds."""
    if c.engine_meta:
        metadata = {**metadata, "engine": c.engine_meta}
    if c.engine_timings:
        # The engine's own numbers, kept apart from servediff's measurements.
        metadata = {**metadata, "engine_timings": c.engine_timings}
    return Item(
        id=c.item_id,
        input=input_,
        text=c.text,
        sha256=sha256_text(c.text),
        n_tokens=c.n_tokens,
        finish_reason=c.finish_reason,
        latency_s=c.latency_s,
        error=c.error,
        ttft_s=c.ttft_s,
        itl_s=c.itl_s,
        finished_at=c.finished_at,
        token_ids=c.token_ids,
        tokens=c.tokens,
        token_source=c.token_source,
        logprobs=None if c.logprobs is None else [(t.token, t.logprob, list(t.top)) for t in c.logprobs],
        stop_logprobs=None if (s := c.stop_logprob) is None else (s.token, s.logprob, list(s.top)),
        answer=None if score is None else score.answer,
        gold=None if score is None else score.gold,
        correct=None if score is None else score.correct,
        metadata=metadata,
    )


def item_line(item: Item, schema: Schema = SCHEMA) -> str:
    """One JSON line for a finished item: each field as ``schema``'s table says (``ITEM_FIELDS``)."""
    return schema.line(item)


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
