"""Every numeric option of every command, given an absurd value: exit 2, one line on stderr
naming the option, nothing written.

    servediff audit --levels 99999999999    # once a numpy MemoryError traceback and exit 1

The options are found by walking the parser (any option whose ``type`` turns "1" into a number),
so an option added tomorrow is checked without touching this file.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from servediff.cli import build_parser, main

# Huge (past int64 and past any count a machine can hold), negative, not numbers at all.
ABSURD = ("99999999999", "1" + "0" * 30, "1e300", "-1", "-1e9", "nan", "inf", "-inf")


def _numeric(kind: object) -> bool:
    if not callable(kind):
        return False
    try:
        value = kind("1")
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        try:
            value = kind("2")  # a type whose least value is 2 (levels under load)
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            return False
    values = value if isinstance(value, tuple) else (value,)
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def numeric_options(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str, object]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from numeric_options(sub, (*path, name))
        elif action.option_strings and _numeric(action.type):
            yield path, action.option_strings[-1], action.type


OPTIONS = sorted({(p, o): t for p, o, t in numeric_options(build_parser())}.items())


def _rejects(kind: object, text: str) -> bool:
    try:
        kind(text)  # type: ignore[operator]
    except (argparse.ArgumentTypeError, ValueError):
        return True
    return False


def test_the_walk_finds_every_command_s_numbers() -> None:
    commands = {p[0] for (p, _), _ in OPTIONS}
    assert {"run", "gate", "audit", "shadow", "stats", "demo"} <= commands
    assert len(OPTIONS) > 60
    assert (("audit",), "--levels") in {k for k, _ in OPTIONS}


@pytest.mark.parametrize(("where", "kind"), OPTIONS, ids=[" ".join((*p, o)) for (p, o), _ in OPTIONS])
def test_an_absurd_number_is_a_usage_error(
    where: tuple[tuple[str, ...], str],
    kind: object,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, option = where
    monkeypatch.chdir(tmp_path)
    values = list(ABSURD)
    if _rejects(kind, "0"):  # zero, where it is not a value the option takes
        values.append("0")
    for value in values:
        with pytest.raises(SystemExit) as exit_:
            main([*path, f"{option}={value}"])
        err = capsys.readouterr().err
        assert exit_.value.code == 2, (value, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and option in lines[0], (value, err)
    assert os.listdir(tmp_path) == []
