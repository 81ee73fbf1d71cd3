"""Mechanism of a divergence on constructed records: alignment, classes, drift, hazard."""

from __future__ import annotations

import math
from typing import Any

import pytest
from statsmodels.stats.rates import confint_poisson

from servediff.compare.divergence import Point, first_token, survival_time
from servediff.compare.mechanism import (
    NEAR_TIE,
    NOT_MEASURED,
    RANK_CHANGE,
    RECORDED,
    UNEXPLAINED,
    Distribution,
    ProbeEntry,
    classify,
    drift,
    explain,
    precision,
    shared_deltas,
)
from servediff.compare.stats import hazard as hz
from servediff.records import Item, sha256_text

# --- hazard -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "low", "high"),
    # Exact (Garwood) 95 % limits for a Poisson count, as tabulated in textbooks.
    [(1, 0.0253, 5.5716), (2, 0.2422, 7.2247), (10, 4.7954, 18.3904), (20, 12.2165, 30.8884)],
)
def test_poisson_interval_matches_the_textbook_table(events: int, low: float, high: float) -> None:
    lo, hi = hz.poisson_rate_interval(events, 1.0)
    assert lo == pytest.approx(low, abs=1e-4) and hi == pytest.approx(high, abs=1e-4)
    # and scales with the exposure: a rate, not a count
    lo2, hi2 = hz.poisson_rate_interval(events, 1000.0)
    assert (lo2, hi2) == pytest.approx((lo / 1000, hi / 1000))
    assert (lo2, hi2) == pytest.approx(confint_poisson(events, 1000, method="exact-c"))


def test_no_event_gives_an_upper_bound_only() -> None:
    h = hz.estimate(0, 3000)
    assert h.upper_bound_only and h.rate == 0 and h.lower == 0
    # one-sided 95 %: −ln(0.05) / E, the "rule of three"
    assert h.upper == pytest.approx(-math.log(0.05) / 3000)
    assert h.per_1000()[2] == pytest.approx(0.9986, abs=1e-4)
    assert h.p_within(300)[2] == pytest.approx(1 - 0.05**0.1)


def test_implied_probability_of_diverging_within_l_tokens() -> None:
    h = hz.estimate(6, 2000)  # 3 per 1,000 tokens
    p1, p300 = h.p_within(1)[0], h.p_within(300)[0]
    assert p1 == pytest.approx(1 - math.exp(-0.003)) and p300 == pytest.approx(1 - math.exp(-0.9))
    lo, hi = h.p_within(10)[1:]
    assert lo < h.p_within(10)[0] < hi
    assert hz.survival([(15, True), (300, False), (1, True)]) == (2, 316)
    with pytest.raises(ValueError):
        hz.poisson_rate_interval(1, 0)


# --- constructed records ----------------------------------------------------------------------


def item(tokens: list[str], ids: list[int] | None = None, tops: list[Any] | None = None, **kw: Any) -> Item:
    text = "".join(tokens)
    lps = None
    if tops is not None:
        lps = [(t, top[0][1] if top[0][0] == t else -5.0, top) for t, top in zip(tokens, tops)]
    return Item(
        id="x",
        input=[{"role": "user", "content": "hi"}],
        text=text,
        sha256=sha256_text(text),
        n_tokens=len(tokens),
        token_ids=ids,
        tokens=None if lps else tokens,
        token_source="engine" if ids else None,
        logprobs=lps,
        **kw,
    )


def test_first_token_prefers_engine_ids_then_texts() -> None:
    a = item(["The", " cat"], ids=[1, 2])
    b = item(["The", " car"], ids=[1, 3])
    p = first_token("x", a, b)
    assert p == Point("x", 1, " cat", " car", 2, 3, "token ids (engine)")
    assert first_token("x", a, a) is None
    p2 = first_token("x", item(["The", " cat"]), item(["The", " car"]))
    assert p2 is not None and (p2.index, p2.alignment, p2.a_id) == (1, "token text (engine)", None)
    # one side stopped: its token at the divergence is the end of the sequence (None)
    p3 = first_token("x", item(["The"], ids=[1]), item(["The", " end"], ids=[1, 4]))
    assert p3 is not None and (p3.index, p3.a_token, p3.b_token) == (1, None, " end")
    p4 = first_token("x", item(["ab"]), Item(id="x", input="p", text="ac", sha256=""))
    assert p4 is not None and p4.index is None and p4.alignment == "none"


def dist(*pairs: tuple[str, float]) -> Distribution:
    return Distribution(tuple(pairs), RECORDED)


P = Point("x", 3, "A", "B", None, None, "token text (engine)")


def test_near_tie_flip() -> None:
    a = dist(("A", -0.70), ("B", -0.75), ("C", -3.0))
    b = dist(("B", -0.69), ("A", -0.77), ("C", -3.1))
    assert classify(P, a, b, 0.1) == (NEAR_TIE, "")
    # the same numbers under a stricter threshold are a rank change
    assert classify(P, a, b, 0.01)[0] == RANK_CHANGE


def test_rank_change_when_the_gap_is_large_or_the_top_two_differ() -> None:
    a = dist(("A", -0.2), ("B", -1.9), ("C", -3.0))
    b = dist(("B", -0.5), ("A", -1.2))
    assert classify(P, a, b, 0.1)[0] == RANK_CHANGE
    # a small gap, but B's token is A's third: not a two-way tie
    a3 = dist(("A", -1.00), ("C", -1.02), ("B", -1.05))
    assert classify(P, a3, b, 0.1)[0] == RANK_CHANGE


def test_unexplained_cases_say_why() -> None:
    a = dist(("A", -0.2), ("C", -1.9))
    cls, note = classify(P, a, dist(("B", -0.1), ("A", -2.0)), 0.1)
    assert cls == UNEXPLAINED and "B's token is not in A's top-2" in note
    cls, note = classify(P, dist(("A", -0.2), ("B", -0.25)), dist(("B", -0.1), ("C", -2.0)), 0.1)
    assert cls == UNEXPLAINED and "A's token is not in B's top-2" in note
    assert classify(P, None, None, 0.1)[0] == NOT_MEASURED


def test_end_of_sequence_matches_by_id_or_empty_text() -> None:
    p = Point("x", 1, None, " end", None, 4, "token ids (engine)")
    a = Distribution((("", -0.5), (" end", -0.55)), "probe: replay", ids=(2, 4))
    b = dist((" end", -0.4), ("", -0.6))
    assert classify(p, a, b, 0.1)[0] == NEAR_TIE


def test_explain_prefers_recorded_logprobs_and_falls_back_to_the_probe() -> None:
    tops_a = [[("The", -0.1), ("A", -2.0)], [(" cat", -0.6), (" car", -0.65)]]
    tops_b = [[("The", -0.1), ("A", -2.1)], [(" car", -0.6), (" cat", -0.66)]]
    a, b = item(["The", " cat"], tops=tops_a), item(["The", " car"], tops=tops_b)
    p = first_token("x", a, b)
    assert p is not None
    probe = ProbeEntry("x", "a", 1, ((" cat", -0.61), (" car", -0.65)), None, "embedded replay")
    e = explain(p, (a, b), {("x", "a"): probe})
    assert e.cls == NEAR_TIE and e.a is not None and e.a.source == RECORDED
    assert e.gap_a == pytest.approx(0.05) and e.gap_b == pytest.approx(0.06)
    assert e.a_probe is not None and e.a_probe.gap == pytest.approx(0.04)
    assert e.shift_a_token == pytest.approx(-0.06) and e.shift_b_token == pytest.approx(0.05)
    # without logprobs in the runs, the probe supplies A's numbers
    bare_a, bare_b = item(["The", " cat"]), item(["The", " car"])
    e2 = explain(p, (bare_a, bare_b), {("x", "a"): probe})
    assert e2.a is not None and e2.a.source == "probe: embedded replay" and e2.b is None
    assert e2.cls == NEAR_TIE and "from A alone" in e2.note
    e3 = explain(p, (bare_a, bare_b), {})
    assert e3.cls == NOT_MEASURED and "did not record logprobs; no probe" in e3.note


def test_drift_survival_and_precision() -> None:
    tops = [[("a", -0.1), ("b", -2.0)], [("b", -0.5), ("c", -0.5)], [("c", -0.3), ("d", -0.9)]]
    a = item(["a", "b", "c"], tops=tops)
    shifted = [[(t, v - 0.01 * i) for t, v in top] for i, top in enumerate(tops)]
    b = item(["a", "b", "x"], tops=[*shifted[:2], [("x", -0.3), ("c", -0.4)]])
    assert shared_deltas(a, b, 2) == pytest.approx([0.0, 0.01])
    d = drift([0.0, 0.01, 0.02, 0.5])
    assert d is not None and d.n == 4 and d.max == 0.5 and d.median == pytest.approx(0.015)
    assert drift([]) is None
    p = first_token("x", a, b)
    assert survival_time(a, b, p) == (3, True) and survival_time(a, a, None) == (3, False)
    prec = precision([a])
    assert (prec.positions, prec.exact_ties) == (3, 1) and prec.coarse
    assert not precision([a], "float32").coarse


def write_run(path: Any, label: str, tokens: list[str], tops: list[Any] | None) -> None:
    from servediff.records import SuiteInfo, item_line, make_header, make_item
    from servediff.types import Completion, SamplingParams, TokenLogprob

    suite = SuiteInfo(name="s", version="1", source="t", data_sha256="0", content_sha256="0", item_ids=["x"])
    header = make_header(
        label=label,
        repeat=1,
        engine={"kind": "http", "model": "m"},
        sampling=SamplingParams(top_logprobs=2),
        suite=suite,
        concurrency=1,
    )
    lps = None if tops is None else [TokenLogprob(t, top[0][1], tuple(top)) for t, top in zip(tokens, tops)]
    c = Completion(
        "x", text="".join(tokens), n_tokens=len(tokens), tokens=tokens, logprobs=lps, token_source="engine"
    )
    path.write_text(header.model_dump_json() + "\n" + item_line(make_item(c, "p", None, {})))


def test_compare_reads_a_probe_record_and_the_threshold(tmp_path: Any) -> None:
    import json

    from servediff.cli import main
    from servediff.records.probes import PROBE_RECORD

    a, b, probes = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "p.jsonl"
    write_run(a, "stock", ["The", " cat"], [[("The", -0.1), ("A", -2.0)], [(" cat", -0.6), (" car", -0.68)]])
    write_run(b, "tuned", ["The", " car"], [[("The", -0.1), ("A", -2.0)], [(" car", -0.6), (" cat", -0.7)]])
    ref = {"label": "stock", "repeat": 1, "path": str(a), "fingerprint": "f"}
    head = {
        "record": PROBE_RECORD,
        "tool_version": "0",
        "created": "now",
        "suite": "s",
        "a": ref,
        "b": {**ref, "label": "tuned", "path": str(b)},
        "engines": {},
        "k": 2,
    }
    line = {
        "item_id": "x",
        "side": "a",
        "token_index": 1,
        "top": [[" cat", -0.6], [" car", -0.68]],
        "method": "one pass",
    }
    probes.write_text(json.dumps(head) + "\n" + json.dumps(line) + "\n")
    md = tmp_path / "r.md"
    assert main(["compare", str(a), str(b), str(probes), "--md", str(md)]) == 0
    text = md.read_text()
    assert (
        "near-tie flip" in text
        and "0.0800" in text
        and "differs from the recorded one by at most 0 nats" in text
    )
    assert main(["compare", str(a), str(b), str(probes), "--md", str(md), "--near-tie", "0.05"]) == 0
    assert "rank change" in md.read_text()


def test_probe_records_merge_per_side_and_match_either_orientation(tmp_path: Any) -> None:
    """An experiment writes one probe record per side; compare merges them, and a pair built the
    other way round (files given in another order) still finds them, sides swapped."""
    import json

    from servediff.cli import main
    from servediff.records.probes import PROBE_RECORD

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    # no logprobs recorded in the runs: every number must come from the probes
    write_run(a, "stock", ["The", " cat"], None)
    write_run(b, "tuned", ["The", " car"], None)
    ref = {"label": "stock", "repeat": 1, "path": str(a), "fingerprint": "f"}
    head = {"record": PROBE_RECORD, "tool_version": "0", "created": "now", "suite": "s", "a": ref,
            "b": {**ref, "label": "tuned", "path": str(b)}, "engines": {}, "k": 2}  # fmt: skip
    tops = {"a": [[" cat", -0.60], [" car", -0.68]], "b": [[" car", -0.60], [" cat", -0.75]]}
    for side, top in tops.items():
        line = {"item_id": "x", "side": side, "token_index": 1, "top": top, "method": "replay"}
        (tmp_path / f"p.{side}.jsonl").write_text(
            json.dumps({**head, "sides": side}) + "\n" + json.dumps(line) + "\n"
        )
    md = tmp_path / "r.md"
    probes = [str(tmp_path / "p.a.jsonl"), str(tmp_path / "p.b.jsonl")]
    assert main(["compare", str(a), str(b), *probes, "--md", str(md)]) == 0
    row = next(x for x in md.read_text().splitlines() if x.startswith("| `x` | 1 |"))
    assert "0.0800 | 0.1500 |" in row and "near-tie flip" in row
    assert main(["compare", str(b), str(a), *probes, "--md", str(md)]) == 0  # tuned is A now
    row = next(x for x in md.read_text().splitlines() if x.startswith("| `x` | 1 |"))
    assert "0.1500 | 0.0800 |" in row and "rank change" in row


def test_the_horizons_stop_at_the_longest_completion_compared() -> None:
    """P(an L-token completion diverges) only for lengths the compared completions reached: the
    constant rate cannot be checked past them (MMLU answers of at most 16 tokens said nothing
    about token 300, yet the report printed P(a 300-token completion diverges))."""
    h = hz.estimate(2, 160)
    short = hz.HazardView.of(h, longest=16)
    assert short is not None and [x.length for x in short.horizons] == [1, 10, 16]
    assert short.horizons[-1].p == pytest.approx(-math.expm1(-2 / 160 * 16))
    assert [x.length for x in hz.HazardView.of(h, longest=10).horizons] == [1, 10]  # type: ignore[union-attr]
    assert [x.length for x in hz.HazardView.of(h, longest=1000).horizons] == [1, 10, 300]  # type: ignore[union-attr]
    assert [x.length for x in hz.HazardView.of(h).horizons] == [1, 10, 300]  # type: ignore[union-attr]
