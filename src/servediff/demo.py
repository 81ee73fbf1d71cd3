"""The main job on the embedded default: is `tuned` llama.cpp the same model as `stock`?

    servediff demo                 # writes servediff-demo/report.md and report.html

Runs the 20-prompt suite under `stock`, `stock` again (the control) and `tuned`, each in a
freshly loaded llama.cpp context, then compares the records and writes the report. Records
are kept under ``runs/``; re-running resumes and reuses what is finished.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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


def run_demo(opts: DemoOptions) -> tuple[Study, Path]:
    t0 = time.perf_counter()
    suite = load_suite("prompts", SuiteOptions(limit=opts.limit))
    sampling = SamplingParams(max_tokens=opts.max_tokens)
    runs = [run_config(suite, label, rep, CONFIGS[label], sampling, opts) for label, rep in SCHEDULE]
    study = build_study(runs)
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
