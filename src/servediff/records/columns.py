"""The per-item numbers the speed statistics read, as float columns.

    servediff compare primary-0001.jsonl candidate-0001.jsonl     # the Speed section at 1M items

At a million items, reading six fields back from each decoded item cost about a microsecond
each (every item is a cache miss by then). A lean (shadow) read keeps its items as columns
already (``servediff.records.lean``), and hands them over whole (``Columns.of``); a record read
whole gives its items one at a time (``add``). One row per item line in the order read, NaN
where a field is absent; valid only while every id was read once.
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
    """Float columns, one row per item: ``add`` an item at a time, or ``of`` whole arrays; then
    ``array``. Rows added one at a time go into one interleaved array (eight appends to eight
    arrays cost 1.6 µs a line)."""

    __slots__ = ("_made", "_rows")

    def __init__(self) -> None:
        self._rows = array("d")
        self._made: dict[str, np.ndarray] | None = None  # one array per field, once made

    @classmethod
    def of(cls, **columns: np.ndarray) -> Columns:
        """Columns made whole, one array per field of ``FIELDS`` (a lean read's items' columns:
        ``LeanItems.columns``)."""
        made = cls()
        made._made = {name: columns[name] for name in FIELDS}
        return made

    def __len__(self) -> int:
        if self._made is not None:
            return len(self._made["error"])
        return len(self._rows) // _WIDTH

    def add(self, item: Any) -> None:
        assert self._made is None, "a column was read: the rows are final"
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
        """One column (error is 1.0 where the engine failed, other fields NaN if absent)."""
        import numpy as np  # here: reading a record must not import numpy

        if self._made is None:
            rows = np.frombuffer(self._rows, dtype=float).reshape(-1, _WIDTH).copy()
            self._made = {name: rows[:, j] for j, name in enumerate(FIELDS)}
            self._rows = array("d")
        return self._made[name]


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
