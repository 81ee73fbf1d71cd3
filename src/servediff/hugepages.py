"""Numpy's arrays without transparent huge pages, for the analysis commands.

    servediff compare primary-0001.jsonl candidate-0001.jsonl

Numpy asks the kernel for transparent huge pages (``madvise``) for every array of 4 MiB or
more. Where the kernel's THP defrag setting is ``madvise`` (a common default), each huge-page
fault on such memory compacts memory synchronously: on a 2-core virtual machine touching a
fresh 1 GiB array took 7.2 s (6.9 s of it in the kernel) with them and 0.44 s without
(BENCHMARKS.md). Compare and report read their arrays once or twice, where huge pages buy next
to nothing; a compare of a million shadow items a side spent seconds in those faults.

Only the analysis commands turn them off, and only in their own process: an engine servediff
starts, or one it runs in-process (llama-cpp-python's logits are numpy arrays), is left as numpy
sets it up, so that what a speed measurement measures does not change. A user who sets
``NUMPY_MADVISE_HUGEPAGE`` decides for themselves.
"""

from __future__ import annotations

import os


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
