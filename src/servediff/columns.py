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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

NAN = math.nan
_NONE = (NAN, NAN)


# The columns, in their order within each row.
FIELDS = ("error", "latency", "finished", "tokens", "ttft", "itl", "engine_n", "engine_ms")
_WIDTH = len(FIELDS)


class Columns:
    """Growing float columns, one row per item: ``add`` or ``extend`` while reading, ``array`` after.

    Rows added one at a time go into one interleaved array (one call per item line: eight appends
    to eight arrays cost 1.6 µs a line, a third of the read); a block of items decoded at once
    becomes a block of rows, and the blocks are joined once, when a column is first asked for
    (growing one array block by block re-copied it each time it outgrew its pages)."""

    __slots__ = ("_blocks", "_made", "_n", "_rows")

    def __init__(self) -> None:
        self._rows = array("d")
        self._blocks: list[np.ndarray] = []  # rows before those in ``_rows``, in order
        self._n = 0  # rows in ``_blocks``
        self._made: dict[str, np.ndarray] | None = None  # ``of``: one array per field

    @classmethod
    def of(cls, **columns: np.ndarray) -> Columns:
        """Columns made whole, one array per field of ``FIELDS`` (a lean read's, from its items'
        columns: ``LeanItems.columns``)."""
        made = cls()
        made._made = {name: columns[name] for name in FIELDS}
        return made

    def __len__(self) -> int:
        if self._made is not None:
            return len(self._made["error"])
        return self._n + len(self._rows) // _WIDTH

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

    def extend(self, items: Sequence[Any]) -> None:
        """``add`` of each of ``items``, a column at a time: one list comprehension per field
        instead of a call per item (a block decoded whole, ``record._read_blocks``)."""
        import numpy as np

        self._flush()
        n = len(items)
        rows = np.empty((n, _WIDTH))
        rows[:, 0] = [item.error is not None for item in items]
        rows[:, 3] = np.fromiter([item.n_tokens or 0 for item in items], float, n)
        for j, values in (
            (1, [item.latency_s for item in items]),
            (2, [item.finished_at for item in items]),
            (4, [item.ttft_s for item in items]),
            (5, [item.itl_s for item in items]),
        ):
            rows[:, j] = _floats(values)
        metadata = [item.metadata for item in items]
        if any(metadata):  # the engine's own counters, where it reported them
            rows[:, 6:] = [engine_counters(m) if m else _NONE for m in metadata]
        else:
            rows[:, 6:] = NAN
        self._blocks.append(rows)
        self._n += n

    def _flush(self) -> None:
        """The rows added one at a time, as a block of their own."""
        if self._rows:
            import numpy as np

            self._blocks.append(np.frombuffer(self._rows, dtype=float).reshape(-1, _WIDTH).copy())
            self._n += len(self._rows) // _WIDTH
            self._rows = array("d")

    def array(self, name: str) -> np.ndarray:
        """One column (a view: error is 1.0 where the engine failed, other fields NaN if absent)."""
        import numpy as np  # here: reading a record must not import numpy

        if self._made is not None:
            return self._made[name]
        self._flush()
        if len(self._blocks) != 1:
            joined = np.concatenate(self._blocks) if self._blocks else np.empty((0, _WIDTH))
            self._blocks = [joined]
        return self._blocks[0][:, FIELDS.index(name)]


def _floats(values: list[float | None]) -> Any:
    """A column of floats with NaN for None. Columns are mostly all numbers (latency) or all None
    (TTFT without streaming): both are read in C; numpy converts a list that mixes them one value
    at a time (57 ns a None)."""
    import numpy as np

    nones = values.count(None)
    if nones == len(values):
        return NAN
    if nones:
        return values  # numpy reads None as NaN in a float array, as ``add`` writes absent fields
    return np.fromiter(values, float, len(values))


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
