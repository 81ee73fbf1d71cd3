"""An Inspect evaluation log at the file boundary: read, validated, and checked for completeness.

    servediff import inspect logs/2026-01-01T12-00-00_gsm8k_abc.json --label stock --out a.jsonl

A log is trusted only as far as it shows itself whole: it must hold its samples (Inspect writes
none under ``--no-log-samples``), its run must have finished (``status`` "success"; a failed or
cancelled run holds only the samples done before it stopped), and the samples present must be
the ``results.total_samples`` it says it evaluated. ``--allow-incomplete`` imports a log that
fails the last two checks, with a note. Each field the reader uses is validated here, so a
malformed log ends in one line naming the file and the field, never in a traceback.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from servediff.importers.imported import LogImportError, read_text

KNOWN_VERSIONS = (1, 2)


class _Open(BaseModel):
    # Inspect adds fields from release to release; only those read here are checked.
    model_config = ConfigDict(extra="allow")


class Score(_Open):
    value: Any = None
    answer: Any = None


class Sample(_Open):
    id: int | str
    epoch: int = 1
    input: str | list[dict[str, Any]]
    target: str | list[str] = ""
    choices: list[str] | None = None
    messages: list[dict[str, Any]] | None = None
    output: dict[str, Any] = {}
    scores: dict[str, Score] | None = None
    error: dict[str, Any] | str | None = None
    metadata: dict[str, Any] | None = None


class Log(_Open):
    version: int
    status: str = "unknown"
    eval: dict[str, Any]
    plan: dict[str, Any] | None = None
    results: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    samples: list[Sample] | None = None


def first_error(exc: ValidationError) -> str:
    """One line for a validation failure: the first field and what is wrong with it."""
    errors = exc.errors()
    where = ".".join(str(p) for p in errors[0]["loc"]) or "(log)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"field {where}: {errors[0]['msg']}{more}"


def _eval_file(path: Path) -> Any:
    # A .eval log is a zip archive: a cut one fails here, with or without inspect_ai.
    try:
        with zipfile.ZipFile(path) as archive:
            archive.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise LogImportError(f"{path}: not a complete .eval log (a zip archive: {exc})") from exc
    try:
        from inspect_ai.log import read_eval_log
    except ImportError as exc:
        raise LogImportError(
            f"{path}: a .eval log needs inspect_ai installed (pip install inspect-ai), or convert "
            "it with `inspect log convert --to json`"
        ) from exc
    try:
        return read_eval_log(str(path)).model_dump(mode="json")
    # A cut or damaged zip fails deep inside inspect_ai (zipfile's "EOCD not found", KeyError,
    # its own validation): whatever it raises, the user needs the file's name and the reason.
    except Exception as exc:
        raise LogImportError(f"{path}: cannot read this .eval log ({type(exc).__name__}: {exc})") from exc


def load(path: Path) -> Log:
    if path.suffix == ".eval":
        data = _eval_file(path)
    else:
        try:
            data = json.loads(read_text(path))
        except json.JSONDecodeError as exc:
            raise LogImportError(f"{path}: cannot read an Inspect log (not JSON: {exc})") from exc
    if not isinstance(data, dict) or "eval" not in data or "version" not in data:
        raise LogImportError(f"{path}: not an Inspect eval log (no version/eval fields)")
    if data["version"] not in KNOWN_VERSIONS:
        raise LogImportError(
            f"{path}: Inspect log format version {data['version']!r} is not one of {KNOWN_VERSIONS}"
        )
    try:
        return Log.model_validate(data)
    except ValidationError as exc:
        raise LogImportError(f"{path}: not a readable Inspect log: {first_error(exc)}") from exc


def deduplicated(path: Path, samples: list[Sample]) -> tuple[list[Sample], list[str]]:
    """One sample per (id, epoch). A repeated sample that is the same to the byte is dropped with
    a note; one with other content is an error: which of the two the model answered is unknown."""
    seen: dict[tuple[str, int], Sample] = {}
    twice: list[str] = []
    for s in samples:
        key = (str(s.id), s.epoch)
        first = seen.setdefault(key, s)
        if first is s:
            continue
        if first.model_dump(mode="json") != s.model_dump(mode="json"):
            raise LogImportError(
                f"{path}: sample {key[0]!r} (epoch {key[1]}) appears twice with different content"
            )
        twice.append(key[0])
    notes = [f"{len(twice)} duplicated sample(s) dropped, e.g. {twice[:5]}"] if twice else []
    return list(seen.values()), notes


def completeness(path: Path, log: Log, samples: list[Sample], allow_incomplete: bool) -> list[str]:
    """Refuse (or, when allowed, note) a log whose samples are not all the run evaluated."""
    if not samples:
        raise LogImportError(
            f"{path}: the log holds no samples (Inspect writes none under --no-log-samples); "
            "there is nothing to compare item by item"
        )
    present = len(samples)
    total = (log.results or {}).get("total_samples")
    problems = []
    if log.status != "success":
        why = str((log.error or {}).get("message") or "").strip().splitlines()
        problems.append(f"the run's status is {log.status!r}" + (f" ({why[0]})" if why else ""))
    if not isinstance(total, int):
        problems.append(f"it records no results.total_samples to check its {present} sample(s) against")
    elif total != present:
        problems.append(f"it holds {present} sample(s) of the {total} its results count")
    if problems and not allow_incomplete:
        raise LogImportError(f"{path}: " + "; ".join(problems) + " (--allow-incomplete imports it anyway)")
    return [f"imported although {p}" for p in problems]
