"""Where an experiment's configurations run: the [executor] table, a configuration's declared
resources, and its replicas (several URLs, or ``replicas = N`` launched copies).

    servediff experiment examples/ray-replicas.toml --executor ray
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from servediff.experiment.source import Source
from servediff.experiment.tables import ConfigurationTable, ExecutorKind, Records


@dataclass(frozen=True, slots=True)
class Resources:
    """What a configuration needs of a cluster node (the Ray executor declares it for its task)."""

    num_gpus: float = 0.0
    num_cpus: float = 1.0
    custom: tuple[tuple[str, float], ...] = ()  # e.g. (("H200", 1.0),): a node label to land on


@dataclass(frozen=True, slots=True)
class Executor:
    """How the configurations run: one after the other here ("local"), or as Ray tasks ("ray").

    ``address``: the cluster to connect to (None: the one this process already joined, else a
    local one started for the experiment). ``records``: "stream" sends each record line back to
    this machine's output folder; "shared" lets the workers write into it (a shared filesystem).
    """

    kind: ExecutorKind = "local"
    address: str | None = None
    records: Records = "stream"


# --- where configurations run --------------------------------------------------------------------
def base_urls(src: Source, table: ConfigurationTable, line: Callable[[str], int | None]) -> tuple[str, ...]:
    """``base_url``: one server, or a list of replicas of one configuration (already running)."""
    urls = table.base_url
    if urls is None:
        return ()
    if not urls or not all(urls):
        raise src.error(
            f"configuration {table.label!r}: base_url must be a URL or a list of URLs (replicas)",
            line("base_url"),
        )
    if len(set(urls)) < len(urls):
        raise src.error(f"configuration {table.label!r}: base_url lists a URL twice", line("base_url"))
    return tuple(urls)


def replicas(
    src: Source, table: ConfigurationTable, line: Callable[[str], int | None], urls: tuple[str, ...]
) -> int:
    if table.replicas is None:
        return max(1, len(urls))
    n = table.replicas
    if table.launch is None:
        raise src.error(
            f"configuration {table.label!r}: replicas = N launches N copies of 'launch'; "
            "for servers already running, list their URLs in base_url",
            line("replicas"),
        )
    if n > 1 and table.port is not None:
        raise src.error(
            f"configuration {table.label!r}: {n} replicas cannot share one fixed port; use {{port}}",
            line("port"),
        )
    return n


def resources(table: ConfigurationTable) -> Resources:
    value = table.resources
    custom = tuple(sorted((k, float(v)) for k, v in value.items() if k not in ("num_gpus", "num_cpus")))
    return Resources(
        num_gpus=float(value.get("num_gpus", 0.0)), num_cpus=float(value.get("num_cpus", 1.0)), custom=custom
    )
