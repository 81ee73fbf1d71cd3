"""Scoring throughput: servediff's embedded scoring run vs a bare llama-cpp-python loop.

    .venv/bin/python bench/scoring.py                 # 20 GSM8K solutions (seeded subset), top-20, 5 passes
    .venv/bin/python bench/scoring.py --limit 10 --passes 3

Both sides score the same token sequences (the GSM8K reference solutions in tests/data, after
the BOS token) with the same model and knobs (1 thread) and produce the same numbers: at every
position the top-k token ids with their logprobs and the logprob of the sequence's next token
(checked: the table says on how many items they were equal bit for bit).

- *servediff*: ``runner.execute`` of a scoring plan on ``LlamaCppEngine(scoring=True)``: the
  whole path of ``servediff run --score``, record file written and flushed per item, model load
  not counted.
- *bare*: ``Llama.eval`` of the sequence, then numpy on ``Llama.scores``: log-softmax, top-k by
  ``argpartition``, the next token's logprob. Nothing else. The target's baseline.
- *bare, in place*: the same with the log-softmax computed in place, as servediff computes it:
  what is left between it and servediff is what servediff adds (tokenizing, lists, the record).

**Interleaved item by item, in one process.** On a shared machine a side's speed drifts by tens
of percent over seconds (other processes take cores, cache and memory bandwidth), so rounds of a
whole side each (~20 s) measured the drift as much as the sides. Here the engine's scoring loop
runs the bare loops on the same sequence right before or after each of its own items, the three
sides in each of their 6 orders in turn (item i of pass n: order (i + n) mod 6), so an item's
measurements lie seconds apart, see the same load, and each side is first, second and third
about equally often. One process rather than alternating ones: the same interpreter, allocator
and numpy for every side, no process start between them, servediff's engine its own ``Llama``
and the bare loops theirs (one, shared by the two); what differs between the sides is only the
code that runs.

CPU time per item is ``time.process_time`` around that side's own work for that item (the engine's
item, its record line, write and flush included; the runner is single-threaded, and llama.cpp
with 1 thread decodes on the calling thread). What ``execute`` spends outside the items (header,
resume check, the load stretch) is reported on its own and in the whole-run ratio. The ratio is
servediff's scored tokens per CPU second ÷ a bare loop's, i.e. Σ bare CPU ÷ Σ servediff CPU,
with a 95 % bootstrap interval over items (seeded; an item's passes stay together), and the
1-minute load average before and after each pass.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from servediff.engines import OnDone  # noqa: E402
from servediff.engines.knobs import CONFIGS, default_model_path  # noqa: E402
from servediff.engines.llamacpp import LlamaCppEngine  # noqa: E402
from servediff.runner import RunPlan, execute  # noqa: E402
from servediff.scoring import scoring_suite  # noqa: E402
from servediff.types import Completion, Sample, SamplingParams  # noqa: E402

GSM8K = ROOT / "tests" / "data" / "gsm8k" / "test.jsonl"
TARGET = 0.05  # servediff within 5 % of the bare loop
SIDES = ("servediff", "bare", "bare, in place")
# Every order of the three sides in turn, item by item: each side is first, second and third
# about equally often, so what running after another side costs or saves falls on all of them.
ORDERS = tuple(itertools.permutations(SIDES))
Bare = tuple[Any, Any, Any]  # top-k ids, their logprobs, the next token's logprob


def bare_item(llm: Any, context: list[int], cont: list[int], k: int, in_place: bool = False) -> Bare:
    """The loop a user would write, one sequence: one eval, numpy over the logits. ``in_place``:
    the log-softmax without temporaries, the same arithmetic as servediff's (bit for bit)."""
    llm.reset()
    llm.eval(context + cont)
    rows = np.array(llm.scores[len(context) - 1 : len(context) - 1 + len(cont)], dtype=np.float64)
    if in_place:
        np.subtract(rows, rows.max(axis=1, keepdims=True), out=rows)
        total = np.exp(rows).sum(axis=1, keepdims=True)
        logp = np.subtract(rows, np.log(total, out=total), out=rows)
    else:
        m = rows.max(axis=1, keepdims=True)
        logp = rows - m - np.log(np.exp(rows - m).sum(axis=1, keepdims=True))
    top = np.argpartition(-logp, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(logp, top, axis=1), axis=1, kind="stable")
    top = np.take_along_axis(top, order, axis=1)
    return top, np.take_along_axis(logp, top, axis=1), logp[np.arange(len(cont)), cont]


@dataclasses.dataclass
class ItemTime:
    item: int
    order: tuple[str, ...]
    cpu: dict[str, float]  # side → CPU seconds
    wall: dict[str, float]
    same: bool  # every side's numbers equal bit for bit


def _clocks() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


class Interleaved(LlamaCppEngine):
    """The servediff engine, unchanged, with the bare loops run between its items (bench only)."""

    def setup(self, bare: Any, k: int) -> None:
        self.bare, self.k, self.pass_no = bare, k, 0
        self.times: list[ItemTime] = []

    def score(self, samples: Sequence[Sample], params: SamplingParams, on_done: OnDone) -> None:
        kept: list[Completion] = []

        def keep(c: Completion) -> None:
            kept.append(c)
            on_done(c)

        for i, sample in enumerate(samples):
            context, cont = self.score_tokens(sample)  # outside every side's clock
            order = ORDERS[(i + self.pass_no) % len(ORDERS)]
            cpu: dict[str, float] = {}
            wall: dict[str, float] = {}
            outs: dict[str, Bare] = {}
            for side in order:
                c0, w0 = _clocks()
                if side == "servediff":
                    super().score([sample], params, keep)
                else:
                    outs[side] = bare_item(self.bare, context, cont, self.k, side == "bare, in place")
                c1, w1 = _clocks()
                cpu[side], wall[side] = c1 - c0, w1 - w0
            same = all(_same(kept[-1], out) for out in outs.values())
            self.times.append(ItemTime(i, order, cpu, wall, same))


def _same(c: Completion, bare: Bare) -> bool:
    top, vals, own = bare
    meta = c.engine_meta or {}
    return (
        c.error is None
        and meta.get("top_ids") == top.tolist()
        and [lp.logprob for lp in c.logprobs or ()] == own.tolist()
        and [[v for _, v in lp.top] for lp in c.logprobs or ()] == vals.tolist()
    )


def ratio_interval(bare: np.ndarray, ours: np.ndarray, seed: int = 0, n: int = 10_000) -> tuple[float, ...]:
    """Σ bare ÷ Σ ours, and the 2.5 % / 97.5 % percentiles of it over items resampled with
    replacement (per-item CPU seconds, each item's passes summed: items are the unit)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(bare), size=(n, len(bare)))
    boot = bare[idx].sum(axis=1) / ours[idx].sum(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return float(bare.sum() / ours.sum()), float(lo), float(hi)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--top-k", type=int, default=20)
    args = p.parse_args()
    import llama_cpp

    knobs = dataclasses.replace(CONFIGS["stock"], threads=1)
    suite = scoring_suite("gsm8k", GSM8K, limit=args.limit)
    engine = Interleaved(knobs, label="bench", scoring=True)
    bare = llama_cpp.Llama(
        model_path=str(default_model_path()),
        n_ctx=knobs.n_ctx,
        n_batch=knobs.n_batch,
        n_ubatch=knobs.n_ubatch,
        n_threads=1,
        n_threads_batch=1,
        logits_all=True,
        verbose=False,
    )
    engine.setup(bare, args.top_k)
    warm = engine.score_tokens(suite.samples[0])  # first evals allocate; counted on neither side
    engine.score_matrix(*warm), bare_item(bare, *warm, args.top_k)
    n_tokens = sum(len(engine.score_tokens(s)[1]) for s in suite.samples)
    sampling = SamplingParams(max_tokens=1, top_logprobs=args.top_k)
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.passes):
            engine.pass_no = n
            plan = RunPlan(suite, "bench", Path(tmp) / f"p{n}.jsonl", sampling, extra={"mode": "score"})
            load0, start = os.getloadavg()[0], len(engine.times)
            c0 = time.process_time()
            execute(plan, engine, progress=False)
            total = time.process_time() - c0
            run = {side: sum(t.cpu[side] for t in engine.times[start:]) for side in SIDES}
            run |= {"load0": load0, "load1": os.getloadavg()[0]}
            run["execute"] = total - run["bare"] - run["bare, in place"]
            runs.append(run)
            print(f"pass {n}: CPU s " + ", ".join(f"{s} {run[s]:.2f}" for s in (*SIDES, "execute"))
                  + f"; load {load0:.1f} → {run['load1']:.1f}", file=sys.stderr)  # fmt: skip
    _table(engine.times, runs, n_tokens, len(suite.samples), args)


def _per_item(times: list[ItemTime], n_items: int, clock: str, side: str) -> np.ndarray:
    out = np.zeros(n_items)
    for t in times:
        out[t.item] += getattr(t, clock)[side]
    return out


def _table(
    times: list[ItemTime], runs: list[dict[str, float]], n_tokens: int, n_items: int, args: Any
) -> None:
    tok = n_tokens * args.passes
    cpu = {s: _per_item(times, n_items, "cpu", s) for s in SIDES}
    wall = {s: _per_item(times, n_items, "wall", s) for s in SIDES}
    sd_run = sum(r["execute"] for r in runs)
    loads = [r[k] for r in runs for k in ("load0", "load1")]
    print(f"{n_items} GSM8K solutions, {n_tokens} scored positions, top-{args.top_k}, {args.passes} passes "
          f"interleaved item by item; 1-minute load average {min(loads):.1f}–{max(loads):.1f}; "
          f"same numbers on every side: {sum(t.same for t in times)}/{len(times)} item runs")  # fmt: skip
    print("| side | scored tokens per CPU s | per wall s | CPU s | servediff ÷ side, CPU (95 % interval) "
          "| servediff ÷ side, wall | per pass, CPU |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    sd = cpu["servediff"].sum()
    print(f"| servediff, items | {tok / sd:.1f} | {tok / wall['servediff'].sum():.1f} | {sd:.2f} |  |  |  |")
    for side in SIDES[1:]:
        r_cpu, lo, hi = ratio_interval(cpu[side], cpu["servediff"])
        r_wall = wall[side].sum() / wall["servediff"].sum()
        per_pass = ", ".join(f"{r[side] / r['servediff']:.3f}" for r in runs)
        rates = f"{tok / cpu[side].sum():.1f} | {tok / wall[side].sum():.1f} | {cpu[side].sum():.2f}"
        ratios = f"{r_cpu:.3f} ({lo:.3f}–{hi:.3f}) | {r_wall:.3f}"
        print(f"| {side} | {rates} | {ratios} | {per_pass} |")
    r_run = cpu["bare"].sum() / sd_run
    print(f"| servediff, whole `execute` | {tok / sd_run:.1f} |  | {sd_run:.2f} | {r_run:.3f} ÷ bare |  |  |")
    r_cpu = cpu["bare"].sum() / cpu["servediff"].sum()
    met = "met" if min(r_cpu, r_run) >= 1 - TARGET else "not met"
    print(f"target: servediff ÷ bare ≥ {1 - TARGET:.2f} (CPU, items and whole execute): {met}")


if __name__ == "__main__":
    main()
