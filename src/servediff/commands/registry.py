"""Every command of ``servediff``, in the order ``servediff --help`` lists them.

    servediff --help

A command is a module with ``NAME``, ``HELP``, ``add_arguments`` and ``main`` (see the package's
docstring); this dict literal is the only list of them. Importing a command module loads its grammar
only: each ``main`` imports the library it calls.
"""

from __future__ import annotations

import argparse
from typing import Protocol

from servediff.audit import command as audit
from servediff.commands import (
    compare,
    configs,
    demo,
    experiment,
    export,
    gate,
    import_logs,
    models,
    probe,
    report,
    run,
    stats,
)
from servediff.commands.grammar import Parser
from servediff.shadow import command as shadow
from servediff.verify import command as verify


class Command(Protocol):
    """What ``cli.py`` needs of a command module."""

    NAME: str
    HELP: str

    def add_arguments(self, sub: argparse._SubParsersAction[Parser]) -> None: ...

    def main(self, args: argparse.Namespace) -> int: ...


COMMANDS: dict[str, Command] = {
    "demo": demo,
    "experiment": experiment,
    "run": run,
    "compare": compare,
    "report": report,
    "probe": probe,
    "stats": stats,
    "import": import_logs,
    "export": export,
    "configs": configs,
    "gate": gate,
    "shadow": shadow,
    "audit": audit,
    "verify": verify,
    "models": models,
}
