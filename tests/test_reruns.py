"""The speedup's interval across reruns, on the committed llama-server sweeps (real runs on an
H200, docs/studies/gpu-h200-load): with repeats it is a t interval over per-run throughputs; with one run
each the report says the interval covers item sampling only."""

from __future__ import annotations

import math
import tarfile
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from servediff.compare import reruns
from servediff.compare import speed as sp
from servediff.compare.loader import load
from servediff.records import read_run
from servediff.report import render, wording
from servediff.report.assembly import build

DOCS = Path(__file__).resolve().parents[1] / "docs" / "studies" / "gpu-h200-load"
NP32 = "speed/sweep/np32.287b2f410a/prompts.4947c685.c1.r{}.jsonl"
NP32_BS = "speed/sweep/np32-bs.feb0ab0d18/prompts.4947c685.c1.r{}.jsonl"
FIRST = "load/sweep/np32.d6a523ae67/prompts.4947c685.c1.r{}.jsonl"  # the first session's sweep


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sweeps")
    for name in ("sweep2.tar.xz", "study.tar.xz"):
        with tarfile.open(DOCS / name) as tar:
            tar.extractall(folder, filter="data")
    return folder


def runs(folder: Path, pattern: str, repeats: tuple[int, ...] = (1, 2)) -> list[sp.Items]:
    return [sp.run_items(read_run(folder / pattern.format(r)), 1) for r in repeats]


def test_a_rerun_lands_outside_the_item_interval_of_one_run(sweeps: Path) -> None:
    """llama-server at 1 in flight, the same configuration run twice with identical outputs:
    272 and 326 tokens/s. One run against the other, the item bootstrap says 1.15×–1.24×, an
    interval that excludes the truth (1). That interval is all one run each allows, so it is
    kept but labelled."""
    one, two = runs(sweeps, FIRST)
    keys = reruns.common_keys([one, two])
    assert [round(x) for x in reruns.run_rates([one, two], keys)] == [272, 326]
    s = reruns.speedup([one], [two])
    assert s is not None and s.basis == "items" and s.runs == (1, 1)
    assert not s.low <= 1.0 <= s.high  # why the report must not present it as a rerun interval


def test_with_repeats_the_interval_is_welchs_over_per_run_throughputs(sweeps: Path) -> None:
    """np32 against np32-bs (backend sampling), two runs each: the interval is Welch's t on the
    log per-run throughputs, as scipy computes it."""
    a, b = runs(sweeps, NP32), runs(sweeps, NP32_BS)
    s = reruns.speedup(a, b)
    assert s is not None and s.basis == "runs" and s.runs == (2, 2)
    keys = reruns.common_keys([*a, *b])
    la, lb = np.log(reruns.run_rates(a, keys)), np.log(reruns.run_rates(b, keys))
    ci = stats.ttest_ind(lb, la, equal_var=False).confidence_interval(0.95)
    assert s.value == pytest.approx(math.exp(lb.mean() - la.mean()), rel=1e-12)
    assert (s.low, s.high) == (
        pytest.approx(math.exp(ci.low), rel=1e-9),
        pytest.approx(math.exp(ci.high), rel=1e-9),
    )
    assert 1.7 < s.low < s.value < s.high < 1.9


def test_one_side_run_once_borrows_the_other_sides_spread(sweeps: Path) -> None:
    """Two runs of A, one of B: Student's t with A's run-to-run spread (1 degree of freedom)."""
    a, b = runs(sweeps, FIRST), runs(sweeps, NP32, (1,))
    s = reruns.speedup(a, b)
    assert s is not None and s.basis == "runs" and s.runs == (2, 1)
    keys = reruns.common_keys([*a, *b])
    la, lb = np.log(reruns.run_rates(a, keys)), np.log(reruns.run_rates(b, keys))
    half = stats.t.ppf(0.975, 1) * la.std(ddof=1) * math.sqrt(1 / 2 + 1)
    diff = lb.mean() - la.mean()
    assert (math.log(s.low), math.log(s.high)) == (pytest.approx(diff - half), pytest.approx(diff + half))


def test_the_report_says_one_run_each_and_claims_no_direction(sweeps: Path) -> None:
    """The second session's configurations ran once each (np32 against np32-bs): the verdict and
    the Speed table give the ratio, the item interval and the words that it covers item sampling
    only; neither calls it faster or slower."""
    files = [sweeps / "speed/runs/np32-bs.feb0ab0d18/prompts.4947c685.r1.jsonl"]
    files += [sweeps / "speed/runs/np32.287b2f410a/prompts.4947c685.r1.jsonl"]
    s, options = load(files)
    text = render.markdown(build(s, options))
    (verdict,) = [x for x in text.splitlines() if x.startswith("| `np32` | `np32-bs` |")]
    assert wording.ONE_RUN_EACH in verdict
    (row,) = [x for x in text.splitlines() if x.startswith("| prompts | `np32` |")]
    assert wording.ONE_RUN_EACH in row and "faster" not in row and "slower" not in row
