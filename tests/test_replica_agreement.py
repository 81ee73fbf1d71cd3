"""The replica check's grouping: who agrees with whom on the shared items, and who is flagged."""

from __future__ import annotations

from pathlib import Path

from servediff.compare.replicas import replica_agreement
from servediff.records import Run, read_run
from tests.helpers.records import Line, write_run


def runs(tmp_path: Path, texts: list[dict[str, str | None]]) -> list[Run]:
    out = []
    for n, by_id in enumerate(texts):
        lines = [Line(i, t or "", error=None if t is not None else "HTTP 500") for i, t in by_id.items()]
        out.append(read_run(write_run(tmp_path / f"rep{n}.jsonl", f"pool@rep{n}", lines)))
    return out


def test_identical_replicas_agree(tmp_path: Path) -> None:
    check = replica_agreement(runs(tmp_path, [{"a": "x", "b": "y"}] * 3))
    assert not check.heterogeneous and check.disagree == () and check.items == ("a", "b")
    assert check.summary()["groups"] == [[0, 1, 2]]


def test_the_odd_replica_out_is_flagged(tmp_path: Path) -> None:
    same, odd = {"a": "x", "b": "y"}, {"a": "x", "b": "Y"}
    check = replica_agreement(runs(tmp_path, [same, odd, same]))
    assert check.heterogeneous and check.disagree == (1,) and check.differing == ("b",)
    assert check.groups == ((0, 2), (1,))


def test_a_tie_flags_every_replica_and_errors_are_not_compared(tmp_path: Path) -> None:
    failed, other = {"a": "x", "b": "y", "c": None}, {"a": "x", "b": "z", "c": "w"}
    check = replica_agreement(runs(tmp_path, [failed, other]))
    assert check.disagree == (0, 1) and check.items == ("a", "b") and check.differing == ("b",)
