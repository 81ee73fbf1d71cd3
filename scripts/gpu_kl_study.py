"""Teacher-forced study on the transformers engine: bf16 and fp16 against an fp32 reference, and
the one-pass argmax against step-by-step greedy decoding.

    SERVEDIFF_GGUF=SmolLM2-135M-Instruct.Q4_1.gguf python scripts/gpu_kl_study.py --out out/gpu-kl
    # a CPU check of the whole pipeline in about a minute:
    SERVEDIFF_GGUF=... python scripts/gpu_kl_study.py --device cpu --dtypes fp32 bf16 --limit 2 \
        --max-tokens 8 --gsm8k-limit 2 --out out/gpu-kl-cpu

For each dtype (the first is the reference), with batch size 1 throughout:

1. greedy decode of the built-in prompts (``runs/generate/<dtype>.jsonl``, top-5 logprobs of the
   logits that chose each token);
2. scoring runs (top-k + the text's own token at every position) of two corpora: the reference's
   greedy completions (on-policy; ``runs/score-on-policy``) and GSM8K reference solutions
   (``runs/score-gsm8k``); the reference scores each corpus twice (A/A: the noise floor);
3. a scoring run of the dtype's *own* greedy completions (``runs/score-own``; the reference's are
   the on-policy corpus), whose argmax is compared with the tokens greedy decoding chose
   (``compare.teacher_greedy``).

Writes ``report.md``/``report.html`` (servediff's report of the scoring runs: KL with percentiles,
same top-1, Δp, ln PPL ratio, intervals clustered by sequence), ``study.md`` (the two tables of
this study) and ``summary.json`` (every number of study.md, and the time of each stage).
Everything runs in this one process: the model is loaded once per dtype and mode.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from servediff.cli import main as servediff_main
from servediff.compare.kl import summarise
from servediff.compare.kl_runs import scoring_pair
from servediff.compare.teacher_greedy import GreedyAgreement, greedy_agreement
from servediff.engines.hf import HFEngine
from servediff.engines.hf_knobs import HFKnobs
from servediff.records import read_run
from servediff.runner import RunPlan, execute
from servediff.scoring import on_policy, scoring_suite
from servediff.suites import Suite, SuiteOptions, load_suite
from servediff.types import SamplingParams

MODEL_ENV = "SERVEDIFF_GGUF"
REPO = Path(__file__).resolve().parent.parent
GSM8K = REPO / "scripts" / "data" / "gsm8k" / "test-100.jsonl"  # the first 100 of the test split


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="output folder (runs resume inside it)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16", "fp16"], help="the first is the reference")
    p.add_argument("--attn", default="sdpa")
    p.add_argument("--limit", type=int, default=20, help="built-in prompts to decode")
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument("--gsm8k", type=Path, default=GSM8K, help="GSM8K test.jsonl (solutions are scored)")
    p.add_argument("--gsm8k-limit", type=int, default=100, help="solutions (a seeded random subset)")
    p.add_argument("--top-k", type=int, default=20, help="top-k logprobs recorded per position")
    return p.parse_args(argv)


def score(engine: HFEngine, suite: Suite, out: Path, top_k: int, repeat: int = 1) -> Path:
    extra = {"mode": "score", "top_k": top_k, "corpus": suite.source}
    plan = RunPlan(suite, engine.label, out, SamplingParams(top_logprobs=top_k), repeat=repeat, extra=extra)
    result = execute(plan, engine, progress=False)
    if result.errors:
        raise SystemExit(f"{out}: {result.errors} sequence(s) failed to score (recorded in the file)")
    return out


def done(stage: str, t0: float) -> float:
    """Seconds since t0, also said on stderr: the GPU run has a time limit to watch."""
    seconds = time.perf_counter() - t0
    print(f"{stage}: {seconds:.0f} s", file=sys.stderr, flush=True)
    return seconds


def run_all(args: argparse.Namespace, model: Path) -> tuple[dict[str, Any], dict[str, float]]:
    """Every run of the study; returns the record paths by role and the seconds per stage."""
    runs, ref = args.out / "runs", args.dtypes[0]
    knobs = {d: HFKnobs(device=args.device, dtype=d, attn=args.attn) for d in args.dtypes}
    prompts = load_suite("prompts", SuiteOptions(limit=args.limit))
    greedy = SamplingParams(max_tokens=args.max_tokens, top_logprobs=5)
    paths: dict[str, Any] = {"generate": {}, "score": [], "own": {}}
    stages: dict[str, float] = {}
    for d in args.dtypes:
        t0 = time.perf_counter()
        with HFEngine(knobs[d], model_path=model, label=d) as engine:
            out = runs / "generate" / f"{d}.jsonl"
            if execute(RunPlan(prompts, d, out, greedy), engine, progress=False).errors:
                raise SystemExit(f"{out}: greedy decoding failed on some prompts (recorded in the file)")
        paths["generate"][d] = out
        stages[f"generate {d}"] = done(f"generate {d}", t0)
    corpora = {
        "on-policy": on_policy(paths["generate"][ref]),
        "gsm8k": scoring_suite("gsm8k", args.gsm8k, args.gsm8k_limit),
    }
    for d in args.dtypes:
        t0 = time.perf_counter()
        with HFEngine(knobs[d], model_path=model, label=d, scoring=True) as engine:
            for name, suite in corpora.items():
                paths["score"].append(score(engine, suite, runs / f"score-{name}" / f"{d}.jsonl", args.top_k))
                if d == ref:  # the A/A row: the reference against its own repeat
                    again = runs / f"score-{name}" / f"{d}-again.jsonl"
                    paths["score"].append(score(engine, suite, again, args.top_k, repeat=2))
            # The reference's own completions are the on-policy corpus, scored above.
            own = runs / "score-on-policy" / f"{d}.jsonl"
            if d != ref:
                own = score(
                    engine, on_policy(paths["generate"][d]), runs / "score-own" / f"{d}.jsonl", args.top_k
                )
            paths["own"][d] = own
        stages[f"score {d}"] = done(f"score {d}", t0)
    return paths, stages


def kl_rows(paths: list[Path], ref: str) -> list[dict[str, Any]]:
    """One row per (corpus, dtype) against the reference's first run of that corpus."""
    by_corpus: dict[str, dict[str, Path]] = {}
    for p in paths:
        by_corpus.setdefault(p.parent.name.removeprefix("score-"), {})[p.stem] = p
    rows = []
    for corpus, files in by_corpus.items():
        base = read_run(files[ref])
        for name, path in files.items():
            if name == ref:
                continue
            s = summarise(scoring_pair(base, read_run(path)))
            rows.append(
                {
                    "corpus": corpus,
                    "b": name,
                    "sequences": s.n_sequences,
                    "positions": s.n_positions,
                    "kl_mean": s.kl_mean,
                    "kl_mean_ci": [s.kl_mean_ci.low, s.kl_mean_ci.high],
                    "kl_p99": s.kl_percentiles[99.0],
                    "kl_max": s.kl_max,
                    "same_top1": s.same_top1,
                    "same_top1_ci": [s.same_top1_ci.low, s.same_top1_ci.high],
                    "dp_rms": s.dp_rms,
                    "ln_ppl_ratio": s.ln_ppl_ratio,
                }
            )
    return rows


def greedy_row(dtype: str, g: GreedyAgreement) -> dict[str, Any]:
    return {
        "dtype": dtype,
        "sequences": g.sequences,
        "positions": g.positions,
        "disagreements": g.disagreements,
        "share": g.share,
        "sequences_with_disagreement": g.sequences_with_disagreement,
        "first_position_median": statistics.median(g.first_positions) if g.first_positions else None,
        "gap_max_nats": max(g.gaps, default=None),
        "chosen_logprob_absdiff_mean": g.chosen_diff_mean,
        "chosen_logprob_absdiff_max": g.chosen_diff_max,
    }


def _f(x: Any, spec: str = ".4g") -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def markdown(summary: dict[str, Any]) -> str:
    ref = summary["reference"]
    lines = [
        f"# Teacher-forced study: {', '.join(summary['dtypes'][1:])} against {ref}",
        "",
        f"KL({ref} ‖ dtype), top-{summary['top_k']} + tail (a lower bound of the full-vocabulary KL), "
        "nats; intervals: 95 %, clustered by sequence. `…-again` is the reference's repeat (A/A).",
        "",
        "| corpus | dtype | sequences | positions | mean KL [95 % CI] | p99 | max | same top-1 | Δp RMS "
        "| ln PPL ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["kl"]:
        ci = r["kl_mean_ci"]
        lines.append(
            f"| {r['corpus']} | {r['b']} | {r['sequences']} | {r['positions']} | {_f(r['kl_mean'])} "
            f"[{_f(ci[0])}, {_f(ci[1])}] | {_f(r['kl_p99'])} | {_f(r['kl_max'])} | "
            f"{_f(r['same_top1'], '.2%')} | {_f(r['dp_rms'])} | {_f(r['ln_ppl_ratio'])} |"
        )
    lines += [
        "",
        "Teacher-forced argmax against greedy decoding, each dtype on its own greedy completions "
        "(batch 1): positions where the one-pass argmax is not the token step-by-step decoding chose.",
        "",
        "| dtype | sequences | positions | disagreements | share | sequences with one | median first "
        "position | largest step-by-step gap there (nats) | mean / max abs. Δ logprob of the greedy token |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["greedy"]:
        lines.append(
            f"| {r['dtype']} | {r['sequences']} | {r['positions']} | {r['disagreements']} | "
            f"{_f(r['share'], '.3%')} | {r['sequences_with_disagreement']} | "
            f"{_f(r['first_position_median'])} "
            f"| {_f(r['gap_max_nats'])} | {_f(r['chosen_logprob_absdiff_mean'])} / "
            f"{_f(r['chosen_logprob_absdiff_max'])} |"
        )
    stages = ", ".join(f"{k} {v:.0f} s" for k, v in summary["stages_s"].items())
    return "\n".join([*lines, "", f"Time: {stages}; total {summary['total_s']:.0f} s.", ""])


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    model = Path(os.environ.get(MODEL_ENV, ""))
    if not model.is_file():
        print(f"error: set {MODEL_ENV} to the model's GGUF file (now {str(model)!r})", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    paths, stages = run_all(args, model)
    ref = args.dtypes[0]
    out = args.out
    files = ["--md", str(out / "report.md"), "--html", str(out / "report.html")]
    rc = servediff_main(["report", *(str(p) for p in paths["score"]), *files])
    greedy = [
        greedy_row(d, greedy_agreement(read_run(paths["generate"][d]), read_run(paths["own"][d])))
        for d in args.dtypes
    ]
    summary = {
        "reference": ref,
        "dtypes": args.dtypes,
        "device": args.device,
        "model": model.name,
        "top_k": args.top_k,
        "kl": kl_rows(paths["score"], ref),
        "greedy": greedy,
        "stages_s": stages,
        "total_s": time.perf_counter() - t0,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out / "study.md").write_text(markdown(summary), encoding="utf-8")
    print((out / "study.md").read_text(encoding="utf-8"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
