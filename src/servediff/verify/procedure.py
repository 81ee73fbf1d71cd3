"""From the flags to the verdict: read the reference, plan from its calibration, then send the
reference's prompts to the endpoint in rounds, within the budget, until the test can say.

    servediff verify --reference ref1.jsonl ref2.jsonl --base-url http://127.0.0.1:8080

The budget is counted before each round is sent: a round goes out only if its requests, and its
requests × the reference's ``max_tokens`` (the most each may generate), fit what is left. A
request the endpoint fails is an engine error (exit 2), never evidence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servediff.commands.grammar import UsageError
from servediff.compare import verify as stats
from servediff.compare.stats.conformal import Floats, first_crossing, log_wealth_path, simulate
from servediff.records import Item, Run, read_run
from servediff.types import Completion, Sample, SamplingParams
from servediff.verify import result as out

PLAN_DELTAS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2)
PLAN_HORIZON = 400  # requests simulated per audit: past it a plan says "more than 400"


@dataclass(frozen=True, slots=True)
class Settings:
    alpha: float
    delta: float
    power: float
    budget_requests: int
    budget_tokens: int
    concurrency: int = 1
    seed: int = 0
    simulations: int = 200


@dataclass(frozen=True, slots=True)
class Reference:
    paths: tuple[Path, ...]
    runs: tuple[Run, ...]
    calibration: stats.Calibration

    @property
    def first(self) -> Run:
        return self.runs[0]

    def tokens_per_request(self) -> float:
        counts = [len(i.logprobs or i.tokens or []) for i in self.first.items.values() if stats.usable(i)]
        return float(np.mean(counts)) if counts else 0.0


def load(paths: Sequence[Path]) -> Reference:
    """The reference's runs and their calibration; a usage error (one line) when they cannot be
    one: fewer than two, other prompts, or not greedy."""
    if len(paths) < 2:
        raise UsageError(
            f"--reference: {len(paths)} record given; verify needs at least 2 runs of the reference "
            "configuration to learn its own nondeterminism (e.g. servediff run ... --repeat 2, one of "
            "them at --concurrency 8)"
        )
    runs = tuple(read_run(p) for p in paths)
    head = runs[0].header
    for path, run in zip(paths, runs, strict=True):
        if run.header.suite.content_sha256 != head.suite.content_sha256:
            raise UsageError(f"{path}: suite: other prompts than {paths[0]}'s")
        if run.header.sampling.temperature != 0:
            raise UsageError(f"{path}: sampling.temperature: verify compares greedy runs (temperature 0)")
    calibration = stats.calibrate(runs)
    if not calibration.pairs:
        raise UsageError(f"--reference: the runs share no item answered without error ({paths[0]})")
    return Reference(tuple(paths), runs, calibration)


def plan(ref: Reference, s: Settings) -> out.Plan:
    """Audits simulated from the calibration: false alarms (no shift) and, for several δ, the
    requests needed for ``s.power``."""
    rows = ref.calibration.rows()
    horizon = min(PLAN_HORIZON, s.budget_requests)
    per_request = ref.tokens_per_request()
    null = simulate(rows, stats.shifted, 0.0, s.alpha, horizon, s.simulations, s.seed)
    plan_rows = []
    for delta in sorted({*PLAN_DELTAS, s.delta}):
        sim = simulate(rows, stats.shifted, delta, s.alpha, horizon, s.simulations, s.seed)
        n = sim.requests_for(s.power)
        plan_rows.append(
            out.PlanRow(
                delta=delta,
                requests=n,
                tokens=None if n is None else math.ceil(n * per_request),
                rejected_at_horizon=float(sim.rejected_by[-1]),
            )
        )
    return out.Plan(
        alpha=s.alpha,
        power=s.power,
        runs=s.simulations,
        horizon=horizon,
        false_alarms=float(null.rejected_by[-1]),
        tokens_per_request=per_request,
        rows=plan_rows,
    )


def sample_of(item: Item) -> Sample:
    if isinstance(item.input, str):
        return Sample(id=item.id, prompt=item.input)
    if isinstance(item.input, list):
        return Sample(id=item.id, messages=tuple(dict(m) for m in item.input))
    raise UsageError(f"item {item.id!r}: input: neither a prompt nor a list of messages")


def params_of(run: Run) -> SamplingParams:
    """What every reference request was sent with, sent again."""
    sp = run.header.sampling
    return SamplingParams(
        temperature=0.0,
        seed=sp.seed if sp.seed is not None else 42,
        top_p=sp.top_p,
        top_k=sp.top_k,
        repeat_penalty=sp.repeat_penalty if sp.repeat_penalty is not None else 1.0,
        min_p=sp.min_p if sp.min_p is not None else 0.0,
        max_tokens=sp.max_tokens,
        top_logprobs=max(sp.top_logprobs, 1),
    )


def order(ref: Reference, seed: int) -> list[Item]:
    """The reference's usable items in a seeded random order: the requests are then a random
    draw of the items, exchangeable with the calibration's pairs."""
    items = [i for i in ref.first.items.values() if stats.usable(i)]
    rng = np.random.default_rng(seed)
    return [items[k] for k in rng.permutation(len(items))]


def null_prompt_mismatch(cal: stats.Calibration) -> bool:
    return any(None not in p.prompt_tokens and p.prompt_tokens[0] != p.prompt_tokens[1] for p in cal.pairs)


def _as_item(c: Completion, input_: Any) -> Item:
    from servediff.records import make_item

    return make_item(c, input_, None, {})


@dataclass(slots=True)
class Progress:
    pairs: list[stats.Pair]
    requests_sent: int = 0
    tokens_reserved: int = 0
    tokens_generated: int = 0


def send_rounds(engine: Any, ref: Reference, s: Settings, stop_at: int | None) -> Progress:
    """Send rounds of ``s.concurrency`` requests until the test crosses, the plan's count is
    reached, or the budget or the items run out. ``engine``: an ``HTTPEngine``."""
    from servediff.engines import EngineError

    params = params_of(ref.first)
    nulls = ref.calibration.nulls()
    queue = order(ref, s.seed)
    progress = Progress(pairs=[])
    while queue:
        room = min(
            s.budget_requests - progress.requests_sent,
            (s.budget_tokens - progress.tokens_reserved) // params.max_tokens,
        )
        size = min(s.concurrency, room, len(queue))
        if size <= 0:
            break
        batch, queue = queue[:size], queue[size:]
        progress.requests_sent += size
        progress.tokens_reserved += size * params.max_tokens
        done = _answers(engine, batch, params)
        for item in batch:
            c = done.get(item.id)
            if c is None or c.error is not None:
                raise EngineError(f"{engine.base_url}: item {item.id!r}: {c.error if c else 'no answer'}")
            progress.tokens_generated += c.n_tokens or 0
            progress.pairs.append(stats.pair(item, _as_item(c, item.input)))
        path, _ = log_wealth_path(_rows(progress.pairs), nulls)
        if first_crossing(path, s.alpha).rejected or (stop_at is not None and len(progress.pairs) >= stop_at):
            break
    return progress


def _answers(engine: Any, batch: Sequence[Item], params: SamplingParams) -> dict[str, Completion]:
    done: dict[str, Completion] = {}
    engine.generate([sample_of(i) for i in batch], params, lambda c: done.__setitem__(c.item_id, c))
    return done


def _rows(pairs: Sequence[stats.Pair]) -> Floats:
    return np.array([p.values for p in pairs], dtype=np.float64).reshape(-1, len(stats.STATISTICS))


def signals(ref: Reference, pairs: Sequence[stats.Pair] | None) -> list[out.Signal]:
    available = ref.calibration.available()
    seen = _rows(pairs) if pairs is not None else None
    return [
        out.Signal(
            statistic=name,
            what=stats.SIGNALS[name],
            reference=available[name],
            endpoint=None if seen is None else bool((~np.isnan(seen[:, k])).any()),
        )
        for k, name in enumerate(stats.STATISTICS)
    ]


def conclude(
    ref: Reference, s: Settings, the_plan: out.Plan, progress: Progress, where: tuple[str, str | None]
) -> out.VerifyResult:
    """The verdict, from the requests the endpoint answered: "differs" where the wealth crossed
    1/α, "consistent" where the plan's count for δ was reached first, else "inconclusive"."""
    n_planned = planned(the_plan, s.delta)
    rows = _rows(progress.pairs)
    path, p = log_wealth_path(rows, ref.calibration.nulls())
    stop = first_crossing(path, s.alpha)
    tested = progress.pairs[: stop.n]
    tokens = sum(x.other_tokens for x in tested)
    e = stats.evidence(tested)
    if stop.rejected:
        verdict: out.Verdict = "differs"
        look = stats.shape(e, null_prompt_mismatch(ref.calibration))
        line = (
            f"differs: p ≤ {s.alpha:g} after {tokens} tokens ({stop.n} requests); the shift looks like {look}"
        )
    elif n_planned is not None and stop.n >= n_planned:
        verdict, look = "consistent", None
        line = (
            f"consistent after {tokens} tokens ({stop.n} requests); a substitution of size "
            f"≥ {s.delta:g} nat/token would have been detected with power ≥ {s.power:g}"
        )
    else:
        verdict, look = "inconclusive", None
        need = f"{n_planned} requests" if n_planned is not None else f"more than {the_plan.horizon} requests"
        line = (
            f"inconclusive: the budget ended after {stop.n} requests ({tokens} tokens); the plan needs "
            f"{need} to detect {s.delta:g} nat/token with power {s.power:g}"
        )
    return out.VerifyResult(
        verdict=verdict,
        exit_code=out.EXIT_CODES[verdict],
        line=line,
        alpha=s.alpha,
        delta=s.delta,
        power=s.power,
        reference_files=[p_.name for p_ in ref.paths],
        reference_label=ref.first.header.label,
        calibration_pairs=len(ref.calibration.pairs),
        endpoint=where[0],
        model=where[1],
        signals=signals(ref, progress.pairs),
        plan=the_plan,
        planned_requests=n_planned,
        requests_at_stop=stop.n,
        tokens_at_stop=tokens,
        log_wealth=stop.log_wealth,
        log_threshold=math.log(1 / s.alpha),
        budget=out.Budget(
            requests=s.budget_requests,
            tokens=s.budget_tokens,
            requests_sent=progress.requests_sent,
            tokens_reserved=progress.tokens_reserved,
            tokens_generated=progress.tokens_generated,
        ),
        evidence=out.Evidence(**_fields(e), shape=look),
        requests=[_request(x, p[i], float(path[i])) for i, x in enumerate(progress.pairs)],
    )


def plan_only(ref: Reference, s: Settings, the_plan: out.Plan) -> out.VerifyResult:
    n_planned = planned(the_plan, s.delta)
    need = f"{n_planned} requests" if n_planned is not None else f"more than {the_plan.horizon} requests"
    return out.VerifyResult(
        verdict="plan",
        exit_code=0,
        line=f"plan: {need} to detect {s.delta:g} nat/token with power {s.power:g} at α {s.alpha:g}",
        alpha=s.alpha,
        delta=s.delta,
        power=s.power,
        reference_files=[p.name for p in ref.paths],
        reference_label=ref.first.header.label,
        calibration_pairs=len(ref.calibration.pairs),
        endpoint=None,
        model=None,
        signals=signals(ref, None),
        plan=the_plan,
        planned_requests=n_planned,
        requests_at_stop=0,
        tokens_at_stop=0,
        log_wealth=0.0,
        log_threshold=math.log(1 / s.alpha),
        budget=None,
        evidence=None,
        requests=[],
    )


def planned(the_plan: out.Plan, delta: float) -> int | None:
    return next(r.requests for r in the_plan.rows if r.delta == delta)


def _fields(e: stats.Evidence) -> dict[str, Any]:
    return {f: getattr(e, f) for f in e.__dataclass_fields__}


def _num(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def _request(x: stats.Pair, p: Floats, log_wealth: float) -> out.Request:
    return out.Request(
        item_id=x.item_id,
        values={n: _num(v) for n, v in zip(stats.STATISTICS, x.values, strict=True)},
        pvalues={n: _num(float(v)) for n, v in zip(stats.STATISTICS, p, strict=True)},
        log_wealth=log_wealth,
    )
