"""The experiment file's tables as pydantic models, and the one place their errors become one line.

    servediff experiment my-study.toml --check     # "my-study.toml:12: unknown key 'lable' ..."

The models say what each table may hold (``extra="forbid"``: a silently ignored key in a study
file is a configuration that was never tested) and of which type, strictly (TOML's ``true`` is no
count, ``"4"`` no number). What depends on several keys or on other tables (exactly one kind of
engine, a control that is a label, a sweep of a server) is checked by ``spec`` after them, with
the same kind of message. ``problem`` turns pydantic's first error into ``FILE:LINE: message``.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from servediff.compare.vocabulary import DesignKind  # one vocabulary: the analysis reads it too
from servediff.experiment.source import ExperimentError, Source
from servediff.types import MAX_SAMPLES

ExecutorKind = Literal["local", "ray"]
Records = Literal["stream", "shared"]
EngineName = Literal["llamacpp", "hf"]
Pairs = Literal["all", "control"]
Thinking = Literal["on", "off", "unset"]


def _as_list(value: Any) -> Any:
    """One string or a list of them (a URL or replicas' URLs; a label or several)."""
    return [value] if isinstance(value, str) else value


Count = Annotated[int, Field(ge=1)]
Seed = Annotated[int, Field(ge=0)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False, description="a number of seconds")]
OneOrMany = Annotated[list[str], BeforeValidator(_as_list)]


class Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SamplingTable(Table):
    max_tokens: Count = 300
    seed: Seed = 42
    top_logprobs: Seed = 0
    thinking: Thinking = "unset"
    temperature: Annotated[float, Field(ge=0)] = 0.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    top_k: Seed = 0
    samples: Annotated[int, Field(ge=1, le=MAX_SAMPLES)] = 1  # the bound: see types.MAX_SAMPLES


class SuiteTable(Table):
    limit: Count | None = None  # 0 would run nothing
    seed: Seed = 0  # numpy refuses a negative seed, later and less clearly
    path: str | None = None
    max_tokens: Count | None = None
    allow_code_execution: bool = False
    concurrency: Count | None = None


class ProbesTable(Table):
    enabled: bool = True
    k: int = 5
    replay: bool | None = None
    template: str | None = None


class ConfigurationTable(Table):
    label: str
    base_url: OneOrMany | None = None
    launch: list[str] | None = None
    env: dict[str, str] = {}
    health: str | None = None
    start_timeout: Seconds = 600.0
    stop_timeout: Seconds = 30.0
    port: Annotated[int, Field(ge=1, le=65535)] | None = None
    profile: str | None = None
    claims: list[str] | None = None
    knobs: dict[str, Any] = {}  # checked against the engine's own knob set by spec
    config: str | None = None
    engine: EngineName | None = None
    model_path: str | None = None
    resources: dict[str, Annotated[float, Field(ge=0)]] = {}
    replicas: Count | None = None
    replica_check: Count = 4
    # The sampling fields each request names (``run --send``): all, or a typical client's few.
    send: Literal["all", "minimal"] = "all"


class SweepTable(Table):
    concurrency: Annotated[list[Count], Field(min_length=1)] = [1, 8]
    repeats: int = 3
    configuration: OneOrMany | None = None
    suite: OneOrMany | None = None


class FactorTable(Table):
    name: str
    knobs: dict[str, Any] = {}
    args: list[str] = []
    env: dict[str, str] = {}


class ExecutorTable(Table):
    kind: ExecutorKind = "local"
    address: str | None = None
    records: Records = "stream"


class ExperimentFile(Table):
    title: str | None = None
    model: str
    model_path: str | None = None
    output: str | None = None
    concurrency: Count = 1
    control: str | None = None
    control_repeats: Seed = 1
    speed_repeats: Count = 1
    sampling: SamplingTable = SamplingTable()
    suites: dict[str, SuiteTable] = {"prompts": SuiteTable()}
    configurations: list[ConfigurationTable]
    sweep: SweepTable | None = None
    probes: ProbesTable = ProbesTable()
    design: DesignKind | None = None
    factors: list[FactorTable] | None = None
    pairs: Pairs = "all"
    checkpoints: bool = False
    executor: ExecutorTable = ExecutorTable()


# --- errors as one line ------------------------------------------------------------------------
# The table each top-level key holds, for "unknown key ... in [sampling]" and the field's bounds.
SECTIONS: dict[str, type[Table]] = {
    "sampling": SamplingTable,
    "suites": SuiteTable,
    "configurations": ConfigurationTable,
    "sweep": SweepTable,
    "factors": FactorTable,
    "probes": ProbesTable,
    "executor": ExecutorTable,
}
# Tables named in a message by their key (executor.kind); the others' keys stand alone.
DOTTED = ("sweep", "probes", "executor")
REQUIRED = {
    "model": "'model' is required: the model id every configuration must serve",
    "configurations": "at least one [[configurations]] table is required",
    "label": "'label' is required (letters, digits, '.', '_', '-')",
    "name": "'name' is required (a letter, then letters, digits or '_')",
}
TABLE_ERRORS = ("model_type", "dict_type", "model_attributes_type")


def read(src: Source, raw: dict[str, Any]) -> ExperimentFile:
    """The file as models; the first problem as ExperimentError(FILE:LINE: message)."""
    try:
        return ExperimentFile.model_validate(raw)
    except ValidationError as exc:
        raise problem(src, exc, raw) from None


def problem(
    src: Source, exc: ValidationError, raw: dict[str, Any], at: tuple[Any, ...] = ()
) -> ExperimentError:
    """Pydantic's first error in the project's words; ``at`` is where ``exc``'s model sits in the
    file (a factor combination is validated alone but reported at its control's table)."""
    error = exc.errors(include_url=False)[0]
    loc = (*at, *error["loc"])
    section = str(loc[0]) if loc and str(loc[0]) in SECTIONS else None
    nth = loc[1] if section in ("configurations", "factors") and len(loc) > 1 else None
    inner = loc[(2 if nth is not None else 1) if section else 0 :]
    if section == "suites" and inner:  # [suites.NAME]: the name is part of the table
        section, inner = f"suites.{inner[0]}", inner[1:]
    keys = [str(k) for k in inner if isinstance(k, str)]
    line = src.line(keys[0], section, nth or 0) if keys else src.line(section or str(loc[0]))
    whole = error["type"] == "extra_forbidden" or (error["type"] in TABLE_ERRORS and not keys)
    prefix = "" if whole else _prefix(section, nth, raw)
    return src.error(prefix + _message(error, section, nth, keys), line)


def _message(error: Any, section: str | None, nth: Any, keys: list[str]) -> str:
    kind, value = error["type"], error.get("input")
    model = SECTIONS.get((section or "").split(".")[0], ExperimentFile)
    name = ".".join(keys)
    if section in DOTTED and name:
        name = f"{section}.{name}"
    if kind == "extra_forbidden":
        where = "the experiment" if section is None else f"[{section}]"
        if isinstance(nth, int):
            where = f"{section} #{nth + 1}"
        return f"unknown key {keys[-1]!r} in {where}; allowed: {', '.join(model.model_fields)}"
    if kind == "missing":
        missing = str(error["loc"][-1])
        return REQUIRED.get(missing, f"{missing!r} is required")
    if kind in TABLE_ERRORS and isinstance(nth, int) and not name:
        return f"{section} #{nth + 1} must be a table"
    if kind in TABLE_ERRORS:
        return f"{name or f'[{section}]'} must be a table"
    if kind == "literal_error":
        expected = error["ctx"]["expected"]
        return f"{name} must be {'one of ' if ', ' in expected else ''}{expected}, got {value!r}"
    if kind == "bool_type":
        return f"{name} must be true or false, got the wrong type ({type(value).__name__}): {value!r}"
    if isinstance(value, bool) and kind in ("int_type", "float_type"):
        return f"{name} must be a number, not {value!r}"
    if kind.endswith("_type"):
        return f"{name} has the wrong type ({type(value).__name__}): {value!r}"
    if kind == "too_short":
        return f"{name} must not be empty"
    return f"{name} must be {_bounds(model, keys)}, got {value!r}"


def _prefix(section: str | None, nth: Any, raw: dict[str, Any]) -> str:
    """Whose key it is: the configuration or factor by its label or name where it has one."""
    if section not in ("configurations", "factors") or not isinstance(nth, int):
        return ""
    tables = raw.get(section)
    table = tables[nth] if isinstance(tables, list) and nth < len(tables) else None
    own = table.get("label" if section == "configurations" else "name") if isinstance(table, dict) else None
    if isinstance(own, str):
        return f"{'configuration' if section == 'configurations' else 'factor'} {own!r}: "
    return f"{section} #{nth + 1}: "


def _bounds(model: type[Table], keys: list[str]) -> str:
    """'an integer from 1 to 65535', 'a number of seconds > 0', '>= 0': read from the field."""
    field = model.model_fields.get(keys[0]) if keys else None
    if field is None:
        return "valid"
    inner = [a for a in typing.get_args(field.annotation) if a is not type(None)]
    found: list[Any] = [*field.metadata]
    for arg in inner:  # Count | None, dict[str, Annotated[float, ...]]: the bounds sit inside
        found += getattr(arg, "__metadata__", ())
        for sub in typing.get_args(arg):
            found += getattr(sub, "__metadata__", ())
    # Field(ge=1) inside Annotated arrives as a FieldInfo holding the bounds
    metadata = [m for f in found for m in (f.metadata if isinstance(f, FieldInfo) else [f])]
    low, above, high = (
        next((getattr(m, b) for m in metadata if hasattr(m, b)), None) for b in ("ge", "gt", "le")
    )
    whole = (
        field.annotation is int or int in inner or any(getattr(a, "__origin__", None) is int for a in inner)
    )
    noun = field.description or ("an integer" if whole else "")
    if whole and low is not None and high is not None:
        return f"{noun} from {low} to {high}"
    parts = [f"> {above}" if above is not None else "", f">= {low}" if low is not None else ""]
    parts.append(f"<= {high}" if high is not None else "")
    return " ".join(p for p in (noun, " and ".join(p for p in parts if p)) if p)
