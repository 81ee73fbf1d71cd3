"""An experiment's evidence in the report model, from the run headers alone: whether each
configuration is what it claims to be.

    servediff experiment examples/llamacpp-flash.toml      # writes OUT/report.md
    servediff compare OUT/runs/*/*.jsonl                    # the same sections from the records

It is empty for runs that were not made by an experiment.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from servediff.compare.loader import is_sweep
from servediff.compare.study import Study
from servediff.records import Run
from servediff.report.model import Claim, ClaimGroup

FLAGGED = ("NOT ENGAGED", "NOT CONFIGURED")


def claims(study: Study) -> tuple[Claim, ...]:
    out: list[Claim] = []
    for c in study.configurations:
        if is_sweep(c.runs[0]):
            continue
        for run in c.runs:
            out += _claims(c.label, c.suite, run)
    return tuple(out)


def _claims(label: str, suite: str, run: Run) -> list[Claim]:
    v: dict[str, Any] = run.header.extra.get("verification") or {}
    if not v:
        return []
    start = f"{v['startup_s']} s" if "startup_s" in v else str(v.get("kind", ""))
    base = Claim(
        label=label,
        suite=suite,
        repeat=run.header.repeat,
        profile=str(v.get("profile") or ""),
        start=start,
        serves=", ".join(v.get("served", [])),
        version=str(v.get("server_version") or "not exposed"),
        claim=None,
        status="none claimed",
        detail="",
        flagged=False,
    )
    checks: dict[str, dict[str, Any]] = v.get("claims", {})
    if not checks:
        return [base]
    return [
        dataclasses.replace(
            base,
            claim=claim,
            status=str(check.get("status", "")),
            detail=str(check.get("detail", "")),
            flagged=claim in v.get("flagged", []),
        )
        for claim, check in checks.items()
    ]


def grouped(claims: tuple[Claim, ...]) -> tuple[ClaimGroup, ...]:
    """One row per configuration and finding: the runs whose claim reads the same (engine,
    version, status, detail) are listed together, and the claims of one configuration that end
    the same way over the same runs share their row, instead of one row per run and claim."""
    by_claim: dict[tuple[object, ...], list[Claim]] = {}
    for c in claims:
        key = (c.label, c.profile, c.serves, c.version, c.claim, c.status, c.detail, c.flagged)
        by_claim.setdefault(key, []).append(c)
    rows: dict[tuple[object, ...], list[list[Claim]]] = {}
    for cs in by_claim.values():
        c, runs = cs[0], tuple((x.suite, x.repeat) for x in cs)
        rows.setdefault(
            (c.label, c.profile, c.serves, c.version, c.status, c.detail, c.flagged, runs), []
        ).append(cs)
    return tuple(_group(row) for row in rows.values())


def _group(row: list[list[Claim]]) -> ClaimGroup:
    c = row[0][0]
    return ClaimGroup(
        label=c.label,
        profile=c.profile,
        starts=tuple(dict.fromkeys(x.start for x in row[0])),
        serves=c.serves,
        version=c.version,
        claims=tuple(cs[0].claim for cs in row if cs[0].claim is not None),
        status=c.status,
        detail=c.detail,
        flagged=c.flagged,
        runs=tuple((x.suite, x.repeat) for x in row[0]),
    )
