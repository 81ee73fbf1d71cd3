"""Speed in the report model: per (suite, configuration) numbers, and the one-line verdicts.

    servediff report runs/*.jsonl --md report.md --html report.html

The statistics are ``compare.speed``'s; this module only decides what is compared with what.
The reference of a suite is its first configuration that is not a load-sweep level (the A side
of every pair: ``stock`` in the demo). A load sweep's levels are compared among themselves in
the throughput-vs-concurrency plot, not against the reference.
"""

from __future__ import annotations

from collections.abc import Sequence

from servediff.compare import speed as sp
from servediff.compare.loader import is_sweep
from servediff.compare.study import Configuration, Study
from servediff.report.model import Claim, QualityDelta, QualityView, SpeedView, Verdict


def _items(c: Configuration, warmup: int, keyed: bool = False) -> sp.Items:
    prefix = f"{c.suite}/" if keyed else ""
    return sp.pooled([sp.run_items(r, warmup, prefix) for r in c.runs])


def references(study: Study) -> dict[str, Configuration]:
    """suite → its reference configuration (the first that is not a sweep level)."""
    out: dict[str, Configuration] = {}
    for c in study.configurations:
        if not is_sweep(c.runs[0]):
            out.setdefault(c.suite, c)
    return out


def views(study: Study, warmup: int) -> tuple[SpeedView, ...]:
    refs = references(study)
    out = []
    for c in study.configurations:
        items = _items(c, warmup)
        ref = refs.get(c.suite)
        sweep = c.label.rsplit("@c", 1)[0] if is_sweep(c.runs[0]) else None
        compared = ref is not None and ref is not c and sweep is None
        rates = sp.rates(items)
        out.append(
            SpeedView(
                suite=c.suite,
                label=c.label,
                sweep=sweep,
                concurrency=c.runs[0].header.concurrency,
                runs=len(c.runs),
                items=len(items.samples),
                warmup=items.warmup,
                errors=items.errors,
                in_flight=items.in_flight,
                tokens_per_s=rates[0] if rates else None,
                requests_per_s=rates[1] if rates else None,
                latency=sp.percentiles([s.latency_s for s in items.samples]),
                ttft=sp.percentiles([s.ttft_s for s in items.samples if s.ttft_s is not None]),
                itl=sp.mean([s.itl_s for s in items.samples if s.itl_s is not None]),
                engine_tokens_per_s=sp.engine_decode_rate(c.runs, warmup),
                reference=ref.label if compared and ref is not None else None,
                speedup=sp.speedup(_items(ref, warmup), items) if compared and ref is not None else None,
                load=sp.load_check(ref.runs, c.runs) if compared and ref is not None else None,
            )
        )
    return tuple(out)


def verdicts(
    study: Study, warmup: int, quality: QualityView | None, claims: Sequence[Claim]
) -> tuple[Verdict, ...]:
    """One per configuration label (not sweep levels), the reference first."""
    refs = references(study)
    ref_labels = list(dict.fromkeys(c.label for c in refs.values()))
    reference = ref_labels[0] if ref_labels else None
    labels = list(dict.fromkeys(c.label for c in study.configurations if not is_sweep(c.runs[0])))
    out = []
    for label in labels:
        mine = [c for c in study.configurations if c.label == label]
        theirs = [refs[c.suite] for c in mine if c.suite in refs and refs[c.suite].label != label]
        # Keys carry the suite only where one label pools several suites: a constant prefix would
        # change no number, and at a million items its copies of every sample cost 0.3 GB.
        keyed = len(mine) > 1
        own = sp.pooled([_items(c, warmup, keyed) for c in mine])
        rates = sp.rates(own)
        base = sp.pooled([_items(c, warmup, keyed) for c in theirs]) if theirs else None
        against = theirs[0].label if theirs else None
        out.append(
            Verdict(
                label=label,
                reference=against,
                concurrency=max(c.runs[0].header.concurrency for c in mine),
                speedup=sp.speedup(base, own) if base is not None else None,
                tokens_per_s=rates[0] if rates else None,
                identity=tuple(
                    (p.suite, p.identical, p.total) for p in study.pairs if p.b == label and p.a == against
                ),
                control=tuple((p.suite, p.identical, p.total) for p in study.controls if p.a == label),
                quality=_quality(quality, against, label),
                verification=_verification(claims, label),
                load=sp.load_check([r for c in theirs for r in c.runs], [r for c in mine for r in c.runs])
                if theirs
                else None,
            )
        )
    out.sort(key=lambda v: v.label != reference)
    return tuple(out)


def _quality(q: QualityView | None, a: str | None, b: str) -> tuple[QualityDelta, ...]:
    if q is None or a is None:
        return ()
    return tuple(
        QualityDelta(p.suite, p.table.delta, p.delta_ci.low, p.delta_ci.high, p.verdict, p.margin)
        for p in q.pairs
        if p.kind == "pair" and p.a == a and p.b == b
    )


def _verification(claims: Sequence[Claim], label: str) -> str | None:
    mine = [c for c in claims if c.label == label and c.claim is not None]
    if not mine:
        return None
    seen = dict.fromkeys(f"{c.claim} {c.status}" for c in mine)
    return ", ".join(seen)
