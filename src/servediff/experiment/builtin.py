"""The built-in experiments that ``servediff demo`` runs: is `tuned` llama.cpp the same model as
`stock`? And on a GPU, which transformers knobs change greedy output?

    servediff demo                                   # → servediff-demo/report.md, report.html
    servediff experiment examples/embedded.toml      # the same study from a file
    servediff demo --engine hf --device cuda --max-tokens 200   # → servediff-hf/report.md

In-process llama.cpp with SmolLM2-135M, no server. The 20-prompt suite (300 tokens) and a
100-item subject-stratified MMLU sample run under `stock`, `stock` again (the control) and
`tuned` (prompt-lookup speculative decoding + flash attention + prefix-cache reuse); then every
stock-vs-tuned divergence is probed under both configurations, and the report is written.
SmolLM2-135M is near chance on MMLU: that part exercises the paired quality statistics, it is
not a quality verdict.

The transformers study runs the 20-prompt suite under batch-1 bf16 twice (the control), then one
knob changed at a time, each in a freshly loaded model: all prompts in one left-padded batch,
prompt-lookup assisted generation, fp16, fp32; each is compared with the batch-1 bf16 reference.
The gap at each divergence comes from the top-5 logprobs recorded during the runs (no probes).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servediff.experiment.spec import Experiment, parse_experiment
from servediff.suites import SuiteOptions, load_suite

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEMO = """\
title = "Does the tuned llama.cpp configuration change the output?"
model = "SmolLM2-135M-Instruct"
control_repeats = 1

# Top-5 logprobs: the embedded engine reads them from the logits that chose each token, so
# recording them does not change its path (the control still has to come out identical).
[sampling]
top_logprobs = 5

[suites.prompts]
max_tokens = 300

[suites.mmlu]
limit = 100

[[configurations]]
label = "stock"
config = "stock"

[[configurations]]
label = "tuned"
config = "tuned"
"""


def demo_experiment(
    out: Path,
    max_tokens: int = 300,
    limit: int | None = None,
    mmlu_limit: int = 100,
    model_path: Path | None = None,
) -> Experiment:
    """The demo's study; ``limit`` trims the prompts, ``mmlu_limit`` 0 leaves MMLU out."""
    raw: dict[str, Any] = tomllib.loads(DEMO)
    raw["suites"]["prompts"]["max_tokens"] = max_tokens
    if limit is not None:
        raw["suites"]["prompts"]["limit"] = limit
    if mmlu_limit:
        raw["suites"]["mmlu"]["limit"] = mmlu_limit
    else:
        del raw["suites"]["mmlu"]
    if model_path is not None:
        raw["model_path"] = str(Path(model_path).resolve())
    return parse_experiment(raw, Path("built-in demo"), DEMO, output=out)


HF_STUDY = """\
title = "Does the transformers configuration change greedy output?"
model = "SmolLM2-135M-Instruct"
control_repeats = 1
pairs = "control"

# Top-5 logprobs from the logits that chose each token: every divergence's gap without a probe.
[sampling]
top_logprobs = 5

[suites.prompts]
max_tokens = 200

[probes]
enabled = false
"""
HF_REFERENCE = "bf16-b1"


@dataclass(frozen=True, slots=True)
class HFStudyOptions:
    max_tokens: int = 200
    limit: int | None = None  # only the first N prompts
    model_path: Path | None = None  # model folder or GGUF (default: SmolLM2-135M-Instruct GGUF)
    device: str = "auto"
    batch_size: int = 0  # the batched configuration; 0 = every prompt in one batch
    prompt_lookup: int = 8  # tokens drafted by prompt lookup (0: no such configuration)
    top_logprobs: int = 5
    only: tuple[str, ...] = ()  # these configurations (and the reference) only; all when empty


def hf_configurations(opts: HFStudyOptions) -> list[tuple[str, dict[str, Any]]]:
    """(label, knobs): the reference first, then one knob changed at a time."""
    batch = opts.batch_size or len(load_suite("prompts", SuiteOptions(limit=opts.limit)).samples)
    changed: list[tuple[str, dict[str, Any]]] = [
        (f"bf16-batch{batch}", {"batch_size": batch}),
        (f"bf16-lookup{opts.prompt_lookup}", {"prompt_lookup": opts.prompt_lookup}),
        ("fp16-b1", {"dtype": "fp16"}),
        ("fp32-b1", {"dtype": "fp32"}),
    ]
    if not opts.prompt_lookup:
        del changed[1]
    return [(HF_REFERENCE, {}), *((label, k) for label, k in changed if not opts.only or label in opts.only)]


def hf_experiment(out: Path, opts: HFStudyOptions) -> Experiment:
    """The transformers study as an experiment on the in-process engine."""
    raw: dict[str, Any] = tomllib.loads(HF_STUDY)
    raw["suites"]["prompts"]["max_tokens"] = opts.max_tokens
    raw["sampling"]["top_logprobs"] = opts.top_logprobs
    if opts.limit is not None:
        raw["suites"]["prompts"]["limit"] = opts.limit
    if opts.model_path is not None:
        raw["model_path"] = str(Path(opts.model_path).resolve())
    raw["configurations"] = [
        {"label": label, "engine": "hf", "knobs": {"device": opts.device, **knobs}}
        for label, knobs in hf_configurations(opts)
    ]
    return parse_experiment(raw, Path("built-in transformers study"), HF_STUDY, output=out)
