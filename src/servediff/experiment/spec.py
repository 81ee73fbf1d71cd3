"""The experiment file (TOML): the model, the suites, the control, and the configurations.

    servediff experiment examples/llamacpp-flash.toml

Read through the pydantic models of ``tables`` (keys and types), then checked across keys and
tables here (one kind of engine per configuration, labels, the control, sweeps) and resolved
into frozen dataclasses: profiles, claims, paths, a digest per definition, the factor design's
configurations. Anything unexpected is an error that names the line where it can, because a
silently ignored key in a study file is a configuration that was never tested.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servediff.experiment import tables
from servediff.experiment.cluster_spec import Executor
from servediff.experiment.configuration import ConfigSpec as ConfigSpec
from servediff.experiment.configuration import LaunchSpec as LaunchSpec
from servediff.experiment.configuration import configuration, model_file, named_file, unfetched
from servediff.experiment.factors import Design, FactorError, applied, parse_design
from servediff.experiment.source import ExperimentError, Source
from servediff.experiment.tables import Pairs
from servediff.textfile import read_utf8
from servediff.types import SamplingParams

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True, slots=True)
class SuiteSpec:
    name: str
    limit: int | None = None
    seed: int = 0
    path: Path | None = None
    max_tokens: int | None = None
    allow_code_execution: bool = False  # humaneval: the file's author allows running model code
    # requests in flight for this suite's runs (None: the experiment's): identity on the prompts
    # one at a time, accuracy on a scored suite at a load that takes minutes, not an hour
    concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class SweepSpec:
    """Run one or more configurations at several concurrencies, several times each."""

    concurrency: tuple[int, ...]
    repeats: int
    configurations: tuple[str, ...]
    suites: tuple[str, ...]  # one or several of the experiment's suites, each at every level


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
    # Runs of every configuration's suites for the speed comparison, alternated between the
    # configurations (A B B A): with two or more, the speedup's interval covers reruns.
    speed_repeats: int = 1
    design: Design | None = None  # factors and the combinations of them that run
    pairs: Pairs = "all"  # "control": compare each configuration with the control only
    notes: tuple[str, ...] = ()  # said before anything runs, e.g. combinations the engine cannot run
    # The configurations load different weight files of one model (declared): compared when their
    # tokenizers match (vocabulary hash), and the report names each side's checkpoint.
    checkpoints: bool = False
    # Registry models named but not fetched yet ("file:line: ... run `servediff models fetch`"):
    # the file is valid and ``--check`` lists its runs; a run refuses to start.
    unfetched: tuple[str, ...] = ()
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
    raw = {**raw, "suites": _suite_tables(src, raw.get("suites", ["prompts"]))}
    file = tables.read(src, raw)
    if not file.model:
        raise src.error("'model' is required: the model id every configuration must serve", src.line("model"))
    base = path.resolve().parent
    model_path = model_file(src, file.model_path, src.line("model_path"), base)
    sampling = _sampling(src, file.sampling)
    suites = _suites(src, file.suites, base)
    shared = shared_of(file.model, model_path, sampling)
    configs = _configurations(src, file, raw, shared)
    labels = [c.label for c in configs]
    _one_kind_of_model(src, configs)
    control = file.control if file.control is not None else labels[0]
    if control not in labels:
        raise src.error(f"control {control!r} is not a configuration label ({labels})", src.line("control"))
    design = parse_design(src, file, control)
    notes: tuple[str, ...] = ()
    if design is not None and extra:
        design = dataclasses.replace(design, extra=extra)
    if design is not None:
        configs, notes = _expand(src, design, raw, configs, shared)
    _check_checkpoints(src, configs, model_path, file.checkpoints)
    if output is None:  # relative to where servediff runs, as --out is
        output = Path(file.output if file.output is not None else f"out/{path.stem}")
    return Experiment(
        path=path,
        title=file.title if file.title is not None else f"servediff experiment: {path.stem}",
        model=file.model,
        model_path=model_path,
        output=output,
        suites=suites,
        configurations=configs,
        control=control,
        control_repeats=file.control_repeats,
        concurrency=file.concurrency,
        sampling=sampling,
        sweep=_sweep(src, file.sweep, control, {c.label: c.kind for c in configs}, suites),
        probes=_probes(src, file.probes, base),
        speed_repeats=file.speed_repeats,
        design=design,
        pairs=file.pairs,
        notes=notes,
        checkpoints=file.checkpoints,
        unfetched=_unfetched(src, file, base),
        executor=Executor(
            kind=file.executor.kind, address=file.executor.address, records=file.executor.records
        ),
        raw=raw,
    )


def _one_kind_of_model(src: Source, configs: tuple[ConfigSpec, ...]) -> None:
    """compare identifies an embedded model by its file hash and a server's by its id: the two
    cannot be checked to be one model, so the final comparison would refuse them."""
    embedded = [n for n, c in enumerate(configs) if c.kind == "embedded"]
    if embedded and len(embedded) < len(configs):
        raise src.error(
            "embedded and server configurations cannot be mixed in one experiment (their models "
            "cannot be checked to be the same); run two experiments, or compare with --force",
            src.line("label", "configurations", embedded[0]),
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


def _sampling(src: Source, table: tables.SamplingTable) -> SamplingParams:
    params = SamplingParams(
        temperature=float(table.temperature),
        seed=table.seed,
        top_p=float(table.top_p),
        top_k=table.top_k,
        samples=table.samples,
        max_tokens=table.max_tokens,
        top_logprobs=table.top_logprobs,
        enable_thinking={"on": True, "off": False, "unset": None}[table.thinking],
    )
    if not params.sampled and (params.samples > 1 or params.top_p < 1 or params.top_k):
        raise src.error("samples, top_p and top_k need temperature > 0", src.line("sampling"))
    return params


def _probes(src: Source, table: tables.ProbesTable, base: Path) -> ProbeSpec:
    if not 2 <= table.k <= 20:
        # a gap needs two tokens; OpenAI-compatible servers cap logprobs at 20
        raise src.error(f"probes.k must be between 2 and 20, got {table.k}", src.line("k", "probes"))
    template = named_file(src, table.template, "template", src.line("template", "probes"), base)
    return ProbeSpec(enabled=table.enabled, k=table.k, replay=table.replay, template=template)


def _suite_tables(src: Source, value: Any) -> Any:
    """``suites = ["prompts", "gsm8k"]`` is short for empty [suites.NAME] tables."""
    if isinstance(value, list) and all(isinstance(name, str) for name in value):
        value = {name: {} for name in value}
    if not isinstance(value, dict) or not value:
        raise src.error("suites must be a list of names or [suites.NAME] tables", src.line("suites"))
    return value


def _suites(src: Source, value: dict[str, tables.SuiteTable], base: Path) -> tuple[SuiteSpec, ...]:
    return tuple(
        SuiteSpec(
            name=name,
            limit=opts.limit,
            seed=opts.seed,
            path=named_file(src, opts.path, "path", src.line("path", f"suites.{name}"), base),
            max_tokens=opts.max_tokens,
            allow_code_execution=opts.allow_code_execution,
            concurrency=opts.concurrency,
        )
        for name, opts in value.items()
    )


def _configurations(
    src: Source, file: tables.ExperimentFile, raw: dict[str, Any], shared: dict[str, Any]
) -> tuple[ConfigSpec, ...]:
    if not file.configurations:
        raise src.error("at least one [[configurations]] table is required", src.line("configurations"))
    seen: dict[str, int] = {}
    out = []
    for n, table in enumerate(file.configurations):
        spec = configuration(src, table, raw["configurations"][n], n, shared)
        if spec.label in seen:
            raise src.error(
                f"duplicate label {spec.label!r} (configurations #{seen[spec.label] + 1} and #{n + 1})",
                src.line("label", "configurations", n),
            )
        seen[spec.label] = n
        out.append(spec)
    return tuple(out)


def _unfetched(src: Source, file: tables.ExperimentFile, base: Path) -> tuple[str, ...]:
    wanted = [(file.model_path, src.line("model_path"))] + [
        (t.model_path, src.line("model_path", "configurations", n)) for n, t in enumerate(file.configurations)
    ]
    found = ((unfetched(value, base), line) for value, line in wanted)
    return tuple(dict.fromkeys(str(src.error(why, line)) for why, line in found if why is not None))


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
            model = tables.ConfigurationTable.model_validate(table)
        except ValidationError as exc:  # a factor's knob of the wrong type: at the control's table
            raise tables.problem(src, exc, raw, ("configurations", n)) from None
        try:
            made.append(dataclasses.replace(configuration(src, model, table, n, shared), factors=on))
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


def _sweep(
    src: Source,
    table: tables.SweepTable | None,
    control: str,
    kinds: dict[str, str],
    suites: tuple[SuiteSpec, ...],
) -> SweepSpec | None:
    if table is None:
        return None
    # one suite, or several (the prompts for identity, a scored suite for accuracy under load)
    swept = table.suite if table.suite is not None else [suites[0].name]
    for suite in swept:
        if suite not in [s.name for s in suites]:
            raise src.error(f"sweep.suite {suite!r} is not one of the suites", src.line("suite", "sweep"))
    if table.repeats < 2:
        raise src.error(
            "sweep.repeats must be >= 2 (unique outputs need repeats)", src.line("repeats", "sweep")
        )
    # one label, or several (the same load on each: -np 4 against -np 1)
    labels = table.configuration if table.configuration is not None else [control]
    for label in labels:
        if label not in kinds:
            raise src.error(
                f"sweep.configuration {label!r} is not a configuration label ({list(kinds)})",
                src.line("configuration", "sweep"),
            )
        if max(table.concurrency) > 1 and kinds[label] == "embedded":
            raise src.error(
                f"sweep.configuration {label!r} is embedded: it runs one request at a time; "
                "a load sweep needs a server (launch or base_url)",
                src.line("configuration", "sweep"),
            )
    return SweepSpec(
        concurrency=tuple(dict.fromkeys(table.concurrency)),
        repeats=table.repeats,
        configurations=tuple(dict.fromkeys(labels)),
        suites=tuple(dict.fromkeys(swept)),
    )
