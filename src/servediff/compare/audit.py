"""The audit's verdict, computed from its run records alone.

    servediff audit --from audit-runs/

Every request sent under load (and every alone repeat after the first) is a trial of its prompt:
it is compared (``compare.stats.agreement``) with the first answer that prompt got alone. The promise
configuration passes when none of its trials diverged — reported as an exact upper bound on the
divergence rate, never as "deterministic" — *and* the negative control diverged: a control that
holds too says the workload could not have caught a failure, so nothing was tested. Errored
requests are errors, not trials, and an audit with any is undecided (a re-run retries them).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from servediff.compare.stats.agreement import Agreement, Output, compare, distinct
from servediff.compare.stats.binomial import Bound, Ratio, throughput_ratio, upper_bound
from servediff.records import Item, Run

Verdict = Literal["pass", "fail", "too weak", "error"]
EXIT: dict[Verdict, int] = {"pass": 0, "fail": 1, "too weak": 2, "error": 2}
SHOWN = 10  # divergences listed per side


@dataclass(frozen=True, slots=True)
class Divergence:
    """One trial whose output differs from its prompt's reference."""

    workload: str
    level: int
    item: str
    prompt: str
    needle: bool
    agreement: Agreement


@dataclass(frozen=True, slots=True)
class Level:
    workload: str
    level: int
    trials: int
    divergent: int
    needle_trials: int
    needle_divergent: int
    tokens_per_s: tuple[float, ...]  # one per timing round
    # identical trials whose logprobs were not bit-equal to the reference's: the same tokens
    # chosen from different numbers (a kernel path that moved without flipping an argmax)
    logprobs_differ: int = 0


@dataclass(frozen=True, slots=True)
class Side:
    """One configuration's audit: every workload and level it ran."""

    role: str
    label: str
    levels: tuple[Level, ...]
    bound: Bound | None  # None: no trials
    divergences: tuple[Divergence, ...]  # all of them, in record order
    distinct_max: int  # the most distinct outputs any prompt had
    # (workload, prompt, outputs, distinct outputs) per prompt: SGLang's "Unique samples"
    per_prompt: tuple[tuple[str, str, int, int], ...]
    logprob_trials: int  # identical trials whose logprobs could be compared
    logprob_bit_equal: int
    max_logprob_diff: float | None
    # (workload, prompt, identical trials with logprobs not bit-equal, identical trials compared),
    # the prompts with any: which inputs move the numbers says which kernel path moved them
    logprobs_differ_per_prompt: tuple[tuple[str, str, int, int], ...]
    basis: tuple[str, ...]  # the comparison units used
    errors: int
    records: tuple[str, ...]

    @property
    def trials(self) -> int:
        return sum(lv.trials for lv in self.levels)

    @property
    def divergent(self) -> int:
        return sum(lv.divergent for lv in self.levels)


@dataclass(frozen=True, slots=True)
class LevelCost:
    """The promise's throughput against the control's at one concurrency, every workload's
    timing rounds pooled (the same workloads on both sides)."""

    level: int
    promise_tokens_per_s: float  # geometric mean over the rounds
    control_tokens_per_s: float
    ratio: Ratio | None  # None: fewer than two rounds on a side


@dataclass(frozen=True, slots=True)
class AuditAnalysis:
    promise: Side
    control: Side | None
    # promise tokens/s ÷ control tokens/s at every common level: batching's gains, and so the
    # promise's price, move with load
    costs: tuple[LevelCost, ...]
    verdict: Verdict
    reason: str
    confidence: float

    @property
    def cost(self) -> Ratio | None:
        """The cost at the highest common level: the verdict line's."""
        return self.costs[-1].ratio if self.costs else None

    @property
    def cost_level(self) -> int | None:
        return self.costs[-1].level if self.costs else None

    @property
    def exit_code(self) -> int:
        return EXIT[self.verdict]


def output_of(item: Item) -> Output:
    """A record item as the comparison sees it: only the engine's own token ids count as ids."""
    ids = tuple(item.token_ids) if item.token_ids is not None and item.token_source == "engine" else None
    lps = item.logprobs
    return Output(
        text=item.text,
        token_ids=ids,
        tokens=tuple(t for t, _, _ in lps) if lps else (tuple(item.tokens) if item.tokens else None),
        logprobs=tuple(lp for _, lp, _ in lps) if lps else None,
        tops=tuple(tuple((a, b) for a, b in top) for _, _, top in lps) if lps else None,
    )


def audit_meta(run: Run) -> dict[str, Any]:
    meta = run.header.extra.get("audit") if run.header.extra else None
    if not isinstance(meta, dict) or not {"role", "workload", "level"} <= set(meta):
        raise ValueError(f"{run.path}: not an audit record (its header has no 'audit' entry)")
    return meta


def round_rates(items: Iterable[Item]) -> tuple[float, ...]:
    """Output tokens per wall-clock second of each timing round: from the first request's start
    (finished_at − latency) to the last one's end."""
    spans: dict[int, list[Item]] = defaultdict(list)
    for it in items:
        if it.error is None and it.finished_at is not None and it.latency_s is not None:
            spans[int(it.metadata.get("round", 0))].append(it)
    rates = []
    for rnd in sorted(spans):
        part = spans[rnd]
        wall = max(i.finished_at or 0.0 for i in part) - min(
            (i.finished_at or 0.0) - (i.latency_s or 0.0) for i in part
        )
        tokens = sum(i.n_tokens or 0 for i in part)
        if wall > 0 and tokens > 0:
            rates.append(tokens / wall)
    return tuple(rates)


@dataclass
class _Tally:
    """Running counts while one side's records are read."""

    divergences: list[Divergence]
    outputs: dict[tuple[str, str], list[Output]]
    lp_max: float | None = None
    errors: int = 0
    # (workload, prompt) → [identical trials with logprobs not bit-equal, identical trials compared]
    lp_prompts: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))

    def add(self, workload: str, level: int, item: Item, ref: Output) -> Agreement:
        out = output_of(item)
        self.outputs[(workload, str(item.metadata.get("prompt")))].append(out)
        a = compare(ref, out)
        if not a.identical:
            prompt, needle = str(item.metadata.get("prompt")), bool(item.metadata.get("needle"))
            self.divergences.append(Divergence(workload, level, item.id, prompt, needle, a))
        elif a.logprobs_equal is not None:
            tally = self.lp_prompts[(workload, str(item.metadata.get("prompt")))]
            tally[0] += not a.logprobs_equal
            tally[1] += 1
            if a.max_logprob_diff is not None:
                self.lp_max = max(self.lp_max or 0.0, a.max_logprob_diff)
        return a


def side(role: str, runs: Sequence[Run], confidence: float = 0.95) -> Side:
    """One configuration's trials, from its audit records (every workload and level)."""
    by_workload: dict[str, dict[int, Run]] = defaultdict(dict)
    for run in runs:
        meta = audit_meta(run)
        by_workload[str(meta["workload"])][int(meta["level"])] = run
    t = _Tally([], defaultdict(list))
    levels: list[Level] = []
    basis: set[str] = set()
    for workload, by_level in sorted(by_workload.items()):
        if 1 not in by_level:
            raise ValueError(f"{role}: the {workload!r} records have no alone run (level 1) to compare with")
        refs = _references(by_level[1], t)
        for level, run in sorted(by_level.items()):
            n = k = nn = nk = lp = 0
            for item in run.items.values():
                key = str(item.metadata.get("prompt"))
                if item.error is not None or key not in refs:
                    t.errors += item.error is not None
                    continue
                if level == 1 and item.id.endswith(".r1"):
                    continue  # the reference itself
                a = t.add(workload, level, item, refs[key])
                basis.add(a.basis)
                n, k = n + 1, k + (not a.identical)
                lp += a.identical and a.logprobs_equal is False
                if item.metadata.get("needle"):
                    nn, nk = nn + 1, nk + (not a.identical)
            rates = round_rates(run.items.values()) if level > 1 else ()
            levels.append(Level(workload, level, n, k, nn, nk, rates, lp))
    total = sum(lv.trials for lv in levels)
    bound = upper_bound(sum(lv.divergent for lv in levels), total, confidence) if total else None
    label = runs[0].header.label if runs else role
    return Side(
        role=role,
        label=label,
        levels=tuple(levels),
        bound=bound,
        divergences=tuple(t.divergences),
        distinct_max=max((distinct(v) for v in t.outputs.values()), default=0),
        per_prompt=tuple((w, k, len(v), distinct(v)) for (w, k), v in sorted(t.outputs.items())),
        logprob_trials=sum(n for _, n in t.lp_prompts.values()),
        logprob_bit_equal=sum(n - d for d, n in t.lp_prompts.values()),
        max_logprob_diff=t.lp_max,
        logprobs_differ_per_prompt=tuple(
            (w, k, d, n) for (w, k), (d, n) in sorted(t.lp_prompts.items()) if d
        ),
        basis=tuple(sorted(basis)),
        errors=t.errors,
        records=tuple(str(r.path) for r in runs),
    )


def _references(alone: Run, t: _Tally) -> dict[str, Output]:
    """Each prompt's first answer alone (its reference); a prompt whose reference errored has none."""
    refs: dict[str, Output] = {}
    workload = str(audit_meta(alone)["workload"])
    for item in alone.items.values():
        if item.id.endswith(".r1") and item.error is None:
            refs[str(item.metadata.get("prompt"))] = out = output_of(item)
            t.outputs[(workload, str(item.metadata.get("prompt")))].append(out)
    return refs


def analyze(runs: Sequence[Run], confidence: float = 0.95) -> AuditAnalysis:
    """The verdict of an audit from all its records (both roles)."""
    by_role: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_role[str(audit_meta(run)["role"])].append(run)
    if "promise" not in by_role:
        raise ValueError("no records of the promise configuration (role 'promise') among the audit's records")
    promise = side("promise", by_role["promise"], confidence)
    control = side("control", by_role["control"], confidence) if by_role.get("control") else None
    verdict, reason = decide(promise, control)
    return AuditAnalysis(promise, control, _costs(promise, control, confidence), verdict, reason, confidence)


def _costs(promise: Side, control: Side | None, confidence: float) -> tuple[LevelCost, ...]:
    """The promise's throughput ÷ the control's at each level both ran, over the workloads both
    timed there (a workload timed on one side only would weigh that side's mean)."""
    if control is None:
        return ()
    mine = {(lv.workload, lv.level): lv.tokens_per_s for lv in promise.levels if lv.tokens_per_s}
    theirs = {(lv.workload, lv.level): lv.tokens_per_s for lv in control.levels if lv.tokens_per_s}
    common = set(mine) & set(theirs)
    out = []
    for level in sorted({lv for _, lv in common}):
        keys = sorted(k for k in common if k[1] == level)
        a = [x for k in keys for x in mine[k]]
        b = [x for k in keys for x in theirs[k]]
        out.append(LevelCost(level, _geomean(a), _geomean(b), throughput_ratio(a, b, confidence)))
    return tuple(out)


def _geomean(xs: Sequence[float]) -> float:
    logs = [math.log(x) for x in xs if x > 0]
    return math.exp(sum(logs) / len(logs)) if logs else 0.0


def decide(promise: Side, control: Side | None) -> tuple[Verdict, str]:
    """Fail on any divergence of the promise; else the control must have diverged."""
    if promise.divergent:
        return "fail", f"{promise.divergent} of {promise.trials} trials diverged from the same prompt alone"
    if promise.errors or (control is not None and control.errors):
        errs = promise.errors + (control.errors if control else 0)
        return (
            "error",
            f"{errs} request(s) failed (engine errors, not trials); re-run the same command to retry them",
        )
    if promise.trials == 0:
        return "error", "no trials: every reference errored or nothing ran"
    if control is None:
        return "too weak", "no negative control: a pass without a control that fails proves nothing"
    if control.divergent == 0:
        return "too weak", (
            f"the negative control did not diverge either (0 of {control.trials} trials): "
            "the workload was too weak to test anything"
        )
    return "pass", f"no divergence in {promise.trials} trials; the control diverged in {control.divergent}"
