"""Engines: a batch of suite items in, completions out.

Two kinds ship: ``http`` (any OpenAI-compatible server) and ``llamacpp`` (embedded
llama.cpp, the default, no server needed). ``servediff run --engine KIND`` picks one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

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
    """A configuration asked, after the runs, for its top-k after a prompt and a continuation.

    Every prober takes the same arguments; each uses what its engine can: ``prefix_ids``
    (generation's own token ids, replayed exactly where the engine can), ``prefix_pieces`` (the
    prefix token by token, for a server replay), ``chat_kwargs`` (what the run sent as
    chat_template_kwargs, for a template rendered on our side). ``with prober:`` closes it."""

    def identity(self) -> dict[str, Any]: ...

    def probe(
        self,
        sample: Sample,
        prefix_ids: Sequence[int] | None,
        prefix_text: str,
        k: int,
        *,
        prefix_pieces: Sequence[str] | None = None,
        chat_kwargs: Mapping[str, Any] | None = None,
    ) -> ProbeResult: ...

    def diverging_tokens(
        self, a_ids: Sequence[int] | None, b_ids: Sequence[int] | None, index: int
    ) -> tuple[str | None, str | None] | None:
        """The texts of token ``index`` of two id sequences, where the runs recorded only ids
        (None: the engine cannot tell, or needs no help)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Prober: ...

    def __exit__(self, *exc: object) -> None: ...


C = TypeVar("C", bound="Closing")


class Closing:
    """``with engine:`` closes it however the block ends."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: C) -> C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
