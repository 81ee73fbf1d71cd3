"""Reading the user's text files (suites, experiment and configuration TOML) as UTF-8, with a
line number when a byte is not.

    servediff run --suite bad.jsonl ...    # "bad.jsonl:3: not UTF-8 (byte 0xff at column 12)"

Python's own message names neither the file nor the line ("'utf-8' codec can't decode byte
0xff in position 4071"); these functions say both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def _not_utf8(path: Path, data: bytes, exc: UnicodeDecodeError, first_line: int = 1) -> ValueError:
    line_start = data.rfind(b"\n", 0, exc.start) + 1
    line = first_line + data.count(b"\n", 0, exc.start)
    column = exc.start - line_start + 1
    return ValueError(f"{path}:{line}: not UTF-8 (byte 0x{data[exc.start]:02x} at column {column})")


def read_utf8(path: Path) -> str:
    """The whole file as text; OSError as ``open`` raises it."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, data, exc) from None


def utf8_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) for every line, split on ``\\n`` as JSON Lines are."""
    with Path(path).open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _not_utf8(path, raw, exc, lineno) from None
