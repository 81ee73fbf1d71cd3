"""servediff's full-vocabulary KL against llama.cpp's own ``llama-perplexity --kl-divergence``.

Same two GGUF files (the shipped Q4_1 and a Q8_0 requantized from it), same text, same chunks
and scored positions. The two cannot be bit-identical: llama-perplexity stores its base
log-probabilities as uint16 (a 2.4e-4-nat grid; tokens more than 16 nats below the top are
dropped, and a next token down there is clamped), and the binary and the Python binding bundle
different llama.cpp builds. The cross-build row (the same file through both builds) measures
the second effect; the tolerances below are a few times what was measured, not chosen to pass.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from servediff.engines.knobs import default_model_path
from tests.helpers.scripts import load_script

pytestmark = pytest.mark.llama_server

ROOT = Path(__file__).resolve().parent.parent


def _crosscheck() -> ModuleType:
    return load_script(ROOT / "bench" / "kl_crosscheck.py")


@pytest.fixture(scope="module")
def perplexity() -> Path:
    from servediff.engines.llama_server import ToolMissing, find_tool

    try:
        return find_tool("llama-perplexity")
    except ToolMissing as exc:
        pytest.skip(str(exc))


def test_parse_rejects_output_without_the_kl_block() -> None:
    kc = _crosscheck()
    with pytest.raises(ValueError, match="kl_mean"):
        kc.parse_perplexity("====== Perplexity statistics ======\nMean PPL(Q) : 10.0\n")


def test_full_vocabulary_kl_agrees_with_llama_perplexity(perplexity: Path, tmp_path: Path) -> None:
    import llama_cpp

    kc = _crosscheck()
    base = default_model_path()
    q8 = kc.requantise(base, tmp_path / "q8_0.gguf", llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0)
    # 3 chunks of 128 tokens: 189 scored positions (llama-perplexity prints no statistics below 100)
    rows = kc.compare(perplexity, [("A/A", base, base), ("Q8_0", base, q8)], 128, 3, tmp_path)
    by_pair = {r["pair"]: r for r in rows}

    aa = by_pair["A/A"]
    assert aa["servediff"].kl_mean == 0.0 and aa["servediff"].same_top_pct == 100.0
    # llama-perplexity's own floor: its uint16 grid, far below any configuration effect
    assert aa["llama-perplexity"].kl_mean < 1e-4
    # The same file through both llama.cpp builds agrees to that grid: what follows compares
    # two implementations of the statistics, not two builds' arithmetic.
    builds = by_pair["A/A, across builds"]["servediff"]
    assert builds.kl_mean < 1e-4 and builds.same_top_pct == 100.0
    # llama-perplexity's A/A ln(PPL ratio) is not 0: a next token below its stored floor
    # (max − 16 nats) is clamped there. Clamping the same way reproduces it.
    assert builds.ln_ppl_ratio == pytest.approx(aa["llama-perplexity"].ln_ppl_ratio, abs=1e-4)

    ours, theirs = by_pair["Q8_0"]["servediff"], by_pair["Q8_0"]["llama-perplexity"]
    assert ours.kl_mean > 1e-3  # a real effect, ten times the floor and more
    assert ours.kl_mean == pytest.approx(theirs.kl_mean, rel=0.02)
    assert ours.kl_median == pytest.approx(theirs.kl_median, rel=0.05)
    assert ours.kl_p99 == pytest.approx(theirs.kl_p99, rel=0.05)
    assert ours.same_top_pct == pytest.approx(theirs.same_top_pct, abs=0.6)
    # once llama-perplexity's clamp (its A/A value) is taken out, the ln PPL ratios agree
    assert ours.ln_ppl_ratio == pytest.approx(
        theirs.ln_ppl_ratio - aa["llama-perplexity"].ln_ppl_ratio, abs=1e-3
    )
