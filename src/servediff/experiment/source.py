"""Where a key sits in a TOML file, for error messages: TOML parsers keep no positions.

servediff experiment my-study.toml      # "my-study.toml:12: unknown key 'lable' ..."
"""

from __future__ import annotations

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


def typed(src: Source, value: Any, kind: type | tuple[type, ...], key: str, line: int | None) -> Any:
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise src.error(f"{key} must be a number, not {value!r}", line)
    if not isinstance(value, kind):
        raise src.error(f"{key} has the wrong type ({type(value).__name__}): {value!r}", line)
    return value
