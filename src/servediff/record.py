"""The run record: one JSONL file per (configuration, suite, repeat).

Line 1 is a header (schema version, tool version, engine identity, sampling, suite, concurrency);
every further line is one finished item. Items are appended as they finish, so an interrupted
run resumes by skipping the ids already present. Order is not significant; for an id written
twice (an errored item retried on resume) the last line wins.

Pydantic validates here, at the file boundary, and nowhere on the hot path.
"""

from __future__ import annotations

import gc
import hashlib
import json
import platform
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servediff import __version__
from servediff.suites.base import Score
from servediff.types import Completion, SamplingParams

SCHEMA_VERSION = 1


class RecordError(ValueError):
    """A record file that cannot be read or does not match what is asked of it."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SuiteInfo(_Model):
    name: str
    version: str
    source: str
    data_sha256: str
    content_sha256: str
    item_ids: list[str]


class SamplingInfo(_Model):
    temperature: float
    seed: int
    max_tokens: int
    top_logprobs: int
    enable_thinking: bool | None


class Header(_Model):
    record: str = "servediff-run"
    schema_version: int = SCHEMA_VERSION
    tool_version: str
    git_revision: str | None
    created: str
    label: str
    repeat: int
    engine: dict[str, Any]
    sampling: SamplingInfo
    suite: SuiteInfo
    concurrency: int
    environment: dict[str, Any]
    extra: dict[str, Any] = Field(default_factory=dict)

    def fingerprint(self) -> str:
        """What must match for two files to be the same run (used by resume)."""
        keep = {
            "label": self.label,
            "repeat": self.repeat,
            "engine": _stable_engine(self.engine),
            "sampling": self.sampling.model_dump(),
            "suite": self.suite.content_sha256,
            "concurrency": self.concurrency,
        }
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()


class Item(_Model):
    id: str
    input: Any  # the messages list or the raw prompt
    text: str
    sha256: str
    n_tokens: int | None = None
    finish_reason: str | None = None
    latency_s: float = 0.0
    error: str | None = None
    token_ids: list[int] | None = None
    tokens: list[str] | None = None
    token_source: str | None = None
    # per token: [token, logprob, [[alt, logprob], ...]]
    logprobs: list[tuple[str, float, list[tuple[str, float]]]] | None = None
    answer: str | None = None
    gold: str | None = None
    correct: bool | None = None
    # A factory, not ``= {}``: pydantic deep-copies a mutable default for every instance, which
    # was most of the time spent reading a 100,000-item record (bench/analysis.py).
    metadata: dict[str, Any] = Field(default_factory=dict)


def _stable_engine(engine: dict[str, Any]) -> dict[str, Any]:
    # A server's version string or a fresh port must not invalidate a finished run.
    return {k: v for k, v in engine.items() if k not in ("server_version", "base_url", "verification")}


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
        sampling=SamplingInfo(
            temperature=sampling.temperature,
            seed=sampling.seed,
            max_tokens=sampling.max_tokens,
            top_logprobs=sampling.top_logprobs,
            enable_thinking=sampling.enable_thinking,
        ),
        suite=suite,
        concurrency=concurrency,
        environment=environment(),
        extra=extra or {},
    )


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
    if metadata:
        d["metadata"] = metadata
    return json.dumps(d, ensure_ascii=False) + "\n"


@dataclass
class Run:
    """A record file read back: its header and its items by id (last line per id wins)."""

    path: Path
    header: Header
    items: dict[str, Item] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.header.label

    def done_ids(self) -> set[str]:
        """Items finished without an error: a resumed run skips these and retries the rest."""
        return {i for i, item in self.items.items() if item.error is None}


def read_header(path: Path) -> Header:
    with path.open(encoding="utf-8") as f:
        return _parse_header(path, f.readline())


def _parse_header(path: Path, line: str) -> Header:
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}: first line is not JSON ({exc})") from exc
    if not isinstance(raw, dict) or raw.get("record") != "servediff-run":
        raise RecordError(f"{path}: not a servediff run record (no header line)")
    if raw.get("schema_version", 0) > SCHEMA_VERSION:
        raise RecordError(f"{path}: schema {raw.get('schema_version')} is newer than this servediff")
    try:
        return Header.model_validate(raw)
    except ValidationError as exc:
        raise RecordError(f"{path}: bad header: {exc}") from exc


def read_run(path: Path) -> Run:
    """Read a record. A torn last line (the writer was killed mid-write) is ignored."""
    path = Path(path)
    try:
        f: IO[str] = path.open(encoding="utf-8")
    except OSError as exc:
        raise RecordError(f"{path}: {exc.strerror or exc}") from exc
    # The cyclic GC finds nothing among freshly parsed items, yet with 100,000s of new objects
    # it runs full collections over and over; pausing it while reading halves the time.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with f:
            run = Run(path=path, header=_parse_header(path, f.readline()))
            _read_items(run, f)
    finally:
        if was_enabled:
            gc.enable()
    return run


def _read_items(run: Run, lines: Iterator[str]) -> None:
    # Streamed line by line (not readlines()): a 100,000-item file never sits in memory twice.
    shared: dict[int, int] = {}
    for n, line in enumerate(lines, 2):
        if line.isspace() or not line:
            continue
        try:
            item = Item.model_validate_json(line)
        except ValidationError as exc:
            if not line.endswith("\n"):  # only the last line can lack one
                continue  # torn final line: that item simply is not done
            raise RecordError(f"{run.path}:{n}: bad item line: {exc.errors()[0]['msg']}") from exc
        _share(item, shared)
        run.items[item.id] = item


def _share(item: Item, shared: dict[int, int]) -> None:
    """Let equal token ids and token strings share one object (same values, same lists).

    Each parsed id is its own 28-byte int; a vocabulary has only ~50k of them, so sharing cuts
    a 100,000-item record's memory by more than half.
    """
    if item.token_ids:
        item.token_ids[:] = map(shared.setdefault, item.token_ids, item.token_ids)
    if item.tokens:
        item.tokens[:] = map(sys.intern, item.tokens)
