"""Options that do nothing in the company of others: one table, checked as the command line is parsed.

    servediff run --score texts.txt --temperature 0.7 ...   # error: --score and --temperature ...

An option that is accepted and then silently ignored lets a user believe it took effect: ``--score``
with ``--samples 2`` once wrote four results for two texts and exited 0. Each rule names two
options of one command and how they relate; the parser (``commands.grammar.Parser``) refuses a command
line that breaks one, as a usage error on one line (exit 2) before anything runs. An option
counts as given when it is on the command line, whatever its value: ``--temperature 0`` next to
``--score`` is refused too, since it asks for something scoring does not do.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Relation = Literal["excludes", "needs"]


@dataclass(frozen=True, slots=True)
class Rule:
    option: str  # as typed: "--score"
    relation: Relation  # excludes: never both; needs: ``option`` does nothing without ``other``
    other: str
    why: str  # the reason, in the words of the error message

    def broken_by(self, given: frozenset[str]) -> str | None:
        """The error message when the options ``given`` break this rule, else None."""
        if self.option not in given:
            return None
        if self.relation == "excludes" and self.other in given:
            return f"{self.option} and {self.other} do not go together: {self.why}"
        if self.relation == "needs" and self.other not in given:
            return f"{self.option} needs {self.other}: {self.why}"
        return None


_FIXED = "scoring reads the logprobs of fixed texts and samples nothing"

RUN_RULES: tuple[Rule, ...] = (
    Rule("--score", "excludes", "--suite", "the texts to score come from --score"),
    Rule("--score", "excludes", "--temperature", _FIXED),
    Rule("--score", "excludes", "--samples", _FIXED),
    Rule("--score", "excludes", "--top-p", _FIXED),
    Rule("--score", "excludes", "--top-k", _FIXED),
    Rule("--score-api", "needs", "--score", "it picks the server API that scores texts"),
    Rule("--bos-text", "needs", "--score", "it is sent before each text scored"),
)


def first_broken(rules: Iterable[Rule], given: frozenset[str]) -> str | None:
    """The message of the first rule the options ``given`` break, in table order."""
    return next((m for m in (r.broken_by(given) for r in rules) if m is not None), None)
