"""How many items the sequential gate needs: its budget for a wanted power, and what it expects
to use, against the fixed-n design with the same α and power.

    servediff gate --config-a stock --config-b tuned --margin 0.02 --power 0.9 --discordance 0.04

What the gate saves depends on the power asked of it. Its confidence sequence is valid at every
n, and pays for that with a wider boundary: at the power a fixed-n design is usually planned for
(0.8) the gate's budget is about twice the fixed n and its expected use above it; at higher power
the early stops win (``bench/gate_sim.py --plan`` and BENCHMARKS.md tabulate it). The
discordance ψ (the share of items on which the two configurations disagree) sets the scale:
at Δ = 0 the per-item difference D has variance ψ, so items grow in proportion to ψ.

Both designs are planned at Δ = 0 (the candidate changes nothing), the point a non-inferiority
test must pass with the wanted power.

Fixed n (normal approximation of the paired difference; e.g. Chow, Shao & Wang, "Sample Size
Calculations in Clinical Research", 2nd ed., §4.2, non-inferiority):
n = (z_{1−α} + z_{power})² · ψ / δ².

The sequential gate: its log capital against m = −δ (``compare.stats.sequential``) grows by a random
walk; for the grid's best constant bet u* (the largest expected increment μ, variance σ²; the
growth-optimal "Kelly" bet, Waudby-Smith & Ramdas 2023 §5) it is approximated by Brownian motion
with drift μ and variance σ² per item. The grid mixture lags the best bet by a penalty measured
on the expected path (the capital of the expected tally at n, against n·μ). The gate passes when
the walk reaches a = log(1/α) + penalty; the first passage time of Brownian motion with drift is
inverse Gaussian (Cox & Miller 1965, "The Theory of Stochastic Processes", §5.7):

    P(T ≤ t) = Φ((μt − a)/(σ√t)) + exp(2μa/σ²) · Φ((−μt − a)/(σ√t)).

The approximation is poor at small n, where the walk is a few dozen steps of very unequal
size: at 130 items and 6 % discordance it gave power 1e-5 where the gate's rule passes about 3 %
of unchanged candidates. Budgets of up to ``EXACT_MAX`` items are therefore planned with the
exact power of the gate's own rule (``exact_pass_probability``: the distribution of the counts
(c, b) carried item by item, the gates that pass or fail at each look taken out, both decided
by ``compare.sequential``'s capital); larger ones with the approximation. ``GatePlan.method``
says which, and the plan line prints it.

Against simulated gates (``bench/gate_sim.py --plan``: 10,000 per discordance, δ = 2 pp,
α = 0.025, discordance 2–15 %, power 0.8–0.95; BENCHMARKS.md; ``tests/test_gate_budget.py``
checks four rows and the power at 100, 500 and 2,000 items) the exact plans hit their power and
expected items (within 1 %); the approximate ones gave at least the wanted power (0.814–0.973)
and expected 9–13 % more items than the simulated mean: they err on the side of more items.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from servediff.compare.stats.sample_size import items_needed
from servediff.compare.stats.sequential import GRID, Tally, log_capital

# scipy.stats is imported inside the functions that use it: importing it costs ~0.6 s, which a
# report that needs none of them (a shadow compare) should not pay.

MOST = 200_000  # items the planner looks through for the power before it says "not reachable"
LEAST_DISCORDANCE = 1e-3  # ψ = 0 has no variance to plan with; identical outputs pass fastest anyway
# The power a budget is measured against when none was asked for (--max-items alone): the power a
# fixed-n design is usually planned for. Below one half a fixed-n design is not a plan anyone makes
# (n = (z_{1−α} + z_power)² ψ / δ² is not even monotone there: z_power < 0), so no comparison is said.
PLANNING_POWER = 0.8
# Budgets up to here get the exact power of the gate's rule (a second or two at 2,000 items and
# 15 % discordance); beyond it the walk is long enough for the first-passage approximation.
EXACT_MAX = 2_000
PowerMethod = Literal["exact", "approximation"]


@dataclass(frozen=True, slots=True)
class GatePlan:
    """What the gate expects at Δ = 0, for one margin, α and discordance."""

    margin: float
    alpha: float  # one-sided, each verdict
    discordance: float
    power: float  # the chance to pass within ``budget`` items when Δ = 0
    budget: int  # items the gate may look at
    expected: int  # items it uses on average when Δ = 0 (it stops early once it passes)
    fixed_n: int | None  # the fixed-n design's items for the same α and power; None below power 1/2
    needed: int | None = None  # when the wanted power needs more items than were available: how many
    # The wanted power is not reached within ``MOST`` items at all (``needed`` is then None): the
    # planner stopped looking, which is not "MOST items would do".
    unreachable: bool = False
    wanted: float = PLANNING_POWER  # the power asked for (``plan``), or the planning power (``at_budget``)
    method: PowerMethod = "approximation"  # how ``power`` and ``expected`` were computed

    @property
    def saving(self) -> float | None:
        """1 − expected / fixed n: positive when the gate uses fewer items on average."""
        return None if self.fixed_n is None else 1 - self.expected / self.fixed_n


def best_bet(margin: float, discordance: float) -> tuple[float, float]:
    """Mean and variance of the log-capital increment per item for the best constant bet of the
    grid, against m = −margin, when Δ = 0: P(D = ±1) = ψ/2, P(D = 0) = 1 − ψ."""
    u = np.arange(1, GRID + 1) / (GRID + 1)
    m = -margin
    logs = np.stack([np.log1p(u * (1 - m) / (1 + m)), np.log1p(-u), np.log1p(-u * m / (1 + m))])
    p = np.array([discordance / 2, discordance / 2, 1 - discordance])[:, None]
    mean = (p * logs).sum(axis=0)
    variance = (p * logs**2).sum(axis=0) - mean**2
    best = int(mean.argmax())
    return float(mean[best]), float(variance[best])


def pass_probability(looks: np.ndarray, margin: float, alpha: float, discordance: float) -> np.ndarray:
    """P(the gate has passed by each look) at Δ = 0: the inverse Gaussian first-passage law with
    the grid's lag behind the best bet added to the barrier (see the module docstring)."""
    from scipy.stats import norm

    psi = max(discordance, LEAST_DISCORDANCE)
    mu, var = best_bet(margin, psi)
    lag = np.array([n * mu - log_capital(_expected_tally(int(n), psi), -margin, +1) for n in looks])
    a = math.log(1 / alpha) + np.maximum(lag, 0.0)
    s = np.sqrt(var * looks)
    # exp(2μa/σ²) overflows where the second term is negligible: add it in logs
    second = np.exp(2 * mu * a / var + norm.logcdf((-mu * looks - a) / s))
    chance = np.minimum(norm.cdf((mu * looks - a) / s) + second, 1.0)
    return np.maximum.accumulate(chance)


def exact_pass_probability(looks: np.ndarray, margin: float, alpha: float, discordance: float) -> np.ndarray:
    """P(the gate has passed by each look) at Δ = 0, exactly: the gate's own rule on the exact
    distribution of its counts. P[c, b] holds the chance that a still-running gate has seen c
    items only B got right and b only A got right; each item moves it by ψ/2 to c + 1, ψ/2 to
    b + 1, 1 − ψ nowhere. At each look the states whose capital passes (or fails) leave. States
    further than 8 standard deviations out are never reached in practice (their mass, < 1e-14,
    is not tracked)."""
    psi = max(discordance, LEAST_DISCORDANCE)
    last = int(looks[-1])
    edge = min(last, int(psi * last + 8 * math.sqrt(psi * last) + 10))
    mass = np.zeros((edge + 1, edge + 1))
    mass[0, 0] = 1.0
    threshold = math.log(1 / alpha)
    sides = [_grid_logs(-margin, side) for side in (+1, -1)]
    passed, out, n, low = 0.0, [], 0, 0
    for look in looks.tolist():
        for _ in range(int(look) - n):
            n += 1
            # Where c and b can be (each about ψn/2 give or take √(ψn/2)): the square between.
            spread = 8 * math.sqrt(psi * n) + 10
            lo, hi = max(0, int(psi * n / 2 - spread)), min(edge, int(psi * n / 2 + spread))
            if lo > low:  # what fell below it is negligible: cleared, not carried
                mass[low:lo, :] = 0.0
                mass[:, low:lo] = 0.0
                low = lo
            grown = mass[lo : hi + 1, lo : hi + 1] * (1 - psi)
            grown[1:, :] += mass[lo:hi, lo : hi + 1] * (psi / 2)
            grown[:, 1:] += mass[lo : hi + 1, lo:hi] * (psi / 2)
            mass[lo : hi + 1, lo : hi + 1] = grown
        window = mass[lo : hi + 1, lo : hi + 1]  # a view: every state with mass
        first_pass = _first_c(n, (lo, hi), sides[0], threshold, rising=True)
        last_fail = _first_c(n, (lo, hi), sides[1], threshold, rising=False) - 1
        c = np.arange(lo, hi + 1)[:, None]
        up = c >= first_pass[None, :]
        passed += float(window[up].sum())
        window[up | (c <= last_fail[None, :])] = 0.0
        out.append(passed)
    return np.array(out)


def _first_c(
    n: int, window: tuple[int, int], logs: tuple[np.ndarray, ...], threshold: float, rising: bool
) -> np.ndarray:
    """For each b of the window, the first c at which the capital is on the stopping side of
    the threshold after n items: its passing side (``rising``: the capital grows with c, pass
    at c ≥ it) or, for the failing side, the first c at which it no longer fails (it falls with
    c, fail at c < it). Each is found by bisection over the window's c, all b at once: the
    capital moves one way in c (a D = +1 in place of a D = 0), so a b's stopping states are a
    run of c. ``window``: the lowest and highest c (and b) that hold mass."""
    first, last = window
    b = np.arange(first, last + 1)
    top = np.minimum(last, n - b)  # c + b ≤ n
    lo, hi = np.full(len(b), first - 1), np.maximum(top + 1, first)  # the answer lies in (lo, hi]
    while True:
        open_ = hi - lo > 1
        if not open_.any():
            return np.asarray(hi)
        mid = (lo + hi) // 2
        k = np.flatnonzero(open_)
        cap = _log_capitals(mid[k], b[k], n - mid[k] - b[k], logs)
        stops = (cap >= threshold) == rising
        hi[k[stops]], lo[k[~stops]] = mid[k[stops]], mid[k[~stops]]


def _grid_logs(m: float, side: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``sequential.log_capital``'s per-item log factors over the grid, for D = +1, −1, 0."""
    u = np.arange(1, GRID + 1) / (GRID + 1)
    if side > 0:
        return np.log1p(u * (1 - m) / (1 + m)), np.log1p(-u), np.log1p(-u * m / (1 + m))
    return np.log1p(-u), np.log1p(u * (1 + m) / (1 - m)), np.log1p(u * m / (1 - m))


def _log_capitals(c: np.ndarray, b: np.ndarray, z: np.ndarray, logs: tuple[np.ndarray, ...]) -> np.ndarray:
    """``sequential.log_capital`` for many tallies at once (the same grid average, in logs)."""
    e = c[:, None] * logs[0] + b[:, None] * logs[1] + z[:, None] * logs[2]
    top = e.max(axis=1)
    return np.asarray(top + np.log(np.exp(e - top[:, None]).mean(axis=1)))


def _chance(
    looks: np.ndarray, margin: float, alpha: float, discordance: float
) -> tuple[np.ndarray, PowerMethod]:
    """P(passed by each look) and how it was computed: exactly up to ``EXACT_MAX`` items."""
    if int(looks[-1]) <= EXACT_MAX:
        return exact_pass_probability(looks, margin, alpha, discordance), "exact"
    return pass_probability(looks, margin, alpha, discordance), "approximation"


def _expected_tally(n: int, psi: float) -> Tally:
    half = round(n * psi / 2)
    return Tally(c=half, b=half, z=n - 2 * half)


def plan(
    margin: float, alpha: float, discordance: float, power: float, batch: int = 10, limit: int = MOST
) -> GatePlan:
    """The smallest budget (in whole batches, at most ``limit``) at which the gate passes with
    ``power`` when Δ = 0, and the items it expects to use within it. When even ``limit`` items
    give less power, the plan is ``limit``'s and ``needed`` says what the power would take, or
    ``unreachable`` that not even ``MOST`` items give it."""
    small = _looks(min(limit, EXACT_MAX), batch)
    exact = exact_pass_probability(small, margin, alpha, discordance)
    if exact[-1] >= power:  # reached within the exact range: the gate's own rule decides
        k = int(np.argmax(exact >= power))
        found = _plan_at(margin, alpha, discordance, small[: k + 1], exact[: k + 1])
        return dataclasses.replace(found, wanted=power, method="exact")
    looks = _looks(limit, batch)
    chance, method = _chance(looks, margin, alpha, discordance) if limit > EXACT_MAX else (exact, "exact")
    if chance[-1] < power:
        at_limit = _plan_at(margin, alpha, discordance, looks, chance)
        full = plan(margin, alpha, discordance, power, batch) if limit < MOST else None
        if full is None or full.unreachable:
            return dataclasses.replace(at_limit, unreachable=True, wanted=power, method=method)
        return dataclasses.replace(at_limit, needed=full.budget, wanted=power, method=method)
    k = int(np.argmax(chance >= power))
    return dataclasses.replace(
        _plan_at(margin, alpha, discordance, looks[: k + 1], chance[: k + 1]), wanted=power, method=method
    )


def at_budget(margin: float, alpha: float, discordance: float, budget: int, batch: int = 10) -> GatePlan:
    """What a given budget buys: the power it gives at Δ = 0 and the items expected; below the
    planning power, also the budget that power would take (a gate with too few items to pass an
    unchanged candidate should say so before it runs, not after)."""
    looks = _looks(budget, batch)
    chance, method = _chance(looks, margin, alpha, discordance)
    p = dataclasses.replace(_plan_at(margin, alpha, discordance, looks, chance), method=method)
    if p.power >= PLANNING_POWER:
        return p
    full = plan(margin, alpha, discordance, PLANNING_POWER, batch)
    if full.unreachable:
        return dataclasses.replace(p, unreachable=True)
    return dataclasses.replace(p, needed=full.budget)


def _looks(budget: int, batch: int) -> np.ndarray:
    """Where the gate looks: after every batch, and at the budget (a last, shorter batch)."""
    return np.append(np.arange(batch, budget, batch), budget)


def _plan_at(
    margin: float,
    alpha: float,
    discordance: float,
    looks: np.ndarray,
    chance: np.ndarray,
) -> GatePlan:
    """E[min(T, budget)] = Σ over looks of the batch size times P(still running before it)."""
    before = np.concatenate([[0.0], chance[:-1]])
    sizes = np.diff(np.concatenate([[0], looks]))
    power = float(chance[-1])
    psi = max(discordance, LEAST_DISCORDANCE)
    fixed = (
        (items_needed(psi, margin, alpha=2 * alpha, power=min(power, 1 - 1e-9)) or 1)
        if power >= 0.5
        else None
    )
    return GatePlan(
        margin=margin,
        alpha=alpha,
        discordance=discordance,
        power=power,
        budget=int(looks[-1]),
        expected=round(float((sizes * (1 - before)).sum())),
        fixed_n=fixed,
    )


def power_text(power: float) -> str:
    """A power with as many decimals as it takes not to round to 1 (0.999999 is not "1.00")."""
    places = 2
    while places < 12 and power < 1 and round(power, places) >= 1:
        places += 1
    return f"{power:.{places}f}"


POWER_SOURCE: dict[PowerMethod, str] = {
    "exact": "exact, the gate's own rule",
    "approximation": "first-passage approximation",
}


def describe(p: GatePlan) -> str:
    """The plan in one line, said before the gate starts."""
    budget = f"a budget of {p.budget:,} items gives power {power_text(p.power)} ({POWER_SOURCE[p.method]})"
    if p.needed is not None:
        budget += (
            f" (power {power_text(p.wanted)} needs {p.needed:,} items: more than the suite or "
            "--max-items holds)"
        )
    elif p.unreachable:
        budget += (
            f" (power {power_text(p.wanted)} is not reached within {MOST:,} items, where the planner "
            "stops looking: at this discordance the margin is too narrow)"
        )
    head = f"gate plan at discordance {p.discordance:.1%}, margin {p.margin:g}, alpha {p.alpha:g}: {budget}"
    if p.fixed_n is None or p.saving is None:
        # Too few items to pass an unchanged candidate: it can still fail a worse one.
        return (
            f"{head}; at this budget the gate can fail a worse candidate, "
            "but an unchanged one more likely ends inconclusive than passes"
        )
    more = "fewer" if p.expected <= p.fixed_n else "more"
    return (
        f"{head}; expected {p.expected:,} items if the candidate changes nothing, against "
        f"{p.fixed_n:,} for a fixed-n design of the same alpha and power ({abs(p.saving):.0%} {more})"
    )
