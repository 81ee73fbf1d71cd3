"""The audit's statistics against scipy, its comparison on constructed pairs, and its plans."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from servediff.audit.names import ENGINES
from servediff.audit.promises import PROMISES, experiment_toml
from servediff.audit.workload import PREFIX_LENGTHS, PlanOptions, plan, prompts_for
from servediff.compare.stats.agreement import Output, compare, distinct, first_difference
from servediff.compare.stats.binomial import clopper_pearson, throughput_ratio, upper_bound
from servediff.experiment.spec import load_experiment


@pytest.mark.parametrize(("k", "n"), [(0, 1), (0, 30), (1, 30), (5, 100), (17, 800), (100, 100), (0, 1000)])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_clopper_pearson_matches_scipy(k: int, n: int, confidence: float) -> None:
    two = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    got = clopper_pearson(k, n, confidence)
    assert got.low == pytest.approx(two.low, abs=1e-12) and got.high == pytest.approx(two.high, rel=1e-9)
    one = stats.binomtest(k, n, alternative="less").proportion_ci(confidence_level=confidence, method="exact")
    assert upper_bound(k, n, confidence).high == pytest.approx(one.high, rel=1e-9)


def test_rule_of_three_after_1000_clean_trials() -> None:
    b = upper_bound(0, 1000)
    assert b.high == pytest.approx(1 - 0.05 ** (1 / 1000)) and 0.0029 < b.high < 0.0030  # "≤ 0.3 %"
    assert b.high == pytest.approx(3 / 1000, rel=0.01)


def test_bounds_refuse_impossible_counts() -> None:
    for k, n in ((1, 0), (-1, 5), (6, 5)):
        with pytest.raises(ValueError):
            upper_bound(k, n)
    with pytest.raises(ValueError):
        clopper_pearson(0, 10, 1.0)


def test_throughput_ratio_is_welch_on_log_throughput() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.lognormal(4.0, 0.10, 6), rng.lognormal(4.5, 0.25, 5)
    r = throughput_ratio(list(a), list(b))
    assert r is not None
    welch = stats.ttest_ind(np.log(a), np.log(b), equal_var=False).confidence_interval(0.95)
    assert math.log(r.low) == pytest.approx(welch.low, rel=1e-9)
    assert math.log(r.high) == pytest.approx(welch.high, rel=1e-9)
    assert r.ratio == pytest.approx(math.exp(np.log(a).mean() - np.log(b).mean()))
    assert throughput_ratio([10.0], [5.0, 6.0]) is None  # one round: no interval


def out(ids: list[int], lps: list[float] | None = None, text: str | None = None) -> Output:
    tokens = tuple(f"t{i}" for i in ids)
    tops = tuple(((f"t{i}", lp), ("t99", lp - 0.03)) for i, lp in zip(ids, lps)) if lps else None
    return Output(
        text if text is not None else "".join(tokens), tuple(ids), tokens, tuple(lps) if lps else None, tops
    )


def test_identical_outputs_with_bit_equal_logprobs() -> None:
    a = compare(out([1, 2, 3], [-0.5, -0.25, -1.0]), out([1, 2, 3], [-0.5, -0.25, -1.0]))
    assert a.identical and a.basis == "token ids" and a.first_diff is None
    assert a.logprobs_equal and a.logprobs_compared == 3 and a.max_logprob_diff == 0.0


def test_same_tokens_with_drifting_logprobs_are_identical_but_not_bit_equal() -> None:
    a = compare(out([1, 2, 3], [-0.5, -0.25, -1.0]), out([1, 2, 3], [-0.5, -0.2500001, -1.0]))
    assert a.identical and a.logprobs_equal is False
    assert a.max_logprob_diff == pytest.approx(1e-7)


def test_a_flip_names_its_position_tokens_and_gap() -> None:
    ref = out([1, 2, 3, 4], [-0.1, -0.2, -0.7, -0.1])
    trial = out([1, 2, 99, 5], [-0.1, -0.2, -0.72, -0.3])
    a = compare(ref, trial)
    assert not a.identical and a.first_diff == 2 and a.ref_token == "t3" and a.trial_token == "t99"
    assert a.gap == pytest.approx(0.03) and a.logprobs_compared == 2 and a.logprobs_equal


def test_text_bytes_when_no_tokens_and_said_so() -> None:
    a = compare(Output("héllo world"), Output("héllo word"))
    assert a.basis == "text bytes" and a.first_diff == 10 and a.gap is None
    assert first_difference([1, 2], [1, 2, 3]) == 2 and first_difference("ab", "ab") is None
    assert distinct([Output("a"), Output("a"), Output("b")]) == 2


def test_needle_plan_is_seeded_and_puts_one_needle_in_every_block() -> None:
    opts = PlanOptions(blocks=40, repeats=2, rounds=4, seed=7)
    p, again = plan("needle", (4, 8), opts), plan("needle", (4, 8), opts)
    assert p == again and p != plan("needle", (4, 8), PlanOptions(blocks=40, seed=8))
    assert len(p.alone) == 2 * len(p.prompts) and p.alone[0].id.endswith(".r1")
    for level, reqs in p.loaded.items():
        assert len(reqs) == 40 * level and len({r.id for r in reqs}) == len(reqs)
        needles = [r for r in reqs if r.needle]
        assert len(needles) == 40 and all(r.prompt == p.needle for r in needles)
        assert not any(r.prompt == p.needle for r in reqs if not r.needle)
        assert len({r.slot for r in needles}) > 1  # the needle moves around
        assert sorted({r.round for r in reqs}) == [0, 1, 2, 3]


def test_prefix_prompts_share_a_prefix_and_are_capped() -> None:
    full = prompts_for("prefix", 4097)
    assert [len(p.text) for p in full[1:]] == list(PREFIX_LENGTHS)
    assert all(full[-1].text.startswith(p.text) for p in full[1:])
    assert [len(p.text) for p in prompts_for("prefix", 600)[1:]] == [1, 511, 600]
    mixed = prompts_for("mixed", 4097)
    assert max(len(p.text) for p in mixed) > 10 * min(len(p.text) for p in mixed)
    with pytest.raises(ValueError):
        plan("needle", (1,), PlanOptions())


def test_every_engine_has_a_promise_profile_and_an_experiment(tmp_path: Path) -> None:
    assert set(PROMISES) == set(ENGINES)
    import tomllib

    for engine in ENGINES:
        exp = tomllib.loads(experiment_toml(engine, "m"))
        on, off = exp["configurations"]
        assert (on["label"], off["label"]) == ("promise", "control") and on != off
        path = tmp_path / f"{engine}.toml"
        path.write_text(experiment_toml(engine, "m"))
        launched = load_experiment(path)  # what `servediff audit --experiment` reads
        assert [c.label for c in launched.configurations] == ["promise", "control"]
        assert launched.config("promise").launch is not None
    assert tomllib.loads(experiment_toml("vllm", "m"))["configurations"][0]["env"] == {
        "VLLM_BATCH_INVARIANT": "1"
    }
    assert (
        "--enable-deterministic-inference"
        in tomllib.loads(experiment_toml("sglang", "m"))["configurations"][0]["launch"]
    )
