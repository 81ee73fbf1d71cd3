"""The built-in embedded experiment: the demo's study (stock twice, tuned once, in-process
llama.cpp) expressed as an experiment, so ``servediff demo`` can run through the same machinery.

    servediff experiment examples/embedded.toml      # the same study from a file
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from servediff.experiment.spec import Experiment, SuiteSpec, parse_experiment

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEMO = """\
title = "Does the tuned llama.cpp configuration change the output?"
model = "SmolLM2-135M-Instruct"
control_repeats = 1

[suites.prompts]

[[configurations]]
label = "stock"
config = "stock"

[[configurations]]
label = "tuned"
config = "tuned"
"""


def demo_experiment(
    out: Path, max_tokens: int = 300, limit: int | None = None, model_path: Path | None = None
) -> Experiment:
    """stock ×2 (the control) and tuned on the built-in prompt suite, embedded llama.cpp."""
    raw = tomllib.loads(DEMO)
    raw["sampling"] = {"max_tokens": max_tokens}
    if model_path is not None:
        raw["model_path"] = str(Path(model_path).resolve())
    exp = parse_experiment(raw, Path("built-in demo"), DEMO, output=out)
    return dataclasses.replace(exp, suites=(SuiteSpec("prompts", limit=limit),))
