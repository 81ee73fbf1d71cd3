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

The sequential gate: its log capital against m = −δ (``compare.sequential``) grows by a random
walk; for the grid's best constant bet u* (the largest expected increment μ, variance σ²; the
growth-optimal "Kelly" bet, Waudby-Smith & Ramdas 2023 §5) it is approximated by Brownian motion
with drift μ and variance σ² per item. The grid mixture lags the best bet by a penalty measured
on the expected path (the capital of the expected tally at n, against n·μ). The gate passes when
the walk reaches a = log(1/α) + penalty; the first passage time of Brownian motion with drift is
inverse Gaussian (Cox & Miller 1965, "The Theory of Stochastic Processes", §5.7):

    P(T ≤ t) = Φ((μt − a)/(σ√t)) + exp(2μa/σ²) · Φ((−μt − a)/(σ√t)).

Against 2,000 simulated gates per row (``bench/gate_sim.py --plan``, δ = 2 pp, α = 0.025,
discordance 2–15 %, power 0.8–0.95; ``tests/test_gate_budget.py`` checks four rows) the planned
budget gave at least the wanted power (0.808–0.972), and the expected items were 3–17 % above the
simulated mean: the plan errs on the side of more items.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from servediff.compare.sample_size import items_needed
from servediff.compare.sequential import GRID, Tally, log_capital

# scipy.stats is imported inside the functions that use it: importing it costs ~0.6 s, which a
# report that needs none of them (a shadow compare) should not pay.

MOST = 200_000  # items the planner looks through for the power before it says "not reachable"
LEAST_DISCORDANCE = 1e-3  # ψ = 0 has no variance to plan with; identical outputs pass fastest anyway
# The power a budget is measured against when none was asked for (--max-items alone): the power a
# fixed-n design is usually planned for. Below one half a fixed-n design is not a plan anyone makes
# (n = (z_{1−α} + z_power)² ψ / δ² is not even monotone there: z_power < 0), so no comparison is said.
PLANNING_POWER = 0.8


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
    looks = _looks(limit, batch)
    chance = pass_probability(looks, margin, alpha, discordance)
    if chance[-1] < power:
        at_limit = _plan_at(margin, alpha, discordance, looks, chance)
        full = plan(margin, alpha, discordance, power, batch) if limit < MOST else None
        if full is None or full.unreachable:
            return dataclasses.replace(at_limit, unreachable=True, wanted=power)
        return dataclasses.replace(at_limit, needed=full.budget, wanted=power)
    k = int(np.argmax(chance >= power))
    return dataclasses.replace(
        _plan_at(margin, alpha, discordance, looks[: k + 1], chance[: k + 1]), wanted=power
    )


def at_budget(margin: float, alpha: float, discordance: float, budget: int, batch: int = 10) -> GatePlan:
    """What a given budget buys: the power it gives at Δ = 0 and the items expected; below the
    planning power, also the budget that power would take (a gate with too few items to pass an
    unchanged candidate should say so before it runs, not after)."""
    looks = _looks(budget, batch)
    p = _plan_at(margin, alpha, discordance, looks, pass_probability(looks, margin, alpha, discordance))
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


def describe(p: GatePlan) -> str:
    """The plan in one line, said before the gate starts."""
    budget = f"a budget of {p.budget:,} items gives power {power_text(p.power)}"
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
