"""``servediff configs``: list the named embedded llama.cpp configurations.

servediff configs --config-file knobs.toml
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from servediff.commands.grammar import Parser

NAME = "configs"
HELP = "list the named embedded llama.cpp configurations"


def add_arguments(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(NAME, help=HELP)
    p.add_argument("--config-file", type=Path)


def main(args: argparse.Namespace) -> int:
    from servediff.engines.knobs import CONFIGS, load_config_file

    known = dict(CONFIGS)
    if args.config_file:
        known.update(load_config_file(args.config_file))
    for name, knobs in known.items():
        print(f"{name}: {json.dumps(knobs.as_dict(), sort_keys=True)}")
    return 0
