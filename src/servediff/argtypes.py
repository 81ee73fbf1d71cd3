"""The ranges of command-line values, checked where argparse reads them.

    servediff run --limit 0 ...    # servediff run: error: argument --limit: must be an integer >= 1, got '0'

Each function is an argparse ``type=``: it turns the text into a value or raises
``ArgumentTypeError``, which argparse reports as one line naming the option, exit 2. A range
checked here is never checked again in a command, and a command never starts (or touches a
file) with a value it cannot use: ``--limit -1`` once silently ran all but the last item.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

# Ceilings: a value past them is a typo, and taken at its word it exhausts memory or time before
# anything says so (``audit --levels 99999999999`` allocated per level: MemoryError, exit 1,
# which reads as "the promise diverged"). Generous on purpose: no real run comes near them.
MAX_COUNT = 1_000_000_000  # items, tokens, rounds, retries, sizes
MAX_IN_FLIGHT = 10_000  # requests at once: concurrency, workers, levels under load
MAX_SEED = 2**32 - 1  # llama.cpp and most servers take a 32-bit seed
MAX_NUMBER = 1e9  # seconds, megabytes, temperatures, nats


def _int(text: str, low: int, high: int = MAX_COUNT) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < low and high == MAX_COUNT:  # the ceiling is for typos; the floor is what a user meets
        raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"must be an integer from {low} to {high}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _int(text, 1)


def count(text: str) -> int:
    """An integer >= 0: a count or a size where 0 has a documented meaning."""
    return _int(text, 0)


def seed(text: str) -> int:
    """A seed: 0 to 2**32 - 1."""
    return _int(text, 0, MAX_SEED)


def in_flight(text: str) -> int:
    """Requests at once (a concurrency, a number of workers): 1 to 10,000."""
    return _int(text, 1, MAX_IN_FLIGHT)


def int_range(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        return _int(text, low, high)

    parse.__name__ = f"integer {low}..{high}"
    return parse


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):  # float() takes 'nan' and 'inf'; no option means either
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    if abs(value) > MAX_NUMBER:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_NUMBER:,.0f}, got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = _float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def nonnegative_float(text: str) -> float:
    value = _float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def fraction(text: str) -> float:
    """Strictly between 0 and 1: a margin, a significance level, a power, a difference."""
    value = _float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {text!r}")
    return value


def nucleus(text: str) -> float:
    """A top-p: above 0 (0 would keep no token) up to 1 (no cut)."""
    value = _float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be > 0 and <= 1, got {text!r}")
    return value


def proportion(text: str) -> float:
    """From 0 to 1 inclusive: an accuracy or a fraction of items."""
    value = _float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, got {text!r}")
    return value


def output_file(text: str) -> Path:
    """A file to write: not an existing folder, and no existing file where a folder must be."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a folder, not a file")
    _check_parents(path)
    return path


def output_folder(text: str) -> Path:
    """A folder to write into: not an existing file, and no file among its parents."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a file, not a folder")
    _check_parents(path)
    return path


def output_path(text: str) -> Path:
    """A file or a folder to write (the command decides which): no file among its parents."""
    path = Path(text)
    _check_parents(path)
    return path


def _check_parents(path: Path) -> None:
    # mkdir(parents=True) under a file fails only after the work is done (or, for a run,
    # after the engine has loaded): refuse it while nothing has started.
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise argparse.ArgumentTypeError(f"{parent} is a file, so {path} cannot be written")
            return


def host_port(text: str) -> tuple[str, int]:
    """HOST:PORT to listen on (``127.0.0.1:9000``, ``[::1]:9000``, ``:9000`` for every address)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"must be HOST:PORT with a port from 1 to 65535, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)
