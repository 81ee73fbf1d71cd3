"""A quality gate for CI: is the candidate configuration non-inferior to the control?

    servediff gate --config-a stock --config-b tuned --suite gsm8k --margin 0.02 --junit gate.xml

Items run in one seeded random order on both configurations (paired), batch by batch, into the
ordinary run records (so a re-run resumes and nothing is lost). After every batch the
anytime-valid confidence sequence of ``compare.stats.sequential`` is updated, and the gate stops as
soon as it lies above −margin (pass) or below it (fail), or at the item budget (inconclusive).
Because the sequence is valid at every n, stopping early costs no error rate. With ``--power``
the budget is planned (``compare.gate_budget``) from the margin, α and the discordance, given or
measured on a pilot, and the gate says beforehand what it expects to use against a fixed-n
design. Errored items are recorded errors: they are left out of the sequence and counted, never
scored as wrong. The control is first run twice on a few items: a greedy control that does not
reproduce itself makes every comparison meaningless.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servediff.compare import gate_budget, quality
from servediff.compare.gate_budget import GatePlan
from servediff.compare.stats import sequential
from servediff.compare.stats.sequential import Tally
from servediff.engines import Engine
from servediff.filename import file_stem
from servediff.gate.result import Checkpoint, Determinism, GateReport
from servediff.records import Run, read_run
from servediff.runner import RunPlan, execute
from servediff.suites import Suite
from servediff.types import SamplingParams


@dataclass(frozen=True, slots=True)
class Side:
    """One configuration: its label, engine and sampling (the same prompts go to both sides)."""

    label: str
    engine: Engine
    sampling: SamplingParams


@dataclass(frozen=True, slots=True)
class GateOptions:
    out: Path  # folder for the run records
    margin: float = 0.02
    alpha: float = 0.025  # each error (false pass, false fail) at most this, whenever it stops
    max_items: int | None = None  # None: the whole suite
    batch: int = 10  # items per look
    seed: int = 0  # the item order
    determinism_items: int = 5  # 0: no determinism check
    progress: bool = False
    power: float | None = None  # plan the budget for this power at Δ = 0 (None: the budget is given)
    discordance: float | None = None  # the plan's estimate; None: measured on the pilot
    pilot: int = 100  # scored items that estimate the discordance when none is given


def gate_order(suite: Suite, seed: int, max_items: int | None) -> Suite:
    """The suite's items in a seeded random order, cut to ``max_items``: both sides, every re-run
    and every resume see the same sequence."""
    order = np.random.default_rng(seed).permutation(len(suite.samples))
    keep = tuple(suite.samples[i] for i in order[: max_items or len(order)])
    return dataclasses.replace(suite, samples=keep, source=f"{suite.source} (gate order, seed {seed})")


def tally(a: Run, b: Run, ids: list[str]) -> tuple[Tally, int]:
    """Paired outcomes over ``ids`` (quality's one 2×2 tally), and how many were left out because
    either side errored (or has no score): an engine failure is not a wrong answer."""
    pairs, errors = quality.scored_pairs(a, b, ids)
    t = quality.paired_counts(pairs)
    return Tally(c=t.c, b=t.b, z=t.both + t.neither), errors


def checkpoint(t: Tally, alpha: float) -> Checkpoint:
    return Checkpoint(
        n=t.n,
        c=t.c,
        b=t.b,
        delta=t.delta,
        low=sequential.bound(t, alpha, +1),
        high=sequential.bound(t, alpha, -1),
    )


def _plan(side: Side, suite: Suite, out: Path, repeat: int = 1) -> RunPlan:
    return RunPlan(suite, side.label, out, side.sampling, repeat=repeat)


def check_determinism(a: Side, suite: Suite, first: Path, opts: GateOptions) -> Determinism:
    """Run the control again on the first ``determinism_items`` items and compare the texts."""
    k = min(opts.determinism_items, len(suite.samples))
    if k == 0:
        return Determinism("skipped", 0, 0, 0)
    head = suite.samples[:k]
    again = opts.out / f"{file_stem(a.label)}.{file_stem(suite.name)}.repeat2.jsonl"
    # The repeat's header names the whole suite, like the sides' records, and it answers the first
    # k: `servediff compare` of the gate's records then takes it as the control of A.
    execute(
        _plan(a, suite, again, repeat=2), a.engine, progress=opts.progress, only=frozenset(s.id for s in head)
    )
    r1, r2 = read_run(first), read_run(again)
    compared = identical = errors = 0
    for s in head:
        i1, i2 = r1.items.get(s.id), r2.items.get(s.id)
        if i1 is None or i2 is None or i1.error or i2.error:
            errors += 1
            continue
        compared += 1
        identical += i1.sha256 == i2.sha256
    status = "no items compared" if compared == 0 else "deterministic"
    if identical < compared:
        status = "NOT deterministic"
    return Determinism(status, compared, identical, errors)


def run_gate(a: Side, b: Side, suite: Suite, opts: GateOptions) -> GateReport:
    """Run the gate to its verdict; see the module docstring."""
    if a.label == b.label:
        raise ValueError(f"the control and the candidate need different labels (both {a.label!r})")
    if suite.scorer is None:
        raise ValueError(f"suite {suite.name!r} is not scored: the gate needs right/wrong answers")
    # The records hold the whole suite in gate order and the budget only cuts the ids looked at:
    # their header then does not depend on --max-items, so a re-run with another budget (a gate
    # cut short by a time limit, asked for its verdict at the items it has) resumes them.
    ordered = gate_order(suite, opts.seed, None)
    ids = [s.id for s in ordered.samples][: opts.max_items]
    paths = {s.label: opts.out / f"{file_stem(s.label)}.{file_stem(suite.name)}.jsonl" for s in (a, b)}
    determinism: Determinism | None = None
    points: list[Checkpoint] = []
    t, errors, verdict, end = Tally(0, 0, 0), 0, None, 0
    budget, planned = budget_plan(opts, len(ids), t)
    while verdict is None and end < budget:
        batch = ids[end : min(end + opts.batch, budget)]
        end += len(batch)
        for side in (a, b):
            plan = _plan(side, ordered, paths[side.label])
            execute(plan, side.engine, progress=opts.progress, only=frozenset(batch))
        if determinism is None:
            determinism = check_determinism(a, ordered, paths[a.label], opts)
        t, errors = tally(read_run(paths[a.label]), read_run(paths[b.label]), ids[:end])
        points.append(checkpoint(t, opts.alpha))
        verdict = sequential.decide(t, opts.margin, opts.alpha)
        if planned is None and verdict is None:  # the pilot may have measured the discordance now
            budget, planned = budget_plan(opts, len(ids), t)
            budget = max(budget, end)
    return GateReport(
        suite=suite.name,
        a=a.label,
        b=b.label,
        margin=opts.margin,
        alpha=opts.alpha,
        max_items=budget,
        verdict=verdict or "inconclusive",
        tally=t,
        errors=errors,
        looked_at=end,
        checkpoints=tuple(points),
        determinism=determinism or Determinism("skipped", 0, 0, 0),
        records=tuple(str(p) for p in paths.values()),
    )


def budget_plan(opts: GateOptions, items: int, t: Tally) -> tuple[int, GatePlan | None]:
    """The item budget and its plan, said on stderr once the discordance is known: given, or
    measured on the first ``pilot`` scored items. Until then the budget is every item.

    Choosing the budget from the data the gate has seen keeps its error rates: the confidence
    sequence holds at every n, so when to stop may depend on anything observed."""
    if opts.discordance is not None:
        psi = opts.discordance
    elif t.n >= opts.pilot:
        psi = (t.b + t.c) / t.n
    else:
        return items, None
    if opts.power is None:
        planned = gate_budget.at_budget(opts.margin, opts.alpha, psi, items, opts.batch)
    else:
        planned = gate_budget.plan(opts.margin, opts.alpha, psi, opts.power, opts.batch, limit=items)
    source = "given" if opts.discordance is not None else f"measured on the first {t.n} items"
    print(f"{gate_budget.describe(planned)} [discordance {source}]", file=sys.stderr, flush=True)
    return planned.budget, planned


def build_side(label: str, config: str | None, base_url: str | None, shared: SideSource) -> Side:
    """A side from the command line: an embedded knob set by name, or an HTTP server, built by
    the one engine factory the CLI and experiments use."""
    from servediff.engines.factory import EngineSpec, make_engine
    from servediff.engines.knobs import resolve_config
    from servediff.engines.openai_http import HTTPOptions

    if base_url:
        spec = EngineSpec(label, http=HTTPOptions(base_url=base_url))
    else:
        spec = EngineSpec(
            label, llama=resolve_config(config or "stock", shared.config_file), model_path=shared.model_path
        )
    return Side(label, make_engine(spec), shared.sampling)


@dataclass(frozen=True, slots=True)
class SideSource:
    """What both sides of a command-line gate share."""

    sampling: SamplingParams
    config_file: Path | None = None
    model_path: Path | None = None


@dataclass(frozen=True, slots=True)
class SideFlags:
    """One side as the command line names it: an embedded knob set, or a server's URL."""

    label: str
    config: str | None = None
    base_url: str | None = None


@dataclass(frozen=True, slots=True)
class GateRequest:
    """Everything ``servediff gate`` is asked: both sides, the suite, and how to run the gate."""

    a: SideFlags
    b: SideFlags
    suite: str
    options: GateOptions
    data: Path | None = None  # the suite's data file instead of its default source
    max_tokens: int | None = None  # None: the suite's own, else 300
    max_tokens_b: int | None = None  # B's own cap (a capped candidate)
    # Each token's top-k on both sides, for the mechanism of the records' divergences; a suite
    # scored from logprobs (mmlu-letter) asks for its own k, which wins.
    top_logprobs: int = 0
    config_file: Path | None = None
    model_path: Path | None = None


def run_request(req: GateRequest) -> GateReport:
    """Both sides built, the suite in its seeded order, the gate run (or resumed from its
    records); the engines are closed however it ends."""
    from servediff.suites import SuiteOptions, load_suite

    if req.a.label == req.b.label:  # checked first: it needs no data and no engine
        raise ValueError(f"both sides are labelled {req.a.label!r}: give --label-a/--label-b")
    suite = load_suite(req.suite, SuiteOptions(path=req.data))
    sampling = SamplingParams(
        max_tokens=req.max_tokens or suite.max_tokens or 300,
        top_logprobs=suite.top_logprobs or req.top_logprobs,
    )
    src = SideSource(sampling, req.config_file, req.model_path)
    # B's own cap, where one is given (a capped candidate)
    capped = dataclasses.replace(
        src, sampling=dataclasses.replace(sampling, max_tokens=req.max_tokens_b or 0)
    )
    a = build_side(req.a.label, req.a.config, req.a.base_url, src)
    try:
        b = build_side(req.b.label, req.b.config, req.b.base_url, capped if req.max_tokens_b else src)
    except BaseException:
        a.engine.close()
        raise
    try:
        return run_gate(a, b, suite, req.options)
    finally:
        a.engine.close()
        b.engine.close()
