"""Group run records into configurations and compare them: control, pairs, divergences.

    servediff compare runs/*.jsonl --md report.md

Runs with the same label (and suite) are repeats of one configuration: the first repeat is
compared with every other (the control), and the first repeat of each configuration with the
first repeat of every other (the pairs). Only item ids present and error-free in both runs are
compared; errors are counted, never treated as a difference.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import PurePath

from servediff.compare.divergence import Divergence, find_divergence
from servediff.record import Run


class CompareError(ValueError):
    """Runs that should not be compared (different prompts, sampling or model)."""


@dataclass(frozen=True, slots=True)
class PairResult:
    suite: str
    a: str  # label of the reference side
    b: str
    kind: str  # "control" (repeat of one configuration) or "pair"
    identical: int
    total: int  # items compared: present and error-free in both runs
    errors: int  # items left out because either side failed
    divergences: tuple[Divergence, ...]
    a_run: Run
    b_run: Run


@dataclass(frozen=True, slots=True)
class Configuration:
    suite: str
    label: str
    runs: tuple[Run, ...]  # repeats, by repeat number


@dataclass(frozen=True, slots=True)
class Study:
    """What the records say, grouped and paired; report options travel separately."""

    configurations: tuple[Configuration, ...]
    controls: tuple[PairResult, ...]
    pairs: tuple[PairResult, ...]
    warnings: tuple[str, ...]

    @property
    def suites(self) -> list[str]:
        return list(dict.fromkeys(c.suite for c in self.configurations))

    @property
    def comparisons(self) -> tuple[PairResult, ...]:
        return (*self.controls, *self.pairs)


def compare_runs(a: Run, b: Run, kind: str) -> PairResult:
    divergences: list[Divergence] = []
    identical = total = errors = 0
    for item_id in a.header.suite.item_ids:
        ia, ib = a.items.get(item_id), b.items.get(item_id)
        if ia is None or ib is None or ia.error or ib.error:
            errors += 1
            continue
        total += 1
        d = find_divergence(item_id, ia, ib)
        if d is None:
            identical += 1
        else:
            divergences.append(d)
    return PairResult(
        suite=a.header.suite.name,
        a=a.label,
        b=b.label,
        kind=kind,
        identical=identical,
        total=total,
        errors=errors,
        divergences=tuple(divergences),
        a_run=a,
        b_run=b,
    )


def group(runs: Iterable[Run]) -> tuple[Configuration, ...]:
    """(suite, label) → its runs, in first-seen order, repeats sorted by repeat number."""
    by_key: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        by_key.setdefault((run.header.suite.name, run.label), []).append(run)
    return tuple(
        Configuration(suite, label, tuple(sorted(rs, key=lambda r: r.header.repeat)))
        for (suite, label), rs in by_key.items()
    )


def _model_key(run: Run) -> str:
    engine = run.header.engine
    if engine.get("model_sha256"):
        return str(engine["model_sha256"])
    return PurePath(str(engine.get("model") or "")).name


def problems(runs: Sequence[Run]) -> list[str]:
    """Why these runs are not comparable (same suite must mean same prompts, sampling, model)."""
    out: list[str] = []
    by_suite: dict[str, list[Run]] = {}
    for r in runs:
        by_suite.setdefault(r.header.suite.name, []).append(r)
    for suite, rs in by_suite.items():
        ref = rs[0]
        for r in rs[1:]:
            where = f"{suite}: {r.path} vs {ref.path}"
            if r.header.suite.content_sha256 != ref.header.suite.content_sha256:
                out.append(f"{where}: the prompts differ (suite content hash)")
            if r.header.sampling != ref.header.sampling:
                out.append(f"{where}: sampling differs ({r.header.sampling} vs {ref.header.sampling})")
            if _model_key(r) != _model_key(ref):
                out.append(
                    f"{where}: model differs ({r.header.engine.get('model')} vs "
                    f"{ref.header.engine.get('model')})"
                )
    return out


def build_study(runs: Sequence[Run], force: bool = False) -> Study:
    if not runs:
        raise CompareError("no runs to compare")
    found = problems(runs)
    if found and not force:
        raise CompareError("refusing to compare:\n  " + "\n  ".join(found) + "\n(--force compares anyway)")
    configs = group(runs)
    controls = [compare_runs(c.runs[0], rep, "control") for c in configs for rep in c.runs[1:]]
    pairs: list[PairResult] = []
    for suite in dict.fromkeys(c.suite for c in configs):
        firsts = [c.runs[0] for c in configs if c.suite == suite]
        pairs.extend(compare_runs(a, b, "pair") for a, b in combinations(firsts, 2))
    warnings = tuple(f"forced despite: {p}" for p in found)
    return Study(configurations=configs, controls=tuple(controls), pairs=tuple(pairs), warnings=warnings)


def without_pairs_of(study: Study, labels: Iterable[str]) -> Study:
    """The study with no pair that involves these labels (their controls stay)."""
    drop = set(labels)
    kept = tuple(p for p in study.pairs if p.a not in drop and p.b not in drop)
    return Study(study.configurations, study.controls, kept, study.warnings)
