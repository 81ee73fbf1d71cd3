"""The values that flow through servediff: suite items in, completions out.

These are plain frozen dataclasses because they sit on the hot path (one per request);
validation happens once, at the file boundary, in ``servediff.records``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Message = dict[str, str]


@dataclass(frozen=True, slots=True)
class Sample:
    """One item of a suite: either a chat (``messages``) or a raw completion ``prompt``."""

    id: str
    messages: tuple[Message, ...] | None = None
    prompt: str | None = None
    target: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # The request's own seed (a sampled run gives each (item, sample index) one); None: the run's.
    seed: int | None = None

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError(f"item {self.id!r}: give exactly one of messages or prompt")


# The most draws of one item a sampled run takes. pass@k needs n >= k draws, and the largest n in
# common use is 200 (Chen et al. 2021, for pass@100); at 1,000 draws an item's own pass rate is
# known to ±3.1 pp (95 %), finer than a comparison of configurations can use. The bound matters
# because a run holds every draw in memory and lists every draw's id in its record header before
# the first request: --samples 1000000000 once grew memory for minutes without writing a line.
MAX_SAMPLES = 1000


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """What every request of a run is sent with. Greedy by default: the study is about T=0."""

    temperature: float = 0.0
    seed: int = 42
    top_p: float = 1.0  # 1.0: no nucleus cut
    top_k: int = 0  # 0: no top-k cut
    # No penalty and no min-p cut: the model's own distribution. Sent explicitly to every server
    # that takes them, so that no server default (llama-cpp-python's repeat_penalty 1.1,
    # llama-server's min_p 0.05) changes an answer; see engines.server_sampling.
    repeat_penalty: float = 1.0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    samples: int = 1  # per item; only a sampled run (temperature > 0) draws more than one
    max_tokens: int = 300
    top_logprobs: int = 0  # 0: do not request logprobs (requesting them can change the engine path)
    # None: send nothing; False/True: send chat_template_kwargs.enable_thinking (vLLM, SGLang).
    enable_thinking: bool | None = None

    @property
    def logprobs(self) -> bool:
        return self.top_logprobs > 0

    @property
    def sampled(self) -> bool:
        return self.temperature > 0

    def seed_for(self, sample: Sample) -> int:
        """The seed this request is sent with: the item's own in a sampled run, else the run's."""
        return self.seed if sample.seed is None else sample.seed


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """The chosen token at one position, its logprob, and the top-k alternatives there."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()
    token_id: int | None = None


@dataclass(slots=True)
class Completion:
    """What an engine returned for one item. ``error`` set means there is no text to score."""

    item_id: str
    text: str = ""
    finish_reason: str | None = None
    latency_s: float = 0.0
    n_tokens: int | None = None
    token_ids: list[int] | None = None
    tokens: list[str] | None = None
    logprobs: list[TokenLogprob] | None = None
    # The end token's own logprobs, where the completion ended by choosing one (finish "stop"):
    # the position after the last token. Kept apart from ``logprobs`` (one entry per token of
    # the text). A divergence where this side ended (at token 0 too) then has a gap here.
    stop_logprob: TokenLogprob | None = None
    # Where token_ids/tokens came from: "engine" (the generation itself) or "retokenized"
    # (the server's tokenizer applied to the text afterwards, which may split differently).
    token_source: str | None = None
    error: str | None = None
    # How the engine computed this item (e.g. its batch and the batch's wall time), recorded
    # under the item's metadata["engine"].
    engine_meta: dict[str, Any] | None = None
    # Seconds from sending the request to the first generated token, and the mean gap between
    # later tokens: measured where tokens arrive one by one (streaming, or in-process).
    ttft_s: float | None = None
    itl_s: float | None = None
    # The engine's own timing fields, as it reported them (llama.cpp's perf counters or a
    # server's ``timings``), recorded under the item's metadata["engine_timings"].
    engine_timings: dict[str, Any] | None = None
    # Wall-clock time (epoch seconds) the runner received the item: with latency_s it places each
    # request in time, which a concurrent run's throughput needs.
    finished_at: float | None = None
