"""The per-item numbers the speed statistics read, gathered while a shadow record is read.

    servediff compare primary-0001.jsonl candidate-0001.jsonl     # the Speed section at 1M items

At a million items, reading six fields back from each decoded item cost about a microsecond
each (every item is a cache miss by then); taken while the line has just been decoded they cost
a fraction of that. Columns hold one row per item line in the order read, NaN where a field is
absent, and are valid only while every id was read once (``matches``).
"""

from __future__ import annotations

import math
from array import array
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

NAN = math.nan


class Columns:
    """Growing float columns, one row per item: ``add`` while reading, ``array`` after."""

    __slots__ = ("engine_ms", "engine_n", "error", "finished", "itl", "latency", "tokens", "ttft")

    def __init__(self) -> None:
        self.error = array("b")  # 1: the engine failed on this item
        self.latency = array("d")
        self.finished = array("d")
        self.tokens = array("d")  # None counts as 0 tokens, as the speed numbers always did
        self.ttft = array("d")
        self.itl = array("d")
        self.engine_n = array("d")  # the engine's own decoded tokens and decode time, if reported
        self.engine_ms = array("d")

    def __len__(self) -> int:
        return len(self.error)

    def add(self, item: Any) -> None:
        self.error.append(item.error is not None)
        self.latency.append(NAN if item.latency_s is None else item.latency_s)
        self.finished.append(NAN if item.finished_at is None else item.finished_at)
        self.tokens.append(item.n_tokens or 0)
        self.ttft.append(NAN if item.ttft_s is None else item.ttft_s)
        self.itl.append(NAN if item.itl_s is None else item.itl_s)
        n, ms = engine_counters(item.metadata)
        self.engine_n.append(n)
        self.engine_ms.append(ms)

    def array(self, name: str) -> np.ndarray:
        import numpy as np  # here: reading a record must not import numpy

        return np.frombuffer(getattr(self, name), dtype=np.int8 if name == "error" else float)


def engine_counters(metadata: dict[str, Any]) -> tuple[float, float]:
    """(tokens, milliseconds) by the engine's own clock, or NaNs: llama.cpp's perf counters
    (eval_n / eval_ms), else a server's ``timings`` (predicted_n / predicted_ms)."""
    t = metadata.get("engine_timings") if metadata else None
    if not t:
        return NAN, NAN
    if "eval_n" in t and "eval_ms" in t:
        return float(t["eval_n"]), float(t["eval_ms"])
    if "predicted_n" in t and "predicted_ms" in t:
        return float(t["predicted_n"]), float(t["predicted_ms"])
    return NAN, NAN
