"""Factors: named changes from the control, and the design that expands them into configurations.

    servediff experiment examples/tuned-factors.toml      # the demo's `tuned` taken apart

A tuned configuration is usually several changes at once; when it changes the output, nobody
knows which change did it. A factor is one named change to the control configuration: knobs
for an embedded engine, or arguments appended to a launched server's argv and environment
variables for its process. The design says which combinations run:

- ``one-at-a-time``: the control, each factor alone (``+NAME``), all factors minus each one
  (``all-NAME``) and all of them (``all``). With three factors that is every combination.
- ``factorial``: every combination (at most 4 factors, 16 configurations).
- ``all``: the control and all factors together; ``servediff experiment FILE --bisect`` then
  runs only the combinations needed to find each divergence's smallest cause (delta debugging).

``--bisect`` works with any design: the combinations it adds are ``Design.extra``, expanded like
the design's own, so they resume and verify as any configuration does.

Each combination becomes an ordinary configuration (same runs, resume and verification as any
other), labelled by the factors it turns on, and its run headers name them, so the attribution
in the report is computed from the records alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from servediff.compare.attribution import design_sets
from servediff.compare.vocabulary import DesignKind
from servediff.experiment.source import Source
from servediff.experiment.tables import ExperimentFile, FactorTable

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
MAX_FACTORIAL = 4  # 16 configurations: beyond that, one factor at a time
MAX_ONE_AT_A_TIME = 8


class FactorError(ValueError):
    """A factor that cannot apply to the control; ``factor`` names it, for the line."""

    def __init__(self, factor: str, message: str) -> None:
        super().__init__(message)
        self.factor = factor


@dataclass(frozen=True, slots=True)
class Factor:
    name: str
    knobs: tuple[tuple[str, Any], ...] = ()  # embedded engine knobs it sets
    args: tuple[str, ...] = ()  # appended to the control's launch argv
    env: tuple[tuple[str, str], ...] = ()  # added to the launched process's environment


@dataclass(frozen=True, slots=True)
class Design:
    kind: DesignKind
    control: str  # the configuration every factor changes
    factors: tuple[Factor, ...]
    extra: tuple[tuple[str, ...], ...] = ()  # further combinations, added by --bisect

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.factors)

    def combinations(self) -> list[tuple[str, ...]]:
        """The factor sets to run, without the control's empty set, each in factor order."""
        order = {n: i for i, n in enumerate(self.names)}
        extra = [tuple(sorted(s, key=order.__getitem__)) for s in self.extra if s]
        return list(dict.fromkeys([*design_sets(self.kind, self.names), *extra]))

    def label(self, on: tuple[str, ...]) -> str:
        names = self.names
        if not on:
            return self.control
        if len(on) == len(names) and len(names) > 1:
            return "all"
        if len(on) == len(names) - 1 and len(names) > 2:
            return "all-" + next(f for f in names if f not in on)
        return "".join(f"+{f}" for f in on)


def parse_design(src: Source, file: ExperimentFile, control: str) -> Design | None:
    """The ``design`` and ``[[factors]]`` of the experiment file, checked; None without factors."""
    if file.factors is None:
        if file.design is not None:
            raise src.error("'design' needs [[factors]] tables to expand", src.line("design"))
        return None
    if not file.factors:
        raise src.error("factors must be [[factors]] tables (name; knobs, args or env)", src.line("factors"))
    kind = file.design or "one-at-a-time"
    factors = tuple(_factor(src, t, n) for n, t in enumerate(file.factors))
    names = [f.name for f in factors]
    again = next((n for n, x in enumerate(names) if x in names[:n]), None)
    if again is not None:
        raise src.error(f"factor {names[again]!r} is named twice", src.line("name", "factors", again))
    most = MAX_FACTORIAL if kind == "factorial" else MAX_ONE_AT_A_TIME
    if len(factors) > most:
        raise src.error(
            f"a {kind} design takes at most {most} factors, got {len(factors)}",
            src.line("design") or src.line("factors"),
        )
    _no_overlap(src, factors)
    return Design(kind, control, factors)


def _factor(src: Source, table: FactorTable, n: int) -> Factor:
    name = table.name
    if not NAME.match(name):
        raise src.error(
            f"factors #{n + 1}: 'name' is required (a letter, then letters, digits or '_'), got {name!r}",
            src.line("name", "factors", n),
        )
    if not (table.knobs or table.args or table.env):
        raise src.error(
            f"factor {name!r} changes nothing: give knobs, args or env", src.line("name", "factors", n)
        )
    return Factor(
        name, tuple(sorted(table.knobs.items())), tuple(table.args), tuple(sorted(table.env.items()))
    )


def _no_overlap(src: Source, factors: tuple[Factor, ...]) -> None:
    """Two factors setting one knob (or variable) would make the combination depend on order."""
    for kind in ("knobs", "env"):
        owner: dict[str, str] = {}
        for f in factors:
            for key, _ in getattr(f, kind):
                if key in owner:
                    raise src.error(
                        f"factors {owner[key]!r} and {f.name!r} both set {key!r} ({kind}): "
                        "each setting belongs to one factor",
                        src.line("name", "factors", [g.name for g in factors].index(f.name)),
                    )
                owner[key] = f.name


def applied(design: Design, base: dict[str, Any], on: tuple[str, ...], where: str) -> dict[str, Any]:
    """The control's configuration table with the factors ``on`` applied, labelled.

    Raises FactorError when a factor cannot apply: knobs need
    an embedded control, args and env a launched one; a server given by base_url is not ours
    to change."""
    table = {k: v for k, v in base.items() if k != "label"}
    table["label"] = design.label(on)
    chosen = [f for f in design.factors if f.name in on]
    embedded = "launch" not in table and "base_url" not in table
    for f in chosen:
        if f.knobs and not embedded:
            raise FactorError(f.name, f"factor {f.name!r} sets knobs, but {where} is not embedded")
        if (f.args or f.env) and "launch" not in table:
            raise FactorError(f.name, f"factor {f.name!r} sets args or env, but {where} is not launched")
        if f.knobs:
            table["knobs"] = {**table.get("knobs", {}), **dict(f.knobs)}
        if f.args:
            table["launch"] = [*table["launch"], *f.args]
        if f.env:
            table["env"] = {**table.get("env", {}), **dict(f.env)}
    return table


def header(design: Design, on: tuple[str, ...]) -> dict[str, Any]:
    """What a run header says about its configuration's place in the design."""
    return {"design": design.kind, "control": design.control, "names": list(design.names), "on": list(on)}
