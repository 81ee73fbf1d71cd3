"""From the flags to the verdict: read the reference, plan from its calibration, then send the
reference's prompts to the endpoint in rounds, within the budget, until the test can say.

    servediff verify --reference ref1.jsonl ref2.jsonl --base-url http://127.0.0.1:8080

The budget is counted before each round is sent: a round goes out only if its requests, and its
requests × the reference's ``max_tokens`` (the most each may generate), fit what is left. A
request the endpoint fails is an engine error (exit 2), never evidence.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servediff.commands.grammar import UsageError
from servediff.compare import verify as stats
from servediff.compare import verify_result as out
from servediff.compare.stats.conformal import Floats, first_crossing, log_wealth_path, simulate
from servediff.records import Item, Run, read_run
from servediff.redaction import redact_text
from servediff.types import Completion, Sample, SamplingParams

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
    api_key_env: str = "OPENAI_API_KEY"  # its value is blanked from anything the endpoint said

    def redacted(self, text: str) -> str:
        return redact_text(text, [os.environ.get(self.api_key_env) or ""])


@dataclass(frozen=True, slots=True)
class Reference:
    paths: tuple[Path, ...]
    runs: tuple[Run, ...]  # generation runs, the one the scorings score first
    scorings: tuple[Run, ...]  # teacher-forced scorings of runs[0]'s completions, if any
    calibration: stats.Calibration

    @property
    def first(self) -> Run:
        return self.runs[0]

    def score_api(self) -> str | None:
        """The scoring API the reference's scoring records used, where they name one."""
        apis = {
            str(r.header.engine.get("score_api")) for r in self.scorings if r.header.engine.get("score_api")
        }
        return apis.pop() if len(apis) == 1 else None

    def tokens_per_request(self) -> float:
        counts = [len(i.logprobs or i.tokens or []) for i in self.first.items.values() if stats.usable(i)]
        return float(np.mean(counts)) if counts else 0.0


def load(paths: Sequence[Path]) -> Reference:
    """The reference's runs and their calibration; a usage error (one line) when they cannot be
    one: fewer than two generation runs, other prompts, not greedy, or scoring records of
    completions that are not among them."""
    read = [(p, read_run(p)) for p in paths]
    scorings = [(p, r) for p, r in read if r.header.suite.name.startswith("score:")]
    gens = [(p, r) for p, r in read if not r.header.suite.name.startswith("score:")]
    if len(gens) < 2:
        raise UsageError(
            f"--reference: {len(gens)} generation run given; verify needs at least 2 runs of the "
            "reference configuration to learn its own nondeterminism (e.g. servediff run ... "
            "--repeat 2, one of them at --concurrency 8)"
        )
    head = gens[0][1].header
    for path, run in gens:
        if run.header.suite.content_sha256 != head.suite.content_sha256:
            raise UsageError(f"{path}: suite: other prompts than {gens[0][0]}'s")
        if run.header.sampling.temperature != 0:
            raise UsageError(f"{path}: sampling.temperature: verify compares greedy runs (temperature 0)")
    gens = _scored_first(gens, scorings)
    runs = tuple(r for _, r in gens)
    calibration = stats.calibrate(runs, tuple(r for _, r in scorings))
    if not calibration.pairs:
        raise UsageError(f"--reference: the runs share no item answered without error ({paths[0]})")
    return Reference(tuple(p for p, _ in gens + scorings), runs, tuple(r for _, r in scorings), calibration)


def _scored_first(gens: list[tuple[Path, Run]], scorings: list[tuple[Path, Run]]) -> list[tuple[Path, Run]]:
    """The generation runs with the one the scoring records score (``servediff run --score
    RUN``: its suite version names the run's id) first."""
    for path, scoring in scorings:
        scored = scoring.header.suite.version.rpartition(":on-policy:")[2]
        if ":on-policy:" not in scoring.header.suite.version:
            raise UsageError(
                f"{path}: suite.version: not an on-policy scoring of a reference run's completions"
            )
        match = [k for k, (_, r) in enumerate(gens) if scored in (r.header.run_id, r.header.label)]
        if not match:
            raise UsageError(f"{path}: suite.version: scores run {scored!r}, not one of the reference's runs")
        gens = [gens[match[0]], *(g for k, g in enumerate(gens) if k != match[0])]
    return gens


def plan(ref: Reference, s: Settings) -> out.Plan:
    """Audits simulated from the calibration: false alarms (no shift) and, for several δ, the
    requests needed for ``s.power``."""
    rows = ref.calibration.rows()
    horizon = min(PLAN_HORIZON, s.budget_requests)
    per_request = ref.tokens_per_request()
    pairs = ref.calibration.pairs
    # False alarms as a real audit meets them: each held-out item at most once.
    null = simulate(rows, lambda _: rows, stats.nulls, s.alpha, horizon, s.simulations, s.seed, replace=False)
    plan_rows = []
    for delta in sorted({*PLAN_DELTAS, s.delta}):
        moved = functools.partial(stats.alternative, pairs, delta)
        sim = simulate(rows, moved, stats.nulls, s.alpha, horizon, s.simulations, s.seed)
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
        false_alarm_requests=len(null.rejected_by),
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


def usable_items(ref: Reference) -> list[Item]:
    """The reference items a test may draw: its first run's, answered without error."""
    return [i for i in ref.first.items.values() if stats.usable(i)]


def order(ref: Reference, seed: int) -> list[Item]:
    """The reference's usable items in a seeded random order: the requests are then a random
    draw of the items, exchangeable with the calibration's pairs."""
    items = usable_items(ref)
    rng = np.random.default_rng(seed)
    return [items[k] for k in rng.permutation(len(items))]


def _as_item(c: Completion, input_: Any) -> Item:
    from servediff.records import make_item

    return make_item(c, input_, None, {})


@dataclass(slots=True)
class Progress:
    pairs: list[stats.Pair]
    requests_sent: int = 0
    tokens_reserved: int = 0
    tokens_generated: int = 0
    # Why the endpoint gives no teacher-forced scores, where the reference has some and the
    # endpoint refused the first (a signal it does not provide, not an error).
    scoring_refused: str | None = None
    ran_out: str = "the budget"  # what ended the requests when no verdict did


# What answers a round: the endpoint's answers to the round's reference items, by item id, as
# records (an engine failure raises, never an answer).
Answer = Callable[[Sequence[Item]], dict[str, Item]]


def send_rounds(answer: Answer, scorer: Any, ref: Reference, s: Settings, stop_at: int | None) -> Progress:
    """Send rounds of ``s.concurrency`` items until the test crosses, the plan's count is
    reached, or the budget or the items run out. ``answer``: the endpoint's answers to a round
    (``http_answers``, or ``recorded_answers`` where they were recorded before); ``scorer``: an
    ``HTTPScorer`` when the reference has scoring records (two more requests per item, one token)."""
    params = params_of(ref.first)
    nulls = ref.calibration.nulls()
    queue = order(ref, s.seed)
    items = len(queue)
    progress = Progress(pairs=[])
    while queue:
        # A scoring is two requests (the server renders the prompt into ids, then scores) and
        # one generated token.
        per_item = (1 + 2 * (scorer is not None), params.max_tokens + (scorer is not None))
        room = min(
            (s.budget_requests - progress.requests_sent) // per_item[0],
            (s.budget_tokens - progress.tokens_reserved) // per_item[1],
        )
        size = min(s.concurrency, room, len(queue))
        if size <= 0:
            break
        if size >= len(queue) and size <= room:
            progress.ran_out = f"the reference's {items} items"
        batch, queue = queue[:size], queue[size:]
        progress.requests_sent += size * per_item[0]
        progress.tokens_reserved += size * per_item[1]
        done = answer(batch)
        forced = _scores(scorer, batch, progress, s) if scorer is not None else {}
        for item in batch:
            got = done[item.id]
            progress.tokens_generated += got.n_tokens or 0
            progress.pairs.append(stats.pair(item, got, forced.get(item.id)))
        if scorer is not None and progress.scoring_refused:
            scorer = None
        path, _ = log_wealth_path(rows_of(progress.pairs), nulls)
        if first_crossing(path, s.alpha).rejected or (stop_at is not None and len(progress.pairs) >= stop_at):
            break
    return progress


def http_answers(engine: Any, params: SamplingParams) -> Answer:
    """A round sent to the endpoint (an ``HTTPEngine``), greedy, with the reference's settings."""

    def answer(batch: Sequence[Item]) -> dict[str, Item]:
        done = _answers(engine, batch, params)
        return {i.id: _as_item(_checked(engine, i, done), i.input) for i in batch}

    return answer


def load_answers(path: Path, ref: Reference) -> Run:
    """A record of the endpoint's answers to the reference's prompts, made before (``servediff
    run`` against it, or imported from its logs): the same prompts, greedy, with logprobs; a usage
    error (one line naming the file and field) otherwise."""
    run = read_run(path)
    if run.header.suite.content_sha256 != ref.first.header.suite.content_sha256:
        raise UsageError(f"{path}: suite: other prompts than the reference's ({ref.paths[0].name})")
    if run.header.sampling.temperature != 0:
        raise UsageError(f"{path}: sampling.temperature: verify compares greedy answers (temperature 0)")
    if run.header.suite.name.startswith("score:"):
        raise UsageError(f"{path}: suite.name: a scoring record, not answers to the reference's prompts")
    # Every item the test may draw, checked before any is tested: a verdict never depends on
    # whether the order happened to reach a gap in the record.
    for i in usable_items(ref):
        got = run.items.get(i.id)
        if got is None or got.error is not None:
            why = "not answered" if got is None else f"failed: {got.error}"
            raise UsageError(f"{path}: item {i.id!r}: {why}; every reference item needs an answer")
    return run


def recorded_answers(run: Run) -> Answer:
    """A round read from the recorded answers (``load_answers``: every item there), in the
    test's order: nothing is sent."""

    def answer(batch: Sequence[Item]) -> dict[str, Item]:
        return {i.id: run.items[i.id] for i in batch}

    return answer


def _checked(engine: Any, item: Item, done: dict[str, Completion]) -> Completion:
    from servediff.engines import EngineError

    c = done.get(item.id)
    if c is None or c.error is not None:
        raise EngineError(f"{engine.base_url}: item {item.id!r}: {c.error if c else 'no answer'}")
    return c


def _scores(scorer: Any, batch: Sequence[Item], progress: Progress, s: Settings) -> dict[str, Item]:
    """The endpoint's teacher-forced scores of the reference's completions after their prompts.
    A refusal of the first round is the endpoint not giving this signal; a failure later is an
    engine error."""
    from servediff.engines import EngineError

    samples = [
        dataclasses.replace(sample_of(i), metadata={"continuation_ids": list(i.token_ids or [])})
        for i in batch
    ]
    done: dict[str, Completion] = {}
    try:
        scorer.generate(
            samples, SamplingParams(max_tokens=1, top_logprobs=1), lambda c: done.__setitem__(c.item_id, c)
        )
    except EngineError as exc:  # e.g. a server that cannot render the chat prompt into ids
        if progress.pairs:
            raise
        progress.scoring_refused = s.redacted(str(exc))
        return {}
    answers = [done.get(i.id) for i in batch]
    failed = ["no answer" if c is None else c.error for c in answers if c is None or c.error]
    if failed and not progress.pairs:
        progress.scoring_refused = s.redacted(failed[0] or "no answer")
        return {}
    if failed:
        raise EngineError(s.redacted(f"{scorer.base_url}: teacher-forced scoring: {failed[0]}"))
    return {k: _as_item(c, None) for k, c in done.items()}


def _answers(engine: Any, batch: Sequence[Item], params: SamplingParams) -> dict[str, Completion]:
    done: dict[str, Completion] = {}
    engine.generate([sample_of(i) for i in batch], params, lambda c: done.__setitem__(c.item_id, c))
    return done


def rows_of(pairs: Sequence[stats.Pair]) -> Floats:
    return np.array([p.values for p in pairs], dtype=np.float64).reshape(-1, len(stats.STATISTICS))
