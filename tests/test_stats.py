"""Statistics against scipy/statsmodels and textbook values."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import statsmodels.api as sm
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint, samplesize_proportions_2indep_onetail

from servediff.compare.stats import (
    Interval,
    PairedCounts,
    clt_halfwidth,
    cluster_se,
    mcnemar_exact,
    n_paired,
    n_unpaired,
    paired_ci,
    verdict,
    wald_paired_ci,
    wilson,
)


@pytest.mark.parametrize(("k", "n"), [(0, 10), (1, 10), (187, 200), (200, 200), (50, 100), (3, 1000)])
def test_wilson_matches_statsmodels(k: int, n: int) -> None:
    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    ci = wilson(k, n)
    assert ci.low == pytest.approx(lo, abs=1e-12)
    assert ci.high == pytest.approx(hi, abs=1e-12)


def test_wilson_textbook() -> None:
    # Wilson (1927) via Agresti & Coull (1998): 0 of 10 → [0, 0.2775].
    ci = wilson(0, 10)
    assert ci.low == 0.0
    assert ci.high == pytest.approx(0.2775, abs=1e-4)


def test_wilson_contains_its_estimate_at_every_perfect_and_zero_score() -> None:
    """At k = n the bound is 1 exactly, but computed it came out 0.9999999999999999 (n = 10, 13,
    27, ...) and at k = 0 the lower one 5.6e-17 (n = 3, 6, ...): an interval without its own
    estimate, which the report's error bars refused."""
    for n in range(1, 3001):
        for k in (0, 1, n - 1, n):
            ci = wilson(k, n)
            assert 0.0 <= ci.low <= k / n <= ci.high <= 1.0, (k, n, ci)
    assert wilson(10, 10).high == 1.0 and wilson(0, 3).low == 0.0


def test_clt_halfwidth_quoted_value() -> None:
    # "±3.3 pp at 95 %" for 94 % on 200 items.
    assert round(clt_halfwidth(0.94, 200) * 100, 1) == 3.3


@pytest.mark.parametrize(("b", "c"), [(8, 0), (0, 8), (3, 7), (12, 2), (0, 0), (25, 25), (1, 0)])
def test_mcnemar_exact_matches_statsmodels(b: int, c: int) -> None:
    expected = mcnemar(np.array([[100, b], [c, 50]]), exact=True).pvalue
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_textbook() -> None:
    assert mcnemar_exact(8, 0) == 0.0078125  # 2 · ½⁸


def test_cluster_se_matches_statsmodels_cluster_robust() -> None:
    rng = np.random.default_rng(7)
    subjects = np.repeat(np.arange(12), rng.integers(3, 15, size=12))
    # Correlated within a subject: each subject has its own accuracy.
    p = rng.uniform(0.1, 0.9, size=12)[subjects]
    correct = rng.random(len(subjects)) < p
    fit = sm.OLS(correct.astype(float), np.ones(len(correct))).fit(
        cov_type="cluster", cov_kwds={"groups": subjects, "use_correction": False}
    )
    assert cluster_se(list(correct), [str(s) for s in subjects]) == pytest.approx(fit.bse[0], rel=1e-10)


def test_cluster_se_one_item_per_cluster_is_clt() -> None:
    correct = [True] * 47 + [False] * 53
    se = cluster_se(correct, [str(i) for i in range(100)])
    assert se == pytest.approx(math.sqrt(0.47 * 0.53 / 100), rel=1e-12)


def test_wald_paired_agresti_textbook() -> None:
    # Agresti, Categorical Data Analysis (3rd ed. 2013) §11.1, presidential approval ratings:
    # 794/150/86/570 of 1600, approval 0.59 then 0.55, SE 0.0095, 95 % CI for the change ±0.019.
    t = PairedCounts(both=794, b=150, c=86, neither=570)
    assert t.delta == pytest.approx(-0.04)
    ci = wald_paired_ci(t)
    se = (ci.high - ci.low) / 2 / 1.959964
    assert se == pytest.approx(0.0095, abs=5e-5)
    assert (round(ci.low, 3), round(ci.high, 3)) == (-0.059, -0.021)


def test_newcombe_paired_properties() -> None:
    # No disagreement at all: the Wald interval collapses to a point, Newcombe's does not.
    t0 = PairedCounts(both=180, b=0, c=0, neither=20)
    assert wald_paired_ci(t0) == Interval(0.0, 0.0)
    ci0 = paired_ci(t0)
    assert ci0.low < 0 < ci0.high
    # Large samples: Newcombe ≈ Wald.
    t = PairedCounts(both=794, b=150, c=86, neither=570)
    assert paired_ci(t).low == pytest.approx(wald_paired_ci(t).low, abs=2e-3)
    assert paired_ci(t).high == pytest.approx(wald_paired_ci(t).high, abs=2e-3)
    # All discordant one way: stays inside [−1, 1], excludes 0.
    ci = paired_ci(PairedCounts(both=0, b=0, c=10, neither=0))
    assert 0 < ci.low < ci.high <= 1.0


def test_newcombe_paired_rebuilt_from_statsmodels_wilson() -> None:
    # Newcombe (1998) method 10, rebuilt from statsmodels' Wilson limits on his example
    # a=36, b=12, c=2, d=0 (n=50). Here A is his second proportion, so Δ = +0.20.
    n, pa, pb = 50, 38 / 50, 48 / 50
    la, ua = proportion_confint(38, n, method="wilson")
    lb, ub = proportion_confint(48, n, method="wilson")
    phi = (36 * 0 - 2 * 12) / math.sqrt(38 * 12 * 48 * 2)
    low = (pb - pa) - math.sqrt((pb - lb) ** 2 - 2 * phi * (pb - lb) * (ua - pa) + (ua - pa) ** 2)
    high = (pb - pa) + math.sqrt((ub - pb) ** 2 - 2 * phi * (ub - pb) * (pa - la) + (pa - la) ** 2)
    ci = paired_ci(PairedCounts(both=36, b=2, c=12, neither=0))
    assert ci.low == pytest.approx(low, abs=1e-12)
    assert ci.high == pytest.approx(high, abs=1e-12)


def test_newcombe_paired_published_examples() -> None:
    """Method 10 against intervals printed in the literature, to the 4 decimals printed.

    - Newcombe RG (1998), "Improved confidence intervals for the difference between binomial
      proportions based on paired data", Stat Med 17:2635–2650, Table II, example (a, b, c, d) =
      (36, 12, 2, 0): θ = (b − c)/n = 0.20, 95 % interval 0.0569 to 0.3404. AD − BC < 0 here,
      so the N/2 correction of φ does not act; it is the same with or without it.
    - Fagerland, Lydersen & Laake (2017), *Statistical Analysis of Contingency Tables*, ch. 8,
      the Cavo et al. (2012) table [[59, 6], [16, 80]]: the Newcombe square-and-add interval
      −0.1186 to −0.0046 (as the authors' R package contingencytables checks it in its tests).
      AD − BC = 4,624 > N/2, so the correction acts: with the plain φ the interval is
      −0.1174 to −0.0059, which this test rejects.

    Their first proportion is B here and their second A (Δ = accuracy(B) − accuracy(A)), so
    their b (first right, second wrong) is our c.
    """
    ci = paired_ci(PairedCounts(both=36, b=2, c=12, neither=0))
    assert (round(ci.low, 4), round(ci.high, 4)) == (0.0569, 0.3404)
    cavo = PairedCounts(both=59, b=16, c=6, neither=80)
    assert round(cavo.delta, 4) == -0.0621
    ci = paired_ci(cavo)
    assert (round(ci.low, 4), round(ci.high, 4)) == (-0.1186, -0.0046)


def test_newcombe_phi_correction_edges() -> None:
    # 0 <= AD − BC <= N/2: φ is taken as 0, the two Wilson distances add in quadrature.
    t = PairedCounts(both=5, b=1, c=4, neither=2)  # AD − BC = 10 − 4 = 6 = N/2
    za = wilson(t.both + t.b, t.n)
    zb = wilson(t.both + t.c, t.n)
    pa, pb = (t.both + t.b) / t.n, (t.both + t.c) / t.n
    low = t.delta - math.hypot(pb - zb.low, za.high - pa)
    assert paired_ci(t).low == pytest.approx(low, abs=1e-12)


def test_verdict() -> None:
    assert verdict(Interval(-0.005, 0.02), margin=0.01) == "non-inferior"
    assert verdict(Interval(-0.05, -0.02), margin=0.01) == "inferior"
    assert verdict(Interval(-0.03, 0.01), margin=0.01) == "inconclusive"


def test_paired_power_connor() -> None:
    # δ = 2 pp with 3.75 % of items discordant: about 730 paired items (Connor 1987).
    assert n_paired(0.02, 0.0375) == 734
    # Impossible: fewer discordant items than the difference to detect.
    assert n_paired(0.02, 0.01) is None


def test_paired_power_by_simulation() -> None:
    # At the computed n, the exact McNemar test rejects about 80 % of the time.
    rng = np.random.default_rng(3)
    n = n_paired(0.05, 0.15)
    assert n is not None
    pb, pc = (0.15 - 0.05) / 2, (0.15 + 0.05) / 2
    draws = rng.multinomial(n, [pb, pc, 1 - pb - pc], size=2000)
    rejected = np.mean([mcnemar_exact(int(b), int(c)) < 0.05 for b, c, _ in draws])
    assert 0.74 < rejected < 0.86


def test_unpaired_power_matches_statsmodels() -> None:
    for p, delta in [(0.94, 0.02), (0.5, 0.05), (0.25, 0.1)]:
        expected = samplesize_proportions_2indep_onetail(
            diff=-delta, prop2=p, power=0.8, alpha=0.05, alternative="two-sided"
        )
        assert n_unpaired(delta, p) == math.ceil(expected)


def test_paired_needs_far_fewer_than_unpaired() -> None:
    paired, unpaired = n_paired(0.02, 0.0375), n_unpaired(0.02, 0.94)
    assert paired is not None and unpaired is not None
    assert unpaired > 3 * paired


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    from servediff.cli import main

    capsys.readouterr()
    assert main(["stats", *argv, "--json"]) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


def test_stats_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli_json(capsys, "mcnemar", "--b", "8", "--c", "0")["p_value"] == 0.0078125
    power = _cli_json(capsys, "power", "--delta", "0.02", "--discordance", "0.0375", "--p", "0.94")
    assert power["paired_items"] == 734
    assert power["unpaired_items_per_arm"] == n_unpaired(0.02, 0.94)
    ci = _cli_json(capsys, "ci", "--correct", "188", "--n", "200")
    assert round(float(ci["clt_halfwidth"]) * 100, 1) == 3.3
    paired = _cli_json(capsys, "mcnemar", "--b", "8", "--c", "0", "--n", "400", "--a-correct", "380")
    assert paired["delta"] == pytest.approx(-0.02)
    assert paired["verdict"] == verdict(paired_ci(PairedCounts(372, 8, 0, 20)), 0.01)


def test_stats_cli_rejects_impossible_counts(capsys: pytest.CaptureFixture[str]) -> None:
    from servediff.cli import main

    assert main(["stats", "ci", "--correct", "201", "--n", "200"]) == 2
    assert main(["stats", "mcnemar", "--b", "8", "--c", "5", "--n", "10", "--a-correct", "9"]) == 2
    assert "error:" in capsys.readouterr().err
