"""One [[configurations]] table of an experiment file, checked and resolved: its kind of engine,
profile, claims, launch command, knobs, replicas, and a digest of its definition.

    servediff experiment examples/llama-server.toml --check
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servediff.engines.hf_knobs import HFKnobs
from servediff.engines.knobs import CONFIGS, LlamaKnobs, knobs_from_mapping
from servediff.engines.profiles import CLAIMS, PROFILES, guess_profile
from servediff.engines.server_sampling import Send
from servediff.experiment.cluster_spec import Resources, base_urls, resources
from servediff.experiment.cluster_spec import replicas as replicas_of
from servediff.experiment.source import Source, typed
from servediff.experiment.tables import ConfigurationTable
from servediff.models import MODELS, ModelError, resolve
from servediff.models.cache import model_file as cached_path
from servediff.models.cache import not_fetched

# Where a configuration runs and how its shared subset is checked are not what it is: changing
# them keeps its digest, so its finished runs are reused.
PLACEMENT_KEYS = ("resources", "replica_check")
# '+' for the labels a factor design makes ("+flash_attn"); it is safe in file names.
LABEL = re.compile(r"^[A-Za-z0-9+][A-Za-z0-9._+-]*$")
Line = Callable[[str], "int | None"]  # a key's line in the configuration's table


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """A server to start: argv with placeholders, extra environment, health path, timeouts."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    health: str = "/v1/models"  # a path on the server, or a full URL
    start_timeout_s: float = 600.0
    stop_timeout_s: float = 30.0
    port: int | None = None  # None: a free port is chosen


@dataclass(frozen=True, slots=True)
class ConfigSpec:
    """One configuration: exactly one of ``launch``, ``base_url``, ``knobs`` (embedded llama.cpp)
    or ``hf`` (in-process transformers) is set."""

    label: str
    profile: str
    claims: tuple[str, ...]
    digest: str  # hash of the definition: a changed definition gets new run files
    launch: LaunchSpec | None = None
    base_url: str | None = None
    knobs: LlamaKnobs | None = None
    factors: tuple[str, ...] | None = None  # the factors it turns on, when part of a design
    hf: HFKnobs | None = None
    # Its own weight file (embedded): another checkpoint of the model, with ``checkpoints = true``.
    model_path: Path | None = None
    base_urls: tuple[str, ...] = ()  # every replica's URL (base_url is the first) when several
    replicas: int = 1  # launched copies of ``launch``, or the number of ``base_urls``
    replica_check: int = 4  # items every replica answers, for the A/A across replicas
    resources: Resources = field(default_factory=Resources)
    send: Send = "all"  # a server's requests: every sampling field, or a client's few (run --send)

    @property
    def kind(self) -> str:
        return "launch" if self.launch else "server" if self.base_url else "embedded"


def named_file(src: Source, value: str | None, key: str, line: int | None, base: Path) -> Path | None:
    """A file named in the experiment, relative to the experiment file's folder."""
    if value is None:
        return None
    if not value:
        raise src.error(f"{key} must name a file, got an empty string", line)
    return Path(value) if Path(value).is_absolute() else base / value


def model_file(src: Source, value: str | None, line: int | None, base: Path) -> Path | None:
    """``model_path``: a GGUF named in the experiment, or a registry name (``servediff models``)
    as its verified cached file; a file of that name beside the experiment wins. A registry model
    not fetched yet is the file it will be: the experiment is still valid (``--check`` notes it),
    and a run asks for the fetch before it starts (``unfetched``)."""
    if value is not None and value in MODELS and not (base / value).exists():
        if unfetched(value, base) is not None:
            return cached_path(MODELS[value])
        try:
            return resolve(value)
        except (ModelError, FileNotFoundError) as exc:
            raise src.error(str(exc), line) from None
    return named_file(src, value, "model_path", line, base)


def unfetched(value: str | None, base: Path) -> str | None:
    """Why a ``model_path`` cannot load yet: a registry model that is not in the cache (a file of
    that name beside the experiment is what it names instead)."""
    if value is None or (base / value).exists():
        return None
    return not_fetched(value)


def configuration(
    src: Source, table: ConfigurationTable, raw: dict[str, Any], n: int, shared: dict[str, Any]
) -> ConfigSpec:
    """One [[configurations]] table: ``raw`` is its TOML, whose hash is the definition's digest."""

    def line(key: str) -> int | None:
        return src.line(key, "configurations", n)

    label = table.label
    if not LABEL.match(label):
        raise src.error(
            f"configurations #{n + 1}: 'label' is required (letters, digits, '.', '_', '-'), got {label!r}",
            line("label"),
        )
    embedded = _one_engine(src, raw, label, line)
    urls = base_urls(src, table, line)
    launch = _launch(src, table, line) if table.launch is not None else None
    engine = _engine(src, table, line) if embedded else None
    knobs = _knobs(src, table, line) if engine == "llamacpp" else None
    hf = _hf_knobs(src, table, line) if engine == "hf" else None
    default = guess_profile(launch.argv) if launch else "generic" if urls else "embedded"
    profile = table.profile or default
    if profile not in PROFILES and profile != "embedded":
        raise src.error(f"unknown profile {profile!r}; known: {sorted(PROFILES)}", line("profile"))
    if embedded and table.send != "all":
        raise src.error(
            f"configuration {label!r}: send = {table.send!r} is for servers (a request's fields); an "
            "embedded engine has no defaults of its own to fall back on",
            line("send"),
        )
    claims = table.claims if table.claims is not None else _implied_claims(profile, launch, knobs or hf)
    bad = [c for c in claims if c not in CLAIMS]
    if bad:
        raise src.error(f"unknown claim {bad[0]!r}; known: {list(CLAIMS)}", line("claims"))
    identity = {k: v for k, v in raw.items() if k not in PLACEMENT_KEYS}
    definition = json.dumps([identity, shared], sort_keys=True, default=str)
    return ConfigSpec(
        label=label,
        profile=profile,
        claims=tuple(claims),
        digest=hashlib.sha256(definition.encode()).hexdigest()[:10],
        launch=launch,
        base_url=urls[0] if urls else None,
        knobs=knobs,
        hf=hf,
        model_path=model_file(src, table.model_path, line("model_path"), src.path.resolve().parent),
        base_urls=urls if len(urls) > 1 else (),
        replicas=replicas_of(src, table, line, urls),
        replica_check=table.replica_check,
        resources=resources(table),
        send=table.send,
    )


def _one_engine(src: Source, raw: dict[str, Any], label: str, line: Line) -> bool:
    """Exactly one of launch, base_url or knobs/config/engine; True when it is embedded."""
    embedded = any(k in raw for k in ("knobs", "config", "engine"))
    kinds = [k for k in ("launch", "base_url") if k in raw] + (["knobs/config"] if embedded else [])
    if len(kinds) != 1:
        raise src.error(
            f"configuration {label!r}: give exactly one of launch, base_url, or knobs/config (embedded); "
            f"got {kinds or 'none'}",
            line("label"),
        )
    return embedded


def _implied_claims(profile: str, launch: LaunchSpec | None, knobs: LlamaKnobs | HFKnobs | None) -> list[str]:
    """What a configuration turns on, read from its launch flags or its embedded knobs."""
    if launch is not None:
        return list(PROFILES.get(profile, PROFILES["generic"]).claims_from_argv(launch.argv))
    if knobs is None:
        return []
    if isinstance(knobs, HFKnobs):
        return ["speculative_decoding"] if knobs.prompt_lookup or knobs.draft_model else []
    return [
        claim
        for claim, on in (
            ("speculative_decoding", knobs.prompt_lookup > 0),
            ("flash_attention", knobs.flash_attn),
            ("prefix_caching", knobs.prefix_cache),
        )
        if on
    ]


def _launch(src: Source, table: ConfigurationTable, line: Line) -> LaunchSpec:
    argv = table.launch or []
    if not argv:
        raise src.error(
            f"configuration {table.label!r}: launch must be a list of strings (argv)", line("launch")
        )
    if table.port is None and not any("{port}" in a for a in argv):
        raise src.error(
            f"configuration {table.label!r}: launch must contain {{port}} (a free port is chosen) "
            "or give port = N",
            line("launch"),
        )
    profile = PROFILES.get(table.profile or guess_profile(argv), PROFILES["generic"])
    return LaunchSpec(
        argv=tuple(argv),
        env=tuple(sorted(table.env.items())),
        health=table.health or profile.health_path,
        start_timeout_s=float(table.start_timeout),
        stop_timeout_s=float(table.stop_timeout),
        port=table.port,
    )


def _knobs(src: Source, table: ConfigurationTable, line: Line) -> LlamaKnobs:
    name = table.config or "stock"
    if name not in CONFIGS:
        raise src.error(
            f"configuration {table.label!r}: unknown config {name!r}; known: {sorted(CONFIGS)}",
            line("config"),
        )
    values = {**dataclasses.asdict(CONFIGS[name]), **table.knobs}
    try:
        return knobs_from_mapping(values, f"configuration {table.label!r}")
    except ValueError as exc:
        raise src.error(str(exc), line("knobs")) from exc


def _engine(src: Source, table: ConfigurationTable, line: Line) -> str:
    engine = table.engine or "llamacpp"
    if engine == "hf" and table.config is not None:
        raise src.error(
            f"configuration {table.label!r}: config names a llama.cpp knob set; hf takes knobs only",
            line("config"),
        )
    return engine


def _hf_knobs(src: Source, table: ConfigurationTable, line: Line) -> HFKnobs:
    known = [f.name for f in dataclasses.fields(HFKnobs)]
    unknown = [k for k in table.knobs if k not in known]
    if unknown:
        raise src.error(
            f"configuration {table.label!r}: unknown hf knob {unknown[0]!r}; known: {known}", line("knobs")
        )
    for key, value in table.knobs.items():
        typed(src, value, int if key in ("batch_size", "prompt_lookup") else str, key, line("knobs"))
    try:
        return HFKnobs(**table.knobs)
    except (TypeError, ValueError) as exc:  # TypeError: a value of the wrong type
        raise src.error(f"configuration {table.label!r}: {exc}", line("knobs")) from exc
