"""The cyclic garbage collector paused while a large analysis allocates.

    servediff compare primary-0001.jsonl candidate-0001.jsonl    # 1M items: comparing and the report

Comparing two records of a million items makes hundreds of thousands of divergences and report
views, none of them part of a reference cycle; with the collector on, its collections re-scan
them over and over as they are made (half a second of a million-item compare). Whatever cycles
are made meanwhile are collected once it runs again.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
