"""Memory for a large analysis: the cyclic garbage collector paused, numpy without huge pages.

    servediff compare primary-0001.jsonl candidate-0001.jsonl    # 1M items: comparing and the report

The cyclic GC: comparing two records of a million items makes hundreds of thousands of
divergences and report views, none of them part of a reference cycle; with the collector on, its
collections re-scan them over and over as they are made (half a second of a million-item
compare), and reading a record's items likewise. Whatever cycles are made meanwhile are collected
once it runs again.

Huge pages: numpy asks the kernel for transparent huge pages (``madvise``) for every array of
4 MiB or more. Where the kernel's THP defrag setting is ``madvise`` (a common default), each
huge-page fault on such memory compacts memory synchronously: on a 2-core virtual machine
touching a fresh 1 GiB array took 7.2 s (6.9 s of it in the kernel) with them and 0.44 s without
(BENCHMARKS.md). Compare and report read their arrays once or twice, where huge pages buy next
to nothing. Only the analysis commands turn them off (``for_analysis``), and only in their own
process: an engine servediff starts, or one it runs in-process (llama-cpp-python's logits are
numpy arrays), is left as numpy sets it up, so that what a speed measurement measures does not
change. A user who sets ``NUMPY_MADVISE_HUGEPAGE`` decides for themselves.
"""

from __future__ import annotations

import gc
import os
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


@contextmanager
def for_analysis() -> Iterator[None]:
    """What compare and report run in: numpy's arrays without huge pages, the GC paused."""
    numpy_without_huge_pages()
    with gc_paused():
        yield
        # What the analysis made stays alive to the end of the command: out of the cyclic GC's
        # view, the collection at exit does not walk its millions of objects (0.2-0.3 s of CPU
        # at a million items a side).
        gc.freeze()


def numpy_without_huge_pages() -> bool:
    """Numpy's arrays made from now on in this process without the huge-page request, unless
    ``NUMPY_MADVISE_HUGEPAGE`` says otherwise; True where it was turned off here."""
    if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return False
    import numpy as np

    # numpy's own switch behind NUMPY_MADVISE_HUGEPAGE, which it reads only when imported.
    switch = getattr(getattr(np, "_core", None), "multiarray", None)
    setter = getattr(switch, "_set_madvise_hugepage", None)
    if setter is None:
        return False
    setter(False)
    return True
