"""Where an experiment's configurations run: the [executor] table, a configuration's declared
resources, and its replicas (several URLs, or ``replicas = N`` launched copies).

    servediff experiment examples/ray-replicas.toml --executor ray
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servediff.experiment.source import Source, check_keys, integer, typed


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

    kind: str = "local"
    address: str | None = None
    records: str = "stream"


# --- where configurations run --------------------------------------------------------------------
EXECUTOR_KEYS = ("kind", "address", "records")


def executor(src: Source, table: Any) -> Executor:
    if not isinstance(table, dict):
        raise src.error("[executor] must be a table", src.line("executor"))
    check_keys(src, table, EXECUTOR_KEYS, "[executor]", "executor")
    kind = table.get("kind", "local")
    if kind not in ("local", "ray"):
        raise src.error(f"executor.kind must be 'local' or 'ray', got {kind!r}", src.line("kind", "executor"))
    records = table.get("records", "stream")
    if records not in ("stream", "shared"):
        raise src.error(
            f"executor.records must be 'stream' or 'shared', got {records!r}", src.line("records", "executor")
        )
    address = table.get("address")
    if address is not None:
        typed(src, address, str, "address", src.line("address", "executor"))
    return Executor(kind=kind, address=address, records=records)


def base_urls(src: Source, table: dict[str, Any], label: str, line: Any) -> tuple[str, ...]:
    """``base_url``: one server, or a list of replicas of one configuration (already running)."""
    value = table.get("base_url")
    if value is None:
        return ()
    urls = value if isinstance(value, list) else [typed(src, value, str, "base_url", line("base_url"))]
    if not isinstance(urls, list) or not urls or not all(isinstance(u, str) and u for u in urls):
        raise src.error(
            f"configuration {label!r}: base_url must be a URL or a list of URLs (replicas)", line("base_url")
        )
    if len(set(urls)) < len(urls):
        raise src.error(f"configuration {label!r}: base_url lists a URL twice", line("base_url"))
    return tuple(urls)


def replicas(src: Source, table: dict[str, Any], label: str, line: Any, urls: tuple[str, ...]) -> int:
    if "replicas" not in table:
        return max(1, len(urls))
    n = integer(src, table["replicas"], "replicas", line("replicas"), 1)
    if "launch" not in table:
        raise src.error(
            f"configuration {label!r}: replicas = N launches N copies of 'launch'; "
            "for servers already running, list their URLs in base_url",
            line("replicas"),
        )
    if n > 1 and "port" in table:
        raise src.error(
            f"configuration {label!r}: {n} replicas cannot share one fixed port; use {{port}}",
            line("port"),
        )
    return n


def resources(src: Source, table: dict[str, Any], label: str, line: Any) -> Resources:
    value = table.get("resources", {})
    if not isinstance(value, dict):
        raise src.error(f"configuration {label!r}: resources must be a table", line("resources"))
    for key, amount in value.items():
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
            raise src.error(
                f"configuration {label!r}: resources.{key} must be a number >= 0, got {amount!r}",
                line("resources"),
            )
    custom = tuple(sorted((k, float(v)) for k, v in value.items() if k not in ("num_gpus", "num_cpus")))
    return Resources(
        num_gpus=float(value.get("num_gpus", 0.0)), num_cpus=float(value.get("num_cpus", 1.0)), custom=custom
    )
