"""The GPU study on the transformers engine: which knobs change greedy output, and how fast is each?

    servediff demo --engine hf --device cuda --max-tokens 200     # writes servediff-hf/report.md

Runs the 20-prompt suite under batch-1 bf16 twice (the control), all prompts in one left-padded
batch, prompt-lookup assisted generation, fp16 and fp32, each in a freshly loaded model; compares
every configuration with the batch-1 bf16 reference; and, per configuration, times a direct
``model.generate`` over the same batches with the same settings, so the report can say what
servediff itself costs. Records go under ``OUT/runs/``; re-running resumes.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servediff.compare.study import Study, build_study
from servediff.engines.hf_knobs import HFKnobs
from servediff.record import read_run
from servediff.report import render
from servediff.report.assembly import build
from servediff.report.model import Report
from servediff.report.options import ReportOptions
from servediff.runner import RunPlan, execute
from servediff.suites import Suite, SuiteOptions, load_suite
from servediff.types import SamplingParams

REFERENCE = "bf16-b1"


@dataclass(frozen=True, slots=True)
class HFStudyOptions:
    out: Path = Path("servediff-hf")
    max_tokens: int = 200
    limit: int | None = None
    model: Path | None = None
    device: str = "auto"
    batch_size: int = 0  # the batched configuration; 0 = every prompt in one batch
    prompt_lookup: int = 8
    top_logprobs: int = 5
    direct: bool = True  # also time model.generate called directly
    only: tuple[str, ...] = ()  # run only these configuration labels (all when empty)
    progress: bool = True


def schedule(opts: HFStudyOptions, n_items: int) -> list[tuple[str, int, HFKnobs]]:
    """(label, repeat, knobs): the reference twice first, then one knob changed at a time."""
    ref = HFKnobs(device=opts.device)
    batch = opts.batch_size or n_items
    return [
        (REFERENCE, 1, ref),
        (REFERENCE, 2, ref),
        (f"bf16-batch{batch}", 1, dataclasses.replace(ref, batch_size=batch)),
        (f"bf16-lookup{opts.prompt_lookup}", 1, dataclasses.replace(ref, prompt_lookup=opts.prompt_lookup)),
        ("fp16-b1", 1, dataclasses.replace(ref, dtype="fp16")),
        ("fp32-b1", 1, dataclasses.replace(ref, dtype="fp32")),
    ]


def direct_generate(engine: Any, suite: Suite, sampling: SamplingParams) -> dict[str, Any]:
    """Time ``model.generate`` alone over the engine's batches, with the engine's own settings.

    Prompts are tokenized and padded before the clock starts: only the generate calls (and a
    device synchronisation) are timed. The token ids are kept to check that servediff's run
    produced exactly what the direct call does.
    """
    import torch

    from servediff.engines.hf import cut_at_stop, left_pad, synchronize

    n = engine.knobs.batch_size
    kwargs = engine._gen_kwargs(sampling.max_tokens, sampling.logprobs)
    wall, tokens, ids_by_item = 0.0, 0, {}
    for start in range(0, len(suite.samples), n):
        batch = suite.samples[start : start + n]
        ids, mask = left_pad([engine.prompt_ids(s) for s in batch], engine.pad_id)
        ids, mask = ids.to(engine.device), mask.to(engine.device)
        synchronize(engine.device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = engine.model.generate(ids, attention_mask=mask, **kwargs)
        synchronize(engine.device)
        wall += time.perf_counter() - t0
        for s, row in zip(batch, out.sequences[:, ids.shape[1] :].tolist()):
            ids_by_item[s.id] = cut_at_stop(row, engine.stops)[0]
            tokens += len(ids_by_item[s.id])
    return {"wall_s": wall, "tokens": tokens, "token_ids": ids_by_item}


def run_one(
    suite: Suite, label: str, repeat: int, knobs: HFKnobs, sampling: SamplingParams, opts: HFStudyOptions
) -> dict[str, Any] | None:
    """One configuration in a freshly loaded model; returns the direct-generate timing (or None)."""
    from servediff.engines.hf import HFEngine

    out = opts.out / "runs" / f"{suite.name}-{label}-{repeat}.jsonl"
    engine = HFEngine(knobs, model_path=opts.model, label=label)
    try:
        execute(RunPlan(suite, label, out, sampling, repeat=repeat), engine, progress=opts.progress)
        if not (opts.direct and repeat == 1):
            return None
        direct = direct_generate(engine, suite, sampling)
    finally:
        engine.close()
    recorded = read_run(out).items
    same = sum(1 for i, ids in direct.pop("token_ids").items() if recorded[i].token_ids == ids)
    return {"label": label, **direct, "same_token_ids": same, "items": len(suite.samples)}


def _finished(path: Path, suite: Suite) -> bool:
    return path.is_file() and len(read_run(path).done_ids()) == len(suite.samples)


def run_hf_study(opts: HFStudyOptions) -> tuple[Report, Path]:
    """Run (or resume) every configuration, then write the report. Resuming skips a configuration
    whose record is complete and whose direct timing (if asked for) is already in direct.json."""
    t0 = time.perf_counter()
    suite = load_suite("prompts", SuiteOptions(limit=opts.limit))
    sampling = SamplingParams(max_tokens=opts.max_tokens, top_logprobs=opts.top_logprobs)
    direct_file = opts.out / "direct.json"
    direct = json.loads(direct_file.read_text(encoding="utf-8")) if direct_file.is_file() else []
    paths: list[Path] = []
    for label, repeat, knobs in schedule(opts, len(suite.samples)):
        if opts.only and label not in opts.only:
            continue
        path = opts.out / "runs" / f"{suite.name}-{label}-{repeat}.jsonl"
        paths.append(path)
        timed = not (opts.direct and repeat == 1) or any(d["label"] == label for d in direct)
        if _finished(path, suite) and timed:
            continue
        timing = run_one(suite, label, repeat, knobs, sampling, opts)
        if timing:
            direct = [d for d in direct if d["label"] != label] + [timing]
            direct_file.write_text(json.dumps(direct, indent=2), encoding="utf-8")
        print(f"{label} #{repeat}: done at {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    model, report = write_report(paths, opts.out)
    print(f"hf study finished in {time.perf_counter() - t0:.0f} s; report: {report}", file=sys.stderr)
    return model, report


def reference_study(paths: Sequence[Path]) -> Study:
    """The study with pairs restricted to (reference, other): one row per knob changed."""
    study = build_study([read_run(p) for p in paths])
    reference = study.configurations[0].label
    pairs = tuple(p for p in study.pairs if p.a == reference)
    return Study(study.configurations, study.controls, pairs, study.warnings)


def write_report(paths: Sequence[Path], out: Path) -> tuple[Report, Path]:
    """Render OUT/report.md from the records (and OUT/direct.json when present)."""
    from servediff.report.throughput import hardware_section, throughput_section

    study = reference_study(paths)
    direct_file = out / "direct.json"
    direct = json.loads(direct_file.read_text(encoding="utf-8")) if direct_file.is_file() else []
    title = "Does the transformers configuration change greedy output?"
    model = build(study, ReportOptions(title=title))
    extra = [*hardware_section(study), *throughput_section(direct)(study)]
    report = out / "report.md"
    report.write_text(render.markdown(model) + "\n" + "\n".join(extra), encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(render.summary(model), indent=2), encoding="utf-8")
    return model, report
