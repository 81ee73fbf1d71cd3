"""SHA-256 of files: the one helper behind every recorded file hash (suite data, model weights).

    servediff run --suite gsm8k --data test.jsonl --out runs/a.jsonl   # header: suite.data_sha256

A leaf module (standard library only), so suites, engines and importers can all use it without
importing one another. Files are read in 1 MiB blocks: a model file can be gigabytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

BLOCK = 1 << 20


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of one file's bytes."""
    return files_sha256([path])


def files_sha256(paths: Iterable[Path]) -> str:
    """Hex SHA-256 of several files' bytes, concatenated in the order given."""
    h = hashlib.sha256()
    for path in paths:
        with path.open("rb") as f:
            for block in iter(lambda: f.read(BLOCK), b""):
                h.update(block)
    return h.hexdigest()
