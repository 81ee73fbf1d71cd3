"""Speedup intervals across reruns: which one covers 1.0 when a configuration meets itself (A/A).

    python bench/speed_sim.py                 # about a minute on two cores; --sims to change the size

The noise model is the committed llama-server sweeps' repeats (docs/studies/gpu-h200-load: study.tar.xz
and sweep2.tar.xz): every configuration and level that ran twice on the same items gives one
pair of runs. Their throughputs (servediff's own, ``speed.run_items`` and ``reruns.run_rates``)
differ by a run effect; each item's latency by that and an item effect. A simulated run of a
suite is the suite's items (drawn with replacement from a base run: the suite is a sample)
with latency_i × exp(ε + η_i), ε a run effect and η_i item effects, both drawn from those the
repeats showed (ε = ± half a pair's log ratio × √2 ... see ``noise``). An A/A pair is k such
runs a side of the same items; its true speedup is 1.

For k = 1, 2, 3 runs a side, the share of simulated pairs whose 95 % interval covers 1.0:

- items: the paired item bootstrap over the pooled runs (``speed.speedup``), the only interval
  before reruns counted;
- runs (t): ``reruns.speedup``, Welch's t interval over log per-run throughputs (Student's with
  one side's spread when the other ran once);
- runs then items: a two-level bootstrap, runs drawn with replacement within each side, then the
  item keys (paired across all runs), percentile interval.

Seeded: the same command prints the same table.
"""

from __future__ import annotations

import argparse
import math
import tarfile
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from servediff.compare import reruns
from servediff.compare import speed as sp
from servediff.records import read_run

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = (ROOT / "docs/studies/gpu-h200-load/study.tar.xz", ROOT / "docs/studies/gpu-h200-load/sweep2.tar.xz")
SEED = 20261206
RESAMPLES = 1000


def repeat_pairs(folder: Path) -> list[tuple[str, sp.Items, sp.Items]]:
    """(name, r1, r2) for every record file pair that differs only in its repeat number."""
    groups: dict[str, dict[int, Path]] = defaultdict(dict)
    for path in sorted(folder.rglob("*.r[0-9].jsonl")):
        stem, r = path.name.rsplit(".r", 1)
        groups[str(path.parent / stem)][int(r.split(".")[0])] = path
    out = []
    for name, runs in sorted(groups.items()):
        if 1 in runs and 2 in runs:
            one, two = (sp.run_items(read_run(runs[r]), 1) for r in (1, 2))
            if len(one) and len(two) and one.in_flight and two.in_flight:
                out.append((str(Path(name).relative_to(folder)), one, two))
    return out


def noise(pairs: list[tuple[str, sp.Items, sp.Items]]) -> tuple[np.ndarray, np.ndarray]:
    """Run effects and item effects (log scale), centred, as the repeats showed them.

    A pair's log throughput ratio d = ε₂ − ε₁ has variance 2σ²: ±d/√2 are draws with the run
    effect's variance. Item effects: each item's log latency ratio less its pair's median,
    over √2 likewise."""
    runs, items = [], []
    for _, one, two in pairs:
        keys = reruns.common_keys([one, two])
        a, b = reruns.run_rates([one, two], keys)
        d = math.log(b / a)
        runs += [d / math.sqrt(2), -d / math.sqrt(2)]
        la = dict(zip(one.keys, one.latency.tolist()))
        lb = dict(zip(two.keys, two.latency.tolist()))
        ratios = np.log([lb[k] / la[k] for k in keys if la[k] > 0 and lb[k] > 0])
        eta = (ratios - np.median(ratios)) / math.sqrt(2)
        items += [*eta, *(-eta)]
    return np.array(runs), np.array(items)


def simulated_run(base: sp.Items, rows: np.ndarray, eps: float, eta: np.ndarray) -> sp.Items:
    n = len(rows)
    latency = base.latency[rows] * np.exp(eps + eta)
    return sp.Items(
        keys=tuple(f"i{j}" for j in range(n)),
        tokens=base.tokens[rows],
        latency=latency,
        ttft=np.full(n, np.nan),
        itl=np.full(n, np.nan),
        start=np.full(n, np.nan),
        warmup=0,
        errors=0,
        in_flight=1.0,  # a sequential run: throughput = Σ tokens / Σ latency
        unique=True,
    )


def two_level(a: list[sp.Items], b: list[sp.Items], rng: np.random.Generator) -> tuple[float, float]:
    """Percentile interval of the pooled ratio, runs resampled within each side, then items."""
    n = len(a[0])
    tok_a, lat_a = np.stack([x.tokens for x in a]), np.stack([x.latency for x in a])
    tok_b, lat_b = np.stack([x.tokens for x in b]), np.stack([x.latency for x in b])
    ra = rng.integers(0, len(a), (RESAMPLES, len(a)))
    rb = rng.integers(0, len(b), (RESAMPLES, len(b)))
    it = rng.integers(0, n, (RESAMPLES, n))
    sums = []
    for tok, lat, runs in ((tok_a, lat_a, ra), (tok_b, lat_b, rb)):
        t = tok[runs[:, :, None], it[:, None, :]].sum(axis=(1, 2))
        la = lat[runs[:, :, None], it[:, None, :]].sum(axis=(1, 2))
        sums.append(t / la)
    low, high = np.percentile(sums[1] / sums[0], [2.5, 97.5])
    return float(low), float(high)


def coverage(
    base: sp.Items, effects: tuple[np.ndarray, np.ndarray], k: tuple[int, int], sims: int, seed: int
) -> dict[str, tuple[float, float]]:
    """Share of A/A pairs of (k_A, k_B) runs whose interval covers 1, and the median width (×)."""
    rng = np.random.default_rng(seed)
    run_fx, item_fx = effects
    hits: dict[str, list[bool]] = defaultdict(list)
    widths: dict[str, list[float]] = defaultdict(list)
    n = len(base)
    for _ in range(sims):
        rows = rng.integers(0, n, n)
        sides = [
            [simulated_run(base, rows, rng.choice(run_fx), rng.choice(item_fx, n)) for _ in range(runs)]
            for runs in k
        ]
        # Fresh objects each time: speed.speedup caches by identity.
        intervals = {"items": sp.speedup(sp.pooled(sides[0]), sp.pooled(sides[1]))}
        if max(k) > 1:
            intervals["runs (t)"] = reruns.speedup(sides[0], sides[1])
            low, high = two_level(sides[0], sides[1], rng)
            intervals["runs then items"] = sp.Interval(1.0, low, high)
        for name, x in intervals.items():
            assert x is not None
            hits[name].append(x.low <= 1.0 <= x.high)
            widths[name].append(x.high / x.low)
    return {name: (float(np.mean(h)), float(np.median(widths[name]))) for name, h in hits.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sims", type=int, default=2000)
    args = p.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        pairs = []
        for n, tarball in enumerate(SWEEPS):
            with tarfile.open(tarball) as tar:
                tar.extractall(Path(tmp) / str(n), filter="data")
            pairs += repeat_pairs(Path(tmp) / str(n))
        effects = noise(pairs)
        print(
            f"noise model: {len(pairs)} pairs of repeats; run effect σ = {effects[0].std():.3f} (log), "
            f"item effect σ = {effects[1].std():.3f}"
        )
        for name, one, two in pairs:
            keys = reruns.common_keys([one, two])
            a, b = reruns.run_rates([one, two], keys)
            item = sp.rates(sp.pooled([one, two]))
            shown = f"[{item[0].low:,.0f}, {item[0].high:,.0f}]" if item else "n/a"
            print(f"  {name}: {a:,.0f} and {b:,.0f} tokens/s; pooled item interval {shown}")
        bases = {
            name: one for name, one, _ in pairs if name.endswith(("prompts.4947c685.c1", "gsm8k.7b508827.c1"))
        }
        print("\n| base run (items) | runs A + B | interval | covers 1.0 (A/A) | median width (high ÷ low) |")
        print("|---|---|---|---|---|")
        for name, base in list(bases.items())[:2]:
            for k in ((1, 1), (2, 1), (2, 2), (3, 3)):
                for method, (cov, width) in coverage(
                    base, effects, k, args.sims, SEED + 10 * k[0] + k[1]
                ).items():
                    print(f"| {name} ({len(base)}) | {k[0]} + {k[1]} | {method} | {cov:.3f} | {width:.3f} |")
    print(f"\n{args.sims} simulated pairs per row, seed {SEED}; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
