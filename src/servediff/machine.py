"""How busy the machine is: the 1-minute load average against the cores this process may use.

    servediff run --engine llamacpp --suite prompts --out runs/stock.jsonl   # header extra "load"

Speed measured while other work competes for the cores is not the configuration's speed:
llama.cpp's threads spin at barriers when the machine is oversubscribed, and one item can take
twenty times as long. The runner records the load at the start and the end of every stretch of
work in the record's header, so ``compare.speed`` can tell when two configurations were measured
under different loads. The load average counts runnable threads, the engine's own among them, so
a run alone on the machine reads up to about one per core.
"""

from __future__ import annotations

import os
import time
from typing import Any


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def load_now() -> dict[str, Any]:
    """The load at this moment, as recorded: 1-minute load average, usable cores, epoch seconds."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this system
        return {"load_1min": None, "cores": usable_cores(), "at": round(time.time(), 3)}
    return {"load_1min": round(load, 3), "cores": usable_cores(), "at": round(time.time(), 3)}
