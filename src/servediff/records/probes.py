"""Probe records: the file a probe writes, and the one compare reads beside the run records.

    servediff probe runs/stock-1.jsonl runs/tuned-1.jsonl --out runs/probes.jsonl
    servediff compare runs/*.jsonl runs/probes.jsonl

A header naming the two runs (by fingerprint), the engines, k, the template source and the sides
measured, then one line per divergence and side with the method that produced it. Pydantic
validates here, at the file boundary; compare works on ``ProbeSet``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servediff.records.reader import Run
from servediff.records.schema import RecordError

PROBE_RECORD = "servediff-probe"
PROBE_SCHEMA = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunRef(_Model):
    label: str
    repeat: int
    path: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class ProbeEntry:
    """One probe line: the top-k after prompt + common prefix under one configuration."""

    item_id: str
    side: str  # "a" or "b"
    token_index: int
    top: tuple[tuple[str, float], ...]
    ids: tuple[int, ...] | None
    method: str
    error: str | None = None
    tokens: tuple[str | None, str | None] | None = None  # A's, B's token text (retokenized runs)


@dataclass(frozen=True, slots=True)
class ProbeSet:
    """A probe record read back: which two runs it probed, and its entries."""

    path: str
    suite: str
    a: tuple[str, int]  # (label, repeat)
    b: tuple[str, int]
    k: int
    template_source: str | None
    entries: dict[tuple[str, str], ProbeEntry]


class ProbeHeader(_Model):
    record: str = PROBE_RECORD
    schema_version: Annotated[int, Field(ge=1, le=PROBE_SCHEMA)] = PROBE_SCHEMA  # no other exists
    tool_version: str
    created: str
    suite: str
    a: RunRef
    b: RunRef
    engines: dict[str, dict[str, Any]]
    k: int
    template_source: str | None = None
    # Which configurations this record measured: both, or one side when the two engines cannot
    # be up together (an experiment probes each configuration while it is running).
    sides: str = "ab"


class ProbeLine(_Model):
    item_id: str
    side: str
    token_index: int
    top: list[tuple[str, float]]
    ids: list[int] | None = None
    method: str
    error: str | None = None
    # A's and B's tokens at the divergence as text (None: the end of the sequence), where the
    # runs recorded only ids the server retokenized: the server's detokenizer names them.
    tokens: tuple[str | None, str | None] | None = None


def read_probes(path: Path) -> ProbeSet:
    return read_record(path)[1]


def read_record(path: Path) -> tuple[ProbeHeader, ProbeSet]:
    """The header as written (run fingerprints, sides) and the record as compare uses it."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    try:
        head = ProbeHeader.model_validate_json(lines[0])
        parsed = [ProbeLine.model_validate_json(x) for x in lines[1:] if x.strip()]
    except (ValidationError, IndexError) as exc:
        raise RecordError(f"{path}: not a valid probe record: {exc}") from exc
    entries = {
        (p.item_id, p.side): ProbeEntry(
            p.item_id,
            p.side,
            p.token_index,
            tuple(p.top),
            tuple(p.ids) if p.ids else None,
            p.method,
            p.error,
            p.tokens,
        )
        for p in parsed
    }
    return head, ProbeSet(
        str(path),
        head.suite,
        (head.a.label, head.a.repeat),
        (head.b.label, head.b.repeat),
        head.k,
        head.template_source,
        entries,
    )


def run_ref(run: Run) -> RunRef:
    return RunRef(
        label=run.label, repeat=run.header.repeat, path=str(run.path), fingerprint=run.header.fingerprint()
    )
