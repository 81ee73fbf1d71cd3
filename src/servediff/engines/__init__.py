"""Engines: a batch of suite items in, completions out.

Two kinds ship: ``http`` (any OpenAI-compatible server) and ``llamacpp`` (embedded
llama.cpp, the default, no server needed). ``servediff run --engine KIND`` picks one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from servediff.types import Completion, Sample, SamplingParams

OnDone = Callable[[Completion], None]


class EngineError(RuntimeError):
    """The engine cannot run at all (unreachable, wrong model, bad knobs): exit 2."""


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """Top-k logprobs for the next token after ``prompt + prefix``, and how they were computed."""

    top: tuple[tuple[str, float], ...]
    method: str  # e.g. "embedded: step-by-step replay", "http: /v1/completions one pass"
    ids: tuple[int, ...] | None = None  # token ids of ``top`` where the engine knows them


class Engine(Protocol):
    """What the runner needs from an engine. Engines own their concurrency."""

    kind: str

    def identity(self) -> dict[str, Any]:
        """Everything that defines this configuration, for the run header (no secrets)."""
        ...

    def generate(self, samples: Sequence[Sample], params: SamplingParams, on_done: OnDone) -> None:
        """Generate every sample, calling ``on_done`` once per item as it finishes.

        A request that fails is reported as a Completion with ``error`` set, never dropped.
        """
        ...

    def close(self) -> None: ...


class Prober(Protocol):
    """Engines that can score one next token after a prompt and a given continuation."""

    def probe(
        self, sample: Sample, prefix_ids: Sequence[int] | None, prefix_text: str, k: int
    ) -> ProbeResult: ...
