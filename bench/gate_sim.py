"""Simulated paired runs: the sequential gate against peeking at a fixed-n test, and items needed.

    python bench/gate_sim.py            # about a minute on two cores; --runs to change the size
    python bench/gate_sim.py --plan     # the budget plan (compare.gate_budget) against simulation:
                                        # 10,000 gates per discordance, ± one standard error

Each simulated run draws per-item differences D = correct_B − correct_A in {−1, 0, +1} with
discordance ψ (the share of items where A and B disagree) and true Δ = E[D]:
P(D = +1) = (ψ + Δ)/2, P(D = −1) = (ψ − Δ)/2. Three questions:

1. False-pass rate at the null boundary Δ = −δ (the candidate exactly at the margin), under
   monitoring after every batch up to the item budget: the sequential gate (``compare.sequential``)
   against the naive gate that re-checks the fixed-n Newcombe interval after every batch and
   passes the first time its lower bound clears −δ.
2. The gate's power at Δ = 0 and the average items it used (it also stops on a fail).
3. The fixed-n design with the same one-sided α and the same power: the smallest n at which
   the Newcombe non-inferiority test passes as often at Δ = 0 (found by simulation, same seed).

With ``--plan``: for several discordances and powers, the budget ``compare.gate_budget`` plans,
the items it expects, and the same gates simulated with that budget (their power and mean
items), against the fixed-n design of the same α and power (normal approximation, and the
one-shot Newcombe test simulated).

Counts at each look are all a test needs (both tests depend on the data through c, b, n only),
so runs are simulated as cumulative counts, vectorised over runs with numpy.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from servediff.compare import gate_budget, stats
from servediff.compare.stats.sequential import GRID


def counts(rng: np.random.Generator, runs: int, n: int, psi: float, delta: float) -> tuple[np.ndarray, ...]:
    """Cumulative (c, b) after each of n items, shape (runs, n)."""
    u = rng.random((runs, n), dtype=np.float32)
    pc = (psi + delta) / 2
    c = np.cumsum(u < pc, axis=1, dtype=np.int32)
    b = np.cumsum((u >= pc) & (u < psi), axis=1, dtype=np.int32)
    return c, b


def log_capitals(c: np.ndarray, b: np.ndarray, n: np.ndarray, m: float, side: int) -> np.ndarray:
    """``sequential.log_capital`` over arrays of counts (the same dKelly grid)."""
    u = np.arange(1, GRID + 1) / (GRID + 1)
    if side > 0:
        la, lb, lz = np.log1p(u * (1 - m) / (1 + m)), np.log1p(-u), np.log1p(-u * m / (1 + m))
    else:
        la, lb, lz = np.log1p(-u), np.log1p(u * (1 + m) / (1 - m)), np.log1p(u * m / (1 - m))
    z = n - c - b
    e = c[..., None] * la + b[..., None] * lb + z[..., None] * lz
    top = e.max(axis=-1)
    return top + np.log(np.exp(e - top[..., None]).mean(axis=-1))


def sequential(
    c: np.ndarray, b: np.ndarray, delta: float, alpha: float, batch: int
) -> tuple[np.ndarray, ...]:
    """Per run: verdict (+1 pass, −1 fail, 0 inconclusive) and items used, looking every batch."""
    runs, n = c.shape
    looks = np.arange(batch, n + 1, batch)
    verdict, used = np.zeros(runs, np.int8), np.full(runs, n)
    open_ = np.ones(runs, bool)
    thr = math.log(1 / alpha)
    for t in looks:
        idx = np.nonzero(open_)[0]
        if idx.size == 0:
            break
        ct, bt = c[idx, t - 1], b[idx, t - 1]
        up = log_capitals(ct, bt, np.full(idx.size, t), -delta, +1) >= thr
        down = ~up & (log_capitals(ct, bt, np.full(idx.size, t), -delta, -1) >= thr)
        verdict[idx[up]], verdict[idx[down]] = 1, -1
        used[idx[up | down]] = t
        open_[idx[up | down]] = False
    return verdict, used


def newcombe_low(c: int, b: int, n: int, confidence: float) -> float:
    """Lower Newcombe bound, the concordant items split evenly between both right and both
    wrong (accuracy about 50 %, where the interval is widest)."""
    both = (n - b - c) // 2
    return stats.paired_ci(stats.PairedCounts(both=both, b=b, c=c, neither=n - b - c - both), confidence).low


def naive_false_pass(
    c: np.ndarray, b: np.ndarray, delta: float, alpha: float, batch: int, start: int
) -> float:
    """Share of runs the peeking Newcombe gate passes at some look from ``start`` items on
    (one-sided α at each look)."""
    runs, n = c.shape
    conf = 1 - 2 * alpha
    passed = np.zeros(runs, bool)
    cache: dict[tuple[int, int, int], bool] = {}
    for t in range(start, n + 1, batch):
        for r in np.nonzero(~passed)[0]:
            key = (int(c[r, t - 1]), int(b[r, t - 1]), t)
            if key not in cache:
                cache[key] = newcombe_low(*key, conf) > -delta
            passed[r] = cache[key]
    return float(passed.mean())


def fixed_n_for_power(rng: np.random.Generator, psi: float, delta: float, alpha: float, power: float) -> int:
    """Smallest n (to 10 items) whose one-shot Newcombe test passes at Δ = 0 with this power."""
    lo, hi = 10, 20000
    while hi - lo > 10:
        mid = (lo + hi) // 2
        draws = rng.multinomial(mid, [psi / 2, psi / 2, 1 - psi], size=2000)
        lows = {(int(x), int(y)): newcombe_low(int(x), int(y), mid, 1 - 2 * alpha) for x, y, _ in draws}
        rate = np.mean([lows[(int(x), int(y))] > -delta for x, y, _ in draws])
        lo, hi = (lo, mid) if rate >= power else (mid, hi)
    return hi


def simulate(
    rng: np.random.Generator, runs: int, budget: int, psi: float, delta: float, alpha: float, batch: int
) -> tuple[np.ndarray, np.ndarray]:
    """Verdicts and items used of ``runs`` gates at Δ = 0, in chunks of 1,000 (memory)."""
    verdicts, used = [], []
    for start in range(0, runs, 1000):
        c, b = counts(rng, min(1000, runs - start), budget, psi, 0.0)
        v, u = sequential(c, b, delta, alpha, batch)
        verdicts.append(v)
        used.append(u)
    return np.concatenate(verdicts), np.concatenate(used)


def stopped(
    verdict: np.ndarray, used: np.ndarray, plans: list[gate_budget.GatePlan]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per plan, the gates stopped at its budget: (passed, items used)."""
    return [((verdict == 1) & (used <= p.budget), np.minimum(used, p.budget)) for p in plans]


def plan_table(rng: np.random.Generator, runs: int, delta: float, alpha: float, batch: int) -> None:
    """The planned budget and expected items against simulated gates with that budget, Δ = 0.

    The three powers of a discordance share their simulated gates (common random numbers): the
    gates run with the largest budget, and a smaller budget's gate is the same gate stopped
    there (its looks are the first of the larger one's), so the rows differ by the budget alone.
    At least ``runs`` gates, and 2,000 more at a time (up to 40,000) until every row's mean
    items has a standard error under 1 %; the ± are one standard error."""
    print(
        f"δ = {delta}, one-sided α = {alpha}, looks every {batch} items, "
        f"at least {runs} simulated gates per discordance"
    )
    print(
        "\n| discordance | power wanted | budget planned (power from) | expected items: plan / simulated "
        "| power simulated | gates | fixed n: formula / Newcombe simulated "
        "| simulated items against fixed n |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for psi in (0.02, 0.04, 0.07, 0.10, 0.15):
        t0 = time.perf_counter()
        plans = [gate_budget.plan(delta, alpha, psi, power, batch) for power in (0.8, 0.9, 0.95)]
        top = max(p.budget for p in plans)
        assert all(p.budget % batch == 0 for p in plans)  # every budget is a look of the largest
        verdict, used = simulate(rng, runs, top, psi, delta, alpha, batch)

        while (
            any(u.std(ddof=1) / np.sqrt(len(u)) >= 0.01 * u.mean() for _, u in stopped(verdict, used, plans))
            and len(used) < 40_000
        ):
            more = simulate(rng, 2000, top, psi, delta, alpha, batch)
            verdict, used = np.concatenate([verdict, more[0]]), np.concatenate([used, more[1]])
        for p, (passed, items) in zip(plans, stopped(verdict, used, plans)):
            newcombe = fixed_n_for_power(rng, psi, delta, alpha, p.wanted)
            assert p.fixed_n is not None  # planned at power >= 0.8
            n, mean, rate = len(items), items.mean(), passed.mean()
            se = items.std(ddof=1) / np.sqrt(n)
            change = mean / p.fixed_n - 1
            print(
                f"| {psi:.0%} | {p.wanted} | {p.budget:,} ({p.method}) "
                f"| {p.expected:,} / {mean:,.0f} ± {se:,.0f} "
                f"| {rate:.3f} ± {np.sqrt(rate * (1 - rate) / n):.3f} | {n:,} "
                f"| {p.fixed_n:,} / {newcombe:,} "
                f"| {abs(change):.1%} {'more' if change > 0 else 'fewer'} |",
                flush=True,
            )
        print(f"<!-- {psi:.0%}: {time.perf_counter() - t0:.0f} s -->", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--max-items", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--delta", type=float, default=0.02)
    ap.add_argument("--alpha", type=float, default=0.025)
    ap.add_argument("--plan", action="store_true", help="the budget plan against simulated gates")
    args = ap.parse_args()
    rng = np.random.default_rng(2026)
    d, a = args.delta, args.alpha
    if args.plan:
        plan_table(rng, args.runs, d, a, args.batch)
        return
    print(f"δ = {d}, one-sided α = {a}, looks every {args.batch} items up to {args.max_items}, ", end="")
    print(f"{args.runs} runs")
    print(
        "\n| discordance | false pass: sequential | false pass: peeking Newcombe from 10 / from 200 "
        "items | power at Δ=0 | mean items at Δ=0 | fixed n, same α and power | fewer items |"
    )
    print("|---|---|---|---|---|---|---|")
    for psi in (0.025, 0.04, 0.07, 0.10):  # ψ ≥ δ: Δ = −δ must be possible
        t0 = time.perf_counter()
        c, b = counts(rng, args.runs, args.max_items, psi, -d)
        fp_seq = float((sequential(c, b, d, a, args.batch)[0] == 1).mean())
        # Newcombe per look is slow in Python: fewer runs
        fp_naive = [naive_false_pass(c[:300], b[:300], d, a, args.batch, s) for s in (args.batch, 200)]
        c, b = counts(rng, args.runs, args.max_items, psi, 0.0)
        verdict, used = sequential(c, b, d, a, args.batch)
        power = float((verdict == 1).mean())
        fixed = fixed_n_for_power(rng, psi, d, a, power) if power < 0.9995 else None
        saving = f"{1 - used.mean() / fixed:.0%}" if fixed else "—"
        print(
            f"| {psi:.1%} | {fp_seq:.4f} | {fp_naive[0]:.3f} / {fp_naive[1]:.3f} (300 runs) "
            f"| {power:.3f} | {used.mean():.0f} "
            f"| {fixed or '—'} | {saving} |  <!-- {time.perf_counter() - t0:.0f} s -->"
        )


if __name__ == "__main__":
    main()
