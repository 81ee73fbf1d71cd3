"""The built-in embedded experiment that ``servediff demo`` runs: is `tuned` llama.cpp the same
model as `stock`?

    servediff demo                                   # → servediff-demo/report.md, report.html
    servediff experiment examples/embedded.toml      # the same study from a file

In-process llama.cpp with SmolLM2-135M, no server. The 20-prompt suite (300 tokens) and a
100-item subject-stratified MMLU sample run under `stock`, `stock` again (the control) and
`tuned` (prompt-lookup speculative decoding + flash attention + prefix-cache reuse); then every
stock-vs-tuned divergence is probed under both configurations, and the report is written.
SmolLM2-135M is near chance on MMLU: that part exercises the paired quality statistics, it is
not a quality verdict.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from servediff.experiment.spec import Experiment, parse_experiment

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
