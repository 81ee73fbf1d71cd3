"""An imported run, and what every importer shares: header, pairing checks, numbering, writing.

    servediff import lm-eval a/samples_gsm8k_*.jsonl b/samples_gsm8k_*.jsonl --label a --label b --out runs/

The readers (``lm_eval``, ``inspect``) turn a tool's log into ``Imported`` runs; this module
checks that runs imported together pair item by item and writes them as run records.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servediff import __version__
from servediff.compare.provenance import setup_problems
from servediff.filename import file_stem
from servediff.records import Header, Item, SamplingInfo, SuiteInfo, read_run

PAIR_KEY = "pair_key"  # item metadata: what must match for two imported items to be one item


class LogImportError(ValueError):
    """A log that cannot be read, or logs that cannot be paired."""


@dataclass(frozen=True)
class ImportOptions:
    label: str
    model: str | None = None  # override the model name found in the log
    choose: str | None = None  # lm-eval: the filter; Inspect: the scorer
    metric: str | None = None  # lm-eval: the per-sample metric that says right/wrong
    epoch: int | None = None  # Inspect: which epoch (None: every epoch, each a repeat)
    # Import a log whose count of items cannot be checked or falls short (a failed or cancelled
    # run, a samples file without its results file), with a note instead of a refusal.
    allow_incomplete: bool = False


@dataclass
class Imported:
    header: Header
    items: list[Item] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def sha256_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def suite_info(name: str, version: str, source: str, items: Sequence[Item]) -> SuiteInfo:
    """Content hash over each item's pair key: equal exactly when the items pair one to one."""
    keys = sorted((it.id, it.metadata.get(PAIR_KEY)) for it in items)
    return SuiteInfo(
        name=name,
        version=version,
        source=source,
        data_sha256=sha256_json([k for _, k in keys]),
        content_sha256=sha256_json(keys),
        item_ids=[it.id for it in items],
    )


def header(
    o: ImportOptions,
    engine: dict[str, Any],
    sampling: SamplingInfo,
    suite: SuiteInfo,
    created: str,
    source: dict[str, Any],
) -> Header:
    """A run header for an imported log: the source format and its version go in ``extra``."""
    return Header(
        tool_version=__version__,
        git_revision=None,
        created=created,
        label=o.label,
        repeat=1,  # numbered by the caller, over all the runs of one import
        engine=engine,
        sampling=sampling,
        suite=suite,
        concurrency=0,  # not recorded by the source tool
        # The source log does not say where it ran; say what it is instead of this machine's facts.
        environment={
            "imported": True,
            "python": "not recorded",
            "platform": f"imported from {source.get('tool')} {source.get('tool_version') or '(version?)'}",
        },
        extra={"imported_from": source},
    )


def correctness(value: Any) -> bool | None:
    """A per-item score as right/wrong; None when it is not binary (a partial credit, a float)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.upper() in ("C", "I"):  # Inspect's CORRECT / INCORRECT
        return value.upper() == "C"
    return None


def read_text(path: Path) -> str:
    """A log's text, or one line naming the file when it cannot be read as UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise LogImportError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from exc
    except OSError as exc:
        raise LogImportError(f"{path}: {exc.strerror or exc}") from exc


def _name(run: Imported) -> str:
    epoch = run.header.extra.get("imported_from", {}).get("epoch")
    return repr(run.header.label) + (f" (epoch {epoch})" if epoch is not None else "")


def _setup_problems(run: Imported, ref: Imported, where: str) -> list[str]:
    out = setup_problems(run.header, ref.header, where)
    if run.header.sampling != ref.header.sampling:
        out.append(f"{where}: different sampling ({run.header.sampling} vs {ref.header.sampling})")
    return out


def _differing_parts(a: Any, b: Any) -> str:
    """Which parts of two pair keys differ: "prompts" when only the prompt as sent does (the
    same documents asked another way), else "documents"."""
    if isinstance(a, dict) and isinstance(b, dict):
        parts = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
        if parts == ["prompt"]:
            return "prompts (the same documents, asked differently)"
        if parts:
            return " and ".join(f"{p}s" for p in parts)
    return "documents"


def pairing_problems(runs: Sequence[Imported], limit: int = 5) -> list[str]:
    """Why these imported runs cannot be compared item by item (empty when they can)."""
    out: list[str] = []
    ref = runs[0]
    ref_keys = {it.id: it.metadata.get(PAIR_KEY) for it in ref.items}
    for run in runs[1:]:
        where = f"{_name(run)} vs {_name(ref)}"
        if run.header.suite.name != ref.header.suite.name:
            out.append(f"{where}: different tasks ({run.header.suite.name} vs {ref.header.suite.name})")
            continue
        keys = {it.id: it.metadata.get(PAIR_KEY) for it in run.items}
        only = sorted(set(keys) ^ set(ref_keys))
        differ = sorted(i for i in set(keys) & set(ref_keys) if keys[i] != ref_keys[i])
        if only:
            out.append(f"{where}: {len(only)} item(s) in only one of them, e.g. {only[:limit]}")
        if differ:
            what = _differing_parts(keys[differ[0]], ref_keys[differ[0]])
            out.append(f"{where}: {len(differ)} item(s) with different {what}, e.g. {differ[:limit]}")
        out += _setup_problems(run, ref, where)
    return list(dict.fromkeys(out))


def numbered(runs: Sequence[Imported]) -> list[Imported]:
    """Repeats numbered in order per label: the second run of a label is its control."""
    seen: dict[str, int] = {}
    out = []
    for r in runs:
        seen[r.header.label] = seen.get(r.header.label, 0) + 1
        out.append(Imported(r.header.model_copy(update={"repeat": seen[r.header.label]}), r.items, r.notes))
    return out


def check_target(run: Imported, path: Path) -> None:
    """Refuse to replace a file that holds anything but this very import (as ``run`` refuses to
    resume into another run's record): importing the same log again may rewrite its record."""
    if not path.exists() or (path.is_file() and path.stat().st_size == 0):
        return
    try:
        previous = read_run(path).header
    except (ValueError, OSError) as exc:
        raise LogImportError(
            f"{path}: exists and is not a record to replace ({exc}); choose another --out"
        ) from exc
    if previous.fingerprint() != run.header.fingerprint() or previous.extra != run.header.extra:
        raise LogImportError(
            f"{path} holds another run ({previous.label!r} #{previous.repeat}, created {previous.created}); "
            "choose another --out or delete it"
        )


def write(run: Imported, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        f.write(run.header.model_dump_json() + "\n")
        for item in run.items:
            # Fields at their defaults are left out; a latency of None is kept (its default is 0 s).
            f.write(item.to_json() + "\n")


def outputs(runs: Iterable[Imported], out: Path, single: bool) -> list[Path]:
    """One file: ``out`` itself. Several: ``out/<label>-<repeat>.jsonl``."""
    if single:
        return [out]
    return [out / f"{file_stem(r.header.label)}-{r.header.repeat}.jsonl" for r in runs]
