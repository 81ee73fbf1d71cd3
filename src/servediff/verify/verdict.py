"""The verdict of ``servediff verify`` from what the endpoint answered: "differs" where the test's
wealth crossed 1/α, "consistent" where the plan's count for δ was reached first, "inconclusive"
where the budget or the reference's items ran out; with the signals, the evidence and the plan.

    servediff verify --reference ref1.jsonl ref2.jsonl --base-url http://127.0.0.1:8080
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from servediff.compare import verify as stats
from servediff.compare import verify_result as out
from servediff.compare.stats.conformal import Floats, first_crossing, log_wealth_path
from servediff.verify.procedure import Progress, Reference, Settings, rows_of


def null_prompt_mismatch(cal: stats.Calibration) -> bool:
    return any(None not in p.prompt_tokens and p.prompt_tokens[0] != p.prompt_tokens[1] for p in cal.pairs)


def signals(ref: Reference, progress: Progress | None) -> list[out.Signal]:
    available = ref.calibration.available()
    seen = rows_of(progress.pairs) if progress is not None else None
    refused = progress.scoring_refused if progress is not None else None
    out_: list[out.Signal] = []
    for k, name in enumerate(stats.STATISTICS):
        note = None
        if name.startswith("scored_"):
            if not ref.scorings:
                note = NO_SCORINGS
            elif refused == RECORDED:
                note = RECORDED
            elif refused:
                note = f"the endpoint did not score: {refused[:300]}"
        endpoint = None if seen is None else bool((~np.isnan(seen[:, k])).any())
        out_.append(
            out.Signal(
                statistic=name,
                what=stats.SIGNALS[name],
                reference=available[name],
                endpoint=endpoint,
                note=note,
                tested=name in stats.TESTED,
            )
        )
    return out_


# Why recorded answers (``verify --answers``) have no teacher-forced scores.
RECORDED = "the answers were read from a record; only a live endpoint can score the reference's completions"
NO_SCORINGS = (
    "the reference has no scoring records: score its first run's completions on the reference "
    "configuration (servediff run --score REF1.jsonl --engine http --score-api vllm ...) and add them"
)


def conclude(
    ref: Reference,
    s: Settings,
    the_plan: out.Plan,
    progress: Progress,
    where: tuple[str | None, str | None],
    answers: str | None = None,
) -> out.VerifyResult:
    """The verdict, from the requests the endpoint answered: "differs" where the wealth crossed
    1/α, "consistent" where the plan's count for δ was reached first, else "inconclusive"."""
    n_planned = planned(the_plan, s.delta)
    rows = rows_of(progress.pairs)
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
            f"inconclusive: {progress.ran_out} ran out after {stop.n} requests ({tokens} tokens); the "
            f"plan needs {need} to detect {s.delta:g} nat/token with power {s.power:g}"
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
        answers=answers,
        signals=signals(ref, progress),
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
        warnings=warnings(ref),
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
        warnings=warnings(ref),
    )


def warnings(ref: Reference) -> list[str]:
    return [stats.STILL_WARNING] if stats.still(ref.calibration) else []


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
