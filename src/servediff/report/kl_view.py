"""The report's teacher-forced divergence rows: scoring runs paired through the study.

A study groups scoring runs like any runs (by suite and label); each control (a configuration
against its own repeat: the noise floor) and each pair of configurations whose runs are scoring
runs becomes one ``KlRow``. The statistics are ``compare.kl``'s; nothing is computed here but
the pairing and the packing into the model.
"""

from __future__ import annotations

import numpy as np

from servediff.compare.kl import log_histogram, summarise
from servediff.compare.kl_runs import is_scoring, scoring_pair
from servediff.compare.speed import Interval
from servediff.compare.stats import Interval as Bounds
from servediff.compare.study import PairResult, Study
from servediff.record import Run
from servediff.report.model import KlRow


def is_scoring_pair(p: PairResult) -> bool:
    return is_scoring(p.a_run) and is_scoring(p.b_run)


def without_scoring_pairs(study: Study) -> Study:
    """The study less its scoring controls and pairs (the configurations stay: Method, Speed)."""
    return Study(
        study.configurations,
        tuple(p for p in study.controls if not is_scoring_pair(p)),
        tuple(p for p in study.pairs if not is_scoring_pair(p)),
        study.warnings,
    )


def rows(study: Study) -> tuple[KlRow, ...]:
    """A/A rows first (the noise floor), then the pairs, in the study's order."""
    return tuple(row(p) for p in (*study.controls, *study.pairs) if is_scoring_pair(p))


def row(p: PairResult) -> KlRow:
    seqs = scoring_pair(p.a_run, p.b_run)
    s = summarise(seqs)
    edges, counts = log_histogram(np.concatenate([q.kl for q in seqs]))
    return KlRow(
        suite=p.suite,
        a=p.a,
        b=p.b,
        kind=p.kind,
        checkpoint_a=_checkpoint(p.a_run),
        checkpoint_b=_checkpoint(p.b_run),
        top_k=min(p.a_run.header.sampling.top_logprobs, p.b_run.header.sampling.top_logprobs),
        sequences=s.n_sequences,
        positions=s.n_positions,
        kl_mean=_iv(s.kl_mean, s.kl_mean_ci),
        kl_max=s.kl_max,
        kl_percentiles=tuple(s.kl_percentiles.items()),
        same_top1=_iv(s.same_top1, s.same_top1_ci),
        dp_mean=_iv(s.dp_mean, s.dp_mean_ci),
        dp_rms=s.dp_rms,
        ln_ppl_ratio=_iv(s.ln_ppl_ratio, s.ln_ppl_ratio_ci),
        kl_hist_edges=edges,
        kl_hist_counts=counts,
    )


def _iv(value: float, ci: Bounds) -> Interval:
    return Interval(value=value, low=ci.low, high=ci.high)


def _checkpoint(run: Run) -> str:
    return str(run.header.engine.get("model") or "not recorded")
