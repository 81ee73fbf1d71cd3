"""Each run as its record's header and items say: what ran, when, and how much of it finished.

    servediff compare runs/*.jsonl --md report.md      # the "Runs" section

One row per run record (configuration, suite, repeat), so a reader can see at a glance that
every run is there, how many items it answered, how many the engine failed, and how many
output tokens it produced, before reading any comparison built on them.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from servediff.compare.study import Study
from servediff.records import Run


@dataclass(frozen=True, slots=True)
class RunRow:
    label: str
    suite: str
    repeat: int
    engine: str  # the engine kind the header records
    created: str  # when the record was started (ISO 8601, as written)
    items: int  # item lines in the record
    errors: int  # items the engine failed (recorded errors)
    output_tokens: int  # over the answered items that report a token count
    concurrency: int


_ERROR, _N_TOKENS = operator.attrgetter("error"), operator.attrgetter("n_tokens")


def run_row(label: str, suite: str, run: Run) -> RunRow:
    items = run.items
    errors, output_tokens = items.errors(), items.output_tokens()
    return RunRow(
        label=label,
        suite=suite,
        repeat=run.header.repeat,
        engine=str(run.header.engine.get("kind")),
        created=run.header.created,
        items=len(run.items),
        errors=errors,
        output_tokens=output_tokens,
        concurrency=run.header.concurrency,
    )


def run_rows(study: Study) -> tuple[RunRow, ...]:
    """Every run of the study, in the study's order of configurations, repeats ascending."""
    return tuple(
        run_row(c.label, c.suite, run)
        for c in study.configurations
        for run in sorted(c.runs, key=lambda r: r.header.repeat)
    )
