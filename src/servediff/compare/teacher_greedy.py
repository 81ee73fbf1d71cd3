"""Teacher-forced argmax against step-by-step greedy decoding, on the same token sequences.

    python scripts/gpu_kl_study.py --out out/gpu-kl      # one row per configuration

A greedy run chose each token as the argmax of logits computed step by step (the prompt once,
then one token per forward pass, reading the KV cache). A scoring run of that run's own
completions (the on-policy corpus, under the same configuration) recomputes every position in
one forward pass over prompt + completion. Mathematically the two are the same distribution; in
floating point they are different computations (other matrix shapes, other kernels, other
summation orders), so where the greedy choice was a near-tie the one-pass argmax can differ. How
often it does is the error of using one-pass scores (``prompt_logprobs``, ``echo``) as a proxy
for what greedy decoding would do.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from servediff.compare.kl_runs import positions
from servediff.records import Run


@dataclass(frozen=True, slots=True)
class GreedyAgreement:
    """Positions where the teacher-forced argmax is not the token greedy decoding chose.

    ``gaps``: the step-by-step top-1 − top-2 logprob gap (nats) at each disagreeing position,
    when the greedy run recorded at least two alternatives; ``chosen_diffs``: per position,
    |logprob of the greedy token step by step − the same teacher-forced|.
    """

    sequences: int
    positions: int
    disagreements: int
    sequences_with_disagreement: int
    first_positions: tuple[int, ...]
    gaps: tuple[float, ...]
    chosen_diffs: tuple[float, ...]

    @property
    def share(self) -> float:
        return self.disagreements / self.positions if self.positions else float("nan")

    @property
    def chosen_diff_mean(self) -> float:
        return statistics.fmean(self.chosen_diffs) if self.chosen_diffs else float("nan")

    @property
    def chosen_diff_max(self) -> float:
        return max(self.chosen_diffs, default=float("nan"))


def greedy_agreement(generated: Run, scored: Run) -> GreedyAgreement:
    """Compare a greedy run with the scoring run of its own completions, item by item.

    Only items finished in both and scored on exactly the generated tokens count; a scoring run
    of another run's completions is refused (the comparison would be meaningless).
    """
    if generated.header.sampling.temperature != 0:
        raise ValueError(f"{generated.path}: not a greedy run")
    shared = sorted(generated.done_ids() & scored.done_ids())
    n_pos = n_dis = 0
    firsts: list[int] = []
    gaps: list[float] = []
    diffs: list[float] = []
    for item_id in shared:
        g, s = generated.items[item_id], scored.items[item_id]
        if g.token_ids != s.token_ids:
            raise ValueError(f"item {item_id!r}: {scored.path} did not score {generated.path}'s tokens")
        tops, chosen_tf = positions(s)
        ids = g.token_ids or []
        steps = g.logprobs or []
        bad = [j for j, (t, top) in enumerate(zip(ids, tops)) if next(iter(top), None) != t]  # best first
        n_pos += len(ids)
        n_dis += len(bad)
        if bad:
            firsts.append(bad[0])
        gaps += [
            steps[j][2][0][1] - steps[j][2][1][1] for j in bad if j < len(steps) and len(steps[j][2]) > 1
        ]
        diffs += [abs(step[1] - tf) for step, tf in zip(steps, chosen_tf)]
    return GreedyAgreement(len(shared), n_pos, n_dis, len(firsts), tuple(firsts), tuple(gaps), tuple(diffs))
