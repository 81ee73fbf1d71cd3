"""Anytime-valid confidence sequence for a paired accuracy difference: the gate's statistics.

    servediff gate --config-a stock --config-b tuned --suite gsm8k --margin 0.02

Two configurations scored on the same items give per-item differences D = correct_B − correct_A
in {−1, 0, +1}; their mean is Δ = accuracy(B) − accuracy(A). A fixed-n interval (Newcombe, in
``stats``) is valid only at the one n chosen in advance: re-checking it after every batch and
stopping when it looks good inflates the false-pass rate (``bench/gate_sim.py`` measures by how
much). A confidence sequence is valid at every n at once, so a gate may look after every item
and stop whenever it likes.

Construction: the diversified ("grid") Kelly betting capital of Waudby-Smith & Ramdas (2023),
"Estimating means of bounded random variables by betting", JRSS-B 86(1), §5 ("dKelly"): for a
null mean m, average over G constant bets u_g = g/(G+1) the capital Π_i (1 + u_g (D_i − m)/(1 + m))
(lower side; 1 − u_g (D_i − m)/(1 − m) for the upper side). Each product is a nonnegative
martingale when E[D] = m (a supermartingale when E[D] ≤ m), so is their average, and Ville's
inequality gives P(sup_n K_n(m) ≥ 1/α) ≤ α: the set of m not rejected is a (1 − α) lower
confidence sequence, at every n simultaneously. Because D takes three values, each product
depends only on the counts (c: only B right, b: only A right, z: the rest), so the capital at
any n costs O(G) however many items came before, is the same for any order of the items, and a
resumed gate recomputes it from the records alone.

Why not a library (measured before writing this, Python 3.11, numpy 2):
- ``confseq`` (Howard, Waudby-Smith): no wheel for this platform; the source build needs Boost
  and a C++ toolchain; its pure-Python ``betting`` module uses ``np.float_`` (removed in numpy
  2) and imports matplotlib and multiprocess. Patched by hand, its ``diversified_betting_mart``
  with D = 10 agrees with ``capital`` below to 7e-15 in log capital; its default hedged
  ``betting_cs`` takes about 1 s for 800 items (a 1,000-point grid over m, re-run from item 1
  at every update). Worth testing against, not worth depending on.
- ``expectation``: requires Python ≥ 3.12 (servediff supports 3.10), is GPL-3.0, and its
  empirical-Bernstein sequence plugs the whole-sample variance into the boundary, which is not
  a predictable process as the published construction (Howard et al. 2021, Thm. 4) requires.
The grid size changed little in simulation (mean items to pass at Δ = 0, discordance 4 %,
δ = 2 pp, α = 0.025: G = 10: 954, 100: 1003, 1000: 972); G = 100 is the default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from servediff.compare.vocabulary import GateVerdict

GRID = 100


@dataclass(frozen=True, slots=True)
class Tally:
    """Paired outcomes so far: c only B right, b only A right, z equal (both right or both wrong)."""

    c: int
    b: int
    z: int

    @property
    def n(self) -> int:
        return self.c + self.b + self.z

    @property
    def delta(self) -> float:
        return (self.c - self.b) / self.n if self.n else 0.0


def log_capital(t: Tally, m: float, side: int, grid: int = GRID) -> float:
    """log K_n(m): the dKelly capital against the null E[D] = m after the items of ``t``.

    ``side`` +1 bets on E[D] > m (large capital rejects m from below: a lower bound); −1 bets on
    E[D] < m (an upper bound). Bets u < 1 keep every factor positive, so the capital is finite
    except at the edges of [−1, 1]: m = −1 (side +1) or m = 1 (side −1) cannot be rejected.
    """
    if not -1.0 < m < 1.0:
        return -math.inf if (m <= -1.0 and side > 0) or (m >= 1.0 and side < 0) else math.inf
    u = np.arange(1, grid + 1) / (grid + 1)
    if side > 0:  # factors for D = +1, −1, 0
        logs = (np.log1p(u * (1 - m) / (1 + m)), np.log1p(-u), np.log1p(-u * m / (1 + m)))
    else:
        logs = (np.log1p(-u), np.log1p(u * (1 + m) / (1 - m)), np.log1p(u * m / (1 - m)))
    e = t.c * logs[0] + t.b * logs[1] + t.z * logs[2]
    top = float(e.max())
    return top + math.log(float(np.exp(e - top).mean()))


def rejects(t: Tally, m: float, alpha: float, side: int, grid: int = GRID) -> bool:
    """Whether the capital against m has reached 1/α (Ville): m is outside the sequence."""
    return log_capital(t, m, side, grid) >= math.log(1 / alpha)


def bound(t: Tally, alpha: float, side: int, grid: int = GRID, tol: float = 1e-6) -> float:
    """The lower (side +1) or upper (side −1) confidence-sequence bound on Δ at this n.

    The capital is monotone in m (each factor is), so the bound is found by bisection: the
    largest m rejected from below, or the smallest rejected from above. −1 (or 1) when none is.
    """
    lo, hi = -1.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        # side +1: m rejected ⇒ every smaller m is too, so the bound lies above mid
        if rejects(t, mid, alpha, side, grid) == (side > 0):
            lo = mid
        else:
            hi = mid
    return lo if side > 0 else hi


def decide(t: Tally, margin: float, alpha: float, grid: int = GRID) -> GateVerdict | None:
    """ "pass" when Δ = −margin is rejected from below (the sequence lies above −margin: B is
    non-inferior), "fail" when rejected from above (B is worse by more than the margin), None
    while the sequence still contains −margin. Each error is at most α whenever the gate stops."""
    if rejects(t, -margin, alpha, +1, grid):
        return "pass"
    if rejects(t, -margin, alpha, -1, grid):
        return "fail"
    return None
