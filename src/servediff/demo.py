"""The main job on the embedded default: is `tuned` llama.cpp the same model as `stock`?

    servediff demo                 # writes servediff-demo/report.md and report.html

Runs the 20-prompt suite under `stock`, `stock` again (the control) and `tuned`, each in a
freshly loaded llama.cpp context, then a 100-item subject-stratified MMLU sample under `stock`
and `tuned` (SmolLM2-135M is near chance on MMLU: that part shows the paired quality machinery,
not a quality verdict), then compares the records and writes the report. Records
are kept under ``runs/``; re-running resumes and reuses what is finished.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from servediff.compare.mechanism import ProbeSet
from servediff.compare.probe import probe_pair, read_probes
from servediff.compare.study import Study, build_study
from servediff.engines.knobs import CONFIGS, LlamaKnobs
from servediff.engines.llamacpp import LlamaCppEngine
from servediff.record import Run, read_run
from servediff.report import html
from servediff.report.markdown import render, summary_json
from servediff.runner import RunPlan, execute
from servediff.suites import Suite, SuiteOptions, load_suite
from servediff.types import SamplingParams


@dataclass(frozen=True, slots=True)
class DemoOptions:
    out: Path = Path("servediff-demo")
    max_tokens: int = 300
    limit: int | None = None  # fewer prompts, for a quick look
    mmlu_limit: int = 100  # stratified MMLU items under stock and tuned (0: skip)
    model: Path | None = None
    progress: bool = True


# (label, repeat): stock twice is the control.
SCHEDULE: tuple[tuple[str, int], ...] = (("stock", 1), ("stock", 2), ("tuned", 1))


def run_config(
    suite: Suite,
    label: str,
    repeat: int,
    knobs: LlamaKnobs,
    sampling: SamplingParams,
    opts: DemoOptions,
) -> Run:
    out = opts.out / "runs" / f"{suite.name}-{label}-{repeat}.jsonl"
    # A fresh engine per run: a repeat must not inherit the previous run's KV state.
    engine = LlamaCppEngine(knobs, model_path=opts.model, label=label)
    try:
        execute(RunPlan(suite, label, out, sampling, repeat=repeat), engine, progress=opts.progress)
    finally:
        engine.close()
    return read_run(out)


def probe_demo(a: Run, b: Run, opts: DemoOptions) -> ProbeSet:
    """Probe every stock-vs-tuned divergence after the runs (reused when already done)."""
    out = opts.out / "runs" / f"{a.header.suite.name}-probes.jsonl"
    if out.exists():
        done = read_probes(out)
        if (done.a, done.b) == ((a.label, a.header.repeat), (b.label, b.header.repeat)):
            return done
    engines = [LlamaCppEngine(CONFIGS[r.label], model_path=opts.model, label=r.label) for r in (a, b)]
    try:
        ids = (engines[0].identity(), engines[1].identity())
        return probe_pair((a, b), (engines[0], engines[1]), out, k=5, identities=ids)
    finally:
        for e in engines:
            e.close()


def run_demo(opts: DemoOptions) -> tuple[Study, Path]:
    t0 = time.perf_counter()
    suite = load_suite("prompts", SuiteOptions(limit=opts.limit))
    # Top-5 logprobs: the embedded engine reads the logits that chose each token, so recording
    # them does not change its path (the stock control still has to come out identical).
    sampling = SamplingParams(max_tokens=opts.max_tokens, top_logprobs=5)
    runs = [run_config(suite, label, rep, CONFIGS[label], sampling, opts) for label, rep in SCHEDULE]
    if opts.mmlu_limit:
        mmlu = load_suite("mmlu", SuiteOptions(limit=opts.mmlu_limit, seed=0))
        scored = SamplingParams(max_tokens=mmlu.max_tokens or opts.max_tokens, top_logprobs=5)
        runs += [run_config(mmlu, label, 1, CONFIGS[label], scored, opts) for label in ("stock", "tuned")]
    study = build_study(runs)
    # Probe stock vs tuned of every suite: it also measures positions the runs cannot record,
    # such as the end-of-turn token where one side stopped and the other went on.
    study.probes = [probe_demo(runs[0], runs[2], opts)]
    if opts.mmlu_limit:
        study.probes.append(probe_demo(runs[3], runs[4], opts))
    report = opts.out / "report.md"
    wall = time.perf_counter() - t0
    report.write_text(
        render(study, title="Does the tuned llama.cpp configuration change the output?"), encoding="utf-8"
    )
    page = html.render(study, title="Does the tuned llama.cpp configuration change the output?")
    (opts.out / "report.html").write_text(page, encoding="utf-8")
    (opts.out / "summary.json").write_text(json.dumps(summary_json(study), indent=2), encoding="utf-8")
    print(f"demo finished in {wall:.0f} s; report: {report}", file=sys.stderr)
    return study, report
