"""Teacher-forced scoring runs on the embedded engine: records, exact KL, and the top-k bound."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import entropy

from servediff.cli import main
from servediff.compare.kl import divergence_exact, kl_exact, summarise
from servediff.compare.kl_runs import scoring_pair
from servediff.engines import EngineError
from servediff.engines.factory import EngineSpec, make_engine
from servediff.engines.knobs import CONFIGS
from servediff.engines.llamacpp import LlamaCppEngine
from servediff.engines.openai_http import HTTPOptions
from servediff.records import read_run
from servediff.scoring import scoring_suite

GSM8K = Path(__file__).parent / "data" / "gsm8k" / "test.jsonl"
ONE_THREAD = dataclasses.replace(CONFIGS["stock"], threads=1)
KV_Q8 = dataclasses.replace(ONE_THREAD, kv_cache_type="q8_0")
SUITE = scoring_suite("gsm8k", GSM8K, limit=3)


def _engine(knobs: object = ONE_THREAD) -> LlamaCppEngine:
    return LlamaCppEngine(knobs, label="t", scoring=True)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def matrices() -> Iterator[tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], list[list[int]]]]:
    """Full log-softmax matrices of three GSM8K solutions: stock twice (two engines) and KV q8_0."""
    out: list[list[np.ndarray]] = []
    nexts: list[list[int]] = []
    for knobs in (ONE_THREAD, ONE_THREAD, KV_Q8):
        with _engine(knobs) as e:
            tokens = [e.score_tokens(s) for s in SUITE.samples]
            out.append([e.score_matrix(ctx, cont) for ctx, cont in tokens])
            nexts = [cont for _, cont in tokens]
    yield out[0], out[1], out[2], nexts


def test_a_against_a_is_exactly_zero_on_two_engines(matrices: tuple) -> None:  # type: ignore[type-arg]
    a, a2, _, nexts = matrices
    seqs = [divergence_exact(x, y, n) for x, y, n in zip(a, a2, nexts)]
    s = summarise(seqs)
    assert s.kl_max == 0.0 and s.same_top1 == 1.0 and s.ln_ppl_ratio == 0.0


def test_exact_kl_on_real_logits_matches_scipy(matrices: tuple) -> None:  # type: ignore[type-arg]
    a, _, b, _ = matrices
    ours = kl_exact(a[0], b[0])
    ref = np.array([entropy(np.exp(x), np.exp(y)) for x, y in zip(a[0], b[0])])
    assert np.allclose(ours, ref, rtol=1e-7, atol=1e-12)
    assert ours.mean() > 0  # a quantised KV cache does change the distributions


@pytest.mark.parametrize("k", [5, 20])
def test_topk_tail_from_records_is_a_close_lower_bound(tmp_path: Path, matrices: tuple, k: int) -> None:  # type: ignore[type-arg]
    a, _, b, nexts = matrices
    exact = np.concatenate([kl_exact(x, y) for x, y in zip(a, b)])
    paths = []
    for label, kv in (("a", "f16"), ("b", "q8_0")):
        out = tmp_path / f"{label}.jsonl"
        argv = ["run", "--score", "gsm8k", "--data", str(GSM8K), "--limit", "3", "--threads", "1"]
        argv += ["--kv-cache-type", kv, "--top-logprobs", str(k), "--label", label, "--out", str(out)]
        assert main([*argv, "--no-progress"]) == 0
        paths.append(out)
    ra, rb = read_run(paths[0]), read_run(paths[1])
    assert ra.header.extra["mode"] == "score" and ra.header.engine["mode"] == "score"
    seqs = scoring_pair(ra, rb)
    assert [int(x.n) for x in seqs] == [len(n) for n in nexts]
    bound = np.concatenate([x.kl for x in seqs])
    # the records hold float logprobs of the same logits: the bound holds to rounding
    assert (bound <= exact + 1e-9).all()
    # Stated closeness on this model and pair (stock vs KV q8_0, 3 GSM8K solutions): the mean
    # top-k + tail KL is 70 % (k = 5) and 85 % (k = 20) of the exact mean; asserted with room.
    assert bound.mean() >= (0.5 if k == 5 else 0.75) * exact.mean()
    same = np.concatenate([x.argmax(1) == y.argmax(1) for x, y in zip(a, b)])
    assert np.array_equal(np.concatenate([x.same_top1 for x in seqs]), same)


def test_scoring_resumes_and_records_errors_per_item(tmp_path: Path) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text("The cat sat on the mat.\n\n" + "word " * 3000 + "\nTwo plus two is four.\n")
    out = tmp_path / "s.jsonl"
    argv = ["run", "--score", str(texts), "--threads", "1", "--out", str(out), "--no-progress"]
    assert main(argv) == 2  # the long line does not fit n_ctx: recorded, not fatal
    run = read_run(out)
    assert sorted(run.done_ids()) == ["line-00001", "line-00004"]
    assert "n_ctx" in (run.items["line-00003"].error or "")
    item = run.items["line-00001"]
    assert item.logprobs is not None and len(item.logprobs[0][2]) == 20
    assert main(argv) == 2  # resume: only the failed item runs again
    assert len(out.read_text().splitlines()) == 1 + 3 + 1


def test_on_policy_corpus_scores_the_controls_own_completion(tmp_path: Path) -> None:
    gen = tmp_path / "gen.jsonl"
    base = ["--threads", "1", "--no-progress", "--label", "stock"]
    assert (
        main(["run", "--suite", "prompts", "--limit", "2", "--max-tokens", "12", "--out", str(gen), *base])
        == 0
    )
    out = tmp_path / "score.jsonl"
    assert main(["run", "--score", str(gen), "--top-logprobs", "3", "--out", str(out), *base]) == 0
    generated, scored = read_run(gen), read_run(out)
    for item_id, item in scored.items.items():
        assert item.token_ids == generated.items[item_id].token_ids
        assert item.logprobs is not None
        # the control's greedy choice is (almost always: one batched pass is not step-by-step
        # decoding) the top-1 of its own teacher-forced distribution
        agree = [top[0][0] == tok for tok, _, top in item.logprobs]
        assert sum(agree) >= 0.9 * len(agree)


def test_bad_corpus_and_unreachable_scoring_server_are_clear_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"txt": "no"}\n')
    assert main(["run", "--score", str(bad), "--out", str(tmp_path / "o.jsonl")]) == 2
    assert f"{bad}:2" in capsys.readouterr().err
    # every engine kind scores now (a server through its API): an unreachable one says so
    with pytest.raises(EngineError, match="cannot reach"):
        make_engine(EngineSpec("h", http=HTTPOptions(base_url="http://127.0.0.1:9"), scoring=True))
