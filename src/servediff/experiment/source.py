"""Where a key sits in a TOML file, for error messages: TOML parsers keep no positions.

servediff experiment my-study.toml      # "my-study.toml:12: unknown key 'lable' ..."
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any


class ExperimentError(ValueError):
    """The experiment file is wrong: the message names the file (and line where possible)."""


class Source:
    """Finds the line of a key, for messages. Best effort: TOML parsers do not keep positions."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def line(self, key: str, table: str | None = None, nth: int = 0) -> int | None:
        start, end = self._table_span(table, nth) if table else (0, len(self.lines))
        pattern = re.compile(rf'^\s*"?{re.escape(key)}"?\s*=|^\s*\[+\s*{re.escape(key)}\s*\]+')
        for i in range(start, end):
            if pattern.search(self.lines[i]):
                return i + 1
        return start + 1 if table and start < len(self.lines) else None

    def _table_span(self, table: str, nth: int) -> tuple[int, int]:
        header = re.compile(rf"^\s*\[+\s*{re.escape(table)}\s*\]+")
        starts = [i for i, ln in enumerate(self.lines) if header.search(ln)]
        if nth >= len(starts):
            return 0, len(self.lines)
        start = starts[nth]
        nxt = next(
            (i for i in range(start + 1, len(self.lines)) if self.lines[i].lstrip().startswith("[")), None
        )
        return start, nxt if nxt is not None else len(self.lines)

    def error(self, message: str, line: int | None) -> ExperimentError:
        where = f"{self.path}:{line}" if line else str(self.path)
        return ExperimentError(f"{where}: {message}")


def check_keys(
    src: Source,
    table: dict[str, Any],
    allowed: tuple[str, ...] | list[str],
    where: str,
    section: str | None = None,
    nth: int = 0,
) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise src.error(
            f"unknown key {unknown[0]!r} in {where}; allowed: {', '.join(allowed)}",
            src.line(unknown[0], section, nth),
        )


def typed(src: Source, value: Any, kind: type | tuple[type, ...], key: str, line: int | None) -> Any:
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise src.error(f"{key} must be a number, not {value!r}", line)
    if not isinstance(value, kind):
        raise src.error(f"{key} has the wrong type ({type(value).__name__}): {value!r}", line)
    return value


def integer(src: Source, value: Any, key: str, line: int | None, low: int, high: int | None = None) -> int:
    """An integer from ``low`` to ``high``: a count, a seed, a port."""
    typed(src, value, int, key, line)
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"from {low} to {high}"
        raise src.error(f"{key} must be an integer {bound}, got {value!r}", line)
    return int(value)


def seconds(src: Source, value: Any, key: str, line: int | None) -> float:
    """A positive, finite time: TOML has ``nan`` and ``inf``, and neither is a timeout."""
    typed(src, value, (int, float), key, line)
    if not (math.isfinite(value) and value > 0):
        raise src.error(f"{key} must be a number of seconds > 0, got {value!r}", line)
    return float(value)
