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


# The columns, in their order within each row.
FIELDS = ("error", "latency", "finished", "tokens", "ttft", "itl", "engine_n", "engine_ms")
_WIDTH = len(FIELDS)


class Columns:
    """Growing float columns, one row per item: ``add`` while reading, ``array`` after.

    One interleaved array, extended by a row at a time: one call per item line (eight appends to
    eight arrays cost 1.6 µs a line, a third of the read)."""

    __slots__ = ("_rows",)

    def __init__(self) -> None:
        self._rows = array("d")

    def __len__(self) -> int:
        return len(self._rows) // _WIDTH

    def add(self, item: Any) -> None:
        meta = item.metadata
        n, ms = engine_counters(meta) if meta else (NAN, NAN)
        self._rows.extend(
            (
                0.0 if item.error is None else 1.0,
                NAN if item.latency_s is None else item.latency_s,
                NAN if item.finished_at is None else item.finished_at,
                item.n_tokens or 0,  # None counts as 0 tokens, as the speed numbers always did
                NAN if item.ttft_s is None else item.ttft_s,
                NAN if item.itl_s is None else item.itl_s,
                n,  # the engine's own decoded tokens and decode time, where it reported them
                ms,
            )
        )

    def array(self, name: str) -> np.ndarray:
        """One column (a view: error is 1.0 where the engine failed, other fields NaN if absent)."""
        import numpy as np  # here: reading a record must not import numpy

        return np.frombuffer(self._rows, dtype=float).reshape(-1, _WIDTH)[:, FIELDS.index(name)]


def engine_counters(metadata: dict[str, Any]) -> tuple[float, float]:
    """(tokens, milliseconds) by the engine's own clock, or NaNs: llama.cpp's perf counters
    (eval_n / eval_ms), else a server's ``timings`` (predicted_n / predicted_ms)."""
    t = metadata.get("engine_timings")
    if not t:
        return NAN, NAN
    if "eval_n" in t and "eval_ms" in t:
        return float(t["eval_n"]), float(t["eval_ms"])
    if "predicted_n" in t and "predicted_ms" in t:
        return float(t["predicted_n"]), float(t["predicted_ms"])
    return NAN, NAN
