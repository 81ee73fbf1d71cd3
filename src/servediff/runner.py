"""Run one suite on one engine into one record file, resuming where a previous attempt stopped.

servediff run --engine llamacpp --config stock --suite prompts --out runs/stock.jsonl
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from servediff.engines import Engine
from servediff.machine import load_now
from servediff.records import (
    Header,
    RecordError,
    SuiteInfo,
    TornHeader,
    annotate,
    item_line,
    make_header,
    make_item,
    read_header,
    read_run,
    seal,
)
from servediff.suites import Suite
from servediff.suites.draws import expand
from servediff.types import Completion, SamplingParams


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What to run: a suite under a label, with the sampling parameters, into a file."""

    suite: Suite
    label: str
    out: Path
    sampling: SamplingParams
    repeat: int = 1
    concurrency: int = 1
    extra: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RunResult:
    path: Path
    total: int
    skipped: int  # finished in an earlier attempt
    done: int  # finished now without error
    errors: int  # failed now (recorded with their error)


def suite_info(suite: Suite) -> SuiteInfo:
    return SuiteInfo(
        name=suite.name,
        version=suite.version,
        source=suite.source,
        data_sha256=suite.data_sha256,
        content_sha256=suite.content_sha256,
        item_ids=[s.id for s in suite.samples],
        scoring=suite.scoring,
    )


def plan_header(plan: RunPlan, engine: Engine) -> Header:
    return make_header(
        label=plan.label,
        repeat=plan.repeat,
        engine=engine.identity(),
        sampling=plan.sampling,
        suite=suite_info(expand(plan.suite, plan.sampling)),
        concurrency=plan.concurrency,
        extra=plan.extra,
    )


def pending_ids(path: Path, header: Header) -> set[str] | None:
    """Ids already finished in ``path``, or None when the run starts afresh (no file yet, an
    empty one, or one holding only a cut header line).

    Leaves the file ready to append to (``record.seal``): a complete last line keeps its item, a
    cut one is dropped with a warning on stderr and its item runs again. Raises RecordError when
    the file holds a different run: resuming into it would mix two configurations in one record.
    """
    if not path.exists() or path.stat().st_size == 0:
        return None
    try:
        previous = read_run(path)
    except TornHeader as exc:
        # Killed before the header was out: nothing was finished, so nothing is lost.
        path.write_bytes(b"")
        print(f"warning: {exc}; starting the run afresh", file=sys.stderr)
        return None
    if previous.header.fingerprint() != header.fingerprint():
        raise RecordError(
            f"{path} holds a different run (label, engine, sampling, suite or concurrency "
            "differ); choose another --out or delete it"
        )
    warning = seal(previous)
    if warning:
        print(warning, file=sys.stderr)
    return previous.done_ids()


def record_load(path: Path, start: dict[str, Any], end: dict[str, Any]) -> None:
    """Add this stretch of work's machine load to the header (a resumed or interleaved run has
    several), for compare.speed to judge whether its speed was measured on a quiet machine."""
    stretches = list(read_header(path).extra.get("load") or [])
    annotate(path, {"load": [*stretches, {"start": start, "end": end}]})


def execute(
    plan: RunPlan, engine: Engine, progress: bool = True, only: frozenset[str] | None = None
) -> RunResult:
    """Run the plan's items not finished yet. ``only`` restricts this call to those ids (the gate
    runs its suite batch by batch into one record; the header still names the whole suite)."""
    header = plan_header(plan, engine)
    finished = pending_ids(plan.out, header)
    # A sampled run sends each item k times, one line per draw: resume and retry work per draw.
    suite = expand(plan.suite, plan.sampling)
    todo = [
        s
        for s in suite.samples
        if (finished is None or s.id not in finished) and (only is None or s.id in only)
    ]
    # The bar counts what this call is asked for: with ``only``, the batch, not the whole suite.
    asked = len(suite.samples) if only is None else sum(s.id in only for s in suite.samples)
    skipped = asked - len(todo)
    plan.out.parent.mkdir(parents=True, exist_ok=True)
    by_id = {s.id: s for s in todo}
    counts = {"done": 0, "errors": 0}
    bar = tqdm(
        total=asked,
        initial=skipped,
        unit="item",
        file=sys.stderr,
        desc=f"{plan.label} #{plan.repeat} {plan.suite.name}",
        disable=not progress,
        dynamic_ncols=True,
    )
    with plan.out.open("a", encoding="utf-8") as f:
        if finished is None:
            f.write(header.model_dump_json() + "\n")

        def on_done(c: Completion) -> None:
            c.finished_at = time.time()
            sample = by_id[c.item_id]
            if suite.top_logprobs and c.error is None and c.text and not c.logprobs:
                # A suite scored from logprobs cannot score a reply without them: that is the
                # engine's failure (it ignored the request), never a wrong answer.
                c.error = "the engine returned no logprobs, and this suite is scored from its top-k"
            # An engine failure is not a wrong answer: errored items are never scored.
            score = suite.scorer(sample, c) if suite.scorer and c.error is None else None
            payload = list(sample.messages) if sample.messages is not None else sample.prompt
            f.write(item_line(make_item(c, payload, score, sample.metadata)))
            f.flush()
            counts["errors" if c.error else "done"] += 1
            bar.update(1)
            if c.error:
                bar.set_postfix(errors=counts["errors"])

        start = load_now()
        try:
            if todo:
                engine.generate(todo, plan.sampling, on_done)
        finally:
            bar.close()
    if todo:
        record_load(plan.out, start, load_now())
    return RunResult(plan.out, asked, skipped, counts["done"], counts["errors"])
