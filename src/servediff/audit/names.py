"""The audit's closed vocabularies, apart from the modules that use them so that the command
line can offer them without importing numpy or the engine profiles."""

from __future__ import annotations

from typing import Literal, get_args

WorkloadName = Literal["needle", "mixed", "prefix"]
WORKLOADS: tuple[str, ...] = get_args(WorkloadName)
PromiseEngine = Literal["llama-server", "sglang", "vllm"]
ENGINES: tuple[str, ...] = get_args(PromiseEngine)
