"""What every command's grammar shares: the parser class and the usage error.

    servediff run --score texts.txt --temperature 0.7    # a usage error on one line, exit 2

``Parser`` is argparse with a one-line usage error and the option rules of ``option_rules``;
``UsageError`` is what a handler raises for flags that do not name one thing to do (exit 2,
no traceback).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

from servediff.option_rules import Rule, first_broken

_UNSET = object()  # what an option's value is until the command line sets it (see Parser)


class UsageError(Exception):
    """Bad input from the user: message and exit 2, no traceback."""


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line: the usage of `run` alone is 20 lines, and
    the line that says what is wrong would scroll away under it; and with ``rules``, the option
    combinations this command refuses (``servediff.option_rules``)."""

    rules: tuple[Rule, ...] = ()

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(  # type: ignore[override]  # one signature for typeshed's overloads
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if not self.rules:
            return super().parse_known_args(args, namespace)
        # argparse fills in a default only where the namespace has no value yet, so an option
        # still holding the marker afterwards was not on the command line (whatever its value).
        dests = {o.lstrip("-").replace("-", "_"): o for r in self.rules for o in (r.option, r.other)}
        namespace = namespace if namespace is not None else argparse.Namespace()
        for dest in dests:
            if not hasattr(namespace, dest):
                setattr(namespace, dest, _UNSET)
        parsed, extras = super().parse_known_args(args, namespace)
        given = frozenset(o for d, o in dests.items() if getattr(parsed, d) is not _UNSET)
        for dest in dests:
            if getattr(parsed, dest) is _UNSET:
                setattr(parsed, dest, self.get_default(dest))
        broken = first_broken(self.rules, given)
        if broken is not None:
            self.error(broken)
        return parsed, extras
