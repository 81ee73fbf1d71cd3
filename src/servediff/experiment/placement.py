"""Where the configuration being run is placed, when a cluster executor placed it.

    servediff experiment examples/ray-replicas.toml --executor ray

The cluster worker sets it before it runs a configuration; the run header then records the
node and the GPUs it ran on (``placement``), and launched servers are tied to the worker's life
(a lost worker must not leave an engine holding its GPU). Unset on the local executor.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

_PLACED: ContextVar[dict[str, Any] | None] = ContextVar("servediff_placement", default=None)


def placed() -> dict[str, Any] | None:
    """The node, GPUs and executor of the current configuration; None on the local executor."""
    return _PLACED.get()


def place(where: dict[str, Any]) -> None:
    _PLACED.set(where)
