"""The experiment file (TOML): the model, the suites, the control, and the configurations.

    servediff experiment examples/llamacpp-flash.toml

Parsed once into frozen dataclasses. Anything unexpected is an error that names the line where
it can (unknown keys, a missing model, duplicate labels), because a silently ignored key in a
study file is a configuration that was never tested.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servediff.engines.hf_knobs import HFKnobs
from servediff.engines.knobs import CONFIGS, LlamaKnobs, knobs_from_mapping
from servediff.engines.profiles import CLAIMS, PROFILES, guess_profile
from servediff.experiment.cluster_spec import Executor, Resources, base_urls, executor, resources
from servediff.experiment.cluster_spec import replicas as replicas_of
from servediff.experiment.factors import Design, FactorError, applied, parse_design
from servediff.experiment.source import ExperimentError, Source, check_keys, integer, seconds, typed
from servediff.models import MODELS, ModelError, resolve
from servediff.textfile import read_utf8
from servediff.types import SamplingParams

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TOP_KEYS = [
    "title",
    "model",
    "model_path",
    "output",
    "concurrency",
    "control",
    "control_repeats",
    "sampling",
    "suites",
    "configurations",
    "sweep",
    "probes",
    "design",
    "factors",
    "pairs",
    "checkpoints",
    "executor",
]
PROBE_KEYS = ("enabled", "k", "replay", "template")
SAMPLING_KEYS = ("max_tokens", "seed", "top_logprobs", "thinking", "temperature", "top_p", "top_k", "samples")
SUITE_KEYS = ("limit", "seed", "path", "max_tokens", "allow_code_execution")
CONFIG_KEYS = [
    "label",
    "base_url",
    "launch",
    "env",
    "health",
    "start_timeout",
    "stop_timeout",
    "port",
    "profile",
    "claims",
    "knobs",
    "config",
    "engine",
    "model_path",
    "resources",
    "replicas",
    "replica_check",
]
# Where a configuration runs and how its shared subset is checked are not what it is: changing
# them keeps its digest, so its finished runs are reused.
PLACEMENT_KEYS = ("resources", "replica_check")
SWEEP_KEYS = ("concurrency", "repeats", "configuration", "suite")
# '+' for the labels a factor design makes ("+flash_attn"); it is safe in file names.
LABEL = re.compile(r"^[A-Za-z0-9+][A-Za-z0-9._+-]*$")


@dataclass(frozen=True, slots=True)
class SuiteSpec:
    name: str
    limit: int | None = None
    seed: int = 0
    path: Path | None = None
    max_tokens: int | None = None
    allow_code_execution: bool = False  # humaneval: the file's author allows running model code


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

    @property
    def kind(self) -> str:
        return "launch" if self.launch else "server" if self.base_url else "embedded"


@dataclass(frozen=True, slots=True)
class SweepSpec:
    """Run one or more configurations at several concurrencies, several times each."""

    concurrency: tuple[int, ...]
    repeats: int
    configurations: tuple[str, ...]
    suite: str


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    """After the runs, measure each configuration's top-k at every divergence from the control.

    ``replay`` (servers): send the prefix token by token so a server that reuses its KV cache
    evaluates it as generation did; None picks it by profile (llama.cpp: yes, others: one pass).
    ``template``: the chat template servers' chat prompts are rendered with for
    /v1/completions (a .gguf, tokenizer_config.json or Jinja file); default: the GGUF a
    launched configuration serves, where the experiment knows it.
    """

    enabled: bool = True
    k: int = 5
    replay: bool | None = None
    template: Path | None = None


@dataclass(frozen=True, slots=True)
class Experiment:
    path: Path
    title: str
    model: str
    model_path: Path | None
    output: Path
    suites: tuple[SuiteSpec, ...]
    configurations: tuple[ConfigSpec, ...]
    control: str
    control_repeats: int
    concurrency: int
    sampling: SamplingParams
    sweep: SweepSpec | None = None
    probes: ProbeSpec = ProbeSpec()
    design: Design | None = None  # factors and the combinations of them that run
    pairs: str = "all"  # "control": compare each configuration with the control only
    notes: tuple[str, ...] = ()  # said before anything runs, e.g. combinations the engine cannot run
    # The configurations load different weight files of one model (declared): compared when their
    # tokenizers match (vocabulary hash), and the report names each side's checkpoint.
    checkpoints: bool = False
    executor: Executor = field(default_factory=Executor)
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def config(self, label: str) -> ConfigSpec:
        return next(c for c in self.configurations if c.label == label)


# --- parsing -----------------------------------------------------------------------------------
def load_experiment(
    path: Path, output: Path | None = None, extra: tuple[tuple[str, ...], ...] = ()
) -> Experiment:
    """Read and validate an experiment file. ``output`` overrides the file's ``output``;
    ``extra`` are factor combinations to run beyond the file's design (``--bisect``)."""
    path = Path(path)
    try:
        text = read_utf8(path)
    except OSError as exc:
        raise ExperimentError(f"{path}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # not UTF-8: the message names the line
        raise ExperimentError(str(exc)) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{path}: not valid TOML: {exc}") from exc
    return parse_experiment(raw, path, text, output, extra)


def parse_experiment(
    raw: dict[str, Any],
    path: Path,
    text: str,
    output: Path | None = None,
    extra: tuple[tuple[str, ...], ...] = (),
) -> Experiment:
    src = Source(path, text)
    check_keys(src, raw, TOP_KEYS, "the experiment")
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        raise src.error("'model' is required: the model id every configuration must serve", src.line("model"))
    base = path.resolve().parent
    model_path = _model_path(src, raw, src.line("model_path"), base)
    sampling = _sampling(src, raw.get("sampling", {}))
    suites = _suites(src, raw.get("suites", ["prompts"]), base)
    configs = _configurations(src, raw, model, model_path, sampling)
    labels = [c.label for c in configs]
    embedded = [n for n, c in enumerate(configs) if c.kind == "embedded"]
    if embedded and len(embedded) < len(configs):
        # compare identifies an embedded model by its file hash and a server's by its id: the
        # two cannot be checked to be one model, so the final comparison would refuse them.
        raise src.error(
            "embedded and server configurations cannot be mixed in one experiment (their models "
            "cannot be checked to be the same); run two experiments, or compare with --force",
            src.line("label", "configurations", embedded[0]),
        )
    control = raw.get("control", labels[0])
    if not isinstance(control, str) or control not in labels:
        raise src.error(f"control {control!r} is not a configuration label ({labels})", src.line("control"))
    design = parse_design(src, raw, control)
    notes: tuple[str, ...] = ()
    if design is not None and extra:
        design = dataclasses.replace(design, extra=extra)
    if design is not None:
        configs, notes = _expand(src, design, raw, configs, shared_of(model, model_path, sampling))
    checkpoints = typed(src, raw.get("checkpoints", False), bool, "checkpoints", src.line("checkpoints"))
    _check_checkpoints(src, configs, model_path, checkpoints)
    repeats = integer(src, raw.get("control_repeats", 1), "control_repeats", src.line("control_repeats"), 0)
    concurrency = integer(src, raw.get("concurrency", 1), "concurrency", src.line("concurrency"), 1)
    title = typed(
        src, raw.get("title", f"servediff experiment: {path.stem}"), str, "title", src.line("title")
    )
    if output is None:  # relative to where servediff runs, as --out is
        output = Path(typed(src, raw.get("output", f"out/{path.stem}"), str, "output", src.line("output")))
    return Experiment(
        path=path,
        title=title,
        model=model,
        model_path=model_path,
        output=output,
        suites=suites,
        configurations=configs,
        control=control,
        control_repeats=repeats,
        concurrency=concurrency,
        sampling=sampling,
        sweep=_sweep(src, raw.get("sweep"), control, {c.label: c.kind for c in configs}, suites),
        probes=_probes(src, raw.get("probes", {}), base),
        design=design,
        pairs=_pairs(src, raw.get("pairs", "all")),
        notes=notes,
        checkpoints=checkpoints,
        executor=executor(src, raw.get("executor", {})),
        raw=raw,
    )


def _check_checkpoints(
    src: Source, configs: tuple[ConfigSpec, ...], model_path: Path | None, declared: bool
) -> None:
    """Configurations with weight files of their own: embedded only, and declared.

    Loading another file is a different model unless the experiment says it compares checkpoints
    of one model; then compare checks the tokenizers instead of refusing the pair."""
    for n, c in enumerate(configs):
        if c.model_path is None:
            continue
        where = src.line("model_path", "configurations", n)
        if c.kind != "embedded":
            raise src.error(f"configuration {c.label!r}: model_path is for embedded configurations", where)
        if not declared and c.model_path != model_path:
            raise src.error(
                f"configuration {c.label!r} loads another weight file ({c.model_path.name}): declare "
                "checkpoints = true to compare checkpoints of one model (their tokenizers must match)",
                where,
            )


def _path(src: Source, table: dict[str, Any], key: str, line: int | None, base: Path) -> Path | None:
    """A file named in the experiment, relative to the experiment file's folder."""
    if key not in table:
        return None
    value = typed(src, table[key], str, key, line)
    if not value:
        raise src.error(f"{key} must name a file, got an empty string", line)
    return Path(value) if Path(value).is_absolute() else base / value


def _model_path(src: Source, table: dict[str, Any], line: int | None, base: Path) -> Path | None:
    """A GGUF named in the experiment, or a registry name (``servediff models``) as its
    verified cached file; a file of that name beside the experiment wins."""
    value = table.get("model_path")
    if isinstance(value, str) and value in MODELS and not (base / value).exists():
        try:
            return resolve(value)
        except (ModelError, FileNotFoundError) as exc:
            raise src.error(str(exc), line) from None
    return _path(src, table, "model_path", line, base)


def _sampling(src: Source, table: Any) -> SamplingParams:
    if not isinstance(table, dict):
        raise src.error("[sampling] must be a table", src.line("sampling"))
    check_keys(src, table, SAMPLING_KEYS, "[sampling]", "sampling")
    thinking = table.get("thinking", "unset")
    if thinking not in ("on", "off", "unset"):
        raise src.error("thinking must be 'on', 'off' or 'unset'", src.line("thinking", "sampling"))

    def number(key: str, default: int, least: int) -> int:
        return integer(src, table.get(key, default), key, src.line(key, "sampling"), least)

    temperature, top_p = _nonnegative(src, table, "temperature", 0.0), _nonnegative(src, table, "top_p", 1.0)
    if not 0 < top_p <= 1:
        raise src.error("top_p must be > 0 and <= 1", src.line("top_p", "sampling"))
    params = SamplingParams(
        temperature=temperature,
        seed=number("seed", 42, 0),
        top_p=top_p,
        top_k=number("top_k", 0, 0),
        samples=number("samples", 1, 1),
        max_tokens=number("max_tokens", 300, 1),
        top_logprobs=number("top_logprobs", 0, 0),
        enable_thinking={"on": True, "off": False, "unset": None}[thinking],
    )
    if not params.sampled and (params.samples > 1 or params.top_p < 1 or params.top_k):
        raise src.error("samples, top_p and top_k need temperature > 0", src.line("sampling"))
    return params


def _nonnegative(src: Source, table: dict[str, Any], key: str, default: float) -> float:
    """A non-negative number of [sampling] (temperature, top_p)."""
    line = src.line(key, "sampling")
    value = float(typed(src, table.get(key, default), (int, float), key, line))
    if value < 0:
        raise src.error(f"{key} must be >= 0, got {value}", line)
    return value


def _probes(src: Source, table: Any, base: Path) -> ProbeSpec:
    if not isinstance(table, dict):
        raise src.error("[probes] must be a table", src.line("probes"))
    check_keys(src, table, PROBE_KEYS, "[probes]", "probes")
    for key in ("enabled", "replay"):
        if key in table:
            typed(src, table[key], bool, key, src.line(key, "probes"))
    k = typed(src, table.get("k", 5), int, "k", src.line("k", "probes"))
    if not 2 <= k <= 20:
        # a gap needs two tokens; OpenAI-compatible servers cap logprobs at 20
        raise src.error(f"probes.k must be between 2 and 20, got {k}", src.line("k", "probes"))
    template = _path(src, table, "template", src.line("template", "probes"), base)
    return ProbeSpec(enabled=table.get("enabled", True), k=k, replay=table.get("replay"), template=template)


def _suites(src: Source, value: Any, base: Path) -> tuple[SuiteSpec, ...]:
    if isinstance(value, list):
        value = {str(name): {} for name in value}
    if not isinstance(value, dict) or not value:
        raise src.error("suites must be a list of names or [suites.NAME] tables", src.line("suites"))
    out = []
    for name, opts in value.items():
        where = f"suites.{name}"
        if not isinstance(opts, dict):
            raise src.error(f"[{where}] must be a table", src.line(where))
        check_keys(src, opts, SUITE_KEYS, f"[{where}]", where)
        # limit and max_tokens of 0 would run nothing; a negative seed is refused by numpy later
        least = {"limit": 1, "seed": 0, "max_tokens": 1}
        given = {k: integer(src, opts[k], k, src.line(k, where), least[k]) for k in least if k in opts}
        out.append(
            SuiteSpec(
                name=name,
                limit=given.get("limit"),
                seed=given.get("seed", 0),
                path=_path(src, opts, "path", src.line("path", where), base),
                max_tokens=given.get("max_tokens"),
                allow_code_execution=_flag(src, opts, "allow_code_execution", where),
            )
        )
    return tuple(out)


def _flag(src: Source, table: dict[str, Any], key: str, where: str) -> bool:
    value = table.get(key, False)
    if not isinstance(value, bool):
        raise src.error(f"{key} must be true or false", src.line(key, where))
    return value


def _configurations(
    src: Source, raw: dict[str, Any], model: str, model_path: Path | None, sampling: SamplingParams
) -> tuple[ConfigSpec, ...]:
    tables = raw.get("configurations")
    if not isinstance(tables, list) or not tables:
        raise src.error("at least one [[configurations]] table is required", src.line("configurations"))
    seen: dict[str, int] = {}
    shared = shared_of(model, model_path, sampling)
    out = []
    for n, table in enumerate(tables):
        spec = _configuration(src, table, n, shared)
        if spec.label in seen:
            raise src.error(
                f"duplicate label {spec.label!r} (configurations #{seen[spec.label] + 1} and #{n + 1})",
                src.line("label", "configurations", n),
            )
        seen[spec.label] = n
        out.append(spec)
    return tuple(out)


def shared_of(model: str, model_path: Path | None, sampling: SamplingParams) -> dict[str, Any]:
    """What every run shares is part of each definition: changing it changes every digest."""
    return {"model": model, "model_path": str(model_path), "sampling": dataclasses.asdict(sampling)}


def _expand(
    src: Source, design: Design, raw: dict[str, Any], configs: tuple[ConfigSpec, ...], shared: dict[str, Any]
) -> tuple[tuple[ConfigSpec, ...], tuple[str, ...]]:
    """The control, then every combination of factors the design runs, then the other
    configurations of the file: each combination is the control's table with its factors applied.

    A combination of several factors, each valid alone, that the engine rejects together
    (transformers' assisted generation needs batch size 1) cannot exist: it is left out, and the
    returned note says so before anything runs; the report lists it as a combination with no
    record. A single factor the engine rejects is a mistake in the file, and an error."""
    n = next(i for i, c in enumerate(configs) if c.label == design.control)
    where = f"the control {design.control!r}"
    made: list[ConfigSpec] = []
    notes: list[str] = []
    for on in design.combinations():
        try:
            table = applied(design, raw["configurations"][n], on, where)
        except FactorError as exc:
            raise src.error(str(exc), src.line("name", "factors", design.names.index(exc.factor))) from None
        try:
            made.append(dataclasses.replace(_configuration(src, table, n, shared), factors=on))
        except ExperimentError as exc:
            if len(on) < 2:
                raise
            reason = str(exc).split(": ", 2)[-1]
            notes.append(f"factors {' + '.join(on)} cannot run together, left out: {reason}")
    taken = {c.label for c in configs}
    clash = next((c.label for c in made if c.label in taken), None)
    if clash is not None:
        raise src.error(
            f"configuration label {clash!r} is also a label the factor design makes; rename it",
            src.line("label", "configurations", [c.label for c in configs].index(clash)),
        )
    control = dataclasses.replace(configs[n], factors=())
    return (control, *made, *(c for c in configs if c.label != design.control)), tuple(notes)


def _configuration(src: Source, table: Any, n: int, shared: dict[str, Any]) -> ConfigSpec:
    def line(key: str) -> int | None:
        return src.line(key, "configurations", n)

    if not isinstance(table, dict):
        raise src.error(f"configurations #{n + 1} must be a table", line("configurations"))
    check_keys(src, table, CONFIG_KEYS, f"configurations #{n + 1}", "configurations", n)
    label = table.get("label")
    if not isinstance(label, str) or not LABEL.match(label):
        raise src.error(
            f"configurations #{n + 1}: 'label' is required (letters, digits, '.', '_', '-'), got {label!r}",
            line("label"),
        )
    embedded = any(k in table for k in ("knobs", "config", "engine"))
    kinds = [k for k in ("launch", "base_url") if k in table] + (["knobs/config"] if embedded else [])
    if len(kinds) != 1:
        raise src.error(
            f"configuration {label!r}: give exactly one of launch, base_url, or knobs/config (embedded); "
            f"got {kinds or 'none'}",
            line("label"),
        )
    for key in ("profile", "health"):
        if key in table:
            typed(src, table[key], str, key, line(key))
    urls = base_urls(src, table, label, line)
    launch = _launch(src, table, label, line) if "launch" in table else None
    engine = _engine(src, table, label, line) if embedded else None
    knobs = _knobs(src, table, label, line) if engine == "llamacpp" else None
    hf = _hf_knobs(src, table, label, line) if engine == "hf" else None
    default = guess_profile(launch.argv) if launch else "generic" if "base_url" in table else "embedded"
    profile = table.get("profile") or default
    if profile not in PROFILES and profile != "embedded":
        raise src.error(f"unknown profile {profile!r}; known: {sorted(PROFILES)}", line("profile"))
    claims = table.get("claims")
    if claims is None:
        claims = _implied_claims(profile, launch, knobs or hf)
    if not isinstance(claims, list) or not all(isinstance(c, str) for c in claims):
        raise src.error(f"configuration {label!r}: claims must be a list of names", line("claims"))
    bad = [c for c in claims if c not in CLAIMS]
    if bad:
        raise src.error(f"unknown claim {bad[0]!r}; known: {list(CLAIMS)}", line("claims"))
    identity = {k: v for k, v in table.items() if k not in PLACEMENT_KEYS}
    definition = json.dumps([identity, shared], sort_keys=True, default=str)
    n_replicas = replicas_of(src, table, label, line, urls)
    return ConfigSpec(
        label=label,
        profile=profile,
        claims=tuple(claims),
        digest=hashlib.sha256(definition.encode()).hexdigest()[:10],
        launch=launch,
        base_url=urls[0] if urls else None,
        knobs=knobs,
        hf=hf,
        model_path=_model_path(src, table, line("model_path"), src.path.resolve().parent),
        base_urls=urls if len(urls) > 1 else (),
        replicas=n_replicas,
        replica_check=integer(src, table.get("replica_check", 4), "replica_check", line("replica_check"), 1),
        resources=resources(src, table, label, line),
    )


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


def _launch(src: Source, table: dict[str, Any], label: str, line: Any) -> LaunchSpec:
    argv = table["launch"]
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise src.error(f"configuration {label!r}: launch must be a list of strings (argv)", line("launch"))
    if "port" not in table and not any("{port}" in a for a in argv):
        raise src.error(
            f"configuration {label!r}: launch must contain {{port}} (a free port is chosen) or give port = N",
            line("launch"),
        )
    env = table.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise src.error(f"configuration {label!r}: env must be a table of strings", line("env"))
    profile = PROFILES.get(table.get("profile") or guess_profile(argv), PROFILES["generic"])
    times = {
        key: seconds(src, table[key], key, line(key))
        for key in ("start_timeout", "stop_timeout")
        if key in table
    }
    return LaunchSpec(
        argv=tuple(argv),
        env=tuple(sorted(env.items())),
        health=table.get("health", profile.health_path),
        start_timeout_s=times.get("start_timeout", 600.0),
        stop_timeout_s=times.get("stop_timeout", 30.0),
        port=integer(src, table["port"], "port", line("port"), 1, 65535) if "port" in table else None,
    )


def _knobs(src: Source, table: dict[str, Any], label: str, line: Any) -> LlamaKnobs:
    name = table.get("config", "stock")
    if name not in CONFIGS:
        raise src.error(
            f"configuration {label!r}: unknown config {name!r}; known: {sorted(CONFIGS)}", line("config")
        )
    knobs = table.get("knobs", {})
    if not isinstance(knobs, dict):
        raise src.error(f"configuration {label!r}: knobs must be a table", line("knobs"))
    values = {**dataclasses.asdict(CONFIGS[name]), **knobs}
    try:
        return knobs_from_mapping(values, f"configuration {label!r}")
    except ValueError as exc:
        raise src.error(str(exc), line("knobs")) from exc


def _engine(src: Source, table: dict[str, Any], label: str, line: Any) -> str:
    engine = table.get("engine", "llamacpp")
    if engine not in ("llamacpp", "hf"):
        raise src.error(
            f"configuration {label!r}: engine must be 'llamacpp' or 'hf' (in-process), got {engine!r}",
            line("engine"),
        )
    if engine == "hf" and "config" in table:
        raise src.error(
            f"configuration {label!r}: config names a llama.cpp knob set; hf takes knobs only", line("config")
        )
    return str(engine)


def _hf_knobs(src: Source, table: dict[str, Any], label: str, line: Any) -> HFKnobs:
    knobs = table.get("knobs", {})
    if not isinstance(knobs, dict):
        raise src.error(f"configuration {label!r}: knobs must be a table", line("knobs"))
    known = [f.name for f in dataclasses.fields(HFKnobs)]
    unknown = [k for k in knobs if k not in known]
    if unknown:
        raise src.error(
            f"configuration {label!r}: unknown hf knob {unknown[0]!r}; known: {known}", line("knobs")
        )
    for key, value in knobs.items():
        typed(src, value, int if key in ("batch_size", "prompt_lookup") else str, key, line("knobs"))
    try:
        return HFKnobs(**knobs)
    except (TypeError, ValueError) as exc:  # TypeError: a value of the wrong type
        raise src.error(f"configuration {label!r}: {exc}", line("knobs")) from exc


def _pairs(src: Source, value: Any) -> str:
    if value not in ("all", "control"):
        raise src.error(f"pairs must be 'all' or 'control', got {value!r}", src.line("pairs"))
    return str(value)


def _sweep(
    src: Source, table: Any, control: str, kinds: dict[str, str], suites: tuple[SuiteSpec, ...]
) -> SweepSpec | None:
    if table is None:
        return None
    if not isinstance(table, dict):
        raise src.error("[sweep] must be a table", src.line("sweep"))
    check_keys(src, table, SWEEP_KEYS, "[sweep]", "sweep")
    levels = table.get("concurrency", [1, 8])
    if (
        not isinstance(levels, list)
        or not levels
        or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in levels)
    ):
        raise src.error("sweep.concurrency must be a list of integers >= 1", src.line("concurrency", "sweep"))
    repeats = typed(src, table.get("repeats", 3), int, "repeats", src.line("repeats", "sweep"))
    suite = table.get("suite", suites[0].name)
    if suite not in [s.name for s in suites]:
        raise src.error(f"sweep.suite {suite!r} is not one of the suites", src.line("suite", "sweep"))
    if repeats < 2:
        raise src.error(
            "sweep.repeats must be >= 2 (unique outputs need repeats)", src.line("repeats", "sweep")
        )
    given = table.get("configuration", control)
    # one label, or several (the same load on each: -np 4 against -np 1)
    labels = given if isinstance(given, list) else [given]
    for configuration in labels:
        if not isinstance(configuration, str) or configuration not in kinds:
            raise src.error(
                f"sweep.configuration {configuration!r} is not a configuration label ({list(kinds)})",
                src.line("configuration", "sweep"),
            )
        if max(levels) > 1 and kinds[configuration] == "embedded":
            raise src.error(
                f"sweep.configuration {configuration!r} is embedded: it runs one request at a time; "
                "a load sweep needs a server (launch or base_url)",
                src.line("configuration", "sweep"),
            )
    return SweepSpec(
        concurrency=tuple(dict.fromkeys(levels)),
        repeats=repeats,
        configurations=tuple(dict.fromkeys(labels)),
        suite=suite,
    )
