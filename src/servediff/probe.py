"""Probing: after the runs, ask each configuration for its top-k at every divergence.

    servediff probe runs/stock-1.jsonl runs/tuned-1.jsonl --out runs/probes.jsonl

For each divergence between two runs, each configuration is asked for its top-k next tokens
after prompt + the common prefix (one-token request; the runs themselves need no logprobs,
which matters because requesting logprobs can change an engine's path). The answers go to a
probe record (``records.probes``), which ``servediff compare`` reads beside the run records, so
the report still renders from records only. This is the one module after the runs that calls
engines; ``compare/`` never does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from servediff import __version__
from servediff.compare.divergence import (
    ENGINE_IDS,
    RETOKENIZED_IDS,
    Point,
    divergence_points,
    first_char_difference,
    token_texts,
)
from servediff.engines import Prober
from servediff.records import Item, Run
from servediff.records.probes import ProbeHeader, ProbeLine, ProbeSet, read_probes, run_ref
from servediff.types import Sample


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
    on_ids = p.alignment in (ENGINE_IDS, RETOKENIZED_IDS)
    ids = list(a.token_ids[: p.index]) if on_ids and a.token_ids else None
    if texts is not None and p.alignment != RETOKENIZED_IDS:
        pieces = list(texts[: p.index])
        return ids, "".join(pieces), pieces
    # Retokenized ids carry no texts: the shared characters are the best available prefix.
    return ids, a.text[: first_char_difference(a.text, b.text)], None


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
        a=run_ref(a_run),
        b=run_ref(b_run),
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
        ids, text, pieces = prefix
        r = prober.probe(sample, ids, text, k, prefix_pieces=pieces, chat_kwargs=chat_kwargs)
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
    if p.alignment != RETOKENIZED_IDS or p.index is None:
        return None
    try:
        return prober.diverging_tokens(a.token_ids, b.token_ids, p.index)
    except Exception:  # the names are a help for matching; the probe itself still counts
        return None
