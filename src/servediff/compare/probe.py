"""Probe records: the top-k at every divergence, obtained after the runs from live engines.

    servediff probe runs/stock-1.jsonl runs/tuned-1.jsonl --out runs/probes.jsonl

For each divergence between two runs, each configuration is asked for its top-k next tokens
after prompt + the common prefix (one-token request; the runs themselves need no logprobs,
which matters because requesting logprobs can change an engine's path). The answers go to a
JSONL record — a header naming the two runs, the engines, k and the template source, then one
line per divergence and side with the method that produced it — which ``servediff compare``
reads beside the run records, so the report still renders from records only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from servediff import __version__
from servediff.compare.divergence import first_char_difference
from servediff.compare.mechanism import Point, ProbeEntry, ProbeSet, first_token, token_texts
from servediff.engines import Prober
from servediff.record import Item, RecordError, Run
from servediff.types import Sample

PROBE_RECORD = "servediff-probe"
PROBE_SCHEMA = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunRef(_Model):
    label: str
    repeat: int
    path: str
    fingerprint: str


class ProbeHeader(_Model):
    record: str = PROBE_RECORD
    schema_version: int = PROBE_SCHEMA
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


def is_probe_record(path: Path) -> bool:
    """True when the file's first line is a probe header (compare sorts its inputs with this)."""
    try:
        # Bytes, not text: a text read decodes a whole buffer ahead, so a bad byte on a later
        # line would raise here; the run reader reports it with its file and line instead.
        with Path(path).open("rb") as f:
            head = json.loads(f.readline() or b"null")
    except (OSError, ValueError):  # ValueError: JSONDecodeError and UnicodeDecodeError
        return False
    return isinstance(head, dict) and head.get("record") == PROBE_RECORD


def read_probes(path: Path) -> ProbeSet:
    return _read(path)[1]


def _read(path: Path) -> tuple[ProbeHeader, ProbeSet]:
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


def sample_of(item: Item) -> Sample:
    if isinstance(item.input, list):
        return Sample(id=item.id, messages=tuple(dict(m) for m in item.input))
    return Sample(id=item.id, prompt=str(item.input))


def prefix_of(p: Point, a: Item, b: Item) -> tuple[list[int] | None, str, list[str] | None]:
    """The common prefix as engine token ids (when aligned on them), text, and token pieces."""
    assert p.index is not None
    texts = token_texts(a)
    # Engine ids are generation's own; retokenized ids still end the prefix on a token boundary
    # (a server prober rebuilds its text from them).
    on_ids = p.alignment in ("token ids (engine)", "token ids (retokenized)")
    ids = list(a.token_ids[: p.index]) if on_ids and a.token_ids else None
    if texts is not None and p.alignment != "token ids (retokenized)":
        pieces = list(texts[: p.index])
        return ids, "".join(pieces), pieces
    # Retokenized ids carry no texts: the shared characters are the best available prefix.
    return ids, a.text[: first_char_difference(a.text, b.text)], None


def _one(
    prober: Prober,
    sample: Sample,
    prefix: tuple[list[int] | None, str, list[str] | None],
    k: int,
    chat_kwargs: dict[str, Any],
) -> Any:
    from servediff.engines.template import TemplateProber

    ids, text, pieces = prefix
    if isinstance(prober, TemplateProber):
        return prober.probe(sample, ids, text, k, prefix_pieces=pieces, chat_kwargs=chat_kwargs)
    return prober.probe(sample, ids, text, k)


def probe_pair(
    runs: tuple[Run, Run],
    probers: tuple[Prober, Prober],
    out: Path,
    k: int = 5,
    identities: tuple[dict[str, Any], dict[str, Any]] | None = None,
    template_source: str | None = None,
) -> ProbeSet:
    """Probe every divergence of runs[0] vs runs[1] under both configurations; write ``out``.

    ``probers`` are engines with a ``probe`` method (embedded llama.cpp, or a TemplateProber
    over HTTP). With two live engines at once; see ``probe_side`` for one at a time.
    """
    ids = identities or ({}, {})
    return probe_sides(
        runs, {"a": probers[0], "b": probers[1]}, out, k, {"a": ids[0], "b": ids[1]}, template_source
    )


def probe_sides(
    runs: tuple[Run, Run],
    probers: Mapping[str, Prober],
    out: Path,
    k: int = 5,
    identities: Mapping[str, dict[str, Any]] | None = None,
    template_source: str | None = None,
    progress: bool = False,
) -> ProbeSet:
    """Probe the divergences of runs[0] vs runs[1] under the configurations in ``probers``
    (keys "a" and/or "b"), and write them to ``out``. An experiment, which runs one engine at a
    time, writes one record per side; ``compare`` merges the records of one pair."""
    a_run, b_run = runs
    sides = "".join(side for side in "ab" if side in probers)
    header = ProbeHeader(
        tool_version=__version__,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        suite=a_run.header.suite.name,
        a=_ref(a_run),
        b=_ref(b_run),
        engines={side: dict((identities or {}).get(side, {})) for side in sides},
        k=k,
        template_source=template_source,
        sides=sides,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(header.model_dump_json() + "\n")
        for line in _lines(a_run, b_run, probers, k, progress):
            f.write(line.model_dump_json() + "\n")
            f.flush()
    # Written aside and renamed: an interrupted probe leaves no record that looks complete.
    tmp.replace(out)
    return read_probes(out)


def divergence_points(a_run: Run, b_run: Run) -> list[tuple[Point, Item, Item]]:
    """The first differing token of every item both runs finished, where it has a position."""
    out = []
    for item_id in a_run.header.suite.item_ids:
        ia, ib = a_run.items.get(item_id), b_run.items.get(item_id)
        if ia is None or ib is None or ia.error or ib.error:
            continue
        p = first_token(item_id, ia, ib)
        if p is not None and p.index is not None:
            out.append((p, ia, ib))
    return out


def probes_complete(path: Path, runs: tuple[Run, Run], sides: str, k: int) -> bool:
    """True when ``path`` probed exactly these runs (same fingerprints, as finished now) at this k,
    on these sides, with an error-free line at every divergence: what resume may reuse."""
    try:
        head, done = _read(path)
    except (OSError, UnicodeDecodeError, RecordError):
        return False
    # The fingerprint names a run; the path it was read from is not part of its identity.
    if (head.a.fingerprint, head.b.fingerprint, head.k, head.sides) != (
        runs[0].header.fingerprint(),
        runs[1].header.fingerprint(),
        k,
        sides,
    ):
        return False
    for p, _, _ in divergence_points(*runs):
        for side in sides:
            e = done.entries.get((p.item_id, side))
            if e is None or e.error or e.token_index != p.index:
                return False
    return True


def _ref(run: Run) -> RunRef:
    return RunRef(
        label=run.label, repeat=run.header.repeat, path=str(run.path), fingerprint=run.header.fingerprint()
    )


def _lines(
    a_run: Run, b_run: Run, probers: Mapping[str, Prober], k: int, progress: bool = False
) -> Iterator[ProbeLine]:
    from tqdm import tqdm

    points = divergence_points(a_run, b_run)
    sides = [side for side in "ab" if side in probers]
    # the chat_template_kwargs the runs sent, so a template rendered here matches the server's
    thinking = a_run.header.sampling.enable_thinking
    chat_kwargs = {} if thinking is None else {"enable_thinking": thinking}
    bar = tqdm(
        total=len(points) * len(sides),
        desc=f"probe {a_run.label} vs {b_run.label} ({a_run.header.suite.name})",
        unit="probe",
        disable=not progress or not points,
    )
    try:
        for p, ia, ib in points:
            assert p.index is not None
            prefix, sample = prefix_of(p, ia, ib), sample_of(ia)
            for side in sides:
                tokens = diverging_tokens(probers[side], p, ia, ib)
                yield _line(probers[side], side, p.item_id, p.index, sample, prefix, k, chat_kwargs, tokens)
                bar.update(1)
    finally:
        bar.close()


def _line(
    prober: Prober,
    side: str,
    item_id: str,
    index: int,
    sample: Sample,
    prefix: tuple[list[int] | None, str, list[str] | None],
    k: int,
    chat_kwargs: dict[str, Any],
    tokens: tuple[str | None, str | None] | None = None,
) -> ProbeLine:
    try:
        r = _one(prober, sample, prefix, k, chat_kwargs)
    except Exception as exc:  # one failed probe is recorded; the others still count
        return ProbeLine(
            item_id=item_id,
            side=side,
            token_index=index,
            top=[],
            method="failed",
            error=f"{type(exc).__name__}: {exc}",
        )
    return ProbeLine(
        item_id=item_id,
        side=side,
        token_index=index,
        top=list(r.top),
        ids=list(r.ids) if r.ids else None,
        method=r.method,
        tokens=tokens,
    )


def diverging_tokens(prober: Prober, p: Point, a: Item, b: Item) -> tuple[str | None, str | None] | None:
    """The texts of the two diverging tokens, from a server's detokenizer, when the runs hold
    only retokenized ids (no token texts): without them the probe's top-k cannot be matched."""
    from servediff.engines.template import TemplateProber

    if p.alignment != "token ids (retokenized)" or p.index is None or not isinstance(prober, TemplateProber):
        return None
    try:
        return prober.diverging_tokens(a.token_ids, b.token_ids, p.index)
    except Exception:  # the names are a help for matching; the probe itself still counts
        return None
