"""A label or a suite name → one safe file-name component; the only way either becomes a path.

    servediff gate --label-a ../escaped --label-b 'a/b' --out gate-runs ...   # two files in gate-runs

Labels and suite names are free text (``--label``, ``--label-a``, an experiment's ``[suites.NAME]``,
an imported log's label): ``../x`` as a path leaves the output folder, ``a/b`` makes a folder, a
control character or 300 characters make a name some file systems refuse. Every place that puts
one into a path calls ``file_stem``; the label itself is kept as it was in the record.
"""

from __future__ import annotations

import hashlib
import re

# Letters, digits and the punctuation experiment labels already use ("+flash_attn", "q8_0.v2").
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")
# Under NAME_MAX (255 bytes on every common file system) with room for what callers append:
# ".DIGEST", ".SUITE.DIGEST.repeat2.jsonl".
MAX_STEM = 80


def file_stem(text: str) -> str:
    """``text`` itself when it is already a safe name (so the paths of existing runs do not
    move), else its safe characters plus 8 hex digits of its SHA-256: two labels that differ
    only in unsafe characters ("a/b", "a_b") still get different files.

    Safe: only ``[A-Za-z0-9._+-]``, not starting with ``.`` (no ``.``, ``..`` or hidden files),
    not empty, at most ``MAX_STEM`` characters."""
    stem = _UNSAFE.sub("_", text) or "_"
    if stem.startswith("."):
        stem = "_" + stem
    if stem == text and text and len(text) <= MAX_STEM:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{stem[: MAX_STEM - 9]}-{digest}"
