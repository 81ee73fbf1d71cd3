"""The statistics of ``servediff verify`` (compare/stats/conformal.py, compare/verify.py): conformal
p-values, the mixture martingale against its closed form, its false-alarm rate over many
simulated audits (and the naive peeking test it replaces, which exceeds α), its power, and the
per-request statistics on constructed items."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from servediff.compare import verify
from servediff.compare.stats.conformal import first_crossing, log_wealth_path, pvalues, simulate
from servediff.records import Item


def test_conformal_pvalues_count_ties_against_the_test() -> None:
    null = np.array([0.0, 1.0, 2.0, 3.0])
    got = pvalues(np.array([2.0, 10.0, -1.0, np.nan, 0.0]), null)
    assert got[:3].tolist() == [3 / 5, 1 / 5, 5 / 5]
    assert math.isnan(got[3])
    assert got[4] == 5 / 5  # a tie with every null value: p = 1


@pytest.mark.parametrize("p", [0.01, 0.05, 0.3])
def test_one_request_mixture_matches_the_integral_of_the_power_calibrators(p: float) -> None:
    # ∫_0^1 κ p^(κ−1) dκ = (1 − p + p ln p) / (p (ln p)^2) (Vovk & Wang 2021); the grid is a
    # midpoint rule of 100 slices.
    null = np.linspace(0, 1, 999)  # s above every value but a fraction p of them
    s = float(np.quantile(null, 1 - p + 1 / 1000))
    got_p = pvalues(np.array([s]), null)[0]
    closed = (1 - got_p + got_p * math.log(got_p)) / (got_p * math.log(got_p) ** 2)
    path, _ = log_wealth_path(np.array([[s]]), [null])
    assert math.exp(path[0]) == pytest.approx(closed, rel=2e-3)


def _audits(shift: float, runs: int, seed: int, n_null: int = 200, horizon: int = 200) -> np.ndarray:
    """First request at which each simulated audit rejected (horizon + 1: never)."""
    rng = np.random.default_rng(seed)
    first = np.full(runs, horizon + 1)
    for r in range(runs):
        null = np.sort(rng.normal(size=n_null))
        stats = rng.normal(size=(horizon, 1)) + shift
        stop = first_crossing(log_wealth_path(stats, [null])[0], 0.05)
        if stop.rejected:
            first[r] = stop.n
    return first


def test_false_alarms_stay_under_alpha_over_many_audits_with_a_fresh_calibration_each() -> None:
    first = _audits(0.0, runs=400, seed=1)
    rate = float((first <= 200).mean())
    assert rate <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 400)  # α + two standard errors


def test_peeking_at_a_fixed_level_test_after_every_request_would_exceed_alpha() -> None:
    # What the martingale replaces: stop at the first request whose own p-value is ≤ α. Over 200
    # requests this rejects nearly always; the same draws never push the martingale that far.
    rng = np.random.default_rng(2)
    naive = 0
    for _ in range(200):
        null = np.sort(rng.normal(size=200))
        naive += bool((pvalues(rng.normal(size=200), null) <= 0.05).any())
    assert naive / 200 > 0.9


def test_a_shift_is_detected_and_a_larger_one_sooner() -> None:
    small, large = _audits(0.5, runs=100, seed=3), _audits(1.5, runs=100, seed=3)
    assert (small <= 200).mean() >= 0.95 and (large <= 200).mean() == 1.0
    assert np.median(large) < np.median(small)


def _pairs(n: int, seed: int) -> list[verify.Pair]:
    """Calibration pairs with a noisy null: 20 shared tokens each, d ~ N(0, 0.02)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        diffs = tuple(float(x) for x in rng.normal(0, 0.02, 20))
        values = (float(np.mean(diffs)), float(np.mean(np.abs(diffs))), 0.0, 0.0, math.nan, math.nan)
        out.append(verify.Pair(str(k), values, diffs, (), 20, 20, 20, True, (5, 5)))
    return out


def test_simulated_plan_false_alarms_and_power_from_one_calibration() -> None:
    pairs = _pairs(400, seed=4)
    rows = np.array([p.values for p in pairs])
    null = simulate(rows, lambda _: rows, verify.nulls, 0.05, 100, 200, seed=0)
    assert null.rejected_by[-1] <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 200)
    once = simulate(rows, lambda _: rows, verify.nulls, 0.05, 1000, 200, seed=0, replace=False)
    assert len(once.rejected_by) == 200  # each of the 200 held-out rows sent once, no more

    def needs(delta: float) -> int | None:
        moved = functools.partial(verify.alternative, pairs, delta)
        return simulate(rows, moved, verify.nulls, 0.05, 100, 200, seed=0).requests_for(0.95)

    near, far = needs(0.01), needs(0.05)
    assert far is not None and near is not None and far < near


def test_a_statistic_missing_on_a_request_leaves_its_martingale_where_it_was() -> None:
    null = np.array([0.0, 0.0, 0.0])
    with_gap, _ = log_wealth_path(np.array([[1.0], [np.nan], [1.0]]), [null])
    without, _ = log_wealth_path(np.array([[1.0], [1.0]]), [null])
    assert with_gap[1] == with_gap[0] and with_gap[2] == pytest.approx(without[1])


def _item(text: str, tokens: list[int], lps: list[float], prompt: int | None = None) -> Item:
    return Item(
        id="x",
        input="q",
        text=text,
        sha256="",
        token_ids=tokens,
        token_source="engine",
        n_tokens=len(tokens),
        logprobs=[(str(t), lp, []) for t, lp in zip(tokens, lps, strict=True)],
        metadata={"engine": {"prompt_tokens": prompt}} if prompt is not None else {},
    )


def test_pair_statistics_on_the_shared_prefix() -> None:
    ref = _item("abcd", [1, 2, 3, 4], [-0.1, -0.2, -0.3, -0.4], prompt=10)
    other = _item("abxy", [1, 2, 9, 9], [-0.3, -0.1, -1.0, -1.0], prompt=12)
    p = verify.pair(ref, other)
    assert p.shared == 2 and not p.identical
    assert p.diffs == pytest.approx((0.2, -0.1))
    shift, distance, divergence, prompt = p.values[:4]
    assert shift == pytest.approx(0.05) and distance == pytest.approx(0.15)
    assert divergence == pytest.approx(0.5) and prompt == 2.0
    same = verify.pair(ref, ref)
    assert same.values[:4] == (0.0, 0.0, 0.0, 0.0) and same.identical
    assert all(math.isnan(v) for v in same.values[4:])  # nothing scored teacher-forced


def test_teacher_forced_statistics_cover_every_token_of_the_reference() -> None:
    ref = _item("abcd", [1, 2, 3, 4], [-0.1, -0.2, -0.3, -0.4])
    other = _item("xbcd", [7, 2, 3, 4], [-0.5, -0.2, -0.3, -0.4])  # diverged at the first token
    scored = _item("abcd", [1, 2, 3, 4], [-0.3, -0.4, -0.1, -0.4])
    values = verify.pair(ref, other, scored).values
    assert math.isnan(values[0]) and math.isnan(values[1])  # no shared token: not compared
    assert values[4] == pytest.approx((0.2 + 0.2 - 0.2 + 0.0) / 4)
    assert values[5] == pytest.approx(0.6 / 4)
    wrong = _item("abce", [1, 2, 3, 5], [-0.3, -0.4, -0.1, -0.4])  # another sequence was scored
    assert math.isnan(verify.pair(ref, other, wrong).values[4])
    # the same ids, other token texts: the ids were retokenized and split the text otherwise
    split = Item(
        **{**{f: getattr(scored, f) for f in scored.__struct_fields__}, "logprobs": [("ab", -0.3, [])] * 4}
    )
    assert math.isnan(verify.pair(ref, other, split).values[4])


def test_a_side_without_prompt_tokens_or_logprobs_leaves_those_statistics_out() -> None:
    ref = _item("ab", [1, 2], [-0.1, -0.2])
    bare = Item(id="x", input="q", text="ab", sha256="")
    values = verify.pair(ref, bare).values
    assert all(math.isnan(v) for v in values)


def test_shape_rules() -> None:
    either = "precision change or different weights"
    base = verify.evidence([verify.pair(_item("a", [1], [-0.1], 5), _item("b", [1], [-0.3], 5))])
    assert verify.shape(base, null_prompt_mismatch=False) == either
    template = verify.evidence([verify.pair(_item("a", [1], [-0.1], 5), _item("a", [1], [-0.1], 7))])
    assert verify.shape(template, null_prompt_mismatch=False) == "different template"
    assert verify.shape(template, null_prompt_mismatch=True) == either
    # The size of the shift names neither: measured, other weights under the same tokenizer moved
    # the shared tokens as much as a Q4_K_M of another model and less than its Q2_K (mean |d|
    # 0.075 against 0.075 and 0.195), so a large shift is not read as "different weights" any
    # more than a small one is.
    far = verify.evidence([verify.pair(_item("a", [1], [-0.1], 5), _item("b", [1], [-2.0], 5))])
    assert verify.shape(far, null_prompt_mismatch=False) == either
    # no token shared from the start: nothing to say about the logprobs
    apart = verify.evidence([verify.pair(_item("a", [1], [-0.1], 5), _item("b", [2], [-0.1], 5))])
    assert apart.distance_mean is None
    assert verify.shape(apart, null_prompt_mismatch=False) == "unclear"


def test_a_reference_that_never_moved_is_called_still() -> None:
    ref = _item("ab", [1, 2], [-0.1, -0.2], prompt=5)
    same = verify.Calibration(runs=2, pairs=(verify.pair(ref, ref),))
    assert verify.still(same)
    moved = _item("ab", [1, 2], [-0.1, -0.25], prompt=5)  # the same text, one logprob moved
    assert not verify.still(
        verify.Calibration(runs=2, pairs=(verify.pair(ref, ref), verify.pair(ref, moved)))
    )
