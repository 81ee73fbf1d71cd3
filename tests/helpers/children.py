"""This test process's children still running, by what their command line holds."""

from __future__ import annotations

import os
from pathlib import Path


def children(marker: bytes) -> list[int]:
    """The pids of this process's children whose command line holds ``marker`` and that have
    not exited (a zombie not yet waited for counts as gone)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == os.getpid() and marker in cmdline and stat[0] != "Z":
            found.append(int(entry.name))
    return found
